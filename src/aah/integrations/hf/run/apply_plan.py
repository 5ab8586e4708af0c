"""`apply` / `remove`: per-head windows inside a transformers model through its AttentionInterface.

`apply` registers the "aah" attention function (`hf.run.attention.aah_attention_forward`) and its
mask builder, stores each layer's windows on its attention module (`module.aah_windows`), and
switches the model's attention implementation to "aah"; `remove` undoes it. `applied` and
`probing` do the same for the length of a block (the searches' measurements run inside them).
Registration is global in transformers and idempotent; nothing happens at import time.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from aah.attention.kv_bytes import layer_sinks
from aah.attention.registry import BACKENDS
from aah.integrations.hf.run.attention import (
    BACKEND_ATTR,
    PROBE_ATTR,
    SINKS_ATTR,
    WINDOWS_ATTR,
    Probe,
    aah_attention_forward,
)
from aah.integrations.hf.run.heal_params import install, installed, uninstall
from aah.integrations.hf.run.masks import aah_mask
from aah.integrations.hf.run.model_layout import (
    Layout,
    layout,
    require_transformers,
    sliding_windows,
)
from aah.plan import Plan, check_plan
from aah.validate import is_int

IMPLEMENTATION = "aah"
# Where `apply` remembers the implementation to go back to.
PREVIOUS_ATTR = "_aah_previous_attn_implementation"


def register() -> None:
    """Register "aah" with transformers' attention and mask interfaces (idempotent)."""
    transformers = require_transformers()
    interface = getattr(transformers, "AttentionInterface", None)
    if interface is None:
        raise ImportError(
            f"transformers {transformers.__version__} has no AttentionInterface; "
            "pip install 'aah-attention[hf]' for a recent version"
        )
    interface.register(IMPLEMENTATION, aah_attention_forward)
    try:
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError:  # older versions build a float causal mask, which the function reads
        return
    # sdpa's builder (None for plain causal with as many keys as queries, else a boolean
    # mask, which the function combines with the window rule): `hf.run.masks.aah_mask`.
    AttentionMaskInterface.register(IMPLEMENTATION, aah_mask)


def plan_windows(plan: Any) -> Plan:
    """A plan's windows: `plan` itself ([layer][head]) or its `.windows` (a searched plan)."""
    return getattr(plan, "windows", plan)


def plan_sinks(plan: Any, sinks: Any, n_layer: int, n_head: int) -> list[list[int]] | None:
    """Sinks as [layer][head] ints >= 0, or None for none: `sinks` (one int for every head, or
    [layer][head]), else the plan's own `.sinks`."""
    if sinks is None:
        sinks = getattr(plan, "sinks", None)
    if sinks is None:
        return None
    if is_int(sinks):
        if sinks < 0:
            raise ValueError(f"sinks must be >= 0, got {sinks}")
        rows = [[sinks] * n_head for _ in range(n_layer)]
    else:
        try:
            rows = [[s for s in row] for row in sinks]
        except TypeError:
            raise ValueError(f"sinks must be an int or [layer][head] ints, got {sinks!r}") from None
        bad = [s for row in rows for s in row if not is_int(s)]
        if bad or any(s < 0 for row in rows for s in row):
            raise ValueError(f"every sink must be an int >= 0, got {sinks!r:.80}")
        if len(rows) != n_layer or any(len(row) != n_head for row in rows):
            raise ValueError(
                f"sinks must be [layer][head] ({n_layer} x {n_head}), got {sinks!r:.80}"
            )
    return rows if any(any(row) for row in rows) else None


def apply(
    model: torch.nn.Module,
    plan: Any,
    *,
    backend: str = "auto",
    sinks: Any = None,
    keep_params: bool = False,
) -> None:
    """Give every query head of every layer its window (plan[layer][head]) and switch to "aah".

    Args:
        model: a supported transformers model (causal LM or base model).
        plan: [layer][query_head] ints >= 1 (w >= T: full causal), or an object with `.windows`
            (and optionally `.sinks`, and a healed plan's `.params`, installed with it; any
            parameters a previous healed plan installed are taken out first).
        backend: the `windowed_attention` backend for prefill ("auto" picks per device).
        sinks: attention sinks, one int for every head or [layer][head] ints >= 0; None takes
            the plan's `.sinks` if it has them, else none. Query i also sees keys j < s. On a
            layer with a sliding window of its own, a head whose window is not below it keeps
            no sinks: it attends exactly as the model does.
        keep_params: change only the windows and sinks, leaving whatever healed parameters
            are installed in place (a heal that re-decides windows while it trains).

    Raises:
        ValueError: unsupported family, a plan or sinks whose shape differs from the model,
            bad backend.
        ImportError: transformers missing.
    """
    register()
    lay = layout(model)
    windows = check_plan(plan_windows(plan), lay.n_layer, lay.n_head)
    sink_rows = plan_sinks(plan, sinks, lay.n_layer, lay.n_head)
    if backend != "auto" and backend not in BACKENDS:
        raise ValueError(
            f"unknown backend {backend!r}; choose auto or one of {', '.join(BACKENDS)}"
        )
    slides = sliding_windows(model)
    for i, (module, row) in enumerate(zip(lay.modules, windows, strict=True)):
        setattr(module, WINDOWS_ATTR, tuple(row))
        setattr(module, BACKEND_ATTR, backend)
        if sink_rows is None:
            if hasattr(module, SINKS_ATTR):
                delattr(module, SINKS_ATTR)
        else:  # a head the plan does not cut below its layer's own window keeps no sinks
            kept = (layer_sinks(w, s, slides[i]) for w, s in zip(row, sink_rows[i], strict=True))
            setattr(module, SINKS_ATTR, tuple(kept))
    params = getattr(plan, "params", None)
    if keep_params:
        if params:
            raise ValueError("keep_params keeps the installed parameters: give a plan without any")
    elif params:
        install(model, params)
    else:
        uninstall(model)
    current = implementation(model)
    if current != IMPLEMENTATION:
        setattr(model, PREVIOUS_ATTR, current)
    set_implementation(model, IMPLEMENTATION)


