"""Plan search per KV head with sinks: mass given sinks, byte and coverage caps, plan files."""

from __future__ import annotations

import argparse
import inspect
import json

import pytest
import torch
from hf_models import (
    SEARCH_CANDIDATES,
    SEARCH_SINKS,
    SEARCH_T,
    run_cli_search,
    search_ids,
    tiny_model,
)

from aah.attention import coverage
from aah.attention.kv_bytes import full_kv_bytes, plan_kv_bytes
from aah.cli.hf import plan_args
from aah.cli.hf.plan_checks import check_budget_flags
from aah.controller.mass import mass_beyond
from aah.integrations import hf
from aah.integrations.hf.run.model_layout import kv_shape
from aah.integrations.hf.search.measure import measure_mass
from aah.integrations.hf.search.plan_allocation import plan_from_mass
from aah.integrations.hf.search.sink_mass import mass_beyond_given_sinks
from aah.plan import WindowPlan

T, CANDIDATES, SINKS = SEARCH_T, SEARCH_CANDIDATES, SEARCH_SINKS
ids = search_ids


@pytest.fixture(scope="module")
def measured() -> dict[str, tuple[torch.nn.Module, torch.Tensor, torch.Tensor]]:
    """Per family (GQA Llama; Mistral with its own sliding window 16): the model, and its mass
    without and with sinks on the same calibration rows."""
    out = {}
    for family in ("llama", "mistral"):
        model = tiny_model(family)
        batches = [ids()[:1], ids()[1:]]
        plain = measure_mass(model, batches, CANDIDATES, sample_queries=16)
        sunk = measure_mass(model, batches, CANDIDATES, sample_queries=16, sinks=SINKS)
        out[family] = (model, plain, sunk)
    return out


def dense_lost(q, k, windows, sinks):  # type: ignore[no-untyped-def]
    """(Hq, n_windows) float64 oracle over every row: share of s <= j <= i - w."""
    q, k = q.double(), k.double()
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    n = q.shape[2]
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    probs = torch.softmax(scores.masked_fill(j > i, float("-inf")), dim=-1)
    cols = [(probs * ((j <= i - w) & (j >= sinks))).sum(-1) for w in windows]
    return torch.stack(cols, dim=-1).mean(dim=(0, 2))


@pytest.mark.parametrize("sinks", [0, 1, 3, 50])
def test_mass_given_sinks_matches_a_dense_float64_oracle(sinks: int) -> None:
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 40, 8, generator=gen) * 2
    k = torch.randn(2, 2, 40, 8, generator=gen) * 2
    windows = [1, 3, 8, 40]
    got = mass_beyond_given_sinks(q, k, windows, sinks, positions=torch.arange(40))
    torch.testing.assert_close(got.double(), dense_lost(q, k, windows, sinks), atol=1e-6, rtol=0)
    if sinks == 0:  # the same measure as the controller's without sinks
        plain = mass_beyond(q, k, k, windows, positions=torch.arange(40))
        torch.testing.assert_close(got, plain, atol=1e-5, rtol=0)


def test_sinks_reduce_measured_lost_mass(measured) -> None:
    _, plain, sunk = measured["llama"]
    assert sunk.shape == plain.shape == (2, 4, len(CANDIDATES))
    assert (sunk <= plain + 1e-9).all()
    assert (sunk[..., 0] < plain[..., 0] - 1e-3).all()  # a sink key's attention is not lost
    assert (sunk[..., -1] == 0).all()  # the full window loses nothing either way
    with pytest.raises(ValueError, match="sinks must be an int >= 0, got -1"):
        measure_mass(measured["llama"][0], [ids()[:1]], CANDIDATES, sinks=-1)


def shares_within_kv_heads(windows: list[list[int]], n_kv: int) -> bool:
    group = len(windows[0]) // n_kv
    return all(
        len(set(row[j * group : (j + 1) * group])) == 1 for row in windows for j in range(n_kv)
    )


