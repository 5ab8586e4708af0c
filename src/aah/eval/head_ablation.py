"""Per-head loss ablation: how much next-byte loss a trained model loses when one head alone
is cut to each candidate window (every other head at full attention).

This measures the cost of cutting a head directly, on the loss, where the attention mass
beyond a window (aah.controller.mass) is only a proxy: a head that retrieves a few far
answers puts little mass far away on average yet carries those answers. Used by the post-hoc
`loss-ablation` plan, which allocates windows on these costs with the same greedy budgeted
allocation as `budget` (the setting of MoA's profiling, measured by ablation instead of
gradients), and by the training-time `loss-ablation` policy through `plan_probe`. Cost: one
forward pass over the calibration windows per (head, candidate < T).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from aah.controller.ablation import cut_costs
from aah.controller.plan import Plan
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


def plan_probe(model: GPT, windows: torch.Tensor, batch_size: int) -> Callable[[Plan], float]:
    """The model's mean next-byte loss (nats) on (N, T + 1) `windows` under a plan, in eval
    mode; the plan in force and the training mode are restored before it returns."""

    def probe(plan: Plan) -> float:
        in_force, was_training = model.window_plan(), model.training
        model.eval()
        try:
            model.set_window_plan(plan)
            return mean_loss(model, windows, batch_size)
        finally:
            model.set_window_plan(in_force)
            model.train(was_training)

    return probe


def loss_ablation(
    model: GPT,
    windows: torch.Tensor,
    candidates: Sequence[int],
    batch_size: int,
    progress: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """(n_layer, n_head, n_candidates) loss increase (nats, >= 0) when that head alone is cut
    to each candidate (aah.controller.ablation.cut_costs on this model's loss); the model's
    plan is restored afterwards."""
    n_layer, n_head = model.config.n_layer, model.config.n_head
    probe = plan_probe(model, windows, batch_size)
    return cut_costs(probe, n_layer, n_head, model.config.max_seq_len, candidates, progress)
