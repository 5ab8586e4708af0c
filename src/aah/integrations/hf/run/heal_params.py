"""A healed plan's learned parameters inside a model: installed, read back, taken out.

Three kinds, named by the prefix of each parameter's name (`WindowPlan.params`):

- `temperature.<layer>` (n_head,): a log-scale per query head; the "aah" attention function
  multiplies the head's query by exp(t) (`QUERY_SCALE_ATTR`), so the head's softmax
  sharpens or flattens over the keys its window leaves. Zero is no effect, bit for bit
  (x * 1.0 == x).
- `sink.<layer>` (n_head,): a sink logit per query head; exp(s) joins the head's softmax
  denominator (`SINK_LOGIT_ATTR`, `aah.attention.sink_logit`), so the head may attend to
  nothing instead of to the keys its window leaves. No key or value is stored for it. It
  starts at `SINK_START`, not at no effect (-inf has no gradient): exp(-8) beside a row whose
  largest score is 0 takes 3e-4 of its weight, less beside a higher one. The heal measures
  the un-healed held-out KL before any parameter exists, so it stays never worse.
- `lora.<layer>.<projection>.A` (r, in) and `.B` (out, r): a low-rank update of that attention
  projection (`q_proj`, `k_proj`, `v_proj`, `o_proj`), through peft's LoRA `Linear` wrapped
  around the model's own layer (B = 0 is no effect); taking it out puts the model's own
  layer object back, so its weights are never copied or changed.

`install` puts a set in (after taking out whatever was there), `uninstall` takes it out,
`installed` reads back what is in. `trainable` installs zero-initialised parameters for a heal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, get_args

import torch

from aah.choices import HealParameter
from aah.integrations.hf.run.attention import QUERY_SCALE_ATTR, SINK_LOGIT_ATTR
from aah.integrations.hf.run.model_layout import layout

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
ADAPTER = "heal"
#: what a parameter name may start with
KINDS: tuple[str, ...] = get_args(HealParameter)
#: a new sink logit's value: far below a row's log-sum-exp, yet with a gradient Adam can use
SINK_START = -8.0
#: the attribute each per-head kind sets on the attention module
HEAD_ATTRS = {"temperature": QUERY_SCALE_ATTR, "sink": SINK_LOGIT_ATTR}


def install(model: torch.nn.Module, params: Mapping[str, torch.Tensor]) -> None:
    """Put `params` (names as in the module docstring) into `model`, replacing any installed
    before; ValueError naming a parameter that does not fit the model."""
    uninstall(model)
    lay = layout(model)
    ranks: dict[tuple[int, str], int] = {}
    for name, value in params.items():
        kind, layer, rest = _parse(name, lay.n_layer)
        module = lay.modules[layer]
        if kind in HEAD_ATTRS:
            if tuple(value.shape) != (lay.n_head,):
                raise ValueError(
                    f"{name}: shape {tuple(value.shape)}, the layer has {lay.n_head} heads"
                )
            setattr(module, HEAD_ATTRS[kind], value.detach().clone())
        elif rest.endswith(".A"):
            ranks[(layer, rest.removesuffix(".A"))] = int(value.shape[0])
    for (layer, projection), rank in ranks.items():
        wrapped = _wrap(lay.modules[layer], projection, rank, f"lora.{layer}.{projection}")
        a, b = params[f"lora.{layer}.{projection}.A"], params.get(f"lora.{layer}.{projection}.B")
        if b is None:
            raise ValueError(f"lora.{layer}.{projection}.A has no .B beside it")
        sides = (("A", a, wrapped.lora_A[ADAPTER].weight), ("B", b, wrapped.lora_B[ADAPTER].weight))
        for which, got, want in sides:
            if got.shape != want.shape:
                raise ValueError(
                    f"lora.{layer}.{projection}.{which}: shape {tuple(got.shape)}, the model's "
                    f"projection needs {tuple(want.shape)}"
                )
            with torch.no_grad():
                want.copy_(got.to(want.dtype))
            want.requires_grad_(False)


def trainable(
    model: torch.nn.Module, kinds: Iterable[str], layers: Iterable[int], rank: int = 4
) -> dict[str, torch.nn.Parameter]:
    """Parameters of `kinds` on `layers` at no effect (the sink logit at almost none:
    `SINK_START`), installed and returned by name for an optimiser (the model's own weights are
    not touched; freeze them before training)."""
    uninstall(model)
    lay = layout(model)
    out: dict[str, torch.nn.Parameter] = {}
    for kind in kinds:
        if kind not in KINDS:
            raise ValueError(
                f"unknown heal parameter kind {kind!r}; choose from {', '.join(KINDS)}"
            )
    device = next(model.parameters()).device
    for layer in layers:
        module = lay.modules[layer]
        for kind, start in (("temperature", 0.0), ("sink", SINK_START)):
            if kind in kinds:
                value = torch.nn.Parameter(torch.full((lay.n_head,), start, device=device))
                setattr(module, HEAD_ATTRS[kind], value)
                out[f"{kind}.{layer}"] = value
        if "lora" in kinds:
            for projection in PROJECTIONS:
                wrapped = _wrap(module, projection, rank, f"lora.{layer}.{projection}")
                out[f"lora.{layer}.{projection}.A"] = wrapped.lora_A[ADAPTER].weight
                out[f"lora.{layer}.{projection}.B"] = wrapped.lora_B[ADAPTER].weight
    return out


def installed(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What is installed now, by name, detached copies on the CPU ({} when nothing is)."""
    out: dict[str, torch.Tensor] = {}
    for layer, module in enumerate(layout(model).modules):
        for kind, attr in HEAD_ATTRS.items():
            value = getattr(module, attr, None)
            if value is not None:
                out[f"{kind}.{layer}"] = value.detach().float().cpu().clone()
        for projection in PROJECTIONS:
            wrapped = getattr(module, projection, None)
            if _is_lora(wrapped):
                for side, table in (("A", wrapped.lora_A), ("B", wrapped.lora_B)):
                    out[f"lora.{layer}.{projection}.{side}"] = (
                        table[ADAPTER].weight.detach().float().cpu().clone()
                    )
    return out