@pytest.mark.parametrize("family", ["llama", "mistral"])
@pytest.mark.parametrize("fraction", [0.15, 0.3, 0.5, 0.8, 1.0])
def test_kv_plan_never_exceeds_the_byte_budget(measured, family: str, fraction: float) -> None:
    model, _, mass = measured[family]
    shape = kv_shape(model)
    budget = int(fraction * full_kv_bytes(shape, T))
    smallest = plan_kv_bytes([[CANDIDATES[0]] * 4] * 2, [[SINKS] * 4] * 2, shape, T)
    if budget < smallest:  # Mistral's own cache holds its 16-key window: 0.15 of it is too little
        with pytest.raises(ValueError, match=f"budget {budget} is below the smallest candidate"):
            plan_from_mass(mass, CANDIDATES, T, None, "m", shape=shape, sinks=SINKS,
                           kv_budget=budget)  # fmt: skip
        return
    plan = plan_from_mass(
        mass, CANDIDATES, T, None, "m", shape=shape, sinks=SINKS, kv_budget=budget
    )
    assert plan.info["kv_bytes"] is not None and plan.info["kv_bytes"] <= budget
    assert plan.info["kv_bytes"] == plan_kv_bytes(plan.windows, plan.sinks, shape, T)
    assert plan.info["budget_unit"] == "kv_bytes" and plan.info["budget"] == budget
    assert plan.sinks == [[SINKS] * 4] * 2
    assert shares_within_kv_heads(plan.windows, shape.n_kv_head)
    assert plan.info["coverage"] == coverage(plan.windows, T, plan.sinks).causal


def test_byte_formula_is_what_the_per_head_cache_holds(measured) -> None:
    from aah.integrations.hf.run.cache import PerHeadCache

    for family in ("llama", "mistral"):
        model, _, mass = measured[family]
        shape = kv_shape(model)
        budget = int(0.4 * full_kv_bytes(shape, T))
        plan = plan_from_mass(
            mass, CANDIDATES, T, None, "m", shape=shape, sinks=SINKS, kv_budget=budget
        )
        hf.apply(model, plan)
        try:
            cache = PerHeadCache(model, max_cache_len=T)
            name = (
                "cache"
                if "cache" in inspect.signature(model.forward).parameters
                else "past_key_values"
            )
            with torch.no_grad():
                model(ids(1), use_cache=True, **{name: cache})
            assert cache.nbytes() == plan.info["kv_bytes"] == cache.reserved_nbytes()
        finally:
            hf.remove(model)


@pytest.mark.parametrize("budget", [0.3, 0.45, 0.6, 1.0])
def test_coverage_budget_per_kv_head_counts_the_sinks(measured, budget: float) -> None:
    model, _, mass = measured["llama"]
    shape = kv_shape(model)
    plan = plan_from_mass(mass, CANDIDATES, T, budget, "m", shape=shape, sinks=SINKS)
    assert plan.info["coverage"] <= budget and plan.info["budget_unit"] == "coverage"
    assert plan.info["coverage"] == coverage(plan.windows, T, [[SINKS] * 4] * 2).causal
    assert shares_within_kv_heads(plan.windows, 2)
    # Without the shape every query head is its own unit (the old search), bytes not counted.
    alone = plan_from_mass(mass, CANDIDATES, T, budget, "m", sinks=SINKS)
    assert alone.info["coverage"] <= budget and alone.info["kv_bytes"] is None


def test_budgets_below_the_smallest_plan_and_bad_budgets_are_refused(measured) -> None:
    model, _, mass = measured["llama"]
    shape = kv_shape(model)
    with pytest.raises(ValueError, match=r"below the smallest candidate's .* KV bytes"):
        plan_from_mass(mass, CANDIDATES, T, None, "m", shape=shape, sinks=SINKS, kv_budget=100)
    with pytest.raises(ValueError, match="exactly one"):
        plan_from_mass(mass, CANDIDATES, T, 0.3, "m", shape=shape, kv_budget=10**6)
    with pytest.raises(ValueError, match="kv_budget must be an int of bytes >= 1, got 0"):
        plan_from_mass(mass, CANDIDATES, T, None, "m", shape=shape, kv_budget=0)
    from aah.integrations.hf.search.plan_search import search_plan

    for bad, message in (
        ({"budget": 0.3, "kv_fraction": 0.3}, "exactly one of budget, kv_budget and kv_fraction"),
        ({"kv_fraction": 1.5}, r"kv_fraction must be in \(0, 1\], got 1.5"),
    ):
        with pytest.raises(ValueError, match=message):
            search_plan(model, ids(), sinks=SINKS, seq_len=T, **bad)


