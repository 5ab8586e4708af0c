"""One Holm family per question, declared once (comparisons.FAMILIES): every table and finding
of a report gives a comparison the same adjusted p; and the accuracy families' exact sign-flip
test as the report shows it."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest
from suite_helpers import REGIMES, write_cell, write_suite

from aah.cli import main
from aah.report import comparisons
from aah.report.suite import REPORT
from aah.sweep.results import write_csv

#: far-bucket accuracy per regime and seed (the synthetic suite is a generated task here)
FAR_ACC = {
    "full": {0: 0.99, 1: 1.0, 2: 0.98},
    "fixed": {0: 0.12, 1: 0.14, 2: 0.13},
    "random": {0: 0.50, 1: 0.20, 2: 0.90},
    "aah-v3-shallow-freeze": {0: 0.95, 1: 0.13, 2: 0.97},
    "budget": {0: 0.30, 1: 0.25},
}
#: a t test's p does not change when the metric is scaled, and val_loss = val_bpb * ln 2: a
#: comparison on either is the same comparison (the old findings tested val_loss)
SAME_TEST = {"val_loss": "val_bpb"}
P_VALUE = r"(<0\.001|n/a|[0-9.]+)"
HOLM = r"\(Holm p " + P_VALUE


def _task_suite(root: Path) -> Path:
    rows = []
    for regime, (deltas, *_) in REGIMES.items():
        for seed in deltas:
            row = write_cell(root / "recall" / f"{regime}-s{seed}", regime, seed)
            acc = FAR_ACC[regime][seed]
            task = {"val_acc": 0.5 + acc / 2, "val_acc_far": acc, "far_bucket": "32-63"}
            rows.append({**row, **task})
    write_csv(root / "recall.csv", rows)
    return root


def _metric(header: list[str]) -> str:
    delta = next(c for c in header if c.startswith("Δ ") and "coverage" not in c)
    name = delta.split()[1]  # "Δ val_bpb mean" -> val_bpb, "Δ accuracy at 32-63" -> accuracy
    return SAME_TEST.get(name, name)


def holm_ps(report: str) -> dict[tuple[frozenset[str], str], list[str]]:
    """(regime pair, metric) -> every Holm p the report prints for it: table rows that name
    a pair, the per-regime sentences against full and the paper checks."""
    found: dict[tuple[frozenset[str], str], list[str]] = defaultdict(list)
    header: list[str] | None = None
    for line in report.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| regime |"):
            header = cells if "Holm p" in cells else None
        elif header and line.startswith("| `"):
            other_col = next((header.index(c) for c in ("control", "vs") if c in header), None)
            other = cells[other_col].strip("`") if other_col is not None else "full"
            holm = cells[header.index("Holm p")]
            if holm:  # "" when the regime shares no seed with the other
                found[(frozenset((cells[0].strip("`"), other)), _metric(header))].append(holm)
        elif not line.startswith("|"):
            header = None
        if m := re.match(r"- `([^`]+)`: .*?Holm p " + P_VALUE, line):  # a regime vs full
            found[(frozenset((m[1], "full")), "val_bpb")].append(m[2])
        if re.match(r"\d\. \*", line):  # a paper check: Δ val_bpb (or val_loss), AAH - other
            pattern = r"`([^`]+)`(?: vs `([^`]+)`)? [+-]?[0-9.]+ (?:\[[^\]]*\]|n/a) " + HOLM
            for m in re.finditer(pattern, line):
                found[(frozenset((m[1], m[2] or "full")), "val_bpb")].append(m[3])
    return found


@pytest.fixture(scope="module")
def task_report(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = _task_suite(tmp_path_factory.mktemp("task"))
    assert main(["report", str(root)]) == 0
    return (root / REPORT).read_text()


#: regimes whose pairs several questions share: each AAH regime is clearly apart from
#: `random` (a matched pair and a paper check) but not from `fixed` (a paper check only)
OVERLAP = {
    "aah-v3-shallow-freeze": {0: 0.00, 1: -0.105, 2: -0.035},
    "aah-v3-deep-reuse": {0: 0.01, 1: -0.10, 2: -0.02},
    "budget-shuffled": {0: 0.23, 1: 0.25, 2: 0.24},
}


@pytest.fixture(scope="module")
def overlap_report(tmp_path_factory: pytest.TempPathFactory) -> str:
    with pytest.MonkeyPatch.context() as patch:
        for regime, deltas in OVERLAP.items():
            patch.setitem(REGIMES, regime, (deltas, {0: 1.0, 1: 1.0, 2: 1.0}, 0.5, 8))
        patch.setitem(
            REGIMES, "budget", ({0: 0.20, 1: 0.22, 2: 0.20}, {0: 0.8, 1: 0.8, 2: 0.8}, 0.3, 4)
        )
        root = write_suite(tmp_path_factory.mktemp("overlap"), "overlap", list(REGIMES))
    assert main(["report", str(root)]) == 0
    return (root / REPORT).read_text()


def test_every_table_gives_a_comparison_one_holm_p(
    task_report: str, report: str, overlap_report: str
) -> None:
    for text in (task_report, report, overlap_report):
        found = holm_ps(text)
        # the parser sees each place that cites these pairs (else the check below is empty)
        assert len(found[(frozenset(("fixed", "full")), "val_bpb")]) == 3  # table, line, check
        assert len(found[(frozenset(("aah-v3-shallow-freeze", "random")), "val_bpb")]) == 2
        assert len(found[(frozenset(("aah-v3-shallow-freeze", "fixed")), "val_bpb")]) == 1
        twice = {key: ps for key, ps in found.items() if len(set(ps)) > 1}
        assert not twice, f"one comparison, several adjusted p: {twice}"
    found = holm_ps(overlap_report)
    for regime in ("aah-v3-shallow-freeze", "aah-v3-deep-reuse"):
        assert len(found[(frozenset((regime, "random")), "val_bpb")]) == 2
    assert len(found[(frozenset(("budget", "budget-shuffled")), "val_bpb")]) == 1
    accuracy = holm_ps(task_report)
    assert len(accuracy[(frozenset(("fixed", "full")), "accuracy")]) == 1


def test_families_are_declared_once_named_and_dated(task_report: str) -> None:
    names = [f.name for f in comparisons.FAMILIES]
    assert len(set(names)) == len(names)
    for declared in comparisons.FAMILIES:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", declared.date)
        assert declared.test in comparisons.TESTS
        assert f"Holm family `{declared.name}` (declared {declared.date})" in task_report


def test_a_pair_two_questions_share_is_tested_in_the_first_family(task_report: str) -> None:
    from aah.report.suite import load_suite

    root = Path(task_report.split("regenerate with: `aah report ")[1].split("`")[0])
    suite = load_suite(root / "recall.csv")
    evidence = comparisons.evidence(suite)
    controls = evidence.of(comparisons.PAPER_CONTROLS_BPB)
    assert [(c.pair.regime, c.pair.baseline) for c in controls] == [
        ("aah-v3-shallow-freeze", "fixed")  # its pair against random is a matched pair
    ]
    shared = evidence.get("aah-v3-shallow-freeze", "random", "val_bpb")
    assert shared is not None and shared.family is comparisons.MATCHED_BPB
    assert shared in evidence.of(comparisons.MATCHED_BPB)


def test_accuracy_pairs_use_the_exact_sign_flip_test(task_report: str) -> None:
    line = next(x for x in task_report.splitlines() if x.startswith("| `fixed` | `full` |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    # three seeds, all lower: p = 2 / 2^3 = 0.25 however large the gap; at 3 seeds no delta
    # is rejected at 5%, so the 95% CI is every difference accuracies can have
    assert cells[2:5] == ["-0.860", "[-1.000, +1.000]", "0.250"]
    assert cells[7] == "undecided (nothing decidable at 3 seeds)"
    assert "the sign-flip p is at least 2 / 2^n (0.5 at 2 seeds)" in task_report
    assert "at 2 seeds no accuracy comparison can reach p < 0.05" in task_report