def uninstall(model: torch.nn.Module) -> None:
    """Take every healed parameter out: the query scales away, each LoRA wrapper replaced by
    the model's own layer it wraps."""
    for module in layout(model).modules:
        for attr in HEAD_ATTRS.values():
            if hasattr(module, attr):
                delattr(module, attr)
        for projection in PROJECTIONS:
            wrapped = getattr(module, projection, None)
            if _is_lora(wrapped):
                setattr(module, projection, wrapped.base_layer)


def _is_lora(module: Any) -> bool:
    """Whether `module` is one of our LoRA wrappers (told apart without importing peft)."""
    return hasattr(module, "base_layer") and ADAPTER in getattr(module, "lora_A", {})


def _wrap(module: torch.nn.Module, projection: str, rank: int, name: str) -> Any:
    """peft's LoRA `Linear` around `module.<projection>`, B = 0 (no effect), put in its place."""
    try:
        from peft import LoraConfig
        from peft.tuners.lora import Linear as LoraLinear
    except ImportError:
        raise ImportError(
            "healed LoRA parameters need peft: pip install 'aah-attention[hf]'"
        ) from None
    base = getattr(module, projection, None)
    if not isinstance(base, torch.nn.Linear):
        raise ValueError(
            f"{name}: the attention module has no linear {projection!r} (GPT-2 fuses its "
            "projections): heal it with the temperature alone"
        )
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"LoRA rank must be an int >= 1, got {rank!r}")
    config = LoraConfig(r=rank, lora_alpha=rank, lora_dropout=0.0)
    wrapped = LoraLinear(base, ADAPTER, config=config, r=rank, lora_alpha=rank)
    wrapped.to(base.weight.device)
    setattr(module, projection, wrapped)
    return wrapped


def _parse(name: str, n_layer: int) -> tuple[str, int, str]:
    """(kind, layer, the rest) of a parameter name; ValueError naming a name that is none."""
    kind, _, rest = name.partition(".")
    layer_text, _, tail = rest.partition(".")
    ok = kind in KINDS and layer_text.isdigit() and int(layer_text) < n_layer
    if ok and kind == "lora":
        projection, _, side = tail.partition(".")
        ok = projection in PROJECTIONS and side in ("A", "B")
    if not ok or (kind in HEAD_ATTRS and tail):
        raise ValueError(
            f"healed parameter {name!r} does not fit this model ({n_layer} layers): expected "
            "temperature.<layer>, sink.<layer> or lora.<layer>.<q_proj|k_proj|v_proj|o_proj>.<A|B>"
        )
    return kind, int(layer_text), tail
