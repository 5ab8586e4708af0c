"""One Holm family per question, declared once (comparisons.FAMILIES): every table and sentence
of a report gives a comparison the same adjusted p; and the accuracy families' exact sign-flip
test as the report shows it."""

from __future__ import annotations

import re

import pytest
from suite_helpers import holm_ps, overlap_suite, task_suite

from aah.cli import main
from aah.report import comparisons
from aah.report.suite import REPORT


@pytest.fixture(scope="module")
def task_report(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = task_suite(tmp_path_factory.mktemp("task"))
    assert main(["report", str(root)]) == 0
    return (root / REPORT).read_text()


@pytest.fixture(scope="module")
def overlap_report(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = overlap_suite(tmp_path_factory.mktemp("overlap"))
    assert main(["report", str(root)]) == 0
    return (root / REPORT).read_text()


def test_every_table_gives_a_comparison_one_holm_p(
    task_report: str, report: str, overlap_report: str
) -> None:
    for text in (task_report, report, overlap_report):
        found = holm_ps(text)
        # the parser sees each place that cites these pairs (else the check below is empty)
        assert len(found[(frozenset(("fixed", "full")), "val_bpb")]) == 2  # table, sentence
        assert len(found[(frozenset(("aah-v3-shallow-freeze", "random")), "val_bpb")]) == 1
        # no family of the package compares an AAH-v3 regime with `fixed`
        assert (frozenset(("aah-v3-shallow-freeze", "fixed")), "val_bpb") not in found
        twice = {key: ps for key, ps in found.items() if len(set(ps)) > 1}
        assert not twice, f"one comparison, several adjusted p: {twice}"
    found = holm_ps(overlap_report)
    for regime in ("aah-v3-shallow-freeze", "aah-v3-deep-reuse"):
        assert len(found[(frozenset((regime, "random")), "val_bpb")]) == 1
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


def test_accuracy_pairs_use_the_exact_sign_flip_test(task_report: str) -> None:
    line = next(x for x in task_report.splitlines() if x.startswith("| `fixed` | `full` |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    # three seeds, all lower: p = 2 / 2^3 = 0.25 however large the gap; at 3 seeds no delta
    # is rejected at 5%, so the 95% CI is every difference accuracies can have
    assert cells[2:5] == ["-0.860", "[-1.000, +1.000]", "0.250"]
    assert cells[7] == "undecided (nothing decidable at 3 seeds)"
    assert "the sign-flip p is at least 2 / 2^n (0.5 at 2 seeds)" in task_report
    assert "at 2 seeds no accuracy comparison can reach p < 0.05" in task_report
