"""The refine step of the plan search (`hf.search.plan_refine`): budget exchanged between groups of
layers, each exchange judged end to end. Checked against the budget's own byte count, an
independent recount of the KL from plain forwards, and the start plan it must never lose to."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from hf_models import tiny_model

from aah.integrations.hf.search.plan_choice import FullReference
from aah.integrations.hf.search.plan_refine import (
    Move,
    exchanged,
    layer_groups,
    plan_cost,
    plan_sinks,
    refine,
)
from aah.integrations.hf.search.plan_search import search_budget, search_plan
from aah.plan import WindowPlan

T = 32
CANDIDATES = [4, 8, 16, 32]
HYBRID = {"num_hidden_layers": 4, "max_position_embeddings": 256,
          "layer_types": ["sliding_attention"] * 3 + ["full_attention"]}  # fmt: skip


def blocks(n: int, seed: int = 3) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 200, (1, T), generator=gen) for _ in range(n)]


def test_groups_are_the_quarters_and_on_a_hybrid_model_each_kind_once() -> None:
    assert layer_groups(8) == {"layers 0-1": (0, 1), "layers 2-3": (2, 3),
                               "layers 4-5": (4, 5), "layers 6-7": (6, 7)}  # fmt: skip
    assert layer_groups(2) == {"layers 0-0": (0,), "layers 1-1": (1,)}
    hybrid = layer_groups(8, [512] * 5 + [None] + [512] * 2)
    assert hybrid["sliding layers"] == (0, 1, 2, 3, 4, 6, 7) and hybrid["full layers"] == (5,)
    # the full layer alone is already a quarter: not a second group
    assert "full layers" not in layer_groups(4, [16, 16, 16, None])
    with pytest.raises(ValueError, match="n_layer"):
        layer_groups(0)


@pytest.mark.parametrize("factor", [1.5, 1 / 1.5])
def test_an_exchange_scales_its_group_and_spends_the_rest_of_the_budget_on_the_others(
    factor: float,
) -> None:
    model = tiny_model("llama", num_hidden_layers=4, max_position_embeddings=256)
    budget = search_budget(model, T, 0, kv_fraction=0.5)
    start = [[8] * 4 for _ in range(4)]
    move = Move("layers 0-0", (0,), factor)
    out = exchanged(start, move, budget)
    assert out is not None
    assert out[0] == [round(8 * factor)] * 4
    others = {w for row in out[1:] for w in row}
    assert len(others) == 1  # every other layer rescaled alike
    assert plan_cost(budget, out) <= budget.value
    # the largest such factor: one more position on the others would not fit
    wider = [out[0]] + [[w + 1 for w in row] for row in out[1:]]
    assert plan_cost(budget, wider) > budget.value
    # a move that cannot fit, or changes nothing, is no exchange
    assert exchanged(start, Move("all", (0, 1, 2, 3), 10.0), budget) is None
    assert exchanged([[T] * 4] * 4, Move("layers 0-0", (0,), 1.5), budget) is None


def test_refine_never_returns_a_plan_worse_than_its_start_and_records_true_scores() -> None:
    model = tiny_model("gemma3_text", **HYBRID)
    held = blocks(2)
    reference = FullReference.of(model, held)
    budget = search_budget(model, T, 0, kv_fraction=0.4)
    n_head = model.config.num_attention_heads
    start = WindowPlan.of([[4] * n_head] * 4, None, T)
    refined, steps = refine(model, start, budget, reference, rounds=3, min_gain=0.0)
    assert steps[0].move == "start"
    assert steps[0].divergence == pytest.approx(reference.divergence(model, start))
    assert [s.divergence for s in steps] == sorted(s.divergence for s in steps)[::-1]
    assert reference.divergence(model, refined) == pytest.approx(steps[-1].divergence)
    assert budget.bytes_of(refined.windows) <= budget.value
    # a starved plan under a roomier budget: an exchange spends the rest, and it helps
    assert len(steps) > 1 and steps[-1].divergence < steps[0].divergence
    assert refined.info["coverage"] > 4 / T
    with pytest.raises(ValueError, match="factors must be positive and not 1"):
        refine(model, start, budget, reference, factors=[1.0])
    with pytest.raises(ValueError, match="min_gain must be in"):
        refine(model, start, budget, reference, min_gain=1.0)


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_the_search_refines_its_choice_only_when_asked_and_never_for_the_worse(
    family: str,
) -> None:
    model = tiny_model(family, **(HYBRID if family == "gemma3_text" else
                                  {"max_position_embeddings": 256}))  # fmt: skip
    options = {"kv_fraction": 0.5, "seq_len": T, "candidates": CANDIDATES}
    chosen = search_plan(model, **options)
    refined = search_plan(model, refine=True, **options)
    assert "refine" not in chosen.info
    steps = refined.info["refine"]["steps"]
    start = chosen.info["choice"]["scores"][chosen.info["choice"]["chosen"]]
    assert steps[0] == ["start", pytest.approx(start)]
    assert steps[-1][1] <= start
    assert refined.sinks == chosen.sinks
    own = search_budget(model, T, plan_sinks(refined), kv_fraction=0.5)
    assert plan_cost(own, refined.windows) <= own.value
    with pytest.raises(ValueError, match=r"refine .* needs choose"):
        search_plan(model, refine=True, choose=False, **options)
    with pytest.raises(ValueError, match="refine must be True or False"):
        search_plan(model, refine=1, **options)  # type: ignore[arg-type]
