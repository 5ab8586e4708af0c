"""experiments/scripts/pretrained_peer_needles.py without kvpress: its prefill-then-answer hit
equals the study's one-forward `needle_hit`, and its table pairs the hits a study folder holds
with a press file's, needle by needle."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")

from hf_models import tiny_model

from experiments.pretrained import needles
from experiments.pretrained.run import main as bench_main
from experiments.scripts import pretrained_peer_needles as peer


@pytest.fixture(scope="module")
def model():
    return tiny_model("llama", max_position_embeddings=256)


def test_an_uncompressed_prefill_then_the_answer_is_needle_hit(model) -> None:
    items = needles.build_needles(None, [160, 224], [0.0, 1.0], 2, seed=1, vocab_size=300)
    # a random model retrieves nothing: plant each needle's own greedy answer so hits happen
    planted = []
    for item in items:
        ids = torch.tensor([item.prompt])
        with torch.no_grad():
            greedy = model.generate(ids, max_new_tokens=3, do_sample=False)[0, ids.shape[1] :]
        planted.append(needles.Needle(item.kind, item.length, item.depth, item.prompt,
                                      greedy.tolist(), item.question))  # fmt: skip
    planted += items  # and the real answers, which it misses
    questions = [n.question for n in planted]  # build_needles' count of question ids
    assert questions[0] == len(b" What is the pass key? The pass key is")
    assert (
        questions[1]
        == len(" What is the secret city of X? The secret city of X is")
        + 2 * (len(planted[1].prompt) and 0)
        or questions[1] > 40
    )  # a fact's question names its person twice
    got = [peer.pressed_hit(model, n.prompt, n.answer, None, q)[0]
           for n, q in zip(planted, questions, strict=True)]  # fmt: skip
    assert got == [needles.needle_hit(model, n) for n in planted]
    assert any(got) and not all(got)
    first = planted[0]
    _, held = peer.pressed_hit(model, first.prompt, first.answer, None, questions[0])
    context = len(first.prompt) - questions[0]
    assert held == 2 * 2 * 2 * context * 16 * 4  # layers, K+V, KV heads, D, fp32
    for n, q in zip(planted, questions, strict=True):  # the prompt does end in that question
        assert bytes(n.prompt[-q:]).decode().startswith(" What is the ")


def test_the_table_pairs_bench_hits_with_the_press_file(model, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(peer, "LENGTHS", (160, 224))
    monkeypatch.setattr(peer, "DEPTHS", 2)
    folder = tmp_path / "llama"
    model.save_pretrained(folder)
    bench = tmp_path / "bench"
    bench_main(["--model", str(folder), "--out", str(bench), "--seq-len", "32",
                "--kv-fractions", "0.5", "--heldout-blocks", "2", "--calib-blocks", "1",
                "--needle-lengths", "160,224", "--needle-depths", "2", "--no-progress",
                "--methods", "uniform,output"])  # fmt: skip
    items = needles.build_needles(None, [160, 224], [0.0, 1.0], 2, seed=0, vocab_size=300)
    out = tmp_path / "peer"
    out.mkdir()
    prompts = [n.prompt for n in items]
    (out / "needles.json").write_text(json.dumps({"digest": peer.digest(prompts), "needles": [
        {"prompt": n.prompt, "answer": n.answer} for n in items]}))  # fmt: skip
    ours = peer.plan_hits(bench, [0.5], {})
    full = ours[("full", 1.0)]
    assert len(full) == len(items) and {("uniform", 0.5), ("output", 0.5)} <= set(ours)
    flipped = [not h for h in full]  # a press that gets every needle the other way round
    press = {"digest": peer.digest(prompts), "env": {"kvpress": "x", "transformers": "y"},
             "rows": [{"method": "full", "fraction": 1.0, "hits": full},
                      {"method": "kvpress-snapkv", "fraction": 0.5, "hits": flipped}]}  # fmt: skip
    (out / "presses.json").write_text(json.dumps(press))
    args = type("Args", (), {"out": str(out), "bench": str(bench), "kv_fractions": [0.5]})
    md = peer.table(args)
    n, lost = len(full), sum(full)
    row = next(line for line in md.splitlines() if "kvpress-snapkv" in line)
    assert f"| {n - lost}/{n} | {lost} / {n - lost} |" in row
    assert f"{n} of {n} needles agree" in md
    (out / "presses.json").write_text(json.dumps({**press, "digest": "other"}))
    with pytest.raises(ValueError, match="other needles"):
        peer.table(args)


def test_the_retrieval_grid_is_counted_per_condition() -> None:
    # Three conditions of two needles each: a condition counts only when both are retrieved.
    saved = {
        "grid": "heldout",
        "lengths": [160],
        "per_cell": 2,
        "conditions": [["fact", "prose", "heldout", 160, d] for d in (0, 0, 1, 1, 2, 2)],
    }
    full = [True] * 6
    output = [True, True, True, False, True, True]  # misses condition 1 only
    snap = [True, False, False, False, True, True]  # misses conditions 0 and 1
    rows = [("output", 0.3, output, "window plan"), ("kvpress-snapkv", 0.3, snap, "kvpress peer")]
    md = peer.condition_table(saved, rows, full, full, {"kvpress": "x", "transformers": "y"})
    plan = next(line for line in md.splitlines() if "| output |" in line)
    press = next(line for line in md.splitlines() if "kvpress-snapkv" in line)
    assert "| 2/3 | 1 / 0, p 1 |" in plan
    assert "| 1/3 | 2 / 0, p 0.5 | 1 / 0, p 1 |" in press
    assert "3 of 3 conditions agree" in md
