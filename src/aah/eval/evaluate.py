"""Evaluation: validation loss and bits per byte, cost diagnostics of a plan, peak memory.

Byte tokens make bits per byte exactly `val_loss / ln 2` (loss in nats per byte).
"""

from __future__ import annotations

import math
import resource
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from aah.attention import coverage, executed_elements
from aah.attention.cost import causal_pairs
from aah.data import eval_batches
from aah.eval.recall_accuracy import RecallCounter

EXECUTED_BACKENDS = ("grouped", "banded", "dense")


@torch.no_grad()
def evaluate_loss(
    model: nn.Module,
    tokens: np.ndarray,
    *,
    batch_size: int,
    seq_len: int,
    max_batches: int | None = None,
    device: torch.device | str = "cpu",
    autocast_dtype: torch.dtype | None = None,
    answers: np.ndarray | None = None,
    buckets: Sequence[tuple[int, int]] = (),
    layout: str = "first",
) -> dict[str, Any]:
    """Mean next-byte loss over deterministic validation windows, bpb, and forward tokens/s.

    `layout`: where the windows sit in the split (aah.data.loader.eval_starts).
    With `answers` (a generated task's per-token answer distances) the same pass also scores
    recall accuracy, overall and per distance bucket (`aah.eval.recall_accuracy.RecallCounter`).
    """
    was_training = model.training
    model.eval()
    device = torch.device(device)
    total, count = 0.0, 0
    recall = RecallCounter(buckets) if answers is not None else None
    start = time.perf_counter()
    try:
        batches = eval_batches(
            tokens, batch_size, seq_len, max_batches, answers=answers, layout=layout
        )
        for batch in batches:
            x, y = batch[0].to(device), batch[1].to(device)
            with torch.autocast(
                device.type,
                dtype=autocast_dtype or torch.float32,
                enabled=autocast_dtype is not None,
            ):
                logits = model(x)
            loss = F.cross_entropy(
                logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum"
            )
            total += float(loss)
            count += y.numel()
            if recall is not None:
                recall.add(logits, y, batch[2])
    finally:
        model.train(was_training)
    seconds = time.perf_counter() - start
    val_loss = total / max(count, 1)
    return {
        "val_loss": val_loss,
        "val_bpb": val_loss / math.log(2),
        "eval_tokens": count,
        "eval_tokens_per_s": count / seconds if seconds > 0 else float("nan"),
        **(recall.result() if recall is not None else {}),
    }


def plan_diagnostics(plan: list[list[int]], seq_len: int) -> dict[str, Any]:
    """ACR, causal coverage and executed ratio (docs/method.md) of a [layer][head] plan.

    The executed ratio is for the first backend in EXECUTED_BACKENDS that is available here.
    """
    cov = coverage(plan, seq_len)
    n_heads = sum(len(row) for row in plan)
    out: dict[str, Any] = {"acr": cov.acr, "causal_coverage": cov.causal}
    for backend in EXECUTED_BACKENDS:
        try:
            executed = sum(executed_elements(backend, row, seq_len) for row in plan)
        except ValueError:
            continue
        out["executed_ratio"] = executed / (n_heads * causal_pairs(seq_len))
        out["executed_backend"] = backend
        break
    return out


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024
