"""The loss signal of the plan search: measured costs, allocation on them, plan files, the flag."""

from __future__ import annotations

import argparse
import json

import pytest
import torch
from hf_models import (
    SEARCH_CANDIDATES,
    SEARCH_SINKS,
    SEARCH_T,
    VOCAB,
    run_cli_search,
    search_ids,
    tiny_model,
)

from aah.cli.hf import plan_args
from aah.cli.hf.plan_checks import check_signal_flag
from aah.controller.allocate import Budget
from aah.integrations import hf
from aah.integrations.hf.run.model_layout import kv_shape
from aah.integrations.hf.search.cut_loss import (
    Imposed,
    loss_increase,
    measure_loss_costs,
    monotone_costs,
    per_query_head,
)
from aah.integrations.hf.search.plan_allocation import plan_from_costs
from aah.integrations.hf.search.plan_search import search_plan
from aah.plan import WindowPlan

T, CANDIDATES, SINKS = SEARCH_T, SEARCH_CANDIDATES, SEARCH_SINKS
ids = search_ids


@pytest.fixture(scope="module")
def measured() -> tuple[torch.nn.Module, list[torch.Tensor], torch.Tensor]:
    """GQA Llama (2 layers, 4 query / 2 KV heads), two calibration batches, raw loss rises."""
    model = tiny_model("llama")
    batches = [ids()[:1], ids()[1:]]
    return model, batches, loss_increase(model, batches, CANDIDATES, sinks=SINKS)


def nll_by_hand(model: torch.nn.Module, batches: list[torch.Tensor]) -> float:
    total, count = 0.0, 0
    with torch.no_grad():
        for b in batches:
            logits = model(input_ids=b, use_cache=False).logits[:, :-1]
            total += float(
                torch.nn.functional.cross_entropy(
                    logits.reshape(-1, VOCAB), b[:, 1:].reshape(-1), reduction="sum"
                )
            )
            count += b[:, 1:].numel()
    return total / count


def test_a_measured_cost_is_the_loss_difference_of_that_plan(measured) -> None:
    model, batches, raw = measured
    assert raw.shape == (2, 2, len(CANDIDATES)) and raw.dtype == torch.float64
    assert (raw[..., -1] == 0).all()  # the full candidate cuts nothing
    assert raw.abs().max() > 1e-4  # cutting a head does change a random model's loss
    base = nll_by_hand(model, batches)  # the model's own sdpa attention, every head full
    layer, kv, j = 1, 0, 1  # KV head 0 of layer 1 (query heads 0 and 1) cut to window 4
    windows = [[T] * 4, [T] * 4]
    windows[1][0] = windows[1][1] = CANDIDATES[j]
    with hf.applied(model, Imposed(windows, [[SINKS] * 4, [SINKS] * 4])):
        assert hf.current_sinks(model) == [[SINKS] * 4] * 2
        cut = nll_by_hand(model, batches)
    assert float(raw[layer, kv, j]) == pytest.approx(cut - base, abs=1e-6)
    assert model.config._attn_implementation == "sdpa" and hf.current_plan(model) is None


def test_costs_are_floored_and_never_rise_with_the_window(measured) -> None:
    _, _, raw = measured
    costs = monotone_costs(raw)
    for index in torch.cartesian_prod(torch.arange(2), torch.arange(2)).tolist():
        row = raw[index[0], index[1]].tolist()
        expect = [max(0.0, *row[j:]) for j in range(len(row))]
        assert costs[index[0], index[1]].tolist() == expect
    assert (costs.diff(dim=-1) <= 0).all() and (costs >= 0).all()
    hand = torch.tensor([[[-0.1, 0.3, 0.05, 0.2, 0.0]]], dtype=torch.float64)
    assert monotone_costs(hand).tolist() == [[[0.3, 0.3, 0.2, 0.2, 0.0]]]


def test_measure_loss_costs_is_the_monotone_raw_measurement(measured) -> None:
    model, batches, raw = measured
    costs = measure_loss_costs(model, batches, CANDIDATES, sinks=SINKS)
    torch.testing.assert_close(costs, monotone_costs(raw), rtol=0, atol=0)
    split = per_query_head(costs, 4)
    assert split.shape == (2, 4, len(CANDIDATES))
    torch.testing.assert_close(split.reshape(2, 2, 2, -1).sum(2), costs)


