"""Backends by name: how each runs, what it executes, whether it can run here, and `auto`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import get_args

import torch

from aah.attention.banded import banded_attention, banded_executed
from aah.attention.dense import dense_attention, dense_executed
from aah.attention.flash import check_flash, flash_attention_windows, flash_available
from aah.attention.flex import check_flex, flex_attention_windows, flex_executed
from aah.attention.grouped import grouped_attention, grouped_executed
from aah.attention.reference import reference_attention
from aah.choices import BackendName

Sinks = tuple[int, ...] | None  # per query head, effective (see api.effective_sinks); None: none
RunFn = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, tuple[int, ...], float, Sinks], torch.Tensor
]


def _runs_anywhere(q: torch.Tensor, needs_grad: bool) -> None:
    return None


@dataclass(frozen=True)
class Backend:
    name: str
    run: RunFn
    executed: Callable[[tuple[int, ...], int, Sinks], int]  # score elements per batch element
    check: Callable[[torch.Tensor, bool], None] = _runs_anywhere  # ValueError if it cannot run
    sinks: bool = True  # whether it keeps attention sinks


def _fp32_on_cpu(run: RunFn) -> RunFn:
    """Run half-precision CPU inputs in fp32, returning q's dtype.

    PyTorch's CPU flash kernel computes its bf16 backward with more than twice the error of
    plain bf16 math (flash-attention's acceptance rule; see tests/attention), and CPUs gain
    no speed from half precision here, so the fused backends upcast instead.
    """

    def wrapped(q, k, v, windows, scale, sinks):  # type: ignore[no-untyped-def]
        if q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float16):
            return run(q.float(), k.float(), v.float(), windows, scale, sinks).to(q.dtype)
        return run(q, k, v, windows, scale, sinks)

    return wrapped


def _reference(q, k, v, windows, scale, sinks):  # type: ignore[no-untyped-def]
    return reference_attention(
        q, k, v, torch.tensor(windows), scale, None if sinks is None else torch.tensor(sinks)
    )


BACKENDS: dict[str, Backend] = {
    "reference": Backend("reference", _reference, dense_executed),
    "dense": Backend("dense", dense_attention, dense_executed),
    "banded": Backend("banded", _fp32_on_cpu(banded_attention), banded_executed),
    "grouped": Backend("grouped", _fp32_on_cpu(grouped_attention), grouped_executed),
    "flex": Backend("flex", flex_attention_windows, flex_executed, check_flex),
    "flash": Backend("flash", flash_attention_windows, flex_executed, check_flash, sinks=False),
}


# The names live once, torch-free, in aah.choices (the model config validates against them).
if tuple(BACKENDS) != get_args(BackendName):
    raise RuntimeError(
        f"attention backends {tuple(BACKENDS)} differ from aah.choices.BackendName "
        f"{get_args(BackendName)}"
    )


def get_backend(name: str) -> Backend:
    return BACKENDS[name]


def pick_auto(
    q: torch.Tensor, windows: tuple[int, ...], needs_grad: bool, sinks: tuple[int, ...] = ()
) -> str:
    """The measured rule (docs/performance.md, "Choosing a backend"):

    - CUDA: flash when installed, the dtype is fp16/bf16 and no head has sinks (flash_attn
      cannot keep them), else flex (compiled, fwd and bwd).
    - CPU: grouped, training or inference. Flex's CPU forward is competitive only once compiled
      for each (T, windows), which costs seconds per new plan, so it is never picked implicitly.
    """
    if q.device.type == "cuda":
        if flash_available() and q.dtype in (torch.float16, torch.bfloat16) and not any(sinks):
            return "flash"
        return "flex"
    return "grouped"
