"""The AAH-v3 group hierarchy of one layer: levels of groups, each with its feature rows.

levels[0][g] lists the heads of level-0 group g; levels[l][g] lists groups of level l - 1.
A level's features are one row per group: level 0 gets them from the caller (mean of the
member heads' features, or features pooled from Q/K/V over the members), every level above
is the plain mean of its children's rows.

Growth above level 0 (`grow`): cluster the current top level's rows with cosine_normdiff;
a clustering that collapses to one group ends the growth and is not added; anything else is
added, even a level that merged nothing (which is how e.g. [2, 2, 2, 2] topologies arise),
until `max_depth` levels exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from aah.controller.clustering import Closest, Groups, cluster_level0, cluster_upper


@dataclass(frozen=True)
class GroupingRule:
    """Thresholds of the clustering (defaults: the paper's main rows)."""

    group_threshold: float = 0.72
    upper_threshold: float = 0.76
    stickiness: float = 0.02
    min_group_size: int = 3
    max_depth: int = 4
    norm_penalty: float = 16.0


@dataclass
class Hierarchy:
    """`levels[l]` groups (members in the order they were added) and `feats[l]` (G_l, F)."""

    levels: list[Groups]
    feats: list[torch.Tensor]
    n_heads: int

    def heads(self) -> list[Groups]:
        """[level][group] -> sorted head ids under that group (the plans.jsonl "groups")."""
        out = [[sorted(g) for g in self.levels[0]]]
        for level in self.levels[1:]:
            below = out[-1]
            out.append([sorted(h for child in g for h in below[child]) for g in level])
        return out

    def parents(self, level: int) -> list[int] | None:
        """Parent index of every group of `level`; None for the top level."""
        if level == len(self.levels) - 1:
            return None
        out = [0] * len(self.levels[level])
        for p, children in enumerate(self.levels[level + 1]):
            for c in children:
                out[c] = p
        return out

    def head_to_group(self) -> list[int]:
        """Level-0 group of every head."""
        return group_map(self.levels[0], self.n_heads)

    def topology(self) -> list[Groups]:
        return [[list(g) for g in level] for level in self.levels]


def group_map(groups: Groups, n: int) -> list[int]:
    """out[i] = index of the group that holds item i."""
    out = [-1] * n
    for g, members in enumerate(groups):
        for i in members:
            out[i] = g
    return out


def groups_of(mapping: Sequence[int]) -> Groups:
    """Inverse of `group_map`: groups in id order, members ascending."""
    groups: Groups = [[] for _ in range(max(mapping) + 1)]
    for i, g in enumerate(mapping):
        groups[g].append(i)
    return groups


def aggregate(groups: Groups, feats: torch.Tensor) -> torch.Tensor:
    """(G, F): the plain mean of each group's rows (members in their listed order)."""
    return torch.stack([feats[g].mean(dim=0) for g in groups])


def grow(
    level0: Groups,
    feats0: torch.Tensor,
    n_heads: int,
    rule: GroupingRule,
    closest: Closest | None = None,
) -> Hierarchy:
    """Level 0 as given, then upper levels as in the module docstring (margins to `closest`)."""
    levels, feats = [level0], [feats0]
    if len(level0) == 1:
        return Hierarchy(levels, feats, n_heads)
    for _ in range(1, rule.max_depth):
        groups = cluster_upper(
            feats[-1], rule.upper_threshold, rule.min_group_size, rule.norm_penalty, closest
        )
        if len(groups) == 1:
            break
        levels.append(groups)
        feats.append(aggregate(groups, feats[-1]))
    return Hierarchy(levels, feats, n_heads)


def build(
    head_feats: torch.Tensor,
    rule: GroupingRule,
    previous: list[int] | None,
    closest: Closest | None = None,
) -> Hierarchy:
    """Cluster heads into level 0 (stickiness toward `previous`, a head -> group map), grow."""
    level0 = cluster_level0(
        head_feats, rule.group_threshold, rule.min_group_size, previous, rule.stickiness, closest
    )
    return grow(level0, aggregate(level0, head_feats), head_feats.shape[0], rule, closest)


def passthrough(level0: Groups, feats0: torch.Tensor, n_heads: int, depth: int) -> Hierarchy:
    """Level 0 as given, then `depth - 1` levels where each group is its own parent."""
    levels, feats = [level0], [feats0]
    for _ in range(1, depth):
        levels.append([[i] for i in range(len(levels[-1]))])
        feats.append(aggregate(levels[-1], feats[-1]))
    return Hierarchy(levels, feats, n_heads)


def from_topology(topology: list[Groups], feats0: torch.Tensor, n_heads: int) -> Hierarchy:
    """A frozen topology with fresh level-0 rows; upper rows are means of their children."""
    levels = [[list(g) for g in level] for level in topology]
    feats = [feats0]
    for level in levels[1:]:
        feats.append(aggregate(level, feats[-1]))
    return Hierarchy(levels, feats, n_heads)


def singletons(feats: torch.Tensor) -> Hierarchy:
    """One level, one head per group (grouping off)."""
    n = feats.shape[0]
    return Hierarchy([[[h] for h in range(n)]], [feats], n)


def check_partition(groups: Sequence[Sequence[int]], n: int) -> bool:
    """True when `groups` cover 0..n-1 exactly once."""
    return sorted(i for g in groups for i in g) == list(range(n))
