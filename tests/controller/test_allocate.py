"""The one allocator: the plans every former allocator made, to the last bit (goldens recorded
before they were folded into `controller.allocate`), the floor, the uniform window against a
brute-force scan, and bad budgets refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from aah.attention import coverage
from aah.attention.kv_bytes import KVShape, full_kv_bytes, plan_kv_bytes
from aah.controller.allocate import Budget, allocate, kv_head_costs, uniform_window
from aah.controller.budget import allocate_budget
from aah.integrations.hf.search.plan_allocation import plan_from_costs, plan_from_mass
from aah.plan import WindowPlan
from aah.posthoc.plans import budgeted_plan
from aah.posthoc.plans import uniform_window as posthoc_uniform

GOLDENS = json.loads((Path(__file__).parents[1] / "fixtures/allocation_goldens.json").read_text())
ARRAYS = GOLDENS["arrays"]
T, CANDS, W64 = 32, [2, 4, 8, 16, 32], [1, 2, 4, 8, 16, 32, 64]


def array(key: str) -> torch.Tensor:
    return torch.tensor(ARRAYS[key], dtype=torch.float64)


# The goldens were recorded before the sliding-layer sinks rule (`kv_bytes.layer_sinks`): their
# shape slides at 8 on layer 1, where the old allocators charged sinks to heads at windows >= 8
# that now keep none. That changes only what sinks cost in bytes: every plan under a coverage
# cap (or none) is still the same to the bit, its byte count is the rule's; a plan under a byte
# cap with sinks may now differ, and is checked against the cap instead.
SHAPE = KVShape(2, 64, (None, 8, None))


def moved_by_the_rule(case: dict) -> bool:
    """A golden whose plan the sliding-layer sinks rule may change: sinks under a byte cap."""
    return bool(case["sinks"]) and case["kind"] == "kv"


def golden_mass_plan(case: dict) -> tuple[WindowPlan, KVShape]:
    """The plan `plan_from_mass` makes of a golden case today, and the case's KV shape."""
    shape = KVShape(2 if case["gqa"] else 4, 64, (None, 8, None))
    budget = None if case["kind"] == "kv" else case["value"]
    plan = plan_from_mass(
        array(case["mass"]), CANDS, T, budget, "m", sinks=case["sinks"],
        shape=None if case["kind"] == "plain" else shape, kv_budget=case["kv_budget"],
    )  # fmt: skip
    return plan, shape


def assert_bytes_follow_the_rule(plan: WindowPlan, case: dict, shape: KVShape) -> None:
    """Without sinks the recorded bytes; with them, the rule's count of the plan."""
    if not case["sinks"] or plan.info["kv_bytes"] is None:
        assert plan.info["kv_bytes"] == case["kv_bytes"]
    else:
        sinks = [[case["sinks"]] * 4] * 3
        assert plan.info["kv_bytes"] == plan_kv_bytes(plan.windows, sinks, shape, T)


@pytest.mark.parametrize(
    "case", [c for c in GOLDENS["hf"] if not moved_by_the_rule(c)],
    ids=lambda c: f"{c['kind']}-{c['value']}-s{c['sinks']}",
)  # fmt: skip
def test_hf_plans_from_mass_are_unchanged(case: dict) -> None:
    plan, shape = golden_mass_plan(case)
    assert plan.windows == case["windows"]
    for key in ("coverage", "lost_mass", "budget"):
        assert plan.info[key] == case[key], key
    assert_bytes_follow_the_rule(plan, case, shape)


@pytest.mark.parametrize(
    "case", [c for c in GOLDENS["hf"] if moved_by_the_rule(c)],
    ids=lambda c: f"{c['kind']}-{c['value']}",
)  # fmt: skip
def test_hf_plans_under_a_byte_cap_with_sinks_keep_it(case: dict) -> None:
    plan, shape = golden_mass_plan(case)
    assert_bytes_follow_the_rule(plan, case, shape)
    assert plan.info["kv_bytes"] <= case["kv_budget"]


