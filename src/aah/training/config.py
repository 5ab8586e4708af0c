"""`TrainConfig`: optimisation, logging and checkpoint cadence, validated field by field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from aah.data.loader import EvalLayout
from aah.validate import check_choice, check_int, check_real

Device = Literal["auto", "cpu", "cuda"]
#: "auto": bfloat16 autocast on CUDA, float32 on CPU.
Dtype = Literal["float32", "bfloat16", "auto"]
DEVICES: tuple[str, ...] = get_args(Device)
DTYPES: tuple[str, ...] = get_args(Dtype)


@dataclass
class TrainConfig:
    """How to train. The training sequence length is `model.max_seq_len`.

    Learning rate: linear warm-up over `warmup_steps`, then cosine decay to `min_lr` over
    `decay_steps` (0 = `max_steps`). To extend a run later with `--resume` exactly as if it
    had been one run, set `decay_steps` to the final length up front.
    Intervals are in optimizer steps; 0 disables periodic eval/checkpoints (the final step
    always evaluates and checkpoints). `threads` 0 leaves torch's default. `dtype` "auto" is
    bfloat16 autocast on CUDA and float32 on CPU. `eval_layout`: where the `eval_batches`
    batches of validation windows sit, "first" (back to back from the split's start) or
    "spread" (evenly spaced over the whole split: many files of a text corpus).
    """

    max_steps: int = 200
    batch_size: int = 8
    grad_accum: int = 1
    lr: float = 1e-3
    min_lr: float = 1e-4
    warmup_steps: int = 20
    decay_steps: int = 0
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    eval_interval: int = 50
    eval_batches: int = 8
    eval_layout: EvalLayout = "first"
    log_interval: int = 10
    checkpoint_interval: int = 100
    seed: int = 0
    device: Device = "auto"
    dtype: Dtype = "float32"
    threads: int = 0

    def validate(self) -> TrainConfig:
        """Raise ValueError naming the first bad field; return self."""
        positive = ("max_steps", "batch_size", "grad_accum", "eval_batches", "log_interval")
        non_negative = (
            "warmup_steps",
            "decay_steps",
            "eval_interval",
            "checkpoint_interval",
            "seed",
            "threads",
        )
        for name in positive + non_negative:
            check_int(f"train.{name}", getattr(self, name), 1 if name in positive else 0)
        for name in ("lr", "min_lr", "weight_decay", "grad_clip", "beta1", "beta2"):
            check_real(f"train.{name}", getattr(self, name))
        for name in ("lr", "min_lr", "weight_decay", "grad_clip"):
            value = getattr(self, name)
            if value < 0:
                raise ValueError(f"train.{name} must be a number >= 0, got {value!r}")
        if self.lr <= 0:
            raise ValueError(f"train.lr must be > 0, got {self.lr!r}")
        if self.min_lr > self.lr:
            raise ValueError(f"train.min_lr ({self.min_lr}) must not exceed train.lr ({self.lr})")
        for name in ("beta1", "beta2"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"train.{name} must be in [0, 1), got {value!r}")
        check_choice("train.device", self.device, Device)
        check_choice("train.dtype", self.dtype, Dtype)
        check_choice("train.eval_layout", self.eval_layout, EvalLayout)
        return self
