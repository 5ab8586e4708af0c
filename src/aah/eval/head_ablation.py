"""Per-head loss ablation: how much next-byte loss a trained model loses when one head alone
is cut to each candidate window (every other head at full attention).

This measures the cost of cutting a head directly, on the loss, where the attention mass
beyond a window (aah.controller.mass) is only a proxy: a head that retrieves a few far
answers puts little mass far away on average yet carries those answers. Used by the post-hoc
`loss-ablation` plan, which allocates windows on these costs with the same greedy budgeted
allocation as `budget` (the setting of MoA's profiling, measured by ablation instead of
gradients). Cost: one forward pass over the calibration windows per (head, candidate < T).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from aah.model import GPT


@torch.no_grad()
def chunk_losses(
    model: GPT, windows: torch.Tensor, batch_size: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor, float]]:
    """Per chunk of (N, T + 1) windows: (logits, targets, summed next-byte loss in nats)."""
    for chunk in torch.split(windows, batch_size):
        logits = model(chunk[:, :-1])
        target = chunk[:, 1:]
        loss = F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), reduction="sum")
        yield logits, target, float(loss)


def mean_loss(model: GPT, windows: torch.Tensor, batch_size: int) -> float:
    """Mean next-byte loss (nats) of the model as it stands over (N, T + 1) windows."""
    total = sum(loss for _, _, loss in chunk_losses(model, windows, batch_size))
    return total / (windows.shape[0] * (windows.shape[1] - 1))


def loss_ablation(
    model: GPT,
    windows: torch.Tensor,
    candidates: Sequence[int],
    batch_size: int,
    progress: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """(n_layer, n_head, n_candidates) loss increase (nats, >= 0) when that head alone is cut
    to each candidate; non-increasing in the window (a wider window never costs more: the
    measured value is raised to that of any wider candidate, which also absorbs noise).
    The model's plan is restored afterwards."""
    seq_len = model.config.max_seq_len
    in_force = model.window_plan()
    n_layer, n_head = len(in_force), len(in_force[0])
    full = [[seq_len] * n_head for _ in range(n_layer)]
    out = np.zeros((n_layer, n_head, len(candidates)), dtype=np.float64)
    todo = [
        (l, h, c) for l in range(n_layer) for h in range(n_head) for c in range(len(candidates))
    ]
    todo = [(l, h, c) for l, h, c in todo if candidates[c] < seq_len]
    try:
        model.set_window_plan(full)
        base = mean_loss(model, windows, batch_size)
        for done, (l, h, c) in enumerate(todo):
            plan = [row[:] for row in full]
            plan[l][h] = int(candidates[c])
            model.set_window_plan(plan)
            out[l, h, c] = max(0.0, mean_loss(model, windows, batch_size) - base)
            if progress is not None:
                progress(done + 1, len(todo))
    finally:
        model.set_window_plan(in_force)
    order = np.argsort(np.asarray(candidates))
    # running max from the widest candidate down: cost(w) = max over w' >= w of measured
    out[..., order] = np.maximum.accumulate(out[..., order][..., ::-1], axis=-1)[..., ::-1]
    return out
