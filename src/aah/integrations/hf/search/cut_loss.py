"""The loss signal of the plan search: what cutting one KV head to a window costs in loss.

Shapes: L layers, Hq query heads and Hkv KV heads per layer (G = Hq / Hkv; query head h reads
KV head h // G), calibration batches (B, T) of token ids, n_w ascending candidate windows.

For each KV head and each candidate c < T the model runs the calibration batches with that KV
head's G query heads cut to window c (and the plan's sinks), every other head at full causal
attention, through the same "aah" attention path `hf.apply` imposes plans with. The cost is
the rise of the mean next-token loss (nats) over the model with every head full. Candidates
>= T cut nothing and cost 0. As `aah.eval.head_ablation` does on the project's own GPT, the
measured rises are then made non-increasing in the window (a wider window never costs more):
each is raised to the largest of any wider candidate (running max from the widest down, which
also absorbs noise), floored at 0.

Attention mass beyond a window (`hf.search.sink_mass`) is a proxy for this cost: a head that
retrieves a few far tokens puts little mean mass far away, yet carries those tokens. Cost of
measuring it: one forward over the calibration batches per (KV head, candidate < T), i.e.
L x Hkv x |{c < T}| passes plus one for the reference loss, less the layers before each cut,
which are replayed from the reference pass (`hf.search.layer_replay`) instead of recomputed.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple

import torch
from tqdm import tqdm

from aah.controller.ablation import monotone_in_window, single_cuts
from aah.controller.allocate import check_candidates
from aah.integrations.hf.run.apply_plan import applied
from aah.integrations.hf.run.model_layout import decoder_layers, layout
from aah.integrations.hf.search.layer_replay import recording, replaying
from aah.plan import Plan
from aah.validate import check_int


class Imposed(NamedTuple):
    """Windows [layer][query head] and sinks [layer][query head] (None: none) for `hf.apply`."""

    windows: Plan
    sinks: Plan | None


@torch.no_grad()
def batch_nll(model: torch.nn.Module, ids: torch.Tensor) -> tuple[float, int]:
    """(summed next-token loss in nats, tokens predicted) of one (B, T) batch, as the model
    stands (its attention implementation, plan and training mode)."""
    ids = ids.to(next(model.parameters()).device)
    logits = model(input_ids=ids, use_cache=False).logits[:, :-1].float()
    targets = ids[:, 1:]
    nll = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum"
    )
    return float(nll), targets.numel()


def mean_loss(model: torch.nn.Module, batches: Sequence[torch.Tensor]) -> float:
    """Mean next-token loss (nats) over every predicted token of `batches` (B, T), as the model
    stands (its attention implementation and plan); ValueError when no block has 2 tokens."""
    with evaluating(model):
        sums = [batch_nll(model, ids) for ids in batches]
    count = sum(n for _, n in sums)
    if count == 0:
        raise ValueError("the loss needs blocks of at least 2 tokens")
    return sum(nll for nll, _ in sums) / count


@contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[None]:
    """Eval mode inside the block; the training mode as it was after."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def cut_plan(
    n_layer: int, n_head: int, group: int, seq_len: int, layer: int, kv_head: int, window: int
) -> Plan:
    """[layer][query head]: every head full (`seq_len`) but the G query heads of `kv_head` in
    `layer`, which get `window`."""
    plan = [[seq_len] * n_head for _ in range(n_layer)]
    for h in range(kv_head * group, (kv_head + 1) * group):
        plan[layer][h] = int(window)
    return plan


