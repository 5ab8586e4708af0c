"""`aah report RESULTS_DIR`: the multi-seed suite report on a synthetic results directory
(suite_helpers.py): its sections, tables, figures, errors, and the recall and context-use parts.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from suite_helpers import PNG_MAGIC, REGIMES, write_cell, write_suite

from aah import records
from aah.cli import main
from aah.report import suite_plots
from aah.report.suite import REPORT, build_suite_report, missing_cells
from aah.report.suite_data import load_suite
from aah.sweep.results import COLUMNS, write_csv

# ---- the report ---------------------------------------------------------------------------


def test_report_lists_every_regime_and_tables(report: str, results: Path) -> None:
    for regime in REGIMES:
        assert f"`{regime}`" in report
    for heading in (
        "Quality and cost",
        "Paired against full (per seed)",
        "Equal wall-clock",
        "What holds at this scale",
        "Caveats",
    ):
        assert f"### {heading}" in report
    assert f"aah report {results}" in report
    suite = load_suite(results / "screening.csv")
    assert missing_cells(suite) == ["budget-s2"] and suite.unfinished == ["budget-s2"]
    setup = report.split("## Suite", 1)[1].split("### ", 1)[0]  # before its first table
    assert setup.count("budget-s2") == 2  # named as missing and as not finished
    assert "| `fixed` | -0.1000 | 0.0100 |" in report
    assert "coverage over training" in report
    fixed_row = next(l for l in report.splitlines() if l.startswith("| `fixed` | 3 |"))
    assert fixed_row.split(" | ")[6] == "0.300"  # mean of the logged coverage (0.3 throughout)
    assert "2 × 2 × 64 = 256 validation tokens" in report
    quality = report.index("### Quality and cost")
    order = [
        report.index(f"| `{r}` |", quality) for r in ("full", "fixed", "aah-v3-shallow-freeze")
    ]
    assert order == sorted(order)  # full first, then by mean val_bpb


def test_every_linked_png_exists(report: str, results: Path) -> None:
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", report)
    names = {
        f"screening_{k}.png" for k in ("val_curves", "acr", "quality_vs_coverage", "equal_time")
    }
    names |= {f"screening_windows_{r}.png" for r in REGIMES if r != "full"}
    assert set(links) == names
    for link in links:
        assert (results / link).read_bytes().startswith(PNG_MAGIC)


def test_out_dir_no_full_and_no_train_s(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = write_suite(tmp_path / "old", "old", ["fixed"], train_s=False)
    out = tmp_path / "elsewhere"
    assert main(["report", str(root), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out / REPORT)
    text = (out / REPORT).read_text()
    assert "No `full` regime in this suite: no paired comparison." in text
    assert "Skipped: fixed-s0's metrics.jsonl has no train_s" in text
    assert not (out / "old_equal_time.png").exists() and (out / "old_acr.png").exists()
    assert not (root / REPORT).exists()


def test_header_only_csv(tmp_path: Path) -> None:
    write_csv(tmp_path / "headline.csv", [])
    text = build_suite_report(tmp_path).read_text()
    assert "No finished cells yet" in text


def test_neither_run_nor_results_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path) in err and "summary.json" in err and ".csv" in err


def test_csv_missing_a_column_names_it(tmp_path: Path) -> None:
    header = ",".join(c for c in COLUMNS if c != "val_bpb")
    (tmp_path / "broken.csv").write_text(header + "\n")
    with pytest.raises(ValueError, match="val_bpb"):
        build_suite_report(tmp_path)


def test_suite_plots_without_matplotlib_say_how_to_install(monkeypatch, tmp_path: Path) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    with pytest.raises(ValueError, match="pip install matplotlib"):
        suite_plots.quality_vs_coverage({"full": (1.0, 2.0, 0.1)}, tmp_path / "x.png", "t")


def test_matched_pairs_show_their_coverage_gap(report: str) -> None:
    line = next(
        x for x in report.splitlines() if x.startswith("| `aah-v3-shallow-freeze` | `random` |")
    )
    assert line.endswith("| +0.100 (not matched) |")  # coverage 0.5 vs 0.4 on every seed


def test_coverage_gap_is_taken_on_the_seeds_both_regimes_finished() -> None:
    from aah.report.accuracy import coverage_gap, coverage_gap_cell
    from aah.report.suite_data import Suite

    rows = [
        {"regime": "twin", "seed": 0, "causal_coverage": 0.50},
        {"regime": "twin", "seed": 1, "causal_coverage": 0.30},
        {"regime": "aah", "seed": 0, "causal_coverage": 0.50},
        {"regime": "aah", "seed": 1, "causal_coverage": 0.30},
        {"regime": "aah", "seed": 2, "causal_coverage": 0.90},  # the twin has no seed 2 yet
    ]
    suite = Suite("partial", rows)
    assert coverage_gap(suite, "aah", "twin") == pytest.approx(0.0)  # not 0.567 - 0.400
    rows[1]["causal_coverage"] = 0.20
    assert coverage_gap(suite, "aah", "twin") == pytest.approx(0.05)
    rows[:2] = []  # no seed in common: no gap to show
    assert coverage_gap_cell(suite, "aah", "twin") == "n/a"


def test_report_states_reference_lines(report: str) -> None:
    found = re.search(
        r"a unigram model scores (\d+\.\d+) bits/byte and a bigram model (\d+\.\d+)", report
    )
    assert found, "the report gives unigram and bigram bits/byte"
    unigram, bigram = map(float, found.groups())
    assert 0 < bigram < unigram < 8  # a bigram knows more than a unigram; both beat uniform


def test_recall_suite_gets_an_accuracy_section(tmp_path: Path) -> None:
    far = {"full": {0: 1.0, 1: 0.98, 2: 0.99}, "fixed": {0: 0.12, 1: 0.14, 2: 0.13}}
    rows = []
    for regime, by_seed in far.items():
        for seed, acc in by_seed.items():
            row = write_cell(tmp_path / "recall" / f"{regime}-s{seed}", regime, seed)
            rows.append(
                {**row, "val_acc": 0.5 + acc / 2, "val_acc_far": acc, "far_bucket": "32-63"}
            )
    write_csv(tmp_path / "recall.csv", rows)
    assert main(["report", str(tmp_path)]) == 0
    text = (tmp_path / REPORT).read_text()
    assert "### Recall accuracy" in text and "accuracy at 32-63" in text
    line = next(x for x in text.splitlines() if x.startswith("| `fixed` | `full` |"))
    assert "-0.860" in line and "undecided" in line  # three seeds: never decided
    assert line.endswith("| -0.700 (not matched) |")  # write_cell: fixed 0.3 vs full 1.0
    write_csv(
        tmp_path / "recall.csv", [{k: v for k, v in r.items() if k != "val_acc_far"} for r in rows]
    )
    assert main(["report", str(tmp_path)]) == 0
    assert "### Recall accuracy" not in (tmp_path / REPORT).read_text()  # a text suite has none


def _cut_rows(full_bpb: float, cut_bpb: dict[int, float], far: dict[str, float] | None) -> list:
    rows = [{"cut": "plan in force", "window": None, "val_bpb": full_bpb}]
    for w, bpb in cut_bpb.items():
        rows.append({"cut": str(w), "window": w, "val_bpb": bpb})
    rows.append({"cut": "full", "window": 256, "val_bpb": full_bpb})
    if far is not None:
        for row in rows:
            acc = far.get(str(row["window"]), 1.0)
            row["val_acc_by_distance"] = {"4-127": 1.0, "128-255": acc}
    return rows


def _gate(root: Path, task: bool = False):  # type: ignore[no-untyped-def]
    from aah.report.context_gate import _curves, _far, task_gate, text_gate
    from aah.report.suite_data import load_suite

    curves = _curves(load_suite(root / "screening.csv"))
    return task_gate(curves, _far(next(iter(curves.values())))) if task else text_gate(curves)


def test_context_use_section_and_gate(tmp_path: Path) -> None:
    root = write_suite(tmp_path / "text", "screening", ["full", "fixed"])
    report_text = lambda: (main(["report", str(root)]), (root / REPORT).read_text())[1]  # noqa: E731
    assert "--cut-windows" in report_text() and _gate(root) is None  # not measured: says how
    for seed, (d64, d128) in {0: (0.10, 0.02), 1: (0.12, 0.03), 2: (0.11, 0.04)}.items():
        rows = _cut_rows(2.0, {64: 2.0 + d64, 128: 2.0 + d128}, None)
        records.write_json(root / "screening" / f"full-s{seed}" / "cut_windows.json", rows)  # type: ignore[arg-type]
    text, gate = report_text(), _gate(root)
    assert re.search(r"\| 128 \| 3 \| \+0\.0300 \|", text)
    assert (gate.window, gate.seeds, gate.below) == (128, 3, 3)
    assert gate.mean == pytest.approx(0.03) and not gate.met and gate.straddles
    assert gate.ci[0] == pytest.approx(0.0052, abs=1e-4)  # t interval over the 3 seeds
    assert "Gate (not met)" in text and f"{gate.mean:+.4f}" in text
    for seed, d128 in {0: 0.058, 1: 0.061, 2: 0.049}.items():  # met on the mean, narrowly
        rows = _cut_rows(2.0, {128: 2.0 + d128}, None)
        records.write_json(root / "screening" / f"full-s{seed}" / "cut_windows.json", rows)  # type: ignore[arg-type]
    text, gate = report_text(), _gate(root)
    assert gate.mean == pytest.approx(0.056) and gate.met and gate.straddles and gate.below == 1
    low, high = gate.ci
    assert low < 0.05 < high and low == pytest.approx(0.0405, abs=1e-4)
    assert "Gate (met)" in text and f"[{low:+.4f}, {high:+.4f}]" in text  # the CI is shown
    for seed in (0, 1, 2):  # a task: far accuracy collapses below the bucket
        rows = _cut_rows(2.0, {64: 2.1, 128: 2.05}, {"64": 0.1, "128": 0.2 + 0.1 * seed})
        records.write_json(root / "screening" / f"full-s{seed}" / "cut_windows.json", rows)  # type: ignore[arg-type]
    text, gate = report_text(), _gate(root, task=True)
    assert (gate.kind, gate.window, gate.bucket, gate.seeds) == ("accuracy", 128, "128-255", 3)
    assert gate.mean == pytest.approx(0.7) and gate.met
    assert "Gate (met)" in text and f"{gate.mean:.3f}" in text
