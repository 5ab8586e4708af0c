"""The project's own suite report: the package's report plus the paper's findings checked on
each suite, every comparison cited with the one adjusted p of its family."""

from __future__ import annotations

from pathlib import Path

import pytest
from suite_helpers import REGIMES, holm_ps, overlap_suite, task_suite, write_suite

from aah.cli import main
from aah.report import comparisons, stats
from aah.report.suite import REPORT, load_suite
from experiments import paper_claims
from experiments.suite_report import build


@pytest.fixture(scope="module")
def screening(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_suite(tmp_path_factory.mktemp("results"), "screening", list(REGIMES))


def _lab_report(root: Path) -> str:
    return build(root).read_text()


def test_the_report_is_the_packages_with_the_paper_section_added(
    tmp_path: Path, screening: Path
) -> None:
    lab = _lab_report(screening).splitlines()
    assert main(["report", str(screening), "--out", str(tmp_path)]) == 0
    package = (tmp_path / REPORT).read_text().splitlines()
    start = lab.index("### The paper's findings")
    end = lab.index("### Caveats")
    assert start < end and sum(x.startswith(("1. *", "2. *", "3. *")) for x in lab) == 3
    # every other line is the package's, up to the command and the time it names
    rest = [x for x in lab[:start] + lab[end:] if not x.startswith(("Suites found", "Report gen"))]
    assert rest == [x for x in package if not x.startswith(("Suites found", "Report gen"))]
    assert "`python -m experiments.suite_report " in "\n".join(lab)


def test_the_claims_classify_clear_and_noisy_regimes(screening: Path) -> None:
    suite = load_suite(screening / "screening.csv")
    evidence = comparisons.evidence(suite, paper_claims.FAMILIES)
    ratios = stats.speed_ratios(suite.rows)
    found = {c.number: c for c in paper_claims.claims(suite, ratios, evidence)}
    assert found[1].verdict == "undecided at 3 seeds"  # fixed beats full; the others can't tell
    assert {c.pair.regime for c in found[1].comps} == {"fixed", "random", "aah-v3-shallow-freeze"}
    # every AAH regime against each control, one comparison each: never best-of after the fact
    assert {(c.pair.regime, c.pair.baseline) for c in found[2].comps} == {
        ("aah-v3-shallow-freeze", "fixed"), ("aah-v3-shallow-freeze", "random")}  # fmt: skip
    assert found[2].verdict == "undecided at 3 seeds"
    assert found[3].verdict == "not measured by this suite" and not found[3].comps
    report = _lab_report(screening)
    for claim in found.values():
        assert claim.render() in report


@pytest.mark.parametrize("suffix", ["-replay-shuffled", "-replay-scattered"])
def test_a_replay_twin_is_a_control_not_an_aah_regime_in_the_paper_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    twin = "aah-v3-shallow-freeze" + suffix
    monkeypatch.setitem(REGIMES, twin, REGIMES["aah-v3-shallow-freeze"])
    root = write_suite(
        tmp_path, "twins", ["full", "fixed", "random", "aah-v3-shallow-freeze", twin]
    )
    lines = _lab_report(root).splitlines()
    claims = [x for x in lines if x[:3] in ("1. ", "2. ", "3. ")]
    assert len(claims) == 3 and all("`aah-v3-shallow-freeze`" in x for x in claims)
    assert not any(twin in x for x in claims)


@pytest.mark.parametrize(
    "ratios",
    [
        {"aah-v3-a": [0.9, 0.91, 0.92], "aah-v3-b": [1.1, 1.11, 1.12]},
        {"aah-v3-a": [0.9, 0.91, 0.92], "aah-v3-b": [0.8, 0.81, 0.82]},
        {"aah-v3-a": [1.2, 1.21, 1.22], "aah-v3-b": [0.8, 1.3, 1.0]},
    ],
)
def test_speed_claim_is_never_decided_from_cell_timings(ratios: dict[str, list[float]]) -> None:
    per_seed = {r: dict(enumerate(v)) for r, v in ratios.items()}
    claim = paper_claims._claim_speed(list(ratios), per_seed)
    assert claim.verdict == "not measured by this suite" and not claim.comps
    for regime in ratios:  # each regime's logged ratio is still shown, labelled
        assert any(f"`{regime}` logged" in d and "cell timings" in d for d in claim.details)


def test_a_pair_two_questions_share_is_tested_in_the_first_family(tmp_path: Path) -> None:
    suite = load_suite(task_suite(tmp_path) / "recall.csv")
    evidence = comparisons.evidence(suite, paper_claims.FAMILIES)
    controls = evidence.of(paper_claims.PAPER_CONTROLS_BPB)
    assert [(c.pair.regime, c.pair.baseline) for c in controls] == [
        ("aah-v3-shallow-freeze", "fixed")  # its pair against random is a matched pair
    ]
    shared = evidence.get("aah-v3-shallow-freeze", "random", "val_bpb")
    assert shared is not None and shared.family is comparisons.MATCHED_BPB
    assert shared in evidence.of(comparisons.MATCHED_BPB)


def test_every_table_and_claim_gives_a_comparison_one_holm_p(
    tmp_path: Path, screening: Path
) -> None:
    task = _lab_report(task_suite(tmp_path / "task"))
    overlap = _lab_report(overlap_suite(tmp_path / "overlap"))
    for text in (task, _lab_report(screening), overlap):
        found = holm_ps(text)
        # the parser sees each place that cites these pairs (else the check below is empty)
        assert len(found[(frozenset(("fixed", "full")), "val_bpb")]) == 3  # table, line, claim
        assert len(found[(frozenset(("aah-v3-shallow-freeze", "random")), "val_bpb")]) == 2
        assert len(found[(frozenset(("aah-v3-shallow-freeze", "fixed")), "val_bpb")]) == 1
        twice = {key: ps for key, ps in found.items() if len(set(ps)) > 1}
        assert not twice, f"one comparison, several adjusted p: {twice}"
    found = holm_ps(overlap)
    for regime in ("aah-v3-shallow-freeze", "aah-v3-deep-reuse"):
        assert len(found[(frozenset((regime, "random")), "val_bpb")]) == 2
    assert f"Holm family `{paper_claims.PAPER_CONTROLS_BPB.name}`" in task
