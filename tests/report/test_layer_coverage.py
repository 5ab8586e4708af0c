"""Coverage per layer over training, on hand-made plan records with hand-computed coverage."""

from pathlib import Path

import pytest

from aah.report.layer_coverage import layer_coverage, layer_coverage_section
from aah.report.suite_data import CellRun, Suite

T = 8
PAIRS = T * (T + 1) // 2  # 36 causal pairs of one head


def _run(regime, seed, plans, last_step=100):
    return CellRun(regime, seed, Path("."), [{"step": 0}, {"step": last_step}], plans)


def _plan(step, windows):
    return {"step": step, "windows": windows}


def _pairs(w):  # brute-force count of (i, j) with 0 <= i - j < w
    return sum(1 for i in range(T) for j in range(i + 1) if i - j < w)


def test_each_layer_averages_its_heads_and_weights_plans_by_their_steps():
    plans = [_plan(0, [[T, T], [T, T]]), _plan(25, [[2, 4], [T, 1]])]
    got = layer_coverage(_run("budget", 0, plans), T)
    windowed = [(_pairs(2) + _pairs(4)) / (2 * PAIRS), (_pairs(T) + _pairs(1)) / (2 * PAIRS)]
    assert got == pytest.approx([0.25 * 1.0 + 0.75 * c for c in windowed])


def test_no_plans_gives_none_and_a_ragged_plan_is_an_error():
    assert layer_coverage(_run("budget", 0, []), T) is None
    with pytest.raises(ValueError, match="budget-s0: plan at step 5 has 1 layers"):
        layer_coverage(_run("budget", 0, [_plan(0, [[T], [T]]), _plan(5, [[T]])]), T)


def _suite(cells):
    rows = [{"regime": c.regime, "seed": c.seed, "val_bpb": 1.0, "seq_len": T} for c in cells]
    return Suite("s", rows, cells)


def test_table_shows_mean_and_range_and_leaves_out_layer_uniform_regimes():
    cells = [
        _run("full", 0, [_plan(0, [[T], [T]])]),
        _run("fixed", 0, [_plan(0, [[4], [4]])]),  # same coverage in both layers: left out
        _run("budget", 0, [_plan(0, [[T], [1]])]),
        _run("budget", 1, [_plan(0, [[1], [T]])]),
    ]
    text = "\n".join(layer_coverage_section(_suite(cells)))
    low = _pairs(1) / PAIRS
    assert f"| `budget` | 2 | {(1 + low) / 2:.2f} ({low:.2f}–1.00) |" in text
    assert "`fixed`" not in text and "`full`" not in text


def test_one_layer_or_all_uniform_gives_no_section():
    assert layer_coverage_section(_suite([_run("budget", 0, [_plan(0, [[1, T]])])])) == []
    uniform = [_run("fixed", s, [_plan(0, [[4, 4], [4, 4]])]) for s in (0, 1)]
    assert layer_coverage_section(_suite(uniform)) == []
