"""AAH-v3 greedy centroid clustering of feature rows (heads at level 0, groups above).

Rows are visited in index order. A row joins the most similar group (the earliest on ties)
when that similarity is at least the threshold, else it opens a group. Similarities use unit
vectors, and a group's centroid is the normalised mean of its members' unit vectors:

- level 0 ("cosine"): similarity = cosine of the row with the centroid. If everything falls
  into one group, it is split in two around the least similar pair (stickiness adds a bonus
  to pairs that shared a group last time, on the pairwise matrix used for that split);
  otherwise groups smaller than `min_size` are merged (see `merge_small_groups`).
- upper levels ("cosine_normdiff"): cosine minus `penalty * |n_g - n_i| / max(n_g, n_i)`,
  where n_i is the row's norm and n_g the norm of the plain mean of the group's raw rows;
  small groups are merged, a collapse is never split.

Arithmetic is float32 in the order the method's reference uses, so decisions agree with it
even on near ties computed the same way. Groups list their members in the order they were
added. Every function takes an optional `Closest`, which keeps the smallest decision margin
of the call: a decision closer than float32 rounding to going the other way can go either
way on another CPU (its matrix products round differently), for the reference too.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

Groups = list[list[int]]
#: Norm floor of every normalisation and of the norm-gap denominator.
EPS = 1e-6
#: Similarity gap under which a row is equally close to both anchors of a split.
SPLIT_TIE = 1e-8


class Closest:
    """The smallest margin of the decisions noted: a similarity against its threshold, the
    best candidate against the runner-up. `value` is inf until something is noted."""

    def __init__(self) -> None:
        self.value = math.inf

    def note(self, margin: float | torch.Tensor) -> None:
        self.value = min(self.value, abs(float(margin)))

    def note_runner_up(self, values: torch.Tensor, *, largest: bool = True) -> None:
        """The gap between the best and the second best of `values` (1-D), when there are two."""
        if values.numel() >= 2:
            top = torch.topk(values.flatten(), 2, largest=largest).values
            self.note(top[0] - top[1])


def _note(closest: Closest | None, margin: float | torch.Tensor) -> None:
    if closest is not None:
        closest.note(margin)


def unit_rows(feats: torch.Tensor) -> torch.Tensor:
    """(N, F) float32 rows scaled to unit norm (rows below EPS are divided by EPS)."""
    return F.normalize(feats.float(), dim=-1, eps=EPS)


def _greedy(
    unit: torch.Tensor,
    threshold: float,
    raw: torch.Tensor | None,
    penalty: float,
    closest: Closest | None = None,
) -> Groups:
    """The greedy pass; with `raw` given, the norm-gap penalty of cosine_normdiff applies."""
    groups: Groups = []
    cents: list[torch.Tensor] = []
    for i in range(unit.shape[0]):
        if not cents:
            groups.append([i])
            cents.append(unit[i].clone())
            continue
        sims = (torch.stack(cents) @ unit[i].unsqueeze(1)).squeeze(1)
        if raw is not None:
            c_norms = torch.stack([raw[g].mean(dim=0).norm() for g in groups])
            i_norm = raw[i].norm()
            den = torch.maximum(c_norms, i_norm.expand_as(c_norms)).clamp_min(EPS)
            sims = sims - penalty * ((c_norms - i_norm).abs() / den)
        best_sim, best = torch.max(sims, dim=0)
        _note(closest, float(best_sim.item()) - float(threshold))
        if float(best_sim.item()) >= float(threshold):
            if closest is not None:
                closest.note_runner_up(sims)
            g = int(best.item())
            groups[g].append(i)
            cents[g] = F.normalize(unit[groups[g]].mean(dim=0), dim=0, eps=EPS)
        else:
            groups.append([i])
            cents.append(unit[i].clone())
    return groups


def merge_small_groups(
    groups: Groups,
    unit: torch.Tensor,
    min_size: int,
    threshold: float,
    closest: Closest | None = None,
) -> Groups:
    """Fold groups smaller than `min_size` into their most similar group, one pass.

    The small groups are listed once, before any merge, and visited in order; a group that
    has grown to `min_size` meanwhile is skipped. Similarity is the dot product of the
    groups' mean unit vectors (not renormalised); a merge needs it >= `threshold` and more
    than two non-empty groups. A merged-away group keeps its old mean, so a later small
    group may still pick it (and then lands in its slot). Empty slots are dropped at the end.
    """
    groups = [list(g) for g in groups]
    small = [i for i, g in enumerate(groups) if len(g) < min_size]
    if not small:
        return groups
    means = torch.stack([unit[g].mean(dim=0) for g in groups])
    for src in small:
        if len(groups[src]) >= min_size:
            continue
        sims = (means @ means[src].unsqueeze(1)).squeeze(1)
        sims[src] = -1.0
        best_sim, best = torch.max(sims, dim=0)
        if sum(1 for g in groups if g) <= 2:
            continue
        _note(closest, float(best_sim.item()) - float(threshold))
        if float(best_sim.item()) < float(threshold):
            continue
        if closest is not None:
            closest.note_runner_up(torch.cat([sims[:src], sims[src + 1 :]]))
        dst = int(best.item())
        groups[dst].extend(groups[src])
        groups[src] = []
        means[dst] = unit[groups[dst]].mean(dim=0)
    return [g for g in groups if g]


def split_in_two(
    unit: torch.Tensor, pairwise: torch.Tensor, closest: Closest | None = None
) -> Groups:
    """Split all rows around the least similar pair (a, b) of `pairwise` (first in row order).

    Every other row, in index order, goes to the anchor its unit vector is closer to; a row
    within SPLIT_TIE of both goes to the smaller side (a's on equal sizes). Lists [a-side,
    b-side], each anchor first.
    """
    n = unit.shape[0]
    masked = pairwise.clone()
    masked.fill_diagonal_(2.0)
    flat = int(torch.argmin(masked).item())
    a, b = flat // n, flat % n
    if a == b:
        b = (a + 1) % n
    if closest is not None:  # which pair, and which of its two entries comes first
        upper = torch.triu_indices(n, n, 1)
        closest.note_runner_up(masked[upper[0], upper[1]], largest=False)
        closest.note_runner_up(masked[upper[1], upper[0]], largest=False)
        if masked[a, b] != masked[b, a]:
            closest.note(masked[a, b] - masked[b, a])
    to_a, to_b = unit @ unit[a], unit @ unit[b]
    side_a, side_b = [a], [b]
    for j in range(n):
        if j in (a, b):
            continue
        gap = float(to_a[j] - to_b[j])
        _note(closest, abs(gap) - SPLIT_TIE)
        if gap > SPLIT_TIE or (gap >= -SPLIT_TIE and len(side_a) <= len(side_b)):
            side_a.append(j)
        else:
            side_b.append(j)
    return [side_a, side_b]


def cluster_level0(
    feats: torch.Tensor,
    threshold: float,
    min_size: int,
    previous: list[int] | None = None,
    stickiness: float = 0.0,
    closest: Closest | None = None,
) -> Groups:
    """Level-0 groups of head features (N, F); `previous[h]` = h's group at the last update."""
    n = feats.shape[0]
    if n == 1:
        return [[0]]
    unit = unit_rows(feats)
    groups = _greedy(unit, threshold, None, 0.0, closest)
    if len(groups) == 1:
        pairwise = unit @ unit.T
        if previous is not None and stickiness > 0:
            prev = torch.tensor(previous)
            same = (prev.unsqueeze(0) == prev.unsqueeze(1)).float()
            pairwise = torch.clamp(pairwise + same * stickiness, max=1.0)
        return split_in_two(unit, pairwise, closest)
    if min_size > 1:
        groups = merge_small_groups(groups, unit, min_size, threshold, closest)
    return groups


def cluster_upper(
    feats: torch.Tensor,
    threshold: float,
    min_size: int,
    penalty: float,
    closest: Closest | None = None,
) -> Groups:
    """Groups of group features (G, F) by cosine_normdiff; a collapse stays one group."""
    if feats.shape[0] == 1:
        return [[0]]
    raw = feats.float()
    unit = unit_rows(raw)
    groups = _greedy(unit, threshold, raw, penalty, closest)
    if min_size > 1 and len(groups) > 1:
        groups = merge_small_groups(groups, unit, min_size, threshold, closest)
    return groups
