"""The end-to-end choice of the plan search (`hf.search.plan_choice`, `hf.search.plan_candidates`):
plans are judged by the KL of the model's next-token distributions from full attention on held-out
blocks, checked here against the same KL computed by hand from two plain forwards."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")

from choice_rule import expected_choice
from hf_models import tiny_model

from aah.integrations.hf.run.apply_plan import applied
from aah.integrations.hf.search.plan_candidates import DEFAULT_SINKS, Variant, variants
from aah.integrations.hf.search.plan_choice import FullReference, Scored, choose, scored_positions
from aah.integrations.hf.search.plan_search import search_plan
from aah.integrations.hf.search.signals import SearchContext
from aah.plan import WindowPlan

T = 32
CANDIDATES = [4, 8, 16, 32]


def blocks(n: int, seed: int = 11) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 200, (1, T), generator=gen) for _ in range(n)]


def kl_by_hand(model, plan: WindowPlan, batches) -> float:  # type: ignore[no-untyped-def]
    """Mean KL(full || plan) at the scored rows, from whole-sequence logits of the model as it
    loads (SDPA) and under the plan."""
    rows = scored_positions(T)
    total, count = 0.0, 0
    for ids in batches:
        with torch.no_grad():
            full = torch.log_softmax(model(ids).logits[:, rows].double(), -1)
            with applied(model, plan.windows, sinks=plan.sinks or 0):
                cut = torch.log_softmax(model(ids).logits[:, rows].double(), -1)
        kl = (full.exp() * (full - cut)).sum(-1)
        total, count = total + float(kl.sum()), count + kl.numel()
    return total / count


def plan_of(windows: list[list[int]], sinks: int = 0) -> WindowPlan:
    return WindowPlan.of(windows, [[sinks] * len(windows[0])] * len(windows) if sinks else None, T)


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_divergence_equals_the_kl_of_two_plain_forwards(family: str) -> None:
    model = tiny_model(family, max_position_embeddings=64)
    held = blocks(2)
    reference = FullReference.of(model, held)
    n_layer, n_head = model.config.num_hidden_layers, model.config.num_attention_heads
    cut = plan_of([[4] * n_head] * n_layer, sinks=1)
    assert reference.divergence(model, cut) == pytest.approx(kl_by_hand(model, cut, held), rel=1e-3)
    assert reference.divergence(model, cut) > 1e-4
    whole = plan_of([[T] * n_head] * n_layer)
    assert abs(reference.divergence(model, whole)) < 1e-5  # a plan that cuts nothing
    assert model.config._attn_implementation == "sdpa"  # left as it was


def test_scored_positions_skip_the_first_eighth_and_end_at_the_last() -> None:
    rows = scored_positions(2048)
    assert rows[0] == 256 and rows[-1] == 2047 and len(rows) == 128
    assert scored_positions(16).tolist() == list(range(2, 16))
    with pytest.raises(ValueError, match="at least 2 tokens, got 1"):
        scored_positions(1)


def test_choose_ranks_by_divergence_and_refuses_no_candidates() -> None:
    model = tiny_model("llama")
    held = blocks(2)
    plans = [("narrow", plan_of([[4] * 4] * 2)), ("wide", plan_of([[16] * 4] * 2)),
             ("whole", plan_of([[T] * 4] * 2))]  # fmt: skip
    scored = choose(model, plans, held)
    assert scored[0].name == "whole"
    assert [s.divergence for s in scored] == sorted(s.divergence for s in scored)
    by_name = {s.name: s.divergence for s in scored}
    assert by_name["narrow"] == pytest.approx(kl_by_hand(model, plans[0][1], held), rel=1e-3)
    with pytest.raises(ValueError, match="no candidate plans"):
        choose(model, [], held)


def test_the_same_plan_under_two_names_runs_once_and_shares_its_score(monkeypatch) -> None:
    model = tiny_model("gemma3_text", max_position_embeddings=64)  # layer 0 slides over 16
    held = blocks(2)
    reference = FullReference.of(model, held)
    runs = []
    real = FullReference.divergence
    monkeypatch.setattr(FullReference, "divergence",
                        lambda self, m, plan: runs.append(plan) or real(self, m, plan))  # fmt: skip
    n_head = model.config.num_attention_heads
    # layer 0 at T or at its own window of 16 computes the same; at 8 it does not
    whole, own, cut = ([[w] * n_head, [8] * n_head] for w in (T, 16, 8))
    plans = [("whole 0", plan_of(whole)), ("own 0", plan_of(own)), ("cut 0", plan_of(cut))]
    scored = {s.name: s.divergence for s in choose(model, plans, held, reference=reference)}
    assert len(runs) == 2 and scored["whole 0"] == scored["own 0"]
    assert scored["own 0"] == pytest.approx(real(reference, model, plans[1][1]))
    assert scored["cut 0"] != scored["own 0"]


def test_the_grid_covers_what_is_left_open_and_only_that() -> None:
    assert len(variants(None, None, None, True)) == 8
    assert {v.sinks for v in variants(None, None, None, True)} == {0, DEFAULT_SINKS}
    forced = variants(2, [1], 0.25, True)
    assert forced == [Variant(2, (1,), 0.25)]
    assert variants(None, None, None, False) == [Variant(0, (), 0.0)]
    assert Variant(4, (0,), 0.5).name("output") == "output, sinks 4, whole 0, floor 0.5"
    # a model that mixes sliding and full layers also tries sinks on its full layers alone
    hybrid = variants(None, [], 0.0, True, [512, None, 512])
    assert [v.sinks for v in hybrid] == [0, DEFAULT_SINKS, (0, DEFAULT_SINKS, 0)]
    assert hybrid[2].name("output") == "output, sinks 4 on full layers"
    assert len(variants(None, [], 0.0, True, [512, 512])) == 2  # every layer slides: no mix


class Starve:
    """A signal that calls the last layer free to cut and the first costly: the allocation
    starves the last layer, whatever it does for the output."""

    name, unit = "starve", ""

    def measure(self, model, batches, candidates, context: SearchContext):  # type: ignore[no-untyped-def]
        n_layer, n_kv = model.config.num_hidden_layers, model.config.num_key_value_heads
        costs = torch.zeros(n_layer, n_kv, len(candidates), dtype=torch.float64)
        costs[0] = torch.linspace(10, 0, len(candidates), dtype=torch.float64)
        return costs


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])  # gemma3: a sliding + a full layer
def test_the_default_search_never_returns_a_plan_one_window_beats_on_the_held_out_blocks(
    family: str,
) -> None:
    model = tiny_model(family, max_position_embeddings=256)
    plan = search_plan(model, kv_fraction=0.7, seq_len=T, candidates=CANDIDATES, signal=Starve())
    choice = plan.info["choice"]
    assert choice["held_out"] == "held-out" and choice["held_out_blocks"] == 4
    scores = choice["scores"]
    # 10 candidates, less those the budget cannot pay for (a whole layer with a floor)
    assert {"uniform, sinks 0", "uniform, sinks 4", "starve, sinks 0", "starve, sinks 4"} <= set(
        scores
    )
    assert choice["chosen"] == expected_choice(choice)
    assert scores[choice["chosen"]] <= min(scores["uniform, sinks 0"], scores["uniform, sinks 4"])
    # the held-out blocks are the mix's 4 blocks after the 8 measured ones; recomputed by hand
    from aah.integrations.hf.search.calibration_mix import calibration_mix

    mix = calibration_mix(None, seq_len=T, n_blocks=12, vocab_size=model.config.vocab_size)
    held = [torch.tensor([ids]) for ids in mix[8:]]
    assert scores[choice["chosen"]] == pytest.approx(kl_by_hand(model, plan, held), rel=1e-3)
    assert WindowPlan.from_data(json.loads(plan.to_json())).info["choice"] == choice
    if family == "gemma3_text":  # layer 0 slides, layer 1 does not
        assert "uniform, sinks 4 on full layers" in scores
        mixed = search_plan(model, kv_fraction=0.7, seq_len=T, candidates=CANDIDATES,
                            signal=Starve(), sinks=None, whole_layers=[], floor=0.0,
                            max_batches=2)  # fmt: skip
        # 3 allocations and 3 uniform windows; beside them the full layer whole and the
        # sliding layer the window the rest pays for, where the budget pays (not with 4
        # sinks in the sliding layer: 32 + 1 + 4 positions is over 0.7 x 48)
        scores = mixed.info["choice"]["scores"]
        assert len(scores) == 8
        assert "uniform, sinks 4, full layers whole" not in scores
        both = search_plan(model, kv_fraction=0.7, seq_len=T, candidates=CANDIDATES,
                           signal=Starve(), sinks=0, whole_layers=[], floor=0.0,
                           max_batches=2)  # fmt: skip
        named = dict(both.info["choice"]["scores"])
        assert set(named) == {"starve, sinks 0", "uniform, sinks 0",
                              "uniform, sinks 0, full layers whole"}  # fmt: skip
        whole = WindowPlan.of([[1] * 4, [T] * 4], None, T)
        mix = calibration_mix(None, seq_len=T, n_blocks=6, vocab_size=model.config.vocab_size)
        held = [torch.tensor([ids]) for ids in mix[2:]]  # after the 2 measured blocks
        assert named["uniform, sinks 0, full layers whole"] == pytest.approx(
            kl_by_hand(model, whole, held), rel=1e-3
        )


def test_forced_settings_hold_for_every_candidate_and_no_choice_is_the_plain_allocation() -> None:
    model = tiny_model("llama", max_position_embeddings=256)
    options = {"kv_fraction": 0.6, "seq_len": T, "candidates": CANDIDATES, "max_batches": 2}
    plan = search_plan(model, sinks=2, whole_layers=[1], floor=0.0, **options)
    assert set(plan.info["choice"]["scores"]) == {"output, sinks 2, whole 1", "uniform, sinks 2"}
    assert plan.sinks == [[2] * 4] * 2
    plain = search_plan(model, sinks=2, whole_layers=[1], choose=False, **options)
    assert "choice" not in plain.info and plain.info["whole_layers"] == [1]
    with pytest.raises(ValueError, match="choose must be True or False, got 'yes'"):
        search_plan(model, choose="yes", **options)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sinks must be"):
        search_plan(model, sinks=-1, **options)


def test_a_users_text_holds_out_its_last_quarter() -> None:
    model = tiny_model("llama", max_position_embeddings=256)
    ids = torch.cat(blocks(8, seed=5), dim=1)
    plan = search_plan(model, ids, kv_fraction=0.5, seq_len=T, candidates=CANDIDATES, sinks=0)
    assert plan.info["choice"]["held_out_blocks"] == 2
    one = search_plan(model, ids[:, :T], kv_fraction=0.5, seq_len=T, candidates=CANDIDATES,
                      sinks=0)  # fmt: skip
    assert one.info["choice"]["held_out"] == "in-sample"


def test_a_plan_displaces_one_window_only_by_the_margin() -> None:
    from aah.integrations.hf.search.search_choice import preferred

    def scored(**scores: float) -> list[Scored]:
        plan = plan_of([[T] * 2])
        return sorted((Scored(n, plan, d) for n, d in scores.items()), key=lambda s: s.divergence)

    windows = {"uniform, sinks 0", "uniform, sinks 4"}
    two = {"uniform, sinks 4": 1.0, "uniform, sinks 0": 2.0}  # the best window scores 1.0
    for lead, want in ((0.005, "uniform, sinks 4"), (0.02, "output")):
        assert preferred(scored(output=1 - lead, **two), windows, 0.01).name == want
    # a window lowest is kept; no window among the candidates leaves the lowest
    one = {"uniform, sinks 0": 1.0}
    assert preferred(scored(output=1.5, **one), windows, 0.5).name == "uniform, sinks 0"
    assert preferred(scored(output=1.0, mass=2.0), windows, 0.5).name == "output"
    assert preferred(scored(output=0.99, **one), windows, 0.0).name == "output"
    assert preferred(scored(output=1.0, **one), windows, 0.0).name == "uniform, sinks 0"  # a tie


@pytest.mark.parametrize("margin", [0.0, 0.999])
def test_the_search_keeps_one_window_unless_a_plan_beats_it_by_the_margin(
    margin: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    import aah.integrations.hf.search.search_choice as search_choice

    monkeypatch.setattr(search_choice, "CHOICE_MARGIN", margin)
    # a tiny hybrid (three sliding layers, one full) where an allocation leads by far
    hybrid = {"num_hidden_layers": 4, "layer_types": ["sliding_attention"] * 3 + ["full_attention"]}
    model = tiny_model("gemma3_text", max_position_embeddings=256, **hybrid)
    plan = search_plan(model, kv_fraction=0.5, seq_len=T, candidates=CANDIDATES, max_batches=2)
    choice = plan.info["choice"]
    scores = choice["scores"]
    assert choice["margin"] == margin and choice["chosen"] == expected_choice(choice)
    lowest = min(scores, key=scores.get)
    best_window = min(scores[n] for n in scores if n.startswith("uniform"))
    assert scores[lowest] < 0.5 * best_window  # not a window, and far ahead of them
    if margin == 0.0:  # the plain argmin
        assert choice["chosen"] == lowest
    else:  # no plan is 1000 times better than the best window here
        assert choice["chosen"].startswith("uniform") and scores[choice["chosen"]] == best_window
