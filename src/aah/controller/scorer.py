"""Scoring groups: enriched controller input, controller MLP and the wide joint sibling scorer.

Enriched input (ENRICHED_DIM = 29 for 9 base features), per group g at level l of L levels:
  [ f_g (9) | l / max(L - 1, 1) (1) | f_g - f_parent(g) (9) | f_g - mean_l f (9) | n_g / H (1) ]
f_g is the group's feature (hierarchy.node_features), the top level's parent is the group
itself (difference 0), mean_l is over the groups of level l, n_g counts the heads under g.

Faithful mode: both MLPs are frozen, drawn once from a seeded generator, used with hard argmax.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from aah.controller.features import N_BASE
from aah.controller.hierarchy import Hierarchy

ENRICHED_DIM = 3 * N_BASE + 2
HIDDEN = 16
JOINT_HIDDEN = 64


def enriched_inputs(hier: Hierarchy, node_feats: list[torch.Tensor]) -> list[torch.Tensor]:
    """Per level (n_groups, 29) float32 inputs, laid out as in the module docstring."""
    n_levels = len(node_feats)
    sizes = [[len(g) for g in level] for level in hier.heads()]
    out = []
    for l, feats in enumerate(node_feats):
        feats = feats.double()
        parent_idx = torch.tensor(hier.parents(l))
        parent = node_feats[l + 1].double()[parent_idx] if l + 1 < n_levels else feats
        level_pos = torch.full((feats.shape[0], 1), l / max(n_levels - 1, 1), dtype=torch.float64)
        size = torch.tensor(sizes[l], dtype=torch.float64).unsqueeze(1) / hier.n_heads
        out.append(
            torch.cat(
                [feats, level_pos, feats - parent, feats - feats.mean(dim=0, keepdim=True), size],
                dim=1,
            ).float()
        )
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
        h = torch.nn.functional.gelu(x.float() @ self.w1.T + self.b1)
        return h @ self.w2.T + self.b2

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
        """Per level (n_groups, W) logits; with `joint`, sibling pairs get the joint scorer's.

        Siblings are the children of one parent in the order the parent lists them (the top
        level's groups are siblings under an implicit root); pairs are (1st, 2nd), (3rd, 4th)...
        and an odd one out keeps its own logits.
        """
        out = []
        for l, x in enumerate(inputs):
            logits = self.group(x)
            if joint:
                for children in _sibling_lists(hier, l):
                    for a, b in zip(children[0::2], children[1::2], strict=False):
                        fa, fb = x[a], x[b]
                        pair = self.joint(torch.cat([fa, fb, fa - fb, fb - fa]).unsqueeze(0))[0]
                        logits[a] = pair[: self.n_windows]
                        logits[b] = pair[self.n_windows :]
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


def _sibling_lists(hier: Hierarchy, level: int) -> list[list[int]]:
    if level == len(hier.levels) - 1:
        return [list(range(len(hier.levels[level])))]
    return [list(children) for children in hier.levels[level + 1]]
