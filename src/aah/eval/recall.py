"""Recall accuracy: argmax predictions at the answer bytes of a synthetic:recall split.

Windows are contiguous and non-overlapping from the split's start, as for the loss. An
answer byte counts in a window only if its source byte lies in the same window (so the
model could have seen it); accuracy is reported overall and per distance bucket.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from aah.data.synthetic import bucket_label, distance_buckets


@torch.no_grad()
def recall_accuracy(
    model: nn.Module,
    tokens: np.ndarray,
    answer_distance: np.ndarray,
    *,
    seq_len: int,
    batch_size: int,
    max_windows: int | None = None,
    device: torch.device | str = "cpu",
) -> dict[str, Any]:
    """{"val_acc", "val_acc_by_distance": {bucket label: accuracy}, "val_answers": count}."""
    n_windows = (tokens.size - 1) // seq_len
    if max_windows is not None:
        n_windows = min(n_windows, max_windows)
    buckets = distance_buckets(seq_len)
    hits = np.zeros(len(buckets))
    counts = np.zeros(len(buckets))
    was_training = model.training
    model.eval()
    try:
        for first in range(0, n_windows, batch_size):
            starts = np.arange(first, min(first + batch_size, n_windows)) * seq_len
            x = torch.from_numpy(
                np.stack([tokens[s : s + seq_len] for s in starts]).astype(np.int64)
            )
            pred = model(x.to(device)).argmax(dim=-1).cpu().numpy()
            for row, s in enumerate(starts):
                target = np.asarray(tokens[s + 1 : s + seq_len + 1])
                dist = np.asarray(answer_distance[s + 1 : s + seq_len + 1])
                # byte i = s + 1 + j is an answer whose source i - d lies in this window
                ok = (dist > 0) & (np.arange(1, seq_len + 1) - dist >= 0)
                right = pred[row] == target
                for b, (lo, hi) in enumerate(buckets):
                    sel = ok & (dist >= lo) & (dist < hi)
                    counts[b] += sel.sum()
                    hits[b] += (right & sel).sum()
    finally:
        model.train(was_training)
    total = counts.sum()
    return {
        "val_acc": float(hits.sum() / total) if total else None,
        "val_acc_by_distance": {
            bucket_label(lo, hi): float(hits[b] / counts[b]) if counts[b] else None
            for b, (lo, hi) in enumerate(buckets)
        },
        "val_answers": int(total),
    }
