"""The hierarchy-topology section of the suite report, on hand-made plan records."""

from pathlib import Path

from aah.report.suite_data import CellRun, Suite
from aah.report.topology import topology_counts, topology_section


def _run(regime, seed, plans):
    return CellRun(regime, seed, Path("."), [], plans)


def _plan(step, groups, windows):
    return {"step": step, "windows": windows, "groups": groups, "decisions": [[0]]}


def test_topologies_counted_from_the_last_decision_and_regimes_compared():
    deep = [[[0, 1], [2, 3]], [[0], [1]], [[0], [1]], [[0], [1]]]  # [2, 2, 2, 2]
    shallow = [[[0, 1], [2, 3]]]
    rows = [
        {"regime": r, "seed": s, "val_bpb": 1.0}
        for r in ("aah-v3-shallow-freeze", "aah-v3-deep-reuse")
        for s in (0, 1)
    ]
    cells = [
        _run(
            "aah-v3-deep-reuse",
            0,
            [{"step": 0, "windows": [[8]]}, _plan(5, [deep, shallow], [[4]])],
        ),
        _run("aah-v3-deep-reuse", 1, [_plan(5, [deep, deep], [[4]])]),
        _run(
            "aah-v3-shallow-freeze",
            0,
            [{"step": 0, "windows": [[8]]}, _plan(5, [shallow, shallow], [[4]])],
        ),
        _run("aah-v3-shallow-freeze", 1, [_plan(5, [shallow, shallow], [[2]])]),
    ]
    suite = Suite("s", rows, cells)
    assert topology_counts(suite, "aah-v3-deep-reuse") == {(2, 2, 2, 2): 3, (2,): 1}
    text = "\n".join(topology_section(suite))
    assert "[2, 2, 2, 2] × 3, [2] × 1" in text
    assert "chose different windows on at least one seed" in text  # seed 1: [[4]] vs [[2]]
