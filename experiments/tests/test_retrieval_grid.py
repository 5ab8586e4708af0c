"""Retrieval probes: exact prompt lengths, the needle where the depth puts it, distinct
conditions (kinds, fillers, wordings), held-out wording and fillers unlike the design grid,
conditions counted with all replicates, and McNemar against a brute-force binomial."""

from __future__ import annotations

import pytest

from aah.integrations.hf.run.data import encode
from experiments.pretrained.needles import FILLER
from experiments.pretrained.retrieval_grid import (
    FILLERS,
    NEEDLE_KINDS,
    build_probes,
    compare,
    conditions,
    texts,
    unseen_by,
)


def find(haystack: list[int], needle: list[int]) -> int:
    return next(i for i in range(len(haystack)) if haystack[i : i + len(needle)] == needle)


@pytest.mark.parametrize("grid", ["design", "heldout"])
def test_prompts_hold_the_needle_at_its_depth_and_have_exact_lengths(grid: str) -> None:
    lengths, depths = [400, 600], [0.0, 0.5, 1.0]
    probes = build_probes(None, grid, lengths, depths, per_condition=2, seed=3)
    fillers = ("repeat",) if grid == "design" else ("prose", "code")
    assert len(probes) == len(fillers) * len(lengths) * len(NEEDLE_KINDS) * len(depths) * 2
    assert len({p.condition for p in probes}) == len(probes) // 2  # 2 replicates each
    assert {p.filler for p in probes} == set(fillers) and set(fillers) <= set(FILLERS)
    for p in probes:
        prompt = p.needle.prompt
        assert len(prompt) == p.needle.length
        answer = bytes(p.needle.answer).decode()
        assert answer.strip() in bytes(prompt).decode()  # the answer is in the prompt
        start = p.needle.length - p.distance  # where the needle begins
        assert 0 <= start <= p.needle.length - p.needle.question
        if p.needle.depth == 0.0:
            assert start == 0
    for i in range(0, len(probes), 2 * len(depths)):  # deeper needles start later
        starts = [p.needle.length - p.distance for p in probes[i : i + 2 * len(depths) : 2]]
        assert starts == sorted(starts) and starts[0] < starts[-1]
    again = build_probes(None, grid, lengths, depths, per_condition=2, seed=3)
    assert [p.needle.prompt for p in again] == [p.needle.prompt for p in probes]
    reps = [p.needle.answer for p in probes if p.condition == probes[0].condition]
    assert reps[0] != reps[1]  # replicates differ in their keys


def test_the_needle_starts_distance_tokens_before_the_end() -> None:
    probes = build_probes(None, "design", [500], [0.0, 0.3, 1.0], kinds=["passkey"], seed=1)
    for p in probes:
        needle_ids = encode(" The pass key is", None, None)
        assert find(p.needle.prompt, needle_ids) == p.needle.length - p.distance
    assert unseen_by(probes, 200) == [p.distance > 200 for p in probes]
    assert probes[0].distance == 500 and unseen_by(probes, 499)[0]


def test_held_out_wording_shares_no_sentence_with_the_design_wording() -> None:
    import random

    for kind in NEEDLE_KINDS:
        design = texts(kind, "design", random.Random(0))
        heldout = texts(kind, "heldout", random.Random(0))
        assert design[2] == heldout[2]  # the same key, other words around it
        assert design[1] != heldout[1] and design[0] != heldout[0]
    heldout = build_probes(None, "heldout", [400], [0.5], seed=0)
    for p in heldout:
        text = bytes(p.needle.prompt).decode(errors="replace")
        assert "pass key" not in text and "secret city" not in text
        assert FILLER.strip()[:20] not in text


def test_a_condition_is_retrieved_when_all_its_needles_are() -> None:
    probes = build_probes(None, "design", [300], [0.0, 1.0], per_condition=2,
                          kinds=["passkey", "fact"], seed=0)  # fmt: skip
    hits = [True, True, True, False, False, False, True, True]
    got = conditions(probes, hits)
    assert list(got.values()) == [True, False, False, True]
    assert list(got) == [p.condition for p in probes[::2]]


def binomial_p(a: int, b: int) -> float:
    """By definition: the probability, under binomial(n, 1/2) built by Pascal's rule, of every
    outcome at least as far from n / 2 as the one seen."""
    n = a + b
    probs = [1.0]
    for _ in range(n):
        probs = [(x + y) / 2 for x, y in zip([0.0, *probs], [*probs, 0.0], strict=True)]
    return min(1.0, sum(q for k, q in enumerate(probs) if abs(2 * k - n) >= abs(a - b)))


@pytest.mark.parametrize(
    ("a_only", "b_only"), [(6, 1), (3, 0), (0, 0), (5, 5), (9, 2), (19, 1), (21, 0), (32, 3)]
)
def test_mcnemar_per_condition_matches_the_exact_binomial(a_only: int, b_only: int) -> None:
    keys = [("k", "f", "w", 1, float(i)) for i in range(a_only + b_only + 4)]
    a = {k: i < a_only or i >= a_only + b_only + 2 for i, k in enumerate(keys)}
    b = {k: a_only <= i < a_only + b_only or i >= a_only + b_only + 2 for i, k in enumerate(keys)}
    lost, gained, p = compare(a, b)
    assert (lost, gained) == (a_only, b_only)
    assert p == pytest.approx(binomial_p(a_only, b_only))


def test_bad_grids_are_named() -> None:
    with pytest.raises(ValueError, match="grid"):
        build_probes(None, "fresh", [400], [0.5])
    with pytest.raises(ValueError, match="kinds"):
        build_probes(None, "design", [400], [0.5], kinds=["riddle"])
    with pytest.raises(ValueError, match="too short"):
        build_probes(None, "design", [40], [0.5])
    with pytest.raises(ValueError, match="depths"):
        build_probes(None, "design", [400], [1.5])


def test_a_tiny_model_scores_every_probe() -> None:
    pytest.importorskip("transformers")
    from hf_models import tiny_model

    from experiments.pretrained.needles import needle_hit

    model = tiny_model("llama", max_position_embeddings=512)
    probes = build_probes(None, "heldout", [300], [0.5], kinds=["tracked", "multikey"],
                          vocab_size=model.config.vocab_size)  # fmt: skip
    hits = [needle_hit(model, p.needle) for p in probes]
    assert len(conditions(probes, hits)) == 4 and all(isinstance(h, bool) for h in hits)
