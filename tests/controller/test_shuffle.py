"""Shuffled twins: the permutations keep every window, and the scope says where they move."""

from __future__ import annotations

import pytest
import torch

from aah.controller.shuffle import draw, permute, shuffled

PLAN = [[1, 2, 3, 4], [10, 20, 30, 40], [100, 200, 300, 400]]


def test_layer_scope_keeps_each_layers_windows() -> None:
    twin = shuffled(PLAN, torch.Generator().manual_seed(0), "layer")
    assert [sorted(r) for r in twin] == PLAN and twin != PLAN


def test_model_scope_keeps_the_models_windows_and_moves_them_between_layers() -> None:
    twin = shuffled(PLAN, torch.Generator().manual_seed(0), "model")
    assert sorted(w for r in twin for w in r) == sorted(w for r in PLAN for w in r)
    assert any(sorted(a) != sorted(b) for a, b in zip(twin, PLAN, strict=True))
    assert [len(r) for r in twin] == [4, 4, 4]


def test_a_draw_is_the_generators_and_applies_as_drawn() -> None:
    perms = draw(torch.Generator().manual_seed(3), 3, 4, "layer")
    again = draw(torch.Generator().manual_seed(3), 3, 4, "layer")
    assert perms == again
    out = permute(PLAN, perms, "layer")
    assert all(out[l][h] == PLAN[l][perms[l][h]] for l in range(3) for h in range(4))
    flat = draw(torch.Generator().manual_seed(3), 3, 4, "model")[0]
    moved = permute(PLAN, [flat], "model")
    every = [w for r in PLAN for w in r]
    assert [w for r in moved for w in r] == [every[p] for p in flat]


def test_an_unknown_scope_is_named() -> None:
    with pytest.raises(ValueError, match="scope must be 'layer' or 'model', got 'row'"):
        draw(torch.Generator(), 2, 2, "row")  # type: ignore[arg-type]
