"""Grouping heads into a hierarchy (METHOD.md section 4, steps 3-5).

Features are rows of a (N, F) tensor; every routine works in float64 on CPU and returns
plain lists. A level is a list of groups; a group lists indices into the level below
(head ids for level 0). Groups keep the order in which they were opened (head order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

Groups = list[list[int]]
# similarity(x (F,), rows (G, F)) -> (G,): one item against every group centroid at once.
Similarity = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def cosine_rows(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Cosine of x with each row; 0 where either vector is zero."""
    x, rows = x.double(), rows.double()
    den = x.norm() * rows.norm(dim=-1)
    return torch.where(den > 0, rows @ x / torch.where(den > 0, den, 1.0), 0.0)


def normdiff_rows(x: torch.Tensor, rows: torch.Tensor, penalty: float = 16.0) -> torch.Tensor:
    """cosine_normdiff of x with each row (see `cosine_normdiff`)."""
    nx, nr = x.double().norm(), rows.double().norm(dim=-1)
    top = torch.maximum(nr, nx)
    gap = torch.where(top > 0, (nr - nx).abs() / torch.where(top > 0, top, 1.0), 0.0)
    return cosine_rows(x, rows) - penalty * gap


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """Cosine similarity; 0 when either vector is zero."""
    return float(cosine_rows(a, b.unsqueeze(0))[0])


def cosine_normdiff(a: torch.Tensor, b: torch.Tensor, penalty: float = 16.0) -> float:
    """cosine(a, b) - penalty * |‖a‖ - ‖b‖| / max(‖a‖, ‖b‖) (penalty 0 for two zeros)."""
    return float(normdiff_rows(a, b.unsqueeze(0), penalty)[0])


def greedy_cluster(
    feats: torch.Tensor,
    threshold: float,
    similarity: Similarity = cosine_rows,
    bonus: Callable[[int, list[int]], float] | None = None,
) -> Groups:
    """Greedy centroid clustering in index order.

    Item i joins the group whose centroid (mean of members) is most similar, similarity plus
    `bonus(i, members)`, if that score is at least `threshold`; otherwise it opens a new group.
    Ties go to the earliest group.
    """
    feats = feats.double()
    groups: Groups = []
    sums = torch.zeros_like(feats)
    for i in range(feats.shape[0]):
        if groups:
            sizes = torch.tensor([len(g) for g in groups], dtype=torch.float64)
            scores = similarity(feats[i], sums[: len(groups)] / sizes.unsqueeze(1)).tolist()
            if bonus is not None:
                scores = [s + bonus(i, members) for s, members in zip(scores, groups, strict=True)]
            best = max(range(len(groups)), key=lambda g: (scores[g], -g))
            if scores[best] >= threshold:
                groups[best].append(i)
                sums[best] += feats[i]
                continue
        sums[len(groups)] = feats[i]
        groups.append([i])
    return groups


def centroids(feats: torch.Tensor, groups: Groups) -> torch.Tensor:
    """(len(groups), F): mean feature of each group's members."""
    return torch.stack([feats[g].double().mean(dim=0) for g in groups])


def merge_small_groups(feats: torch.Tensor, groups: Groups, min_size: int) -> Groups:
    """Merge every group smaller than `min_size` into its most similar (cosine of centroids) group.

    The smallest group (earliest on ties) goes first; centroids are recomputed after each merge;
    a merged group keeps the earlier position and its members stay sorted.
    """
    groups = [list(g) for g in groups]
    while len(groups) > 1:
        small = [g for g in range(len(groups)) if len(groups[g]) < min_size]
        if not small:
            break
        src = min(small, key=lambda g: (len(groups[g]), g))
        cents = centroids(feats, groups)
        sims = cosine_rows(cents[src], cents).tolist()
        dst = max((g for g in range(len(groups)) if g != src), key=lambda g: (sims[g], -g))
        keep, drop = min(src, dst), max(src, dst)
        groups[keep] = sorted(groups[keep] + groups[drop])
        del groups[drop]
    return groups


def split_collapsed(feats: torch.Tensor, groups: Groups) -> Groups:
    """If everything sits in one group of >= 2 items, split it around the least similar pair.

    Each item joins whichever of the pair (a, b), a < b, it is more cosine-similar to (a on ties).
    """
    if len(groups) != 1 or len(groups[0]) < 2:
        return groups
    items = groups[0]
    x = feats.double()[items]
    unit = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    sim = (unit @ unit.T).tolist()  # zero vectors get cosine 0 with everything
    worst, pair = float("inf"), (0, 1)
    for r in range(len(items)):
        for c in range(r + 1, len(items)):
            if sim[r][c] < worst:
                worst, pair = sim[r][c], (r, c)
    ra, rb = pair
    # a and b anchor their sides even when all features point the same way.
    side_a = [
        items[r] for r in range(len(items)) if r == ra or (r != rb and sim[r][ra] >= sim[r][rb])
    ]
    side_b = [i for i in items if i not in side_a]
    return [side_a, side_b] if side_a[0] < side_b[0] else [side_b, side_a]


