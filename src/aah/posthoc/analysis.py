"""Post-hoc allocation: trained full-attention runs, per-head plans imposed at matched coverage.

For each run (one seed each): measure every head's attention mass beyond each candidate
window on calibration windows from the *training* split, build each policy's plan at each
coverage cap (plans.py), and score the model under it on evaluation windows spread
evenly over the whole *validation* split (the same windows for every plan and run). The
quality lost is Δ bpb = bpb(plan) - bpb(full attention), per run; over runs, the mean and its
95% CI (Student t). On a generated task (`synthetic:recall`, `synthetic:passkey`) the same pass
scores accuracy at the answer bytes, overall and per distance bucket. A policy that allocates
context well loses less at the same coverage.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from aah.attention import coverage
from aah.controller.mass import mass_beyond
from aah.data import load_tokens
from aah.data.loader import answer_marks, spread_starts, spread_windows
from aah.eval.cut_probe import chunk_losses
from aah.eval.head_ablation import loss_ablation
from aah.eval.recall_accuracy import RecallCounter
from aah.model import GPT
from aah.posthoc.plans import AAH, BUDGETED, NEEDS_ABLATION, aah_plan, budgeted_plan
from aah.training.load import load_run
from aah.validate import check_int


@dataclass(frozen=True)
class PosthocConfig:
    """What to impose and how to measure it."""

    coverages: tuple[float, ...] = (0.1, 0.2, 0.3, 0.5)
    policies: tuple[str, ...] = BUDGETED + AAH
    windows: tuple[int, ...] | None = None  # None: powers of two from 1 up to T
    eval_windows: int = 128  # evaluation sequences of length T, spread over the val split
    calib_windows: int = 8  # calibration sequences from the training split
    batch_size: int = 8
    seed: int = 0

    def validate(self) -> None:
        for c in self.coverages:
            if not 0.0 < c <= 1.0:
                raise ValueError(f"coverages: every coverage must be in (0, 1], got {c!r}")
        unknown = [p for p in self.policies if p not in BUDGETED + AAH]
        if unknown:
            raise ValueError(
                f"policies: unknown {', '.join(unknown)}; choose from {', '.join(BUDGETED + AAH)}"
            )
        for name in ("eval_windows", "calib_windows", "batch_size"):
            check_int(name, getattr(self, name), 1)


@dataclass
class RunResult:
    """One run's scores: full attention's and one row per (policy, cap) plan.

    `full` holds "bpb" and, on a generated task, "acc" and "acc_by_distance" (None otherwise).
    """

    run: str
    full: dict
    rows: list[dict] = field(default_factory=list)

    @property
    def full_bpb(self) -> float:
        return float(self.full["bpb"])


@dataclass(frozen=True)
class EvalSet:
    """Evaluation windows (N, T + 1) and, on a generated task, their answer marks (N, T)."""

    windows: torch.Tensor
    marks: torch.Tensor | None = None
    buckets: tuple[tuple[int, int], ...] = ()


def eval_set(
    tokens: np.ndarray,
    seq_len: int,
    count: int,
    answers: np.ndarray | None = None,
    buckets: Sequence[tuple[int, int]] = (),
) -> EvalSet:
    """Strided windows of a split, with answer marks when the split has answers."""
    windows = spread_windows(tokens, seq_len, count)
    if answers is None:
        return EvalSet(windows)
    starts = spread_starts(tokens.size, seq_len, count)
    return EvalSet(windows, answer_marks(answers, starts, seq_len), tuple(buckets))


@torch.no_grad()
def score(model: GPT, data: EvalSet, batch_size: int) -> dict:
    """{"bpb", "acc", "acc_by_distance"} of the model as it stands (acc None on text)."""
    total, count = 0.0, 0
    recall = RecallCounter(data.buckets) if data.marks is not None else None
    for i, (logits, target, loss) in enumerate(chunk_losses(model, data.windows, batch_size)):
        total += loss
        count += target.numel()
        if recall is not None and data.marks is not None:
            recall.add(logits, target, data.marks[i * batch_size : i * batch_size + len(target)])
    result = recall.result() if recall is not None else {}
    return {
        "bpb": total / count / math.log(2),
        "acc": result.get("val_acc"),
        "acc_by_distance": result.get("val_acc_by_distance"),
    }


def bits_per_byte(model: GPT, windows: torch.Tensor, batch_size: int) -> float:
    return float(score(model, EvalSet(windows), batch_size)["bpb"])


@torch.no_grad()
def measure_mass(
    model: GPT, windows: torch.Tensor, candidates: Sequence[int], seed: int
) -> np.ndarray:
    """(n_layer, n_head, n_candidates) mass beyond each candidate, mean over windows."""
    total = None
    for i, chunk in enumerate(torch.split(windows, 2)):
        with model.capturing() as qkv:
            model(chunk[:, :-1])
        per_layer = [mass_beyond(q, k, v, candidates, seed=seed + i) for q, k, v, *_ in qkv]
        mass = torch.stack(per_layer).double()
        total = mass if total is None else total + mass
    assert total is not None
    return (total / math.ceil(windows.shape[0] / 2)).numpy()


def run_posthoc(
    run_dir: str | Path, cfg: PosthocConfig, progress: Callable[[str], None] | None = None
) -> RunResult:
    """Every (policy, cap) plan of `cfg` on one trained run; see the module docstring."""
    cfg.validate()
    model, config, _ = load_run(run_dir)
    seq_len = config.seq_len
    splits = load_tokens(config.data, seq_len=config.seq_len)
    evals = eval_set(
        splits.val, seq_len, cfg.eval_windows, splits.val_answer_distance,
        splits.answer_buckets or (),
    )  # fmt: skip
    calib = spread_windows(splits.train, seq_len, cfg.calib_windows)
    cands = list(cfg.windows or _powers_of_two(seq_len))
    full = [[seq_len] * config.model.n_head for _ in range(config.model.n_layer)]
    model.set_window_plan(full)
    result = RunResult(str(run_dir), score(model, evals, cfg.batch_size))
    mass = measure_mass(model, calib, cands, cfg.seed)
    loss = (
        loss_ablation(model, calib, cands, cfg.batch_size)
        if any(p in NEEDS_ABLATION for p in cfg.policies)
        else None
    )
    with torch.no_grad(), model.capturing() as qkv:
        model(calib[: min(2, calib.shape[0]), :-1])
    plans: list[tuple[str, float | None, list[list[int]]]] = []
    for policy in cfg.policies:
        if policy in AAH:
            plans.append((policy, None, aah_plan(policy, qkv, _aah_windows(seq_len), cfg.seed)))
        else:
            plans += [
                (policy, c, budgeted_plan(policy, mass, cands, seq_len, c, cfg.seed, loss))
                for c in cfg.coverages
            ]
    for policy, cap, plan in plans:
        model.set_window_plan(plan)
        scores = score(model, evals, cfg.batch_size)
        result.rows.append({
            "policy": policy, "cap": cap, "coverage": coverage(plan, seq_len).causal,
            **scores, "delta_bpb": scores["bpb"] - result.full_bpb, "windows": plan,
        })  # fmt: skip
        if progress is not None:
            acc = "" if scores["acc"] is None else f", accuracy {scores['acc']:.3f}"
            progress(
                f"{Path(run_dir).name}: {policy} cap {cap}: "
                f"Δ bpb {scores['bpb'] - result.full_bpb:+.4f}{acc}"
            )
    model.set_window_plan(full)
    return result


def _powers_of_two(seq_len: int) -> list[int]:
    """1, 2, 4, ... below T, and T: fine enough for every coverage cap down to ~1 / T."""
    return sorted({2**p for p in range(seq_len.bit_length()) if 2**p < seq_len} | {seq_len})


def _aah_windows(seq_len: int) -> list[int]:
    """The method's candidates: T/8, T/4, T/2, T."""
    return sorted({max(1, seq_len // d) for d in (8, 4, 2, 1)})
