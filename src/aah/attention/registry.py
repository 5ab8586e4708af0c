"""Backends by name: how each runs, what it executes, and whether it can run here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from aah.attention.dense import dense_attention, dense_executed
from aah.attention.reference import reference_attention

RunFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, tuple[int, ...], float], torch.Tensor]


def _always(q: torch.Tensor, needs_grad: bool) -> None:
    return None


@dataclass(frozen=True)
class Backend:
    name: str
    run: RunFn
    executed: Callable[[tuple[int, ...], int], int]
    check: Callable[[torch.Tensor, bool], None] = _always


def _reference(q, k, v, windows, scale):  # type: ignore[no-untyped-def]
    return reference_attention(q, k, v, torch.tensor(windows), scale)


BACKENDS: dict[str, Backend] = {
    "reference": Backend("reference", _reference, dense_executed),
    "dense": Backend("dense", dense_attention, dense_executed),
}


def get_backend(name: str) -> Backend:
    return BACKENDS[name]


def pick_auto(q: torch.Tensor, windows: tuple[int, ...], needs_grad: bool) -> str:
    return "dense"
