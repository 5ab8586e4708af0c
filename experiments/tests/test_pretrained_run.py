"""`python -m experiments.pretrained` end to end on a tiny random Llama saved to a folder:
every method's numbers against an independent recompute, resuming without re-running a cell, and
refusing a folder of other settings."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")

from hf_models import tiny_model

from aah.integrations.hf import applied
from experiments.pretrained import corpus, scoring
from experiments.pretrained.cells import CellStore
from experiments.pretrained.run import main

T = 32
ARGS = [
    "--seq-len", str(T), "--kv-fractions", "0.3,0.6", "--heldout-blocks", "3",
    "--calib-blocks", "2", "--needle-lengths", "112,160", "--needle-depths", "2",
    "--needles-per-cell", "2", "--no-progress",
    "--methods", "uniform,output,output-shuffled,mass,duo,duo-loss,random,aah-v3,"
    "aah-v3-shuffled,suffix-loss,suffix-loss-shuffled", "--loss-suffix", "8",
]  # fmt: skip


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("tiny") / "llama"
    tiny_model("llama", max_position_embeddings=256).save_pretrained(path)
    return path


def nll(model, ids: torch.Tensor) -> float:
    """Mean next-token negative log-likelihood, written out (not cross_entropy)."""
    with torch.no_grad():
        logp = model(input_ids=ids, use_cache=False).logits[0, :-1].double().log_softmax(-1)
    return float(-logp.gather(1, ids[0, 1:, None]).mean())


def test_every_cell_matches_a_float64_recompute_and_a_rerun_resumes(model_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["--model", str(model_dir), "--out", str(out), *ARGS]) == 0
    result = json.loads((out / "results.json").read_text())
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["benchmark"] == "pretrained"
    for name in ("table.md", "quality_vs_kv.png", "needles.png"):
        assert (out / name).stat().st_size > 0
    rows = {(r["method"], r["kv_target"]): r for r in result["rows"]}
    methods = ["uniform", "output", "output-shuffled", "mass", "duo", "duo-loss", "random",
               "suffix-loss", "suffix-loss-shuffled"]  # fmt: skip
    own = next(f for m, f in rows if m == "aah-v3")  # AAH-v3 sets its own KV fraction
    budgeted = {(m, f) for m in methods for f in (0.3, 0.6)}
    assert set(rows) == budgeted | {(m, own) for m in ("uniform", "aah-v3", "aah-v3-shuffled")}
    assert rows[("aah-v3", own)]["holm_p"] is not None  # compared with uniform at its fraction

    model = tiny_model("llama", max_position_embeddings=256)
    text = corpus.stdlib_text(corpus.HELDOUT_PACKAGES)
    held = corpus.text_blocks(None, text, T, 3, vocab_size=model.config.vocab_size)
    full = [nll(model, ids) for ids in held]
    assert result["full_loss"] == pytest.approx(sum(full) / 3, abs=1e-5)
    for plan in result["plans"]:
        key = (plan["method"], plan["kv_fraction"])
        with applied(model, plan["windows"], backend="reference", sinks=4):
            mine = [nll(model, ids) for ids in held]
        assert rows[key]["loss"] == pytest.approx(sum(mine) / 3, abs=1e-5), key
        diffs = [a - b for a, b in zip(mine, full, strict=True)]
        assert rows[key]["vs_full"]["mean"] == pytest.approx(sum(diffs) / 3, abs=1e-5)
        assert rows[key]["kv_fraction"] <= key[1] + 1e-9
        assert 0.0 <= rows[key]["needle"] <= 1.0

    cells = (out / "cells.jsonl").read_text()
    assert main(["--model", str(model_dir), "--out", str(out), *ARGS]) == 0
    assert (out / "cells.jsonl").read_text() == cells  # nothing ran twice
    assert json.loads((out / "results.json").read_text())["rows"] == result["rows"]


def test_a_folder_of_other_settings_is_refused(model_dir, tmp_path) -> None:
    out = tmp_path / "out"
    small = ["--kv-fractions", "0.5", "--heldout-blocks", "2", "--calib-blocks", "1",
             "--needle-lengths", "none", "--no-progress", "--methods", "uniform"]  # fmt: skip
    assert main(["--model", str(model_dir), "--out", str(out), "--seq-len", "16", *small]) == 0
    with pytest.raises(ValueError, match="other settings"):
        main(["--model", str(model_dir), "--out", str(out), "--seq-len", "24", *small])
    with pytest.raises(ValueError, match="other settings"):  # other held-out text
        main(["--model", str(model_dir), "--out", str(out), "--seq-len", "16", *small,
              "--heldout-packages", "xml"])  # fmt: skip


def test_other_held_out_packages_are_the_blocks_measured(model_dir, tmp_path) -> None:
    out = tmp_path / "out"
    args = ["--model", str(model_dir), "--out", str(out), "--seq-len", str(T),
            "--kv-fractions", "0.5", "--heldout-blocks", "2", "--calib-blocks", "1",
            "--needle-lengths", "none", "--no-progress", "--methods", "uniform",
            "--heldout-packages", "xml,urllib"]  # fmt: skip
    assert main(args) == 0
    result = json.loads((out / "results.json").read_text())
    assert result["heldout_packages"] == ["xml", "urllib"]
    model = tiny_model("llama", max_position_embeddings=256)
    text = corpus.stdlib_text(("xml", "urllib"))
    held = corpus.text_blocks(None, text, T, 2, vocab_size=model.config.vocab_size)
    assert result["full_loss"] == pytest.approx(sum(nll(model, ids) for ids in held) / 2, abs=1e-5)


def test_output_plus_retrieval_measures_at_the_answer_rows_and_a_new_needle_seed_is_a_new_grid(
    model_dir, tmp_path
) -> None:
    from aah.integrations.hf.search.measure import measure_signal
    from aah.integrations.hf.search.retrieval_calib import retrieval_prompts
    from experiments.pretrained.planning import candidates

    out, t = tmp_path / "out", 128
    args = ["--model", str(model_dir), "--out", str(out), "--seq-len", str(t),
            "--kv-fractions", "0.5", "--heldout-blocks", "2", "--calib-blocks", "2",
            "--retrieval-prompts", "3", "--needle-lengths", "112", "--needle-depths", "2",
            "--needles-per-cell", "1", "--no-progress",
            "--methods", "uniform,output+retrieval"]  # fmt: skip
    assert main(args) == 0
    cells = [json.loads(line) for line in (out / "cells.jsonl").read_text().splitlines()]
    signal = next(c["value"]["value"] for c in cells if c.get("key", "").startswith(
        "signal/retrieval-3/"))  # fmt: skip
    model = tiny_model("llama", max_position_embeddings=256)
    calib = corpus.text_blocks(None, corpus.stdlib_text(corpus.CALIB_PACKAGES), t, 2,
                               vocab_size=model.config.vocab_size)  # fmt: skip
    prompts = retrieval_prompts(calib, None, 3, vocab_size=model.config.vocab_size)
    want = measure_signal(model, [p.ids for p in prompts], candidates(t, t // 16), "output",
                          sinks=4, query_rows=[p.rows for p in prompts])  # fmt: skip
    torch.testing.assert_close(torch.tensor(signal, dtype=torch.float64), want)
    plan = json.loads((out / "results.json").read_text())["rows"]
    assert {r["method"] for r in plan} == {"uniform", "output+retrieval"}

    needle_keys = {c["key"].split("/")[0] for c in cells if c.get("key", "").startswith("needles")}
    assert main([*args, "--needle-seed", "5"]) == 0
    cells = [json.loads(line) for line in (out / "cells.jsonl").read_text().splitlines()]
    fresh = {c["key"].split("/")[0] for c in cells if c.get("key", "").startswith("needles")}
    assert fresh - needle_keys == {next(iter(needle_keys)) + "-s5"}  # only the needles reran
    whole = [c for c in cells if c.get("key", "").startswith("loss/") and c["key"].count("/") == 1]
    assert len(whole) == 3  # full + two plans


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [("--kv-fractions", "0,0.5", "kv-fractions"), ("--kv-fractions", "a", "kv-fractions"),
     ("--methods", "uniform,nope", "nope"),
     ("--heldout-blocks", "1", "heldout-blocks"), ("--needle-lengths", "8", "needle-lengths"),
     ("--heldout-packages", "logging,json", "heldout-packages"),
     ("--heldout-packages", "logging,nopkg", "nopkg")],
)  # fmt: skip
def test_bad_flags_are_named(model_dir, tmp_path, flag: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        main(["--model", str(model_dir), "--out", str(tmp_path / "o"), flag, value])


def test_a_stopped_evaluation_resumes_at_the_item_it_stopped_on(tmp_path, monkeypatch) -> None:
    import argparse
    import contextlib

    monkeypatch.setattr(scoring, "_under", lambda model, plan, sinks: contextlib.nullcontext())
    args = argparse.Namespace(sinks=4, no_progress=True)
    plans, items = [None, [[8, 16]]], [1.0, 2.0, 3.0, 4.0]
    calls: list[tuple[float, int]] = []

    def score(model, item, stop_after=None):
        if stop_after is not None and len(calls) == stop_after:
            raise KeyboardInterrupt
        calls.append(item)
        return item * 10

    store = CellStore(tmp_path / "cells.jsonl", {"s": 1})
    with pytest.raises(KeyboardInterrupt):
        scoring.evaluate(None, plans, items, lambda m, i: score(m, i, 6), "loss", args, store)
    assert calls == [1.0, 2.0, 3.0, 4.0, 1.0, 2.0]  # the first plan whole, two of the second
    store = CellStore(tmp_path / "cells.jsonl", {"s": 1})  # a new process reads the file
    got = scoring.evaluate(None, plans, items, score, "loss", args, store)
    assert calls[6:] == [3.0, 4.0]  # only what was left
    assert list(got.values()) == [[10.0, 20.0, 30.0, 40.0]] * 2
