"""Shuffled twins: a plan's windows permuted across heads, the control for "which head".

A twin keeps the windows and moves them to other heads. Permuted within each layer
(`scope="layer"`), every layer keeps its coverage and only which head holds which window
changes; permuted across every head of the model (`scope="model"`, flat index
layer * n_head + head), the model's coverage is kept and layers trade windows too. Every
policy twin and every post-hoc twin draws and applies its permutations here, so they all
mean the same thing; when the draw happens (once, or at every update) is the caller's choice
and its name says which.
"""

from __future__ import annotations

from typing import Literal

import torch

from aah.plan import Plan

Scope = Literal["layer", "model"]


def draw(gen: torch.Generator, n_layer: int, n_head: int, scope: Scope) -> list[list[int]]:
    """Seeded permutations: one of the heads per layer ("layer"), or one list permuting every
    head of the model ("model")."""
    if scope == "layer":
        return [torch.randperm(n_head, generator=gen).tolist() for _ in range(n_layer)]
    if scope == "model":
        return [torch.randperm(n_layer * n_head, generator=gen).tolist()]
    raise ValueError(f"scope must be 'layer' or 'model', got {scope!r}")


def permute(plan: Plan, perms: list[list[int]], scope: Scope) -> Plan:
    """`plan` with head h of each layer taking the window of head perms[layer][h] ("layer"),
    or flat head i taking the window of flat head perms[0][i] ("model")."""
    if scope == "layer":
        return [[row[p] for p in perm] for row, perm in zip(plan, perms, strict=True)]
    flat = [w for row in plan for w in row]
    moved = [flat[p] for p in perms[0]]
    n_head = len(plan[0])
    return [moved[i : i + n_head] for i in range(0, len(moved), n_head)]


def shuffled(plan: Plan, gen: torch.Generator, scope: Scope) -> Plan:
    """`plan` permuted by a fresh draw from `gen`."""
    return permute(plan, draw(gen, len(plan), len(plan[0]), scope), scope)