@pytest.mark.parametrize("case", GOLDENS["hf_loss"], ids=lambda c: f"{c['kind']}-{c['sinks']}")
def test_hf_plans_from_loss_costs_are_unchanged(case: dict) -> None:
    cap = Budget(T, 3, 4, None if case["kv_budget"] else case["value"], case["kv_budget"],
                 case["sinks"], SHAPE)  # fmt: skip
    plan = plan_from_costs(array(case["costs"]), CANDS, cap, "m", signal="loss", unit="loss")
    assert_bytes_follow_the_rule(plan, case, SHAPE)
    assert plan.info["lost_mass"] is None and plan.info["signal"] == "loss"
    if moved_by_the_rule(case):
        assert plan.info["kv_bytes"] <= case["kv_budget"]
        return
    assert plan.windows == case["windows"]
    for key in ("coverage", "loss_increase", "budget"):
        assert plan.info[key] == case[key], key


@pytest.mark.parametrize("case", GOLDENS["budget"], ids=lambda c: str(c["budget"]))
def test_the_training_policies_allocation_is_unchanged(case: dict) -> None:
    alloc = allocate_budget(np.array(ARRAYS[case["mass"]]), W64, 64, case["budget"])
    assert alloc.indices == case["indices"] and alloc.exceeded == case["exceeded"]
    assert alloc.coverage == case["coverage"] and alloc.lost_mass == case["lost_mass"]


@pytest.mark.parametrize("case", GOLDENS["posthoc"], ids=lambda c: f"{c['policy']}-{c['cap']}")
def test_posthoc_plans_are_unchanged(case: dict) -> None:
    mass, loss = np.array(ARRAYS[case["mass"]]), np.array(ARRAYS[case["loss"]])
    plan = budgeted_plan(case["policy"], mass, W64, 64, case["cap"], seed=1, loss=loss)
    assert plan == case["plan"]


def test_posthoc_uniform_windows_are_unchanged() -> None:
    for case in GOLDENS["uniform_window"]:
        assert posthoc_uniform(case["seq_len"], case["cap"]) == case["window"], case


