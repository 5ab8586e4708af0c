"""The pretrained comparison's methods, table and cell store, each against a brute-force or
hand-computed answer."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from aah.attention.kv_bytes import KVShape, plan_kv_bytes
from aah.controller.allocate import Budget
from aah.integrations.hf.search.measure import blended
from aah.report.stats import estimate
from experiments.pretrained import methods, table
from experiments.pretrained.cells import CellStore

# 3 layers of 4 query heads on 2 KV heads, head dim 8 in fp32: 64 B per stored position.
SHAPE = KVShape(n_kv_head=2, position_bytes=64, sliding=(None, None, None))
T, SINKS = 64, 2
CANDS = [4, 8, 16, 32, 64]


# Plans recorded before the studies' allocators were folded into `controller.allocate`.
GOLDENS = json.loads(
    (Path(__file__).parents[2] / "tests/fixtures/allocation_goldens.json").read_text()
)


def budget(fraction: float) -> Budget:
    return Budget.at_kv_fraction(fraction, T, 3, 4, SHAPE, SINKS)


def kv_bytes(plan) -> int:
    return plan_kv_bytes(plan, [[SINKS] * 4] * 3, SHAPE, T)


@pytest.mark.parametrize("fraction", [0.1, 0.3, 0.5, 0.9])
def test_uniform_plan_is_the_widest_single_window_that_fits(fraction: float) -> None:
    b = budget(fraction)
    plan = methods.uniform_plan(b)
    w = plan[0][0]
    assert all(x == w for row in plan for x in row)
    fits = [v for v in range(1, T + 1) if kv_bytes([[v] * 4] * 3) <= b.kv_bytes]
    assert w == max(fits)


def test_uniform_plan_refuses_a_budget_below_one_window() -> None:
    with pytest.raises(ValueError, match="below one window"):
        methods.uniform_plan(Budget(T, 3, 4, kv_bytes=10, sinks=SINKS, shape=SHAPE))


@pytest.mark.parametrize("fraction", [0.2, 0.5])
def test_allocated_plans_fit_and_keep_one_window_per_kv_head(fraction: float) -> None:
    b = budget(fraction)
    signal = methods.random_signal(3, 4, len(CANDS), seed=5)
    plan = methods.allocated_plan(signal, CANDS, b)
    assert kv_bytes(plan) <= b.kv_bytes
    for row in plan:
        assert row[0] == row[1] and row[2] == row[3]  # query heads 0-1 read KV head 0
        assert set(row) <= set(CANDS)
    # One more step up for any KV head would break the budget (the greedy rule fills it).
    for layer in range(3):
        for kv in range(2):
            j = CANDS.index(plan[layer][2 * kv])
            if j + 1 < len(CANDS):
                wider = [list(r) for r in plan]
                wider[layer][2 * kv : 2 * kv + 2] = [CANDS[j + 1]] * 2
                assert kv_bytes(wider) > b.kv_bytes


def test_random_signal_is_seeded_non_increasing_and_zero_at_the_widest() -> None:
    a = methods.random_signal(2, 3, 5, seed=1)
    assert torch.equal(a, methods.random_signal(2, 3, 5, seed=1))
    assert not torch.equal(a, methods.random_signal(2, 3, 5, seed=2))
    assert (a[..., :-1] >= a[..., 1:]).all() and (a[..., -1] == 0).all()


def test_shuffled_twin_moves_kv_head_windows_within_each_layer() -> None:
    plan = [[4, 4, 64, 64], [8, 8, 16, 16], [32, 32, 32, 32]]
    moved = [methods.shuffled_twin(plan, 2, seed) for seed in range(20)]
    for twin in moved:
        for row, new in zip(plan, twin, strict=True):
            assert sorted(row) == sorted(new) and new[0] == new[1] and new[2] == new[3]
    assert any(t != plan for t in moved) and methods.shuffled_twin(plan, 2, 3) == moved[3]


def test_shuffled_twin_keeps_kv_bytes_when_a_kv_head_holds_several_windows() -> None:
    plan = [[4, 64, 8, 8], [16, 4, 32, 2], [64, 64, 4, 4]]  # AAH-v3 decides per query head
    for seed in range(10):
        twin = methods.shuffled_twin(plan, 2, seed)
        assert kv_bytes(twin) == kv_bytes(plan)
        for row, new in zip(plan, twin, strict=True):  # whole KV groups moved
            assert sorted([tuple(row[:2]), tuple(row[2:])]) == sorted(
                [tuple(new[:2]), tuple(new[2:])]
            )


def test_duo_gives_each_kv_head_recent_or_full_and_picks_the_costliest_to_stream() -> None:
    signal = torch.zeros(3, 4, len(CANDS), dtype=torch.float64)
    signal[1, 2:4, :-1] = 5.0  # layer 1's second KV head loses much unless full
    signal[:, :, 0] += 0.1  # everything else loses a little at the smallest window
    plans = methods.build_plans(["duo"], budget(0.3), {"output": signal}, CANDS, recent=8)
    plan = plans["duo"]
    assert {w for row in plan for w in row} <= {8, T}
    assert plan[1][2] == T and kv_bytes(plan) <= budget(0.3).kv_bytes
    # duo-loss: the same split, ranked by the loss signal (another head costly to stream there)
    loss = torch.zeros_like(signal)
    loss[2, 0:2, :-1] = 5.0
    loss[:, :, 0] += 0.1
    signals = {"output": signal, "suffix-loss": loss}
    by_loss = methods.build_plans(["duo-loss"], budget(0.3), signals, CANDS, recent=8)["duo-loss"]
    assert {w for row in by_loss for w in row} <= {8, T}
    assert by_loss[2][0] == T and by_loss[1][2] == 8 and kv_bytes(by_loss) <= budget(0.3).kv_bytes


def test_output_plus_retrieval_weighs_both_signals_alike_whatever_their_scale() -> None:
    text = torch.zeros(3, 4, len(CANDS), dtype=torch.float64)
    text[0, 0:2, :-1] = 1e6  # running text needs layer 0's first KV head whole...
    retrieval = torch.zeros_like(text)
    retrieval[2, 2:4, :-1] = 1e-6  # ...and retrieval layer 2's second, at a tiny raw scale
    blend = blended([text, retrieval])
    torch.testing.assert_close(blend[..., 0].sum(), torch.tensor(2.0, dtype=torch.float64))
    torch.testing.assert_close(blend[0, 0], text[0, 0] / text[..., 0].sum())
    torch.testing.assert_close(blend[2, 3], retrieval[2, 3] / retrieval[..., 0].sum())
    signals = {"output": text, "retrieval": retrieval}
    plans = methods.build_plans(["output", "output+retrieval"], budget(0.6), signals, CANDS,
                                recent=8)  # fmt: skip
    assert plans["output"][2][2] < T  # the text signal alone does not see layer 2's need
    assert plans["output+retrieval"][2][2] == T and plans["output+retrieval"][0][0] == T
    assert kv_bytes(plans["output+retrieval"]) <= budget(0.6).kv_bytes
    assert methods.signals_needed(["output+retrieval-shuffled"]) == ["output", "retrieval"]
    assert blended([text]) is text
    with pytest.raises(ValueError, match="signal 1 is zero"):
        blended([text, torch.zeros_like(text)])


def test_build_plans_names_and_errors() -> None:
    sig = {"output": methods.random_signal(3, 4, 5, 0), "mass": methods.random_signal(3, 4, 5, 1)}
    names = methods.check_methods(["output", "output-shuffled", "mass", "random", "uniform"])
    assert names[0] == "uniform"
    plans = methods.build_plans(names, budget(0.4), sig, CANDS, recent=8)
    assert plans["output-shuffled"] == methods.shuffled_twin(plans["output"], 2, 1)
    assert methods.signals_needed(names) == ["mass", "output"]
    with pytest.raises(ValueError, match="bogus"):
        methods.check_methods(["output", "bogus"])
    with pytest.raises(ValueError, match="kv_fraction"):
        budget(1.5)


def test_table_rows_pair_blocks_and_adjust_over_one_family() -> None:
    full = [1.0, 2.0, 3.0, 4.0]
    losses = {
        ("uniform", 0.3): [1.5, 2.4, 3.6, 4.3],
        ("output", 0.3): [1.2, 2.3, 3.1, 4.2],
        ("uniform", 0.5): [1.1, 2.2, 3.1, 4.2],
        ("output", 0.5): [1.1, 2.1, 3.2, 4.0],
    }
    held = {k: k[1] for k in losses}
    got = {(r.method, r.kv_target): r for r in table.rows(losses, full, held, {})}
    d3 = estimate([-0.3, -0.1, -0.5, -0.1])
    d5 = estimate([0.0, -0.1, 0.1, -0.2])
    assert got[("output", 0.3)].vs_uniform.mean == pytest.approx(d3.mean)
    assert got[("output", 0.3)].vs_full.mean == pytest.approx(0.2)
    # Holm over the family of two: the smaller p doubled, the larger at least that.
    low, high = sorted([d3.p, d5.p])
    expected = {low: min(1.0, 2 * low), high: min(1.0, max(2 * low, high))}
    assert got[("output", 0.3)].holm_p == pytest.approx(expected[d3.p])
    assert got[("output", 0.5)].holm_p == pytest.approx(expected[d5.p])
    assert got[("uniform", 0.5)].vs_uniform is None and got[("uniform", 0.5)].holm_p is None
    md = table.markdown(list(got.values()), 2.5, None)
    assert md.count("\n| 0.3 |") == 2 and "| 1.0 | full |" in md
    with pytest.raises(ValueError, match="uniform baseline"):
        table.rows({("output", 0.3): full}, full, {("output", 0.3): 0.3})


def test_needles_are_paired_with_full_attention_needle_by_needle() -> None:
    full = [1.0, 2.0]
    losses = {("uniform", 0.3): [1.5, 2.5], ("output", 0.3): [1.2, 2.1]}
    hits = {
        ("full", 1.0): [True] * 8 + [False, False],
        ("uniform", 0.3): [False] * 6 + [True, True, False, False],  # 6 lost, none gained
        ("output", 0.3): [True] * 7 + [False, True, False],  # 1 lost, 1 gained
    }
    got = {r.method: r for r in table.rows(losses, full, {k: 0.3 for k in losses}, hits)}
    assert (got["uniform"].needles_lost, got["uniform"].needles_gained) == (6, 0)
    assert got["uniform"].needles_p == pytest.approx(2 / 2**6)  # exact: all 6 one way
    assert (got["output"].needles_lost, got["output"].needles_gained) == (1, 1)
    assert got["output"].needles_p == pytest.approx(1.0) and got["output"].needle == 0.8
    assert table.needle_change([True, False], [True, False]) == (0, 0, 1.0)
    md = table.markdown(list(got.values()), 1.5, 0.8)
    assert "| -6 / +0, p 0.031 |" in md
    with pytest.raises(ValueError, match="3 and 2 needles cannot be paired"):
        table.needle_change([True] * 3, [True] * 2)


def test_cell_store_resumes_refuses_other_settings_and_survives_a_torn_line(tmp_path) -> None:
    path = tmp_path / "cells.jsonl"
    store = CellStore(path, {"t": 64})
    store.put("loss/a", {"scores": [1.0, math.inf]})
    again = CellStore(path, {"t": 64})
    assert "loss/a" in again and again.get("loss/a")["scores"][0] == 1.0
    with pytest.raises(ValueError, match="other settings"):
        CellStore(path, {"t": 128})
    with path.open("a") as handle:  # a crash in the middle of writing a cell
        handle.write('{"key": "loss/b", "val')
    third = CellStore(path, {"t": 64})
    third.put("loss/c", {"scores": [2.0]})
    lines = path.read_text().splitlines()
    assert json.loads(lines[-1])["key"] == "loss/c" and "loss/b" not in CellStore(path, {"t": 64})


# Recorded by the code before the sliding-layer sinks rule on a shape without sliding layers,
# where that rule and the model's own full cache change nothing (the fixture's
# `about_methods_unslid`); the older goldens on a sliding shape recorded the old rule.
UNSLID = KVShape(n_kv_head=2, position_bytes=64, sliding=(None, None, None))


@pytest.mark.parametrize("case", GOLDENS["methods_unslid"], ids=lambda c: str(c["fraction"]))
def test_the_studies_plans_are_unchanged(case: dict) -> None:
    budget = Budget.at_kv_fraction(case["fraction"], 64, 3, 4, UNSLID, sinks=2)
    assert budget.kv_bytes == case["kv_bytes"]
    arrays = GOLDENS["arrays"]
    signals = {n: torch.tensor(arrays[k], dtype=torch.float64) for n, k in case["signals"].items()}
    names = [m for m in methods.METHODS if m not in methods.AAH_METHODS]
    assert set(case["plans"]) <= set(names)
    older = [m for m in names if m in case["plans"]]  # methods added since allocate elsewhere
    plans = methods.build_plans(older, budget, signals, [4, 8, 16, 32, 64], recent=8, seed=0)
    assert plans == case["plans"]
    assert {m: budget.fraction_of(p) for m, p in plans.items()} == case["fractions"]


@pytest.mark.parametrize("case", GOLDENS["methods"], ids=lambda c: str(c["fraction"]))
def test_on_a_sliding_layer_the_studies_plans_keep_their_budget(case: dict) -> None:
    shape = KVShape(n_kv_head=2, position_bytes=64, sliding=(None, 16, None))
    budget = Budget.at_kv_fraction(case["fraction"], 64, 3, 4, shape, sinks=2)
    assert budget.kv_bytes == int(case["fraction"] * (64 + 16 + 64) * 2 * 64)  # its own cache
    arrays = GOLDENS["arrays"]
    signals = {n: torch.tensor(arrays[k], dtype=torch.float64) for n, k in case["signals"].items()}
    older = [m for m in methods.METHODS if m in case["plans"] and m not in methods.AAH_METHODS]
    if case["fraction"] == 0.2:  # 0.2 of a cache a third smaller: below duo's streaming floor
        with pytest.raises(ValueError, match="KV budget 3686 B is below the smallest candidate"):
            methods.build_plans(older, budget, signals, [4, 8, 16, 32, 64], recent=8, seed=0)
        return
    plans = methods.build_plans(older, budget, signals, [4, 8, 16, 32, 64], recent=8, seed=0)
    assert all(budget.fraction_of(p) <= case["fraction"] for p in plans.values() if p)


@pytest.mark.parametrize("base", ["output", "output+retrieval"])
def test_the_whole0_methods_keep_the_first_layer_whole_and_allocate_the_rest(base: str) -> None:
    case = next(c for c in GOLDENS["methods_unslid"] if c["fraction"] == 0.5)
    budget = Budget.at_kv_fraction(0.5, 64, 3, 4, UNSLID, sinks=2)
    arrays = GOLDENS["arrays"]
    signals = {n: torch.tensor(arrays[k], dtype=torch.float64) for n, k in case["signals"].items()}
    cands = [4, 8, 16, 32, 64]
    plans = methods.build_plans([base, base + "-whole0"], budget, signals, cands, recent=8)
    whole = plans[base + "-whole0"]
    assert whole == case["plans"][base + "-whole0"]  # as the code before the rule made it
    assert whole is not None and whole[0] == [64] * 4
    assert whole != plans[base] and budget.fraction_of(whole) <= 0.5
    assert whole[1:] != plans[base][1:]  # the rest pays for the first layer
