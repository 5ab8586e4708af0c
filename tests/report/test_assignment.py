"""The share of layer-steps a within-layer shuffle can change, and of steps a scatter over
the layers can, on hand-made plan records."""

from pathlib import Path

import pytest

from aah.report.assignment import split_share, spread_lines, spread_share
from aah.report.suite_data import CellRun, Suite

T = 64


def _run(regime, seed, plans, last_step=100):
    metrics = [{"step": 50}, {"step": last_step}]
    return CellRun(regime, seed, Path("."), metrics, plans)


def _plan(step, windows):
    return {"step": step, "windows": windows}


def test_share_weights_each_plan_by_its_steps_and_drops_the_warm_up():
    plans = [
        _plan(0, [[T, T], [T, T]]),  # warm-up: full everywhere, not counted
        _plan(20, [[16, 32], [16, 16]]),  # steps 20-60: one of two layers spread
        _plan(60, [[16, 16], [T, T]]),  # steps 60-100: no layer spread
    ]
    # layer-steps: 2 x 80 = 160; spread: layer 0 for 40 steps
    assert spread_share(_run("budget", 0, plans), T) == pytest.approx(40 / 160)


def test_a_plan_uniform_within_each_layer_leaves_nothing_to_shuffle():
    plans = [_plan(0, [[T, T]]), _plan(10, [[16, 16]]), _plan(30, [[T, T]])]
    assert spread_share(_run("budget", 0, plans), T) == 0.0
    assert spread_share(_run("budget", 0, [_plan(0, [[T, T]])]), T) is None  # never windowed


def test_the_last_plan_counts_until_the_last_logged_step():
    plans = [_plan(0, [[T, T]]), _plan(90, [[8, 16]])]
    assert spread_share(_run("budget", 0, plans, last_step=100), T) == 1.0
    # a plan logged after the last metrics record still counts one step
    assert spread_share(_run("budget", 0, plans, last_step=0), T) == 1.0


def test_report_lines_name_only_pairs_present_with_mean_and_range():
    rows = [
        {"regime": r, "seed": s, "val_bpb": 1.0, "seq_len": T}
        for r in ("aah-v3-full-adaptive", "shuffle", "budget")
        for s in (0, 1)
    ]
    cells = [
        _run("aah-v3-full-adaptive", 0, [_plan(0, [[16, 32]])]),  # 100%
        _run("aah-v3-full-adaptive", 1, [_plan(0, [[16, 16]]), _plan(50, [[16, 32]])]),  # 50%
        _run("budget", 0, [_plan(0, [[16, 32]])]),  # no budget-shuffled in the suite
    ]
    text = " ".join(spread_lines(Suite("s", rows, cells)))
    assert "`aah-v3-full-adaptive` 75% (50%–100%; twin `shuffle`)" in text
    assert "`budget`" not in text
    assert spread_lines(Suite("s", rows[4:], cells[2:])) == []  # budget alone: no pair


def test_a_regime_with_two_twins_gets_one_line_naming_both():
    rows = [
        {"regime": r, "seed": 0, "val_bpb": 1.0, "seq_len": T}
        for r in ("aah-v3-full-adaptive", "shuffle", "aah-v3-full-adaptive-replay-shuffled")
    ]
    cells = [_run("aah-v3-full-adaptive", 0, [_plan(0, [[16, 32]])])]
    text = " ".join(spread_lines(Suite("s", rows, cells)))
    assert (
        "`aah-v3-full-adaptive` 100% (one seed; twins `shuffle`, "
        "`aah-v3-full-adaptive-replay-shuffled`)" in text
    )
    assert text.count("`aah-v3-full-adaptive` ") == 1


def test_split_share_counts_the_steps_whose_layers_hold_different_windows():
    plans = [
        _plan(0, [[T, T], [T, T]]),  # warm-up: not counted
        _plan(20, [[16, 32], [32, 16]]),  # steps 20-60: the same windows in both layers
        _plan(60, [[16, 16], [T, 16]]),  # steps 60-100: layer 1 holds a longer one
    ]
    assert split_share(_run("aah-v3-deep-reuse", 0, plans), T) == pytest.approx(40 / 80)
    assert split_share(_run("aah-v3-deep-reuse", 0, [_plan(0, [[T, T], [T, T]])]), T) is None


def test_scattered_twins_get_their_own_sentence():
    regime, twin = "aah-v3-deep-reuse", "aah-v3-deep-reuse-replay-scattered"
    rows = [{"regime": r, "seed": 0, "val_bpb": 1.0, "seq_len": T} for r in (regime, twin)]
    cells = [_run(regime, 0, [_plan(0, [[T, T], [T, T]]), _plan(50, [[16, 16], [T, 16]])])]
    text = " ".join(spread_lines(Suite("s", rows, cells)))
    assert f"`{regime}` 100% (one seed; twin `{twin}`)" in text
    assert "scatters a regime's windows over every layer" in text
    assert "other heads of the same layer" not in text  # no shuffled twin in this suite
