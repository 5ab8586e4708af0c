"""The choice's objective with retrieval probes (`objective="text+retrieval"`), and candidates
from several signals: the divergence is checked against the KL recomputed by hand from plain
forwards, at the text's scored rows and at the probes' answer rows."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from choice_rule import expected_choice
from hf_models import tiny_model

from aah.integrations.hf.run.apply_plan import applied
from aah.integrations.hf.search.plan_choice import FullReference, scored_positions
from aah.integrations.hf.search.plan_search import search_plan
from aah.integrations.hf.search.retrieval_calib import PROBES, probes_on
from aah.plan import WindowPlan

T = 128  # room for a fact, its question and its answer in bytes
CANDIDATES = [8, 16, 32, 64, 128]


def blocks(n: int, seed: int = 7) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(32, 200, (1, T), generator=gen) for _ in range(n)]


def kl_at(model, plan: WindowPlan, ids: torch.Tensor, rows) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    """Summed KL(full || plan) at `rows` of `ids`, and how many rows, by two plain forwards."""
    with torch.no_grad():
        full = torch.log_softmax(model(ids).logits[:, rows].double(), -1)
        with applied(model, plan.windows, sinks=plan.sinks or 0):
            cut = torch.log_softmax(model(ids).logits[:, rows].double(), -1)
    kl = (full.exp() * (full - cut)).sum(-1)
    return float(kl.sum()), kl.numel()


def test_probes_are_built_on_the_held_out_rows_with_their_answer_rows() -> None:
    held = [torch.cat(blocks(2), dim=0)]  # one batch of two blocks
    probes = probes_on(held, None, seed=0, vocab_size=256)
    assert len(probes) == PROBES
    for ids, rows in probes:
        assert ids.shape == (1, T) and rows == list(range(T - len(rows) - 1, T - 1))
    # prompt i hides its fact in held-out block i % 2: that block's first tokens are in it
    for i, (ids, _) in enumerate(probes):
        text, start = ids[0].tolist(), held[0][i % 2, :4].tolist()
        assert any(text[j : j + 4] == start for j in range(T - 4))
        assert text != held[0][i % 2].tolist()
    assert probes_on(held, None, seed=0, vocab_size=256)[3][0].equal(probes[3][0])  # seeded


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_with_probes_the_divergence_is_the_mean_of_the_text_and_the_answer_rows(
    family: str,
) -> None:
    model = tiny_model(family, max_position_embeddings=256)
    held = blocks(2)
    probes = probes_on(held, None, seed=0, vocab_size=model.config.vocab_size, n=3)
    reference = FullReference.of(model, held, probes)
    n_layer, n_head = model.config.num_hidden_layers, model.config.num_attention_heads
    plan = WindowPlan.of([[8] * n_head] * n_layer, None, T)
    text = [kl_at(model, plan, ids, scored_positions(T)) for ids in held]
    answer = [kl_at(model, plan, ids, rows) for ids, rows in probes]
    want = 0.5 * (sum(s for s, _ in text) / sum(n for _, n in text)) + 0.5 * (
        sum(s for s, _ in answer) / sum(n for _, n in answer)
    )
    assert reference.divergence(model, plan) == pytest.approx(want, rel=1e-3)
    text_only = FullReference.of(model, held).divergence(model, plan)
    assert reference.divergence(model, plan) != pytest.approx(text_only, rel=1e-3)
    with pytest.raises(ValueError, match="no answer rows"):
        FullReference.of(model, held, [(probes[0][0], [])])


def test_the_search_judges_every_signals_plans_by_text_and_retrieval() -> None:
    model = tiny_model("llama", max_position_embeddings=256)
    options = {"kv_fraction": 0.5, "seq_len": T, "candidates": CANDIDATES, "max_batches": 2,
               "sinks": 0, "whole_layers": [], "floor": 0.0}  # fmt: skip
    plan = search_plan(model, signal=["output", "mass"], objective="text+retrieval", **options)
    choice = plan.info["choice"]
    assert set(choice["scores"]) == {"output, sinks 0", "mass, sinks 0", "uniform, sinks 0"}
    assert choice["retrieval_probes"] == PROBES and "answer rows" in choice["objective"]
    assert choice["chosen"] == expected_choice(choice)
    default = search_plan(model, signal=["output", "mass"], **options).info["choice"]
    assert default == choice  # text and retrieval is the default objective
    text = search_plan(model, signal=["output", "mass"], objective="text", **options)
    text_choice = text.info["choice"]
    assert text_choice["retrieval_probes"] == 0 and set(text_choice["scores"]) == set(
        choice["scores"]
    )
    assert text_choice["scores"] != choice["scores"]  # the probes move every score
    # a T too short to hide a fact, ask and answer: the default judges by text, and says so;
    # asked for by name, retrieval is refused
    short = {**options, "seq_len": 32, "candidates": [8, 16, 32]}
    alone = search_plan(model, signal="output", **short).info["choice"]
    assert alone["retrieval_probes"] == 0 and "answer rows" not in alone["objective"]
    with pytest.raises(ValueError, match="T = 32 is too short for a fact, question and answer"):
        search_plan(model, signal="output", objective="text+retrieval", **short)
    with pytest.raises(ValueError, match="objective must be one of text, text\\+retrieval"):
        search_plan(model, objective="retrieval", **options)
    with pytest.raises(ValueError, match="needs choose"):
        search_plan(model, objective="text+retrieval", choose=False, **options)
    with pytest.raises(ValueError, match="several signals need choose"):
        search_plan(model, signal=["output", "mass"], choose=False, **options)
    with pytest.raises(ValueError, match="several signals need choose"):
        search_plan(model, signal=[], **options)