def test_kv_fraction_is_that_share_of_the_full_cache(measured) -> None:
    from aah.integrations.hf.search.plan_search import search_plan

    model = measured["llama"][0]
    full = full_kv_bytes(kv_shape(model), T)
    by_fraction = search_plan(model, ids(), kv_fraction=0.4, sinks=SINKS, seq_len=T)
    by_bytes = search_plan(model, ids(), kv_budget=int(0.4 * full), sinks=SINKS, seq_len=T)
    assert by_fraction == by_bytes and by_fraction.info["kv_bytes"] <= 0.4 * full


def test_old_plan_files_still_load() -> None:
    old = {"windows": [[4, 8]], "budget": 0.3, "coverage": 0.25, "candidates": [4, 8]}
    old.update(model="GPT2LMHeadModel", seq_len=8, lost_mass=0.1)  # before sinks and KV bytes
    plan = WindowPlan.from_data(old)
    assert plan.sinks == [[0, 0]] and plan.seq_len == 8 and plan.info["lost_mass"] == 0.1
    assert "kv_bytes" not in plan.info and WindowPlan.from_data(plan.to_dict()) == plan


def test_budget_flag_checks_name_the_value() -> None:
    with pytest.raises(ValueError, match=r"one of --budget \(0.3\) and --budget-kv-mb \(2.0\)"):
        check_budget_flags(0.3, 2.0, 0)
    with pytest.raises(ValueError, match=r"--budget-kv-mb \(2.0\) and --kv-fraction \(0.3\)"):
        check_budget_flags(None, 2.0, 0, kv_fraction=0.3)
    for bad in (0.0, 1.0, -0.2):
        with pytest.raises(ValueError, match=rf"--kv-fraction must be in \(0, 1\), got {bad}"):
            check_budget_flags(None, None, 0, kv_fraction=bad)
    with pytest.raises(ValueError, match=r"--budget-kv-mb must be .* got -1\.0"):
        check_budget_flags(None, -1.0, 0)
    with pytest.raises(ValueError, match="--sinks must be >= 0, got -2"):
        check_budget_flags(None, None, -2)
    check_budget_flags(None, None, 4)


def test_cli_search_by_kv_fraction_caps_that_share_of_the_full_cache(tmp_path) -> None:
    *_, out = run_cli_search(tmp_path, "--kv-fraction", "0.4", "--sinks", "2")
    plan = WindowPlan.load(out)
    full = full_kv_bytes(kv_shape(tiny_model("llama")), T)  # what Budget.at_kv_fraction counts
    assert plan.info["budget_unit"] == "kv_bytes" and plan.info["budget"] == int(0.4 * full)
    assert plan.info["kv_bytes"] <= plan.info["budget"] and plan.sinks == [[2] * 4] * 2


def test_cli_kv_fraction_below_the_smallest_plan_is_named(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"--kv-fraction 0.01 \(.* MB\) \(\d+ bytes\) is below"):
        run_cli_search(tmp_path, "--kv-fraction", "0.01", "--sinks", "2")


def test_cli_search_by_kv_bytes_with_sinks_then_apply(tmp_path, capsys) -> None:
    model_dir, text, out = run_cli_search(tmp_path, "--budget-kv-mb", "0.004", "--sinks", "2")
    plan = WindowPlan.load(out)
    assert plan.info["budget_unit"] == "kv_bytes" and plan.info["budget"] == int(0.004 * 2**20)
    assert plan.info["kv_bytes"] is not None and plan.info["kv_bytes"] <= plan.info["budget"]
    assert plan.sinks == [[2] * 4] * 2 and shares_within_kv_heads(plan.windows, 2)
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["kv_bytes"] == plan.info["kv_bytes"] and summary["sinks"] == 2

    parser = argparse.ArgumentParser()
    plan_args.add_plan_apply_arguments(parser)
    argv = [str(model_dir), "--plan", str(out), "--text", str(text), "--max-batches", "2"]
    assert plan_args.run_plan_apply(parser.parse_args(argv)) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["kv_bytes"] == plan.info["kv_bytes"] < result["kv_bytes_full"]
    assert result["coverage"] == pytest.approx(plan.info["coverage"])
