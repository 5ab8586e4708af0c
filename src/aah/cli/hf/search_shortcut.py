"""`aah plan search` answered from the plan cache before the model loads.

`search_plan(..., cache=True)` keys a plan by the loaded model (`plan_cache.model_fingerprint`),
so even a cached search pays for the load: 10 to 40 seconds for a GGUF file on 2 cores. The
command line also files every plan it finds under a second key it can compute from the files
alone: the bytes of the model's files (`plan_cache.files_fingerprint`), the text's bytes, T
and every flag of the search, and the package version. The same command again is then answered
from that key without loading the model. A hub name, `--no-cache` and `--heldout` (whose sweep
needs the model) always load it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def shortcut_key(
    args: argparse.Namespace, text: str | None, t: int, budget: float | None,
    kv_budget: int | None,
) -> dict[str, Any] | None:  # fmt: skip
    """The files-and-flags key of this search, or None where it cannot be answered before
    the model loads."""
    import aah
    from aah.integrations.hf.search.plan_cache import files_fingerprint, text_fingerprint

    if not args.cache or args.heldout:
        return None
    files = files_fingerprint(args.model)
    if files is None:
        return None
    flags = {name: getattr(args, name) for name in SEARCH_FLAGS}
    return {
        "files": files, "text": text_fingerprint(text), "seq_len": t, "budget": budget,
        "kv_budget": kv_budget, "flags": flags, "version": aah.__version__,
    }  # fmt: skip


#: every flag of `aah plan search` that changes the plan it finds (besides the budget and T)
SEARCH_FLAGS = (
    "signal", "sinks", "candidates", "whole_layers", "choose", "refine", "objective",
    "batch_size", "max_batches", "sample_queries", "suffix", "seed",
)  # fmt: skip


def cached_before_load(key: dict[str, Any] | None) -> Any:
    """The plan filed under `key` (saying so on stderr), or None."""
    from aah.integrations.hf.search.plan_cache import entry_path, load_cached

    if key is None:
        return None
    plan = load_cached(key)
    if plan is not None:
        print(f"plan from the cache, before loading the model: {entry_path(key)} (--no-cache "
              "searches anew)", file=sys.stderr)  # fmt: skip
    return plan


def file_plan(key: dict[str, Any] | None, plan: Any) -> None:
    """File a plan just found (or found in the model-keyed cache) under `key`."""
    from aah.integrations.hf.search.plan_cache import store

    if key is not None:
        store(key, plan)
