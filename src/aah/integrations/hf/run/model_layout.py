"""What the Hugging Face integration reads off a transformers model: its family, sizes,
attention modules in order, each layer's own sliding window and what its KV memory costs; and
the transformers import.

transformers is imported lazily: without it `require_transformers` raises ImportError naming
`pip install 'aah-attention[hf]'`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

import torch

from aah.attention.kv_bytes import KVShape

# model_type -> attribute path from the base model to the decoder layers, and the layer's attention.
FAMILIES: dict[str, tuple[str, str]] = {
    "gemma3_text": ("layers", "self_attn"),
    "gpt2": ("h", "attn"),
    "llama": ("layers", "self_attn"),
    "mistral": ("layers", "self_attn"),
    "qwen2": ("layers", "self_attn"),
    "qwen3": ("layers", "self_attn"),
}


def require_transformers() -> ModuleType:
    """The transformers module, or ImportError saying how to install it."""
    try:
        import transformers
    except ImportError as err:
        raise ImportError(
            "the Hugging Face integration needs transformers: pip install 'aah-attention[hf]'"
        ) from err
    return transformers


@dataclass(frozen=True)
class Layout:
    """What `apply` needs to know about a model: family, sizes and attention modules in order."""

    family: str
    n_layer: int
    n_head: int
    n_kv_head: int
    modules: tuple[torch.nn.Module, ...]
    head_dim: int  # the config's own, or hidden_size / n_head


def layout(model: torch.nn.Module) -> Layout:
    """The model's layout; ValueError naming the class if its family is not supported."""
    config = getattr(model, "config", None)
    family = getattr(config, "model_type", None)
    if family not in FAMILIES:
        names = ", ".join(sorted(FAMILIES))
        raise ValueError(
            f"{type(model).__name__} (model_type {family!r}) is not supported by the aah "
            f"integration; supported model types: {names}"
        )
    if getattr(config, "add_cross_attention", False):
        raise ValueError(f"{type(model).__name__} has cross-attention layers: not supported")
    _, attn_attr = FAMILIES[family]
    modules = tuple(getattr(layer, attn_attr) for layer in decoder_layers(model))
    n_head = int(config.num_attention_heads)
    n_kv = int(getattr(config, "num_key_value_heads", None) or n_head)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // n_head)
    return Layout(family, len(modules), n_head, n_kv, modules, head_dim)


def decoder_layers(model: torch.nn.Module) -> Sequence[torch.nn.Module]:
    """The model's decoder layers in order (its family must be in FAMILIES)."""
    layers_attr, _ = FAMILIES[model.config.model_type]
    return getattr(getattr(model, "base_model", model), layers_attr)


def cache_keyword(model: torch.nn.Module) -> str:
    """The forward's (and `generate`'s) keyword for a cache object in this transformers
    version: `cache` in recent ones, `past_key_values` before."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def sliding_windows(model: torch.nn.Module) -> list[int | None]:
    """Each layer's own sliding window (Mistral, Qwen and Gemma 3 sliding layers), None where
    it has none: the cap `PerHeadCache` puts on that layer's rings."""
    config = model.config
    caps = []
    for module in layout(model).modules:
        cap = getattr(module, "sliding_window", getattr(config, "sliding_window", None))
        caps.append(int(cap) if cap else None)
    return caps


def hybrid_full_layers(sliding: Sequence[int | None]) -> tuple[int, ...]:
    """The full-attention layers of a model that mixes them with sliding ones (Gemma 2/3), from
    each layer's own sliding window (`sliding_windows`); () for a model of one kind."""
    full = tuple(i for i, cap in enumerate(sliding) if not cap)
    return full if 0 < len(full) < len(sliding) else ()


def kv_shape(model: torch.nn.Module) -> KVShape:
    """The model's `KVShape` as `PerHeadCache` stores it: KV heads, D * 2 * itemsize bytes per
    position (the dtype of its parameters), each layer's sliding window."""
    lay = layout(model)
    itemsize = next(model.parameters()).element_size()
    return KVShape(lay.n_kv_head, lay.head_dim * 2 * itemsize, tuple(sliding_windows(model)))