def level0_groups(
    feats: torch.Tensor,
    *,
    threshold: float = 0.72,
    stickiness: float = 0.02,
    min_size: int = 3,
    previous: Groups | None = None,
) -> Groups:
    """Level-0 head groups: greedy cosine clustering, small-group merge, then collapse split.

    Stickiness: the similarity of head i to a group gains `stickiness` times the share of the
    group's members that shared a group with i in `previous` (so +stickiness for a pair that
    was together last time). The collapse split comes last, so a layer of >= 2 heads always
    ends with >= 2 groups even if a split part is smaller than `min_size`.
    """
    bonus = None
    if previous is not None and stickiness != 0.0:
        where = {h: g for g, members in enumerate(previous) for h in members}

        def bonus(i: int, members: list[int]) -> float:
            gi = where.get(i, -1)
            same = sum(1 for m in members if gi >= 0 and where.get(m, -2) == gi)
            return stickiness * same / len(members)

    groups = greedy_cluster(feats, threshold, cosine_rows, bonus)
    groups = merge_small_groups(feats, groups, min_size)
    return split_collapsed(feats, groups)


def upper_levels(
    group_feats: torch.Tensor,
    *,
    threshold: float = 0.76,
    penalty: float = 16.0,
    max_levels: int = 3,
) -> list[Groups]:
    """Levels above level 0 by greedy clustering with cosine_normdiff (no merge, no split).

    Node features are the mean of their children's features. Stops at a level of one group,
    after `max_levels` levels, or when a level would merge nothing (it would repeat the last).
    """
    levels: list[Groups] = []
    feats = group_feats.double()
    while len(levels) < max_levels and feats.shape[0] > 1:
        groups = greedy_cluster(feats, threshold, lambda x, rows: normdiff_rows(x, rows, penalty))
        if len(groups) == feats.shape[0]:
            break
        levels.append(groups)
        feats = centroids(feats, groups)
    return levels


@dataclass
class Hierarchy:
    """levels[0][g] = head ids of level-0 group g; levels[l][g] = indices of level l-1 groups."""

    levels: list[Groups]
    n_heads: int

    def heads(self) -> list[Groups]:
        """[level][group] -> sorted head ids under that group (the plans.jsonl "groups" field)."""
        out = [[sorted(g) for g in self.levels[0]]]
        for level in self.levels[1:]:
            below = out[-1]
            out.append([sorted(h for child in g for h in below[child]) for g in level])
        return out

    def parents(self, level: int) -> list[int]:
        """Parent index (in level + 1) of every group of `level`; all 0 for the top level."""
        if level == len(self.levels) - 1:
            return [0] * len(self.levels[level])
        out = [0] * len(self.levels[level])
        for p, children in enumerate(self.levels[level + 1]):
            for c in children:
                out[c] = p
        return out

    def node_features(self, head_feats: torch.Tensor) -> list[torch.Tensor]:
        """Per level (n_groups, F): level 0 = mean of member heads, above = mean of children."""
        feats = [centroids(head_feats, self.levels[0])]
        for level in self.levels[1:]:
            feats.append(centroids(feats[-1], level))
        return feats


def build_hierarchy(
    head_feats: torch.Tensor,
    *,
    level0: Groups | None = None,
    previous: Groups | None = None,
    group_threshold: float = 0.72,
    upper_threshold: float = 0.76,
    stickiness: float = 0.02,
    min_group_size: int = 3,
    max_depth: int = 4,
    norm_penalty: float = 16.0,
) -> Hierarchy:
    """Full hierarchy of one layer; `level0` reuses a cached level-0 map (deep practical reuse).

    `max_depth` counts levels including level 0 (1 = level 0 only).
    """
    n = head_feats.shape[0]
    if level0 is None:
        level0 = level0_groups(
            head_feats,
            threshold=group_threshold,
            stickiness=stickiness,
            min_size=min_group_size,
            previous=previous,
        )
    levels = [level0]
    if max_depth > 1:
        levels += upper_levels(
            centroids(head_feats, level0),
            threshold=upper_threshold,
            penalty=norm_penalty,
            max_levels=max_depth - 1,
        )
    return Hierarchy(levels=levels, n_heads=n)


def singleton_hierarchy(n_heads: int) -> Hierarchy:
    """One level, one head per group (grouping off and the non-hierarchical policies)."""
    return Hierarchy(levels=[[[h] for h in range(n_heads)]], n_heads=n_heads)


def check_partition(groups: Sequence[Sequence[int]], n: int) -> bool:
    """True when `groups` cover 0..n-1 exactly once."""
    flat = sorted(i for g in groups for i in g)
    return flat == list(range(n))
