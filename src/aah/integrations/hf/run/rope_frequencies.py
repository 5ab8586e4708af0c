"""The rotary frequencies a transformers model rotates each layer's queries and keys with, as
the `RopeShift` a rolling `PerHeadCache` moves its sinks with.

Read off the model's own rotary module (`rotary_emb`: `inv_freq`, or on Gemma 3 one
`<layer type>_inv_freq` per kind of layer, each layer's kind in `config.layer_types`), in
transformers' pairing (`rotate_half`: dimension i with i + D/2). Refused with ValueError, naming
the reason: a model without rotary positions (GPT-2's learned ones would run out), rotary types
whose frequencies change with the length ("dynamic", "longrope": a moved key would no longer
match a key rotated at that position), and rotary embeddings of part of the head only.
"""

from __future__ import annotations

import torch

from aah.integrations.hf.run.model_layout import layout
from aah.model.rope_shift import RopeShift

# Rotary types whose frequencies are fixed once the model is built: a rotation by d moves a
# key by d positions at any length.
FIXED_ROPE_TYPES = ("default", "linear", "llama3", "yarn")


def rope_shift(model: torch.nn.Module) -> RopeShift:
    """The model's rotary frequencies per layer; ValueError where rolling cannot move keys."""
    lay = layout(model)
    name = type(model).__name__
    rotary = getattr(getattr(model, "base_model", model), "rotary_emb", None)
    if rotary is None:
        raise ValueError(
            f"{name} (model_type {lay.family!r}) has no rotary position embedding: a rolling "
            "cache needs positions that only count distances (RoPE); learned absolute "
            "positions run out at the model's limit"
        )
    kinds = getattr(model.config, "layer_types", None) or [None] * lay.n_layer
    freqs = []
    for i, kind in enumerate(kinds):
        rope_type = getattr(rotary, "rope_type", "default")
        if isinstance(rope_type, dict):
            rope_type = rope_type.get(kind, "default")
        if rope_type not in FIXED_ROPE_TYPES:
            raise ValueError(
                f"{name}: rotary type {rope_type!r} changes its frequencies with the length; "
                f"a rolling cache supports {', '.join(FIXED_ROPE_TYPES)}"
            )
        inv_freq = getattr(rotary, f"{kind}_inv_freq", None) if kind else None
        if inv_freq is None:
            inv_freq = getattr(rotary, "inv_freq", None)
        if inv_freq is None:
            raise ValueError(f"{name}: no rotary frequencies found for layer {i}")
        if 2 * inv_freq.numel() != lay.head_dim:
            raise ValueError(
                f"{name}: layer {i} rotates {2 * inv_freq.numel()} of its {lay.head_dim} head "
                "dimensions; a rolling cache supports rotary embeddings of the whole head"
            )
        freqs.append(inv_freq)
    return RopeShift.of(freqs, "half")