def test_loss_signal_keeps_wide_the_head_the_loss_needs(monkeypatch) -> None:
    """KV head 1 of layer 0 matters for the loss at every window below T; the mass of a random
    model does not earn it the full window under the same budget."""
    model = tiny_model("llama")
    target = (0, 1)
    table = torch.tensor([0.04, 0.02, 0.01, 0.005, 0.0], dtype=torch.float64).repeat(2, 2, 1)
    table[target] = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0], dtype=torch.float64)
    seen: dict[str, object] = {}

    def fake(model_, batches, candidates, *, sinks=0, progress=False):  # type: ignore[no-untyped-def]
        seen.update(candidates=list(candidates), sinks=sinks, t=batches[0].shape[1])
        return table

    monkeypatch.setattr("aah.integrations.hf.search.cut_loss.measure_loss_costs", fake)
    opts = {"seq_len": T, "candidates": CANDIDATES, "sinks": SINKS, "sample_queries": 16,
            "choose": False}  # fmt: skip
    by_loss = search_plan(model, ids(), 0.5, signal="loss", **opts)
    by_mass = search_plan(model, ids(), 0.5, signal="mass", **opts)
    assert seen == {"candidates": CANDIDATES, "sinks": SINKS, "t": T}
    layer, kv = target
    assert by_loss.windows[layer][2 * kv : 2 * kv + 2] == [T, T]
    assert by_mass.windows[layer][2 * kv] < T
    assert by_loss.info["coverage"] <= 0.5 and by_mass.info["coverage"] <= 0.5
    assert by_loss.info["signal"] == "loss" and by_loss.info["lost_mass"] is None
    assert by_mass.info["signal"] == "mass" and by_mass.info["loss_increase"] is None
    # the summed costs of the chosen windows: every other KV head at its chosen candidate
    chosen = [
        float(table[l, k, CANDIDATES.index(by_loss.windows[l][2 * k])])
        for l in range(2)
        for k in range(2)
    ]
    assert by_loss.info["loss_increase"] == pytest.approx(sum(chosen))


def test_plan_from_costs_checks_the_table_shape() -> None:
    budget = Budget(T, 2, 4, coverage=0.3, shape=kv_shape(tiny_model("llama")))
    costs = torch.zeros(2, 4, len(CANDIDATES), dtype=torch.float64)
    with pytest.raises(ValueError, match="costs are 2 layers x 4 KV heads, the model has 2 x 2"):
        plan_from_costs(costs, CANDIDATES, budget, "m", signal="loss", unit="loss")
    with pytest.raises(ValueError, match="signal must be a signal's name, got ''"):
        plan_from_costs(costs[:, :2], CANDIDATES, budget, "m", signal="")


def test_cli_loss_search_writes_a_plan_that_apply_reads(tmp_path, capsys) -> None:
    model_dir, text, out = run_cli_search(
        tmp_path, "--budget", "0.4", "--sinks", "2", "--signal", "loss", "--no-choose",
        "--candidates", "4,8,16,32",
    )  # fmt: skip
    plan = WindowPlan.load(out)
    info = plan.info
    assert info["signal"] == "loss" and info["lost_mass"] is None
    assert info["loss_increase"] is not None
    assert WindowPlan.from_data(json.loads(plan.to_json())) == plan
    assert plan.info["coverage"] <= 0.4 and plan.sinks == [[2] * 4] * 2
    assert all(row[0] == row[1] and row[2] == row[3] for row in plan.windows)
    printed = capsys.readouterr().out.strip().splitlines()
    assert "loss signal" in printed[0] and "loss rise" in printed[0]
    assert json.loads(printed[-1])["signal"] == "loss"

    parser = argparse.ArgumentParser()
    plan_args.add_plan_apply_arguments(parser)
    argv = [str(model_dir), "--plan", str(out), "--text", str(text), "--max-batches", "2"]
    assert plan_args.run_plan_apply(parser.parse_args(argv)) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["coverage"] == pytest.approx(plan.info["coverage"])
    assert result["kv_bytes"] == plan.info["kv_bytes"] < result["kv_bytes_full"]
    assert result["ppl_plan"] != result["ppl_full"]


def test_bad_signal_values_are_named() -> None:
    names = r"one of output, mass, output\+retrieval, retrieval, loss, suffix-loss, "
    with pytest.raises(ValueError, match=names + r"got 'gradient'"):
        search_plan(tiny_model("llama"), ids(), 0.3, signal="gradient")
    several = r"\(or several, comma-separated\), "
    with pytest.raises(
        ValueError, match=r"--signal must be " + names[:-2] + " " + several + "got 'Loss'"
    ):
        check_signal_flag("Loss", None)
    with pytest.raises(ValueError, match="--heldout sweeps budgets on the mass signal only"):
        check_signal_flag("loss", "heldout.txt")
    with pytest.raises(ValueError, match="add --signal mass, or with --signal output write"):
        check_signal_flag("output", "heldout.txt")
    check_signal_flag("loss", None)
    with pytest.raises(ValueError, match=r"candidates must be distinct .* got \[8, 4\]"):
        loss_increase(tiny_model("llama"), [ids()], [8, 4])