def decreasing(*shape: int, seed: int = 0) -> torch.Tensor:
    steps = torch.rand(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    steps[..., -1] = 0.0
    return steps.flip(-1).cumsum(-1).flip(-1)


@pytest.mark.parametrize("floor", [4, 8, 16])
def test_a_floor_drops_the_candidates_below_it(floor: int) -> None:
    costs = decreasing(3, 2, len(CANDS), seed=floor)
    shape = KVShape(2, 64, (None, None, None))
    budget = Budget.at_kv_fraction(0.7, T, 3, 4, shape, sinks=2)
    got = allocate(costs, CANDS, budget, floor=floor)
    first = CANDS.index(floor)
    alone = allocate(costs[..., first:], CANDS[first:], budget)  # the same, dropped by hand
    assert got is not None and alone is not None
    assert got.windows == alone.windows and got.lost == alone.lost
    assert min(w for row in got.windows for w in row) >= floor
    assert budget.bytes_of(got.windows) <= budget.kv_bytes


def test_a_floor_must_be_a_measured_candidate() -> None:
    budget = Budget(T, 3, 4, coverage=0.5)
    with pytest.raises(ValueError, match="floor 6 must be one of the candidates"):
        allocate(decreasing(3, 4, len(CANDS)), CANDS, budget, floor=6)
    high = Budget(T, 3, 4, coverage=0.05)
    assert allocate(decreasing(3, 4, len(CANDS)), CANDS, high, floor=16) is None


@pytest.mark.parametrize("sinks", [0, 3])
@pytest.mark.parametrize("sliding", [None, 12])
def test_the_uniform_window_is_the_widest_that_fits(sinks: int, sliding: int | None) -> None:
    shape = KVShape(2, 32, (None, sliding))
    for fraction in (0.1, 0.37, 0.8, 1.0):
        budget = Budget.at_kv_fraction(fraction, T, 2, 4, shape, sinks)
        sink_rows = [[sinks] * 4] * 2
        held = {w: plan_kv_bytes([[w] * 4] * 2, sink_rows, shape, T) for w in range(1, T + 1)}
        fits = [w for w, b in held.items() if b <= budget.kv_bytes]
        assert uniform_window(budget) == (max(fits) if fits else None)
    for cap in (0.02, 0.3, 0.75):
        budget = Budget(T, 2, 4, coverage=cap, sinks=sinks)
        fits = [w for w in range(1, T + 1) if coverage([[w] * 4] * 2, T, sinks).causal <= cap]
        assert uniform_window(budget) == (max(fits) if fits else None)


@pytest.mark.parametrize("sinks", [0, 3, (0, 3)])
def test_the_uniform_window_beside_whole_layers_is_the_widest_the_rest_pays_for(
    sinks: int | tuple[int, int],
) -> None:
    """A hybrid model's full layer kept whole (window T): the sliding layers' one window is
    the widest whose plan, counted by `plan_kv_bytes` / `coverage`, fits; None when even 1
    does not (the whole layer alone is over the budget)."""
    shape = KVShape(2, 32, (12, None))
    sink_rows = [[s] * 4 for s in ((sinks, sinks) if isinstance(sinks, int) else sinks)]
    seen = set()
    for fraction in (0.2, 0.75, 0.8, 0.95, 1.0):
        budget = Budget.at_kv_fraction(fraction, T, 2, 4, shape, sinks)
        held = {w: plan_kv_bytes([[w] * 4, [T] * 4], sink_rows, shape, T) for w in range(1, T + 1)}
        fits = [w for w, b in held.items() if b <= budget.kv_bytes]
        seen.add(max(fits) if fits else None)
        assert uniform_window(budget, whole_layers=[1]) == (max(fits) if fits else None)
    assert None in seen and len(seen) >= 3  # over budget, and windows of several widths
    for bad in ([2], [1, 1], [-1]):
        with pytest.raises(ValueError, match=r"whole_layers must be distinct layers in 0\.\.1"):
            uniform_window(budget, whole_layers=bad)
    for cap in (0.4, 0.7):
        budget = Budget(T, 2, 4, coverage=cap, sinks=sinks)
        fits = [w for w in range(1, T + 1)
                if coverage([[T] * 4, [w] * 4], T, sink_rows).causal <= cap]  # fmt: skip
        assert uniform_window(budget, whole_layers=[0]) == (max(fits) if fits else None)


@pytest.mark.parametrize("sinks", [(0, 3), (3, 0)])
def test_sinks_per_layer_are_priced_layer_by_layer(sinks: tuple[int, int]) -> None:
    """Per-layer sinks (a hybrid model's full layers only): every figure of the budget is the
    one of the plan with those sinks, counted by `plan_kv_bytes` and `coverage`."""
    shape = KVShape(2, 32, (12, None))
    sink_rows = [[sinks[0]] * 4, [sinks[1]] * 4]
    budget = Budget.at_kv_fraction(0.37, T, 2, 4, shape, sinks)
    assert budget.sink_rows() == sink_rows
    held = {w: plan_kv_bytes([[w] * 4] * 2, sink_rows, shape, T) for w in range(1, T + 1)}
    assert uniform_window(budget) == max(w for w, b in held.items() if b <= budget.kv_bytes)
    plan = [[4] * 4, [16] * 4]
    assert budget.bytes_of(plan) == plan_kv_bytes(plan, sink_rows, shape, T)
    cov = Budget(T, 2, 4, coverage=0.3, sinks=sinks)
    fits = [w for w in range(1, T + 1) if coverage([[w] * 4] * 2, T, sink_rows).causal <= 0.3]
    assert uniform_window(cov) == max(fits)
    assert Budget(T, 2, 4, coverage=0.3, sinks=(0, 0)).sink_rows() is None
    with pytest.raises(ValueError, match="sinks per layer must give 2 counts, got 3"):
        Budget(T, 2, 4, coverage=0.3, sinks=(1, 2, 3))
    with pytest.raises(ValueError, match="sinks"):
        Budget(T, 2, 4, coverage=0.3, sinks=(1, -2))


def test_a_kv_head_costs_the_sum_of_its_query_heads() -> None:
    per_query = decreasing(2, 6, 3)
    got = kv_head_costs(per_query, 2)
    want = torch.stack([per_query[:, 3 * j : 3 * j + 3].sum(dim=1) for j in range(2)], dim=1)
    assert torch.allclose(got, want, rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="6 query heads do not split into 4 KV heads"):
        kv_head_costs(per_query, 4)


def test_bad_budgets_are_refused_by_name() -> None:
    shape = KVShape(2, 64, (None, None))
    with pytest.raises(ValueError, match="exactly one"):
        Budget(T, 2, 4)
    with pytest.raises(ValueError, match="exactly one"):
        Budget(T, 2, 4, coverage=0.3, kv_bytes=100, shape=shape)
    with pytest.raises(ValueError, match=r"budget must be in \(0, 1\], got 1.5"):
        Budget(T, 2, 4, coverage=1.5)
    with pytest.raises(ValueError, match="kv_budget must be an int of bytes >= 1, got 0"):
        Budget(T, 2, 4, kv_bytes=0, shape=shape)
    with pytest.raises(ValueError, match="needs the model's KVShape"):
        Budget(T, 2, 4, kv_bytes=100)
    with pytest.raises(ValueError, match="kv_fraction must be in"):
        Budget.at_kv_fraction(0.0, T, 2, 4, shape)
    with pytest.raises(ValueError, match="the KV shape has 2 layers of 2 KV heads, the model 3"):
        Budget(T, 3, 4, coverage=0.3, shape=shape)
    assert Budget.at_kv_fraction(1.0, T, 2, 4, shape).kv_bytes == full_kv_bytes(shape, T)


@pytest.mark.parametrize("layers", [(0,), (2,), (0, 2)])
def test_whole_layers_keep_full_attention_and_the_rest_is_allocated_as_if_forced(
    layers: tuple[int, ...],
) -> None:
    costs = decreasing(3, 2, len(CANDS), seed=len(layers))
    shape = KVShape(2, 64, (None, None, None))
    budget = Budget.at_kv_fraction(0.8, T, 3, 4, shape, sinks=2)
    got = allocate(costs, CANDS, budget, whole_layers=layers)
    # the same plan another way: cutting a whole layer's head costs more than anything else
    forced = costs.clone()
    for layer in layers:
        forced[layer, :, :-1] = 1e6
    same = allocate(forced, CANDS, budget)
    assert got is not None and same is not None
    assert got.windows == same.windows
    assert all(w == T for layer in layers for w in got.windows[layer])
    assert any(w < T for layer in set(range(3)) - set(layers) for w in got.windows[layer])
    assert budget.bytes_of(got.windows) <= budget.kv_bytes


def test_whole_layers_are_refused_by_name_or_when_they_do_not_fit() -> None:
    costs = decreasing(3, 2, len(CANDS))
    budget = Budget.at_kv_fraction(0.6, T, 3, 4, KVShape(2, 64, (None, None, None)), sinks=2)
    for bad in [(3,), (-1,), (0, 0), (True,), (1.0,)]:
        with pytest.raises(ValueError, match=r"whole_layers must be distinct layers in 0\.\.2"):
            allocate(costs, CANDS, budget, whole_layers=bad)
    with pytest.raises(ValueError, match="largest candidate, 16, which is not full attention"):
        allocate(costs[..., :-1], CANDS[:-1], budget, whole_layers=(0,))
    tight = Budget.at_kv_fraction(0.3, T, 3, 4, KVShape(2, 64, (None, None, None)), sinks=2)
    assert allocate(costs, CANDS, tight) is not None
    assert allocate(costs, CANDS, tight, whole_layers=(0, 1)) is None
