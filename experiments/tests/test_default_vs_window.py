"""`python -m experiments.scripts.default_vs_window` end to end on a tiny Llama saved with its
own tokenizer: the plans it compares hold the same bytes, every cell is the loss a plain forward
gives under that plan, the table's differences are those of the cells, and a second run
computes nothing again."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")

from hf_tokenized import save_tokenized_llama

from experiments.scripts import default_vs_window as study


def study_args(folder, out) -> list[str]:  # type: ignore[no-untyped-def]
    return ["--model", str(folder), "--out", str(out), "--seq-len", "64", "--kv-fraction", "0.5",
            "--kinds", "python,c", "--blocks-per-kind", "1", "--threads", "1"]  # fmt: skip


def run(folder, out):  # type: ignore[no-untyped-def]
    return study.main(study_args(folder, out))


def test_the_study_scores_each_plan_and_resumes(tmp_path, monkeypatch) -> None:
    folder, out = tmp_path / "llama", tmp_path / "out"
    save_tokenized_llama(folder, max_position_embeddings=128)
    assert run(folder, out) == 0
    cells = [json.loads(line) for line in (out / "cells.jsonl").read_text().splitlines()]
    values = {c["key"]: c["value"] for c in cells[1:]}
    assert len(values) == 4 * 2 + 1  # four plans x two blocks, and the search's seconds
    plans = {m: json.loads((out / "plans" / f"{m}.json").read_text()) for m in study.METHODS[1:]}
    assert "choice" in plans["default"]
    assert all(s == 4 for row in plans["uniform-s4"]["sinks"] for s in row)
    assert not any(s for row in plans["uniform-s0"].get("sinks") or [] for s in row)
    results = json.loads((out / "results.json").read_text())
    better = results["better_window"]
    blocks = json.loads((out / "blocks.json").read_text())
    pooled = results["kinds"]["pooled"]
    by_doc: dict[str, list[float]] = {}
    for i, block in enumerate(blocks):
        diff = values[f"default/{i}"] - values[f"{better}/{i}"]
        by_doc.setdefault(block["document"], []).append(diff)
    means = [sum(v) / len(v) for v in by_doc.values()]
    assert pooled["diff"] == pytest.approx(sum(means) / len(means))
    # a cell is the plain loss of its block under its plan
    from aah.integrations.hf.run.apply_plan import applied
    from aah.integrations.hf.run.load import load_model
    from experiments.pretrained.kinds import kind_blocks

    model, tok = load_model(str(folder))
    ids = torch.tensor([kind_blocks(tok, ["python"], 64, 1)[0].ids])
    plan = plans["uniform-s4"]
    with torch.no_grad(), applied(model, plan["windows"], sinks=plan["sinks"]):
        logits = model(ids).logits[0, :-1]
    want = float(torch.nn.functional.cross_entropy(logits, ids[0, 1:]))
    assert values["uniform-s4/0"] == pytest.approx(want, rel=1e-5)
    monkeypatch.setattr(
        "aah.integrations.hf.search.plan_search.search_plan",
        lambda *a, **k: pytest.fail("searched again"),
    )
    calls = []
    monkeypatch.setattr("experiments.pretrained.corpus.block_loss", lambda *a: calls.append(a))
    assert run(folder, out) == 0 and not calls  # every cell on file: nothing computed again


def test_the_report_again_and_the_readme_rows_say_what_the_cells_say(tmp_path, monkeypatch,
                                                                      capsys) -> None:  # fmt: skip
    from experiments.scripts import default_tables

    folder, out = tmp_path / "llama", tmp_path / "out"
    save_tokenized_llama(folder, max_position_embeddings=128)
    assert run(folder, out) == 0
    table, results = (out / "table.md").read_text(), (out / "results.json").read_text()
    (out / "table.md").unlink()
    monkeypatch.setattr("aah.integrations.hf.run.load.load_model", lambda *a: pytest.fail("loaded"))
    assert study.main([*study_args(folder, out), "--report-only"]) == 0
    assert (out / "table.md").read_text() == table
    assert (out / "results.json").read_text() == results
    capsys.readouterr()
    assert default_tables.main([str(out)]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    saved = json.loads(results)
    values = {c["key"]: c["value"] for c in
              map(json.loads, (out / "cells.jsonl").read_text().splitlines()[1:])}  # fmt: skip
    kinds = [b["kind"] for b in json.loads((out / "blocks.json").read_text())]
    python_full = [values[f"full/{i}"] for i, k in enumerate(kinds) if k == "python"]
    assert [r.split(" | ")[1] for r in rows] == ["python", "c", "pooled"]
    assert rows[0].split(" | ")[2] == f"{sum(python_full) / len(python_full):.4f}"
    pooled = saved["kinds"]["pooled"]
    assert f"{pooled['diff']:+.4f} [{pooled['ci'][0]:+.4f}, {pooled['ci'][1]:+.4f}]" in rows[2]
    with pytest.raises(ValueError, match=r"blocks\.json does not exist"):
        study.main([*study_args(folder, tmp_path / "empty"), "--report-only"])


def test_refined_joins_a_finished_folder_without_touching_its_cells(tmp_path) -> None:
    folder, out = tmp_path / "llama", tmp_path / "out"
    save_tokenized_llama(folder, max_position_embeddings=128)
    assert run(folder, out) == 0
    before = (out / "cells.jsonl").read_text()
    assert study.main([*study_args(folder, out), "--refined"]) == 0
    after = (out / "cells.jsonl").read_text()
    assert after.startswith(before)  # the settings line and the cells stand; more appended
    values = {c["key"]: c["value"] for c in map(json.loads, after.splitlines()[1:])}
    assert {"refined/0", "refined/1", "refine_search_seconds"} <= set(values)
    refined = json.loads((out / "plans" / "refined.json").read_text())
    default = json.loads((out / "plans" / "default.json").read_text())
    assert refined["choice"] == default["choice"]  # the same search, then its refine step
    results = json.loads((out / "results.json").read_text())
    assert results["refined"]["steps"] == refined["refine"]["steps"]
    pooled = results["refined"]["kinds"]["pooled"]
    diffs = [values[f"refined/{i}"] - values[f"default/{i}"] for i in range(2)]
    assert pooled["diff"] == pytest.approx(sum(diffs) / 2)  # two blocks, two documents
    assert "(`refined`) minus `default`" in (out / "table.md").read_text()


def test_a_confirmation_scores_later_blocks_with_the_plans_named(tmp_path) -> None:
    folder, first, later = tmp_path / "llama", tmp_path / "first", tmp_path / "later"
    save_tokenized_llama(folder, max_position_embeddings=128)
    assert run(folder, first) == 0
    argv = [
        *study_args(folder, later),
        "--first-block",
        "1",
        "--methods",
        "full,uniform-s4,default",
    ]
    assert study.main(argv) == 0
    values = {
        c["key"] for c in map(json.loads, (later / "cells.jsonl").read_text().splitlines()[1:])
    }
    assert not any(k.startswith("uniform-s0/") for k in values)
    assert json.loads((later / "results.json").read_text())["better_window"] == "uniform-s4"
    # each kind's second block in the seeded order: never a block the first run scored
    seen = {(b["kind"], b["document"], b["start"]) for b in
            json.loads((first / "blocks.json").read_text())}  # fmt: skip
    now = [(b["kind"], b["document"], b["start"]) for b in
           json.loads((later / "blocks.json").read_text())]  # fmt: skip
    assert len(now) == 2 and not seen & set(now)
    with pytest.raises(ValueError, match="unknown method 'uniform'"):
        study.main([*study_args(folder, later), "--methods", "full,uniform,default"])
    with pytest.raises(ValueError, match="needs full, default and a window"):
        study.main([*study_args(folder, later), "--methods", "full,default"])


def test_each_comparison_states_the_smallest_difference_it_decides() -> None:
    """`detectable` is (t_{1-a/2m} + t_{0.8}) * sd / sqrt(n) over the document means: m = 3
    kinds for a kind's row (Holm's first step), m = 1 pooled, worked out here by hand."""
    from types import SimpleNamespace

    from aah.report.stats import t_critical

    kinds = ["python"] * 4 + ["prose"] * 4 + ["c"] * 4
    blocks = [SimpleNamespace(kind=k, document=f"{k}{i // 2}") for i, k in enumerate(kinds)]
    full = [1.0] * 12
    base = [1.5] * 12
    plan = [1.4, 1.3, 1.2, 1.2, 1.45, 1.35, 1.3, 1.4, 1.1, 1.3, 1.25, 1.15]
    rows = study.comparison({"full": full, "b": base, "p": plan}, blocks, "p", "b")

    def by_hand(diffs: list[float], family: int) -> float:
        n, m = len(diffs), sum(diffs) / len(diffs)
        sd = (sum((d - m) ** 2 for d in diffs) / (n - 1)) ** 0.5
        return (t_critical(n - 1, 1 - 0.05 / family) + t_critical(n - 1, 0.6)) * sd / n**0.5

    doc_means = [(p1 + p2) / 2 - 1.5 for p1, p2 in zip(plan[::2], plan[1::2], strict=True)]
    assert rows["python"]["detectable"] == pytest.approx(by_hand(doc_means[:2], 3))
    assert rows["pooled"]["detectable"] == pytest.approx(by_hand(doc_means, 1))
    line = study.detectable_line(rows["pooled"], rows["pooled"])
    assert f"{rows['pooled']['detectable']:.4f} nats" in line
    assert f"{rows['pooled']['detectable'] / 0.5:.1%}" in line
