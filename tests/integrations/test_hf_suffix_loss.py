"""The suffix-loss signal: against a float64 attention that freezes the context by hand, against
the exact loss signal where the two must agree, and through the search and the CLI."""

from __future__ import annotations

import json

import pytest
import torch
from hf_models import (
    FAMILIES,
    SEARCH_CANDIDATES,
    SEARCH_SINKS,
    SEARCH_T,
    VOCAB,
    run_cli_search,
    search_ids,
    tiny_model,
)

pytest.importorskip("transformers")

from aah.controller.allocate import Budget
from aah.integrations import hf
from aah.integrations.hf.run.model_layout import kv_shape
from aah.integrations.hf.search.cut_loss import loss_increase, monotone_costs
from aah.integrations.hf.search.plan_allocation import plan_from_costs
from aah.integrations.hf.search.plan_search import search_plan
from aah.integrations.hf.search.signals import SuffixLoss
from aah.integrations.hf.search.suffix_loss import measure_suffix_loss_costs, suffix_loss_increase
from aah.plan import WindowPlan

T, CANDIDATES, SINKS = SEARCH_T, SEARCH_CANDIDATES, SEARCH_SINKS
SUFFIX = 8


@pytest.fixture(scope="module")
def model():
    """GQA Llama (2 layers, 4 query / 2 KV heads)."""
    return tiny_model("llama")


@pytest.fixture(scope="module")
def batches() -> list[torch.Tensor]:
    ids = search_ids()
    return [ids[:1], ids[1:]]


def frozen_attention(cut: tuple[int, int, int] | None, start: int):
    """A float64 attention written out: causal, and in layer `cut[0]` the query heads of KV head
    `cut[1]` see keys i - w < j <= i or j < SINKS (w = cut[2]) on query rows i >= `start` only.
    Rows before `start` never see the cut, so they are what full attention makes of them at
    every layer: the frozen context, by construction."""

    def attend(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kw):
        _, n_q, t, d = query.shape
        group = n_q // key.shape[1]
        k = key.double().repeat_interleave(group, dim=1)
        v = value.double().repeat_interleave(group, dim=1)
        scores = query.double() @ k.transpose(-1, -2) * (scaling or d**-0.5)
        i = torch.arange(t).view(t, 1)
        j = torch.arange(t).view(1, t)
        allowed = (j <= i).expand(n_q, t, t).clone()
        if cut is not None and module.layer_idx == cut[0]:
            layer_heads = slice(cut[1] * group, (cut[1] + 1) * group)
            windowed = (j <= i) & ((i - j < cut[2]) | (j < SINKS))
            allowed[layer_heads] = torch.where(i >= start, windowed, j <= i)
        probs = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
        return (probs @ v).to(query.dtype).transpose(1, 2).contiguous(), None

    return attend


def suffix_nll(model, batches, attend, start: int) -> float:
    """Mean next-token loss of the predictions made at rows start .. T-2, under `attend`."""
    from transformers import AttentionInterface

    AttentionInterface.register("frozen_test", attend)
    model.config._attn_implementation = "frozen_test"
    try:
        total, count = 0.0, 0
        with torch.no_grad():
            for ids in batches:
                logits = model(input_ids=ids, use_cache=False).logits[:, start:-1].double()
                targets = ids[:, start + 1 :]
                total += float(
                    torch.nn.functional.cross_entropy(
                        logits.reshape(-1, VOCAB), targets.reshape(-1), reduction="sum"
                    )
                )
                count += targets.numel()
    finally:
        model.config._attn_implementation = "sdpa"
    return total / count


def test_each_cut_is_the_frozen_context_loss_rise_written_out(model, batches) -> None:
    raw = suffix_loss_increase(model, batches, CANDIDATES, suffix=SUFFIX, sinks=SINKS)
    assert raw.shape == (2, 2, len(CANDIDATES)) and raw.dtype == torch.float64
    start = T - SUFFIX
    base = suffix_nll(model, batches, frozen_attention(None, start), start)
    for layer in range(2):
        for kv in range(2):
            for j, w in enumerate(CANDIDATES[:-1]):
                attend = frozen_attention((layer, kv, w), start)
                mine = suffix_nll(model, batches, attend, start) - base
                assert float(raw[layer, kv, j]) == pytest.approx(mine, abs=2e-5), (layer, kv, w)
    assert (raw[..., -1] == 0).all()  # w = T cuts nothing and runs nothing
    assert raw.abs().max() > 1e-3  # the cuts do move a random model's loss
    assert model.config._attn_implementation == "sdpa" and hf.current_plan(model) is None


