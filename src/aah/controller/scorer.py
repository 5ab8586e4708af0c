"""Scoring groups: enriched controller input, controller MLP and the wide joint sibling scorer.

Enriched input (ENRICHED_DIM = 29 for 9 base features), per group g at level l of L levels:
  [ f_g (9) | l / max(L - 1, 1) (1) | f_g - f_parent(g) (9) | f_g - mean_l f (9) | c_g / C_l (1) ]
f_g is the group's feature row (Hierarchy.feats), the top level's parent difference is 0,
mean_l is over the groups of level l, c_g counts g's members (heads at level 0, child groups
above) and C_l all members of level l (the items of the level below).

Joint scoring: at every level, the children of each parent (parents in index order, children
in ascending index order; the top level's groups form one family) are paired (1st, 2nd),
(3rd, 4th), ...; the joint MLP maps [f_a, f_b, f_a - f_b, f_b - f_a] of the enriched inputs
to 2 x W logits that replace both groups' own; an odd one out keeps its own.

Faithful mode: both MLPs are frozen, drawn once from a seeded generator, used with hard argmax.
All arithmetic is float32, as in the method's reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from aah.controller.head_stats import N_BASE
from aah.controller.hierarchy import Hierarchy

ENRICHED_DIM = 3 * N_BASE + 2
HIDDEN = 16
JOINT_HIDDEN = 64


def enriched_inputs(hier: Hierarchy) -> list[torch.Tensor]:
    """Per level (n_groups, 29) float32 inputs, laid out as in the module docstring."""
    n_levels = len(hier.levels)
    out = []
    for l, groups in enumerate(hier.levels):
        base = hier.feats[l].float()
        n = base.shape[0]
        level_pos = torch.full((n, 1), float(l) / max(1.0, float(n_levels - 1)))
        parents = hier.parents(l)
        if parents is None:
            parent_diff = torch.zeros_like(base)
        else:
            parent_diff = base - hier.feats[l + 1].float()[torch.tensor(parents)]
        offset = base - base.mean(dim=0, keepdim=True)
        total = max(1.0, float(sum(len(g) for g in groups)))
        size = torch.tensor([len(g) / total for g in groups], dtype=base.dtype).unsqueeze(1)
        out.append(torch.cat([base, level_pos, parent_diff, offset, size], dim=-1))
    return out


@dataclass
class FrozenMLP:
    """x -> W2 gelu(W1 x + b1) + b2 with fixed weights (weights stored as (out, in))."""

    w1: torch.Tensor
    b1: torch.Tensor
    w2: torch.Tensor
    b2: torch.Tensor

    @classmethod
    def random(cls, sizes: tuple[int, int, int], gen: torch.Generator) -> FrozenMLP:
        """Uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) weights and biases, as torch.nn.Linear draws."""
        d_in, d_hid, d_out = sizes

        def u(shape: tuple[int, ...], fan_in: int) -> torch.Tensor:
            bound = 1.0 / math.sqrt(fan_in)
            return (torch.rand(shape, generator=gen) * 2 - 1) * bound

        return cls(
            u((d_hid, d_in), d_in), u((d_hid,), d_in), u((d_out, d_hid), d_hid), u((d_out,), d_hid)
        )

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(F.gelu(F.linear(x.float(), self.w1, self.b1)), self.w2, self.b2)

    def state_dict(self) -> dict:
        return {k: getattr(self, k).clone() for k in ("w1", "b1", "w2", "b2")}

    @classmethod
    def from_state(cls, state: dict) -> FrozenMLP:
        return cls(**{k: state[k].detach().clone().float() for k in ("w1", "b1", "w2", "b2")})


@dataclass
class Scorer:
    """One layer's controller: group MLP 29 -> 16 -> W and joint sibling MLP 116 -> 64 -> 2W."""

    group: FrozenMLP
    joint: FrozenMLP
    n_windows: int

    @classmethod
    def random(cls, n_windows: int, gen: torch.Generator) -> Scorer:
        group = FrozenMLP.random((ENRICHED_DIM, HIDDEN, n_windows), gen)
        joint = FrozenMLP.random((4 * ENRICHED_DIM, JOINT_HIDDEN, 2 * n_windows), gen)
        return cls(group=group, joint=joint, n_windows=n_windows)

    def logits(
        self, hier: Hierarchy, inputs: list[torch.Tensor], joint: bool
    ) -> list[torch.Tensor]:
        """Per level (n_groups, W) logits; with `joint`, sibling pairs get the joint scorer's."""
        out = []
        for l, x in enumerate(inputs):
            logits = self.group(x)
            if joint:
                for a, b in sibling_pairs(hier, l):
                    fa, fb = x[a], x[b]
                    pair = self.joint(torch.cat([fa, fb, fa - fb, fb - fa], dim=-1).unsqueeze(0))
                    pair = pair.view(2, self.n_windows)
                    logits[a], logits[b] = pair[0], pair[1]
            out.append(logits)
        return out

    def state_dict(self) -> dict:
        return {
            "group": self.group.state_dict(),
            "joint": self.joint.state_dict(),
            "n_windows": self.n_windows,
        }

    @classmethod
    def from_state(cls, state: dict) -> Scorer:
        return cls(
            group=FrozenMLP.from_state(state["group"]),
            joint=FrozenMLP.from_state(state["joint"]),
            n_windows=int(state["n_windows"]),
        )


def sibling_pairs(hier: Hierarchy, level: int) -> list[tuple[int, int]]:
    """Joint-scored pairs of `level` (see the module docstring)."""
    parents = hier.parents(level)
    n = len(hier.levels[level])
    if parents is None:
        families = [list(range(n))]
    else:
        families = [[g for g in range(n) if parents[g] == p] for p in sorted(set(parents))]
    return [(f[i], f[i + 1]) for f in families for i in range(0, len(f) - 1, 2)]
