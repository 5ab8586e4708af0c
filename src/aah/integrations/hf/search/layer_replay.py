"""Replay a transformers model's first decoder layers from a recorded forward.

The loss signal (`hf.search.cut_loss`) runs the calibration batches once per (layer, KV head,
window) cut. A cut in layer l leaves layers 0..l-1 computing exactly what they compute with
every head full, so their outputs can be recorded once per batch (`recording`) and handed
back instead of recomputed (`replaying`): each cut then costs the layers from l on, about
half a forward on average, for the memory of one batch's hidden states per layer. The
decoder layer's output object is returned as it was recorded (a tensor or a tuple, whatever
this transformers version's layer returns), so the model's own loop is untouched; a layer
whose forward is already wrapped by an instance attribute (e.g. accelerate's device-map
hooks) gets that wrapper back afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch


@contextmanager
def recording(layers: Sequence[torch.nn.Module]) -> Iterator[list[Any]]:
    """Inside the block, each forward stores layer i's output at index i of the yielded list
    (the last forward's, when several run)."""
    outputs: list[Any] = [None] * len(layers)
    handles = [
        layer.register_forward_hook(lambda _m, _a, out, i=i: outputs.__setitem__(i, out))
        for i, layer in enumerate(layers)
    ]
    try:
        yield outputs
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def replaying(
    layers: Sequence[torch.nn.Module], outputs: Sequence[Any], upto: int
) -> Iterator[None]:
    """Inside the block, layers 0..upto-1 skip their computation and return `outputs[i]`."""
    if any(outputs[i] is None for i in range(upto)):
        raise ValueError(f"no recorded output for some of the first {upto} layers")
    saved = [layer.__dict__.get("forward") for layer in layers[:upto]]
    try:
        for i, layer in enumerate(layers[:upto]):
            layer.forward = _Replay(outputs[i])
        yield
    finally:
        for layer, forward in zip(layers[:upto], saved, strict=True):
            if forward is None:
                layer.__dict__.pop("forward", None)
            else:
                layer.forward = forward


class _Replay:
    """A stand-in forward: whatever the call, the recorded output."""

    def __init__(self, output: Any) -> None:
        self.output = output

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.output