def current_plan(model: torch.nn.Module) -> Plan | None:
    """The windows `apply` set, or None when the model is not running a plan."""
    lay = layout(model)
    rows = [getattr(m, WINDOWS_ATTR, None) for m in lay.modules]
    if implementation(model) != IMPLEMENTATION or any(r is None for r in rows):
        return None
    return [list(r) for r in rows]  # type: ignore[arg-type]


def current_sinks(model: torch.nn.Module) -> list[list[int]] | None:
    """The sinks `apply` set, [layer][head], or None when there are none."""
    rows = [getattr(m, SINKS_ATTR, None) for m in layout(model).modules]
    if all(r is None for r in rows):
        return None
    n_head = layout(model).n_head
    return [list(r) if r is not None else [0] * n_head for r in rows]


def per_head_cache(
    model: torch.nn.Module, max_cache_len: int | None = None, *, rolling: bool = False
) -> Any:
    """A `hf.run.cache.PerHeadCache` for the plan and sinks now applied, for `generate`'s cache;
    `rolling=True`: one that never fills (every head bounded; positions past the model's)."""
    from aah.integrations.hf.run.cache import PerHeadCache

    return PerHeadCache(model, max_cache_len, rolling=rolling)


def remove(model: torch.nn.Module) -> None:
    """Undo `apply`: drop the windows and any healed parameters, and restore the previous
    implementation (default sdpa). The model then computes bit for bit what it did before."""
    uninstall(model)
    for module in layout(model).modules:
        for attr in (WINDOWS_ATTR, BACKEND_ATTR, PROBE_ATTR, SINKS_ATTR):
            if hasattr(module, attr):
                delattr(module, attr)
    previous = getattr(model, PREVIOUS_ATTR, "sdpa")
    if hasattr(model, PREVIOUS_ATTR):
        delattr(model, PREVIOUS_ATTR)
    set_implementation(model, previous)


def implementation(model: torch.nn.Module) -> str | None:
    """The attention implementation the model's config names."""
    return getattr(model.config, "_attn_implementation", None)


def set_implementation(model: torch.nn.Module, name: str) -> None:
    """Switch the model's attention implementation, by the installed version's own means."""
    setter = getattr(model, "set_attn_implementation", None)
    if callable(setter):
        setter(name)
    # Versions without the setter (or classes it declines) read the config field directly.
    if implementation(model) != name:
        model.config._attn_implementation = name


@contextmanager
def probing(model: torch.nn.Module, probe: Probe) -> Iterator[Layout]:
    """Run the model with full causal "aah" attention and `probe` called in every layer.

    The probe sees (module, query, key, value, scale) with post-RoPE tensors. The model's
    previous windows and implementation are restored on exit, whatever happens inside.
    """
    register()
    lay = layout(model)
    attrs = (WINDOWS_ATTR, PROBE_ATTR, SINKS_ATTR)
    saved = [{a: getattr(m, a) for a in attrs if hasattr(m, a)} for m in lay.modules]
    before = implementation(model)
    try:
        for module in lay.modules:
            setattr(module, WINDOWS_ATTR, None)  # None: full causal, whatever T is
            setattr(module, PROBE_ATTR, probe)
            if hasattr(module, SINKS_ATTR):
                delattr(module, SINKS_ATTR)
        set_implementation(model, IMPLEMENTATION)
        yield lay
    finally:
        for module, state in zip(lay.modules, saved, strict=True):
            for attr in attrs:
                if attr in state:
                    setattr(module, attr, state[attr])
                elif hasattr(module, attr):
                    delattr(module, attr)
        if before is not None:
            set_implementation(model, before)


@contextmanager
def applied(
    model: torch.nn.Module, plan: Any, *, backend: str = "auto", sinks: Any = None
) -> Iterator[None]:
    """`apply(model, plan, sinks=sinks)` inside the block; the previous plan (or none), with any
    healed parameters it had, is back on exit."""
    before, before_sinks, before_params = (
        current_plan(model),
        current_sinks(model),
        installed(model),
    )
    previous_backend = getattr(layout(model).modules[0], BACKEND_ATTR, "auto")
    try:
        apply(model, plan, backend=backend, sinks=sinks)
        yield
    finally:
        if before is None:
            remove(model)
        else:
            apply(model, before, backend=previous_backend, sinks=before_sinks or 0)
            if before_params:
                install(model, before_params)
