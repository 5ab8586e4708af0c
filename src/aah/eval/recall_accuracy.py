"""Recall accuracy: argmax prediction == target at the answer positions of a generated task.

Answer marks come with the batches (`aah.data.loader`): a target is counted only when its
source lies in the same window, so the model could have seen it. Accuracy is reported
overall and per distance bucket (`aah.data.synthetic.distance_buckets`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from aah.data.synthetic import bucket_label


class RecallCounter:
    """Hits and counts at answer targets, overall and per [lo, hi) distance bucket."""

    def __init__(self, buckets: Sequence[tuple[int, int]]) -> None:
        self.buckets = [(int(lo), int(hi)) for lo, hi in buckets]
        self.hits = [0] * len(self.buckets)
        self.counts = [0] * len(self.buckets)
        self.total_hits = 0
        self.total = 0

    def add(self, logits: torch.Tensor, targets: torch.Tensor, marks: torch.Tensor) -> None:
        """Count one batch: logits (B, T, V), targets and marks (B, T)."""
        marks = marks.to(targets.device)
        right = logits.argmax(dim=-1) == targets
        answer = marks > 0
        self.total += int(answer.sum())
        self.total_hits += int((right & answer).sum())
        for b, (lo, hi) in enumerate(self.buckets):
            sel = (marks >= lo) & (marks < hi)
            self.counts[b] += int(sel.sum())
            self.hits[b] += int((right & sel).sum())

    def result(self) -> dict[str, Any]:
        """{"val_acc", "val_acc_by_distance": {bucket label: accuracy}, "val_answers"};
        None where nothing was counted."""
        return {
            "val_acc": self.total_hits / self.total if self.total else None,
            "val_acc_by_distance": {
                bucket_label(lo, hi): (self.hits[b] / self.counts[b] if self.counts[b] else None)
                for b, (lo, hi) in enumerate(self.buckets)
            },
            "val_answers": self.total,
        }