def test_a_suffix_of_all_but_the_first_row_is_the_exact_loss_signal(model, batches) -> None:
    """With the context one token long nothing is frozen that a cut could change, so the rise
    is the exact signal's, over T - 2 predictions instead of T - 1."""
    mine = suffix_loss_increase(model, batches, CANDIDATES, suffix=T - 1, sinks=SINKS)
    exact = loss_increase(model, batches, CANDIDATES, sinks=SINKS)
    assert exact.abs().max() > 1e-3
    torch.testing.assert_close(mine, exact * (T - 1) / (T - 2), atol=2e-6, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_runs_the_cached_suffix_and_agrees_with_the_exact_signal(family) -> None:
    model = tiny_model(family)
    batches = [search_ids()]
    only = [(0, 0, 1), (1, 0, 2)]
    mine = suffix_loss_increase(model, batches, CANDIDATES, suffix=T - 1, sinks=SINKS, only=only)
    exact = loss_increase(model, batches, CANDIDATES, sinks=SINKS, only=only)
    assert exact.abs().max() > 1e-4
    torch.testing.assert_close(mine, exact * (T - 1) / (T - 2), atol=2e-6, rtol=0)


def test_only_measures_the_named_cuts_and_costs_are_monotone(model, batches) -> None:
    full = suffix_loss_increase(model, batches, CANDIDATES, suffix=SUFFIX, sinks=SINKS)
    only = [(1, 0, 1), (0, 1, 0)]
    some = suffix_loss_increase(model, batches, CANDIDATES, suffix=SUFFIX, sinks=SINKS, only=only)
    for cut in only:
        assert float(some[cut]) == pytest.approx(float(full[cut]), abs=1e-9)
    mask = torch.ones_like(some, dtype=torch.bool)
    for cut in only:
        mask[cut] = False
    assert (some[mask] == 0).all()
    costs = measure_suffix_loss_costs(model, batches, CANDIDATES, suffix=SUFFIX, sinks=SINKS)
    torch.testing.assert_close(costs, monotone_costs(full))


def test_search_plan_allocates_on_the_suffix_loss(model) -> None:
    calib = search_ids()
    plan = search_plan(
        model, calib, 0.4, sinks=SINKS, seq_len=T, candidates=CANDIDATES, signal="suffix-loss",
        suffix=SUFFIX, choose=False,
    )  # fmt: skip
    costs = measure_suffix_loss_costs(
        model, [calib[:1], calib[1:]], CANDIDATES, suffix=SUFFIX, sinks=SINKS
    )
    budget = Budget(T, 2, 4, coverage=0.4, sinks=SINKS, shape=kv_shape(model))
    by_hand = plan_from_costs(
        costs, CANDIDATES, budget, type(model).__name__, signal="suffix-loss", unit="loss"
    )
    assert plan.info["signal"] == "suffix-loss" and plan.windows == by_hand.windows
    assert plan.info["loss_increase"] == pytest.approx(by_hand.info["loss_increase"])
    assert WindowPlan.from_data(json.loads(plan.to_json())) == plan
    assert search_plan(
        model, calib, 0.4, sinks=SINKS, seq_len=T, candidates=CANDIDATES,
        signal=SuffixLoss(suffix=SUFFIX), choose=False,
    ) == plan  # fmt: skip
    with pytest.raises(ValueError, match="suffix is not an option of the 'output' signal"):
        search_plan(model, calib, 0.4, seq_len=T, signal="output", suffix=SUFFIX)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"suffix": T}, f"suffix must be shorter than the blocks \\({T}\\), got {T}"),
        ({"suffix": 1}, "suffix must be an int >= 2, got 1"),
        ({"suffix": SUFFIX, "sinks": -1}, "sinks must be an int >= 0, got -1"),
    ],
)
def test_bad_arguments_are_named(model, batches, kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        suffix_loss_increase(model, batches, CANDIDATES, **kwargs)


def test_blocks_of_other_lengths_and_no_blocks_are_refused(model, batches) -> None:
    with pytest.raises(ValueError, match=f"must all hold {T} tokens"):
        suffix_loss_increase(model, [batches[0], batches[1][:, :20]], CANDIDATES, suffix=SUFFIX)
    with pytest.raises(ValueError, match="no calibration batches"):
        suffix_loss_increase(model, [], CANDIDATES, suffix=SUFFIX)


def test_cli_suffix_loss_search_writes_its_plan(tmp_path, capsys) -> None:
    _, _, out = run_cli_search(
        tmp_path, "--budget", "0.4", "--sinks", "2", "--signal", "suffix-loss", "--suffix", "8",
        "--no-choose",
        "--candidates", "4,8,16,32",
    )  # fmt: skip
    plan = WindowPlan.load(out)
    assert plan.info["signal"] == "suffix-loss" and plan.info["loss_increase"] is not None
    assert plan.info["coverage"] <= 0.4
    printed = capsys.readouterr().out.strip().splitlines()
    assert "loss rise" in printed[0] and json.loads(printed[-1])["signal"] == "suffix-loss"
