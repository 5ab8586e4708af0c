"""Per-head loss ablation: how much next-byte loss a trained model loses when one head alone
is cut to each candidate window (every other head at full attention).

This measures the cost of cutting a head directly, on the loss, where the attention mass
beyond a window (aah.controller.mass) is only a proxy: a head that retrieves a few far
answers puts little mass far away on average yet carries those answers. Used by the post-hoc
`loss-ablation` plan, which allocates windows on these costs with the same greedy budgeted
allocation as `budget` (the setting of MoA's profiling, measured by ablation instead of
gradients), and by the training-time `loss-ablation` policy. Both measure through
`aah.eval.cut_probe.CutProbe`, which reruns only what a cut changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from aah.controller.ablation import cut_costs
from aah.eval.cut_probe import CutProbe
from aah.model import GPT


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
    probe = CutProbe(model, windows, batch_size)
    return cut_costs(probe, n_layer, n_head, model.config.max_seq_len, candidates, progress)
