"""pytest plugin for transformers' own model tests: with AAH_ROUTE=1 every "sdpa" attention
call (and sdpa's mask builder) runs the "aah" function with full windows and no sinks, so each
test compares it against eager exactly as it compares sdpa. AAH_ROUTE=0 leaves sdpa alone (the
baseline run). Prints how many calls it routed, so a run that routed nothing is visible."""

from __future__ import annotations

import collections
import os

CALLS: collections.Counter[str] = collections.Counter()


def _route() -> None:
    import torch
    from transformers.masking_utils import AttentionMaskInterface
    from transformers.modeling_utils import AttentionInterface

    from aah.integrations.hf.run.attention import WINDOWS_ATTR, aah_attention_forward
    from aah.integrations.hf.run.masks import aah_mask

    def routed(module, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not hasattr(module, WINDOWS_ATTR):
            setattr(module, WINDOWS_ATTR, None)  # None: full causal windows
        if not torch.compiler.is_compiling():  # a counter in traced code would recompile
            CALLS["calls"] += 1
        return aah_attention_forward(module, *args, **kwargs)

    AttentionInterface.register("sdpa", routed)
    AttentionMaskInterface.register("sdpa", aah_mask)


def pytest_configure(config) -> None:  # type: ignore[no-untyped-def]
    if os.environ.get("AAH_ROUTE") == "1":
        _route()


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    if os.environ.get("AAH_ROUTE") == "1":
        terminalreporter.write_line(f"aah routed calls: {CALLS['calls']}")
