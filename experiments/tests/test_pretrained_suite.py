"""`python -m experiments.pretrained --kinds` end to end on a tiny random Llama (bytes, no
tokenizer): the plans are searched on the shipped mix, every kind's numbers equal a float64
recompute on the blocks the kinds module draws, intervals are over files, one Holm family
covers the folder, a rerun resumes, more blocks per kind score only the new blocks, and another
text is refused."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")

from hf_models import tiny_model

from aah.integrations.hf import applied
from aah.integrations.hf.search.calibration_mix import calibration_blocks
from aah.report.comparisons import holm
from experiments.pretrained import kinds
from experiments.pretrained.clusters import clustered_estimate
from experiments.pretrained.run import main

T = 32
KINDS = ["python", "prose", "c"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("tiny") / "llama"
    tiny_model("llama", max_position_embeddings=256).save_pretrained(path)
    return path


def args_for(model_dir, out, per_kind: int, names: list[str] = KINDS) -> list[str]:
    return ["--model", str(model_dir), "--out", str(out), "--seq-len", str(T),
            "--kv-fractions", "0.3", "--calib-blocks", "2", "--kinds", ",".join(names),
            "--blocks-per-kind", str(per_kind), "--needle-lengths", "none", "--no-progress",
            "--methods", "uniform,output"]  # fmt: skip


def nll(model, ids: torch.Tensor) -> float:
    with torch.no_grad():
        logp = model(input_ids=ids, use_cache=False).logits[0, :-1].double().log_softmax(-1)
    return float(-logp.gather(1, ids[0, 1:, None]).mean())


def test_the_suite_measures_each_kind_and_resumes(model_dir, tmp_path) -> None:
    out = tmp_path / "out"
    assert main(args_for(model_dir, out, 2)) == 0
    result = json.loads((out / "results.json").read_text())
    assert set(result["kind_rows"]) == {*KINDS, "pooled"}
    mix = calibration_blocks(None, seq_len=T, n_blocks=2)
    assert result["calib_blocks"] == [b.record() for b in mix]
    model = tiny_model("llama", max_position_embeddings=256)
    plans = {p["method"]: p["windows"] for p in result["plans"]}
    assert plans["output"] != plans["uniform"]  # two plans to tell apart
    per_plan: dict[str, list[float]] = {"full": [], **{m: [] for m in plans}}
    clusters = []
    for name in KINDS:
        blocks = kinds.kind_blocks(None, [name], T, 2, vocab_size=model.config.vocab_size)
        assert [b.record() for b in blocks] == result["blocks"][name]
        ids = [torch.tensor([list(b.ids)]) for b in blocks]
        full = [nll(model, x) for x in ids]
        assert result["kind_full_loss"][name] == pytest.approx(sum(full) / 2, abs=1e-5)
        per_plan["full"] += full
        clusters += [b.document for b in blocks]
        mine = {}
        for method, windows in plans.items():
            with applied(model, windows, backend="reference", sinks=4):
                mine[method] = [nll(model, x) for x in ids]
            per_plan[method] += mine[method]
        row = next(r for r in result["kind_rows"][name] if r["method"] == "output")
        want = clustered_estimate([a - b for a, b in zip(mine["output"], mine["uniform"],
                                                         strict=True)],
                                  [b.document for b in blocks])  # fmt: skip
        assert row["vs_uniform"]["mean"] == pytest.approx(want.mean, abs=1e-5)
        assert row["vs_uniform"]["ci"] == pytest.approx(list(want.ci), abs=1e-5)
    pooled = next(r for r in result["kind_rows"]["pooled"] if r["method"] == "output")
    diffs = [a - b for a, b in zip(per_plan["output"], per_plan["uniform"], strict=True)]
    assert pooled["vs_uniform"]["mean"] == pytest.approx(clustered_estimate(diffs, clusters).mean,
                                                         abs=1e-5)  # fmt: skip
    ps = [next(r for r in result["kind_rows"][n] if r["method"] == "output")["vs_uniform"]["p"]
          for n in [*KINDS, "pooled"]]  # fmt: skip
    got = [next(r for r in result["kind_rows"][n] if r["method"] == "output")["holm_p"]
           for n in [*KINDS, "pooled"]]  # fmt: skip
    assert got == pytest.approx(holm(ps))  # one family over the folder
    assert "## prose: 2 blocks" in (out / "table.md").read_text()

    cells = (out / "cells.jsonl").read_text()
    assert main(args_for(model_dir, out, 2)) == 0
    assert (out / "cells.jsonl").read_text() == cells  # nothing ran twice
    assert main(args_for(model_dir, out, 3)) == 0  # one more block of each kind
    added = [json.loads(line)["key"] for line in (out / "cells.jsonl").read_text().splitlines()
             [len(cells.splitlines()):]]  # fmt: skip
    items = [k for k in added if k.startswith("loss-") and k.count("/") == 2]
    assert sorted(items) == sorted(f"loss-{n}/{k.split('/')[1]}/2" for n in KINDS
                                   for k in added if k.startswith(f"loss-{n}/")
                                   and k.count("/") == 1)  # fmt: skip
    assert len(items) == 3 * 3  # full, uniform, output; block 2 of each kind only
    grown = json.loads((out / "results.json").read_text())
    assert grown["blocks"]["python"][:2] == result["blocks"]["python"]


def test_a_declared_holm_family_covers_only_its_comparisons(model_dir, tmp_path) -> None:
    out = tmp_path / "out"
    base = args_for(model_dir, out, 2, ["python", "prose"])
    assert main(base) == 0
    everything = json.loads((out / "results.json").read_text())["kind_rows"]
    cells = (out / "cells.jsonl").read_text()
    assert main([*base, "--holm-family", "pooled:output@0.3,prose:output"]) == 0
    assert (out / "cells.jsonl").read_text() == cells  # the same cells, tested anew
    result = json.loads((out / "results.json").read_text())
    declared = [next(r for r in result["kind_rows"][n] if r["method"] == "output")
                for n in ("pooled", "prose")]  # fmt: skip
    assert [r["holm_p"] for r in declared] == pytest.approx(
        holm([r["vs_uniform"]["p"] for r in declared])
    )
    python = next(r for r in result["kind_rows"]["python"] if r["method"] == "output")
    assert python["holm_p"] is None  # reported, not tested
    assert (
        python["vs_uniform"]
        == next(r for r in everything["python"] if r["method"] == "output")["vs_uniform"]
    )
    assert result["holm_family"] == "pooled:output@0.3,prose:output"
    assert "declared family `pooled:output@0.3,prose:output` only" in (out / "table.md").read_text()


@pytest.mark.parametrize(
    ("family", "message"),
    [("poetry:output", "table 'poetry' is not a kind"), ("pooled:mass", "method 'mass'"),
     ("pooled:output@0.5", "fraction 0.5 is not among"), ("pooled:", "is not TABLE"),
     ("pooled:output@x", "is not TABLE")],
)  # fmt: skip
def test_a_holm_family_naming_no_comparison_is_refused(model_dir, tmp_path, family, message):
    with pytest.raises(ValueError, match=message):
        main([*args_for(model_dir, tmp_path / "o", 2), "--holm-family", family])


def test_another_text_for_a_block_on_file_is_refused(model_dir, tmp_path) -> None:
    out = tmp_path / "out"
    assert main(args_for(model_dir, out, 2, ["prose"])) == 0
    lines = (out / "cells.jsonl").read_text().splitlines()
    for i, line in enumerate(lines):
        cell = json.loads(line)
        if cell.get("key") == "text/prose":
            cell["value"]["blocks"][1]["sha"] = "0" * 16  # as if another machine drew it
            lines[i] = json.dumps(cell)
    (out / "cells.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="block 1 of the prose text differs"):
        main(args_for(model_dir, out, 2, ["prose"]))


def test_bad_kinds_and_counts_are_named(model_dir, tmp_path) -> None:
    base = args_for(model_dir, tmp_path / "o", 2)
    with pytest.raises(ValueError, match="kinds must be distinct names"):
        main([*base, "--kinds", "python,poetry"])
    with pytest.raises(ValueError, match="--blocks-per-kind"):
        main([*base, "--blocks-per-kind", "1"])


def test_the_held_out_probe_grid_counts_conditions(model_dir, tmp_path) -> None:
    from experiments.pretrained.needles import needle_hit
    from experiments.pretrained.retrieval_grid import build_probes, compare, conditions

    out = tmp_path / "out"
    args = [a for a in args_for(model_dir, out, 2, ["c"]) if a != "none"]
    args[args.index("--needle-lengths") + 1 : args.index("--needle-lengths") + 1] = ["248"]
    args += ["--needle-grid", "heldout", "--needle-depths", "2", "--needles-per-cell", "1"]
    assert main(args) == 0
    result = json.loads((out / "results.json").read_text())
    model = tiny_model("llama", max_position_embeddings=256)
    probes = build_probes(None, "heldout", [248], [0.0, 1.0], 1,
                          vocab_size=model.config.vocab_size)  # fmt: skip
    plans = {p["method"]: p["windows"] for p in result["plans"]}
    got = {"full": conditions(probes, [needle_hit(model, p.needle) for p in probes])}
    for method, windows in plans.items():
        with applied(model, windows, sinks=4):
            got[method] = conditions(probes, [needle_hit(model, p.needle) for p in probes])
    assert len(got["full"]) == 2 * 4 * 2  # fillers x needle kinds x depths
    assert result["full_needles"] == pytest.approx(sum(got["full"].values()) / 16)
    row = next(r for r in result["rows"] if r["method"] == "output")
    assert row["needle"] == pytest.approx(sum(got["output"].values()) / 16)
    lost, gained, p = compare(got["full"], got["output"])
    assert (row["needles_lost"], row["needles_gained"]) == (lost, gained)
    won, lost, p = compare(got["output"], got["uniform"])
    assert f"| 0.3 | output | {sum(got['output'].values())}/16 | {won} / {lost}, p {p:.2g} |" in (
        out / "table.md").read_text()  # fmt: skip


def test_heldout_skip_reads_the_blocks_after_an_earlier_runs(model_dir, tmp_path) -> None:
    first, later = tmp_path / "first", tmp_path / "later"
    assert main(args_for(model_dir, first, 4, ["prose"])) == 0
    assert main([*args_for(model_dir, later, 2, ["prose"]), "--heldout-skip", "2"]) == 0
    read = [json.loads((d / "results.json").read_text())["blocks"]["prose"] for d in (first, later)]
    assert read[1] == read[0][2:]
    settings = json.loads((later / "cells.jsonl").read_text().splitlines()[0])["settings"]
    assert settings["skip"] == 2  # a folder never mixes skipped and unskipped blocks