def loss_increase(
    model: torch.nn.Module,
    batches: Sequence[torch.Tensor],
    candidates: Sequence[int],
    *,
    sinks: int = 0,
    progress: bool = False,
    only: Sequence[tuple[int, int, int]] | None = None,
) -> torch.Tensor:
    """(L, Hkv, n_w) float64: measured rise of the mean loss (nats, may be < 0 by noise) when
    that KV head alone is cut to each candidate with `sinks` sinks (module docstring); 0 for
    candidates >= T. `only`: measure just these (layer, KV head, candidate index) cuts (the
    rest stay 0). The model's plan and implementation are as they were on return."""
    check_int("sinks", sinks, minimum=0)
    cands = check_candidates(candidates)
    if not batches:
        raise ValueError("no calibration batches")
    lay = layout(model)
    seq_len = int(batches[0].shape[1])
    group = lay.n_head // lay.n_kv_head
    sink_rows = [[sinks] * lay.n_head for _ in range(lay.n_layer)] if sinks else None
    out = torch.zeros(lay.n_layer, lay.n_kv_head, len(cands), dtype=torch.float64)
    todo = single_cuts(lay.n_layer, lay.n_kv_head, cands, seq_len, only)
    full = Imposed([[seq_len] * lay.n_head for _ in range(lay.n_layer)], sink_rows)
    cuts = [
        Imposed(cut_plan(lay.n_layer, lay.n_head, group, seq_len, layer, kv, cands[j]), sink_rows)
        for layer, kv, j in todo
    ]
    layers = decoder_layers(model)
    base_nll, cut_nll, count = 0.0, [0.0] * len(todo), 0
    bar = tqdm(
        total=len(todo) * len(batches), desc="loss signal (KV head x window)", unit="pass",
        disable=not progress,
    )  # fmt: skip
    with evaluating(model):
        for ids in batches:  # per batch: one full forward, then each cut from its layer on
            with applied(model, full), recording(layers) as outputs:
                nll, tokens = batch_nll(model, ids)
            base_nll, count = base_nll + nll, count + tokens
            for i, ((layer, _, _), cut) in enumerate(zip(todo, cuts, strict=True)):
                with applied(model, cut), replaying(layers, outputs, upto=layer):
                    cut_nll[i] += batch_nll(model, ids)[0]
                bar.update(1)
    bar.close()
    if count == 0:
        raise ValueError("the loss needs blocks of at least 2 tokens")
    base = base_nll / count
    for (layer, kv, j), nll in zip(todo, cut_nll, strict=True):
        out[layer, kv, j] = nll / count - base
    if not math.isfinite(base) or not torch.isfinite(out).all():
        raise RuntimeError("the calibration loss is not finite")
    return out


def monotone_costs(raw: torch.Tensor) -> torch.Tensor:
    """(..., n_w) over ascending candidates: `raw` floored at 0, then raised to the largest
    value of any wider candidate (`controller.ablation.monotone_in_window`, the rule the
    project's own GPT is measured by)."""
    steps = range(raw.shape[-1])
    return torch.from_numpy(monotone_in_window(raw.detach().cpu().double().numpy(), steps))


def measure_loss_costs(
    model: torch.nn.Module,
    batches: Sequence[torch.Tensor],
    candidates: Sequence[int],
    *,
    sinks: int = 0,
    progress: bool = False,
) -> torch.Tensor:
    """(L, Hkv, n_w) float64 costs, >= 0 and non-increasing along the candidates: the loss
    rise of cutting each KV head alone to each candidate (module docstring)."""
    return monotone_costs(loss_increase(model, batches, candidates, sinks=sinks, progress=progress))


def per_query_head(costs: torch.Tensor, n_head: int) -> torch.Tensor:
    """(L, Hkv, n_w) -> (L, Hq, n_w): each KV head's cost split evenly over its G query heads,
    so that their sum, which `controller.allocate` allocates on, is the KV head's cost."""
    n_kv = costs.shape[1]
    if n_head % n_kv:
        raise ValueError(f"{n_head} query heads do not split into {n_kv} KV heads")
    group = n_head // n_kv
    return costs.repeat_interleave(group, dim=1) / group


def chosen_cost(costs: torch.Tensor, windows: Plan, candidates: Sequence[int]) -> float:
    """Sum over KV heads of the cost (L, Hkv, n_w) at each KV head's window in `windows`
    [layer][query head] (windows must be candidates): the summed single-head loss rises."""
    n_kv = costs.shape[1]
    index = {int(c): j for j, c in enumerate(candidates)}
    total = 0.0
    for layer, row in enumerate(windows):
        group = len(row) // n_kv
        for kv in range(n_kv):
            total += float(costs[layer, kv, index[int(row[kv * group])]])
    return total
