"""Post-hoc allocation: plans at matched coverage, and `aah posthoc` end to end on tiny runs."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from aah.attention import coverage
from aah.cli import main
from aah.eval.posthoc import strided_windows
from aah.eval.posthoc_plans import budgeted_plan, shuffled, uniform_window

T = 64
WINDOWS = [1, 2, 4, 8, 16, 32, 64]


def flat(plan):
    return [w for row in plan for w in row]


def mass(seed=0, layers=3, heads=4):
    """Mass beyond each window, decreasing in the window as measured mass is."""
    gen = np.random.default_rng(seed)
    steps = gen.random((layers, heads, len(WINDOWS)))
    m = np.cumsum(steps[..., ::-1], axis=-1)[..., ::-1]
    m = m / m[..., :1] * gen.random((layers, heads, 1))
    m[..., -1] = 0.0
    return m


@pytest.mark.parametrize("cap", [0.1, 0.2, 0.3, 0.5])
def test_every_budgeted_plan_stays_under_the_cap_and_shuffles_keep_windows(cap):
    m = mass()
    plans = {
        p: budgeted_plan(p, m, WINDOWS, T, cap, seed=1)
        for p in ("budget", "budget-shuffled", "random", "uniform", "uniform-layer")
    }
    for name, plan in plans.items():
        assert coverage(plan, T).causal <= cap + 1e-12, name
    budget = plans["budget"]
    shuffled_layer = plans["budget-shuffled"]
    assert [sorted(r) for r in shuffled_layer] == [sorted(r) for r in budget]
    assert sorted(flat(plans["random"])) == sorted(flat(budget))
    assert len(set(flat(plans["uniform"]))) == 1
    assert all(len(set(row)) == 1 for row in plans["uniform-layer"])


def test_uniform_window_is_the_largest_under_the_cap():
    for cap in (0.05, 0.2, 0.5, 1.0):
        w = uniform_window(T, cap)
        assert coverage([w], T).causal <= cap
        assert w == T or coverage([w + 1], T).causal > cap


def test_shuffles_are_seeded_permutations():
    plan = [[1, 2, 3, 4], [5, 6, 7, 8]]
    a = shuffled(plan, torch.Generator().manual_seed(0), across_layers=True)
    b = shuffled(plan, torch.Generator().manual_seed(0), across_layers=True)
    assert a == b and sorted(flat(a)) == list(range(1, 9))


def test_strided_windows_cover_the_whole_split():
    tokens = np.arange(1000, dtype=np.uint8)
    w = strided_windows(tokens, 10, 5)
    assert w.shape == (5, 11)
    assert int(w[0, 0]) == 0 and int(w[-1, -1]) == 999 % 256
    with pytest.raises(ValueError, match="fewer than T"):
        strided_windows(np.arange(5, dtype=np.uint8), 10, 2)


def test_posthoc_command_on_two_tiny_runs(tmp_path, tiny_corpus, capsys):
    sys.path.insert(0, str(Path(__file__).parents[1] / "cli"))
    from cli_helpers import tiny_args

    runs = []
    for seed in (0, 1):
        run = tmp_path / f"full-s{seed}"
        args = [*tiny_args(tiny_corpus, run, steps=6), "--train.seed", str(seed)]
        assert main(["train", *args, "--controller.policy", "full"]) == 0
        runs.append(str(run))
    out = tmp_path / "ph"
    argv = ["posthoc", *runs, "--coverages", "0.2,0.5", "--eval-windows", "4", "--out", str(out)]
    assert main([*argv, "--threads", "1", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rows = {(r["policy"], r["cap"]): r for r in summary}
    assert rows[("budget", 0.2)]["n"] == 2 and rows[("budget", 0.2)]["coverage"] <= 0.2
    assert ("aah-v3", None) in rows
    payload = json.loads((out / "posthoc.json").read_text())
    assert len(payload["runs"]) == 2 and (out / "posthoc.md").exists()
    for run in payload["runs"]:  # Δ is each plan's bpb minus the same run's full-attention bpb
        for row in run["rows"]:
            assert row["delta_bpb"] == pytest.approx(row["bpb"] - run["full_bpb"])
    capsys.readouterr()
    assert main(["posthoc", runs[0], "--coverages", "0,0.5", "--out", str(out)]) == 2
    assert "coverages" in capsys.readouterr().err
