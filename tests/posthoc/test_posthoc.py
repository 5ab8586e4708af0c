"""Post-hoc allocation: plans at matched coverage, and `aah posthoc` end to end on tiny runs."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from aah.attention import coverage
from aah.cli import main
from aah.controller.shuffle import shuffled
from aah.model import GPT, GPTConfig
from aah.plan import WindowPlan
from aah.posthoc.analysis import EvalSet, RunResult, score
from aah.posthoc.plans import aah_plan, budgeted_plan, uniform_window
from aah.posthoc.report import markdown, summarize, twins

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
    a = shuffled(plan, torch.Generator().manual_seed(0), "model")
    b = shuffled(plan, torch.Generator().manual_seed(0), "model")
    assert a == b and sorted(flat(a)) == list(range(1, 9))


def test_the_aah_v3_twin_permutes_the_decision_within_each_layer():
    torch.manual_seed(0)
    cfg = GPTConfig(n_layer=2, n_head=8, n_kv_head=8, d_model=32, max_seq_len=T)
    model = GPT(cfg).eval()
    with torch.no_grad(), model.capturing() as qkv:
        model(torch.randint(0, 256, (2, T)))
    for policy in ("aah-v3", "aah-v3-grouping-off"):
        plan = aah_plan(policy, qkv, [8, 16, 32, 64], seed=3)
        twin = aah_plan(policy + "-shuffled", qkv, [8, 16, 32, 64], seed=3)
        assert twin == aah_plan(policy + "-shuffled", qkv, [8, 16, 32, 64], seed=3)
        assert [sorted(r) for r in twin] == [sorted(r) for r in plan]
        gen = torch.Generator().manual_seed(3)
        assert twin == [[row[i] for i in torch.randperm(8, generator=gen).tolist()] for row in plan]
    with pytest.raises(ValueError, match="aah-v3-nope"):
        aah_plan("aah-v3-nope", qkv, [8, 16, 32, 64], seed=0)


def _row(policy, cap, delta, windows, far=None):
    acc = None if far is None else {"1-15": 1.0, "16-31": far}
    return {"policy": policy, "cap": cap, "delta_bpb": delta, "windows": windows,
            "coverage": 0.3, "bpb": 1.0 + delta, "acc": far, "acc_by_distance": acc}  # fmt: skip


def test_twins_pair_each_plan_with_its_shuffled_twin_on_the_same_run():
    mixed, same = [[8, 64], [16, 16]], [[16, 16], [32, 32]]
    runs = [
        RunResult("a", {"bpb": 1.0}, [
            _row("budget", 0.3, 0.10, mixed), _row("budget-shuffled", 0.3, 0.30, mixed),
            _row("aah-v3", None, 0.02, same), _row("aah-v3-shuffled", None, 0.02, same),
            _row("uniform", 0.3, 0.5, same),
        ]),
        RunResult("b", {"bpb": 1.1}, [
            _row("budget", 0.3, 0.20, mixed), _row("budget-shuffled", 0.3, 0.10, mixed),
            _row("aah-v3", None, 0.01, mixed), _row("aah-v3-shuffled", None, 0.04, mixed),
        ]),
    ]  # fmt: skip
    pairs = {(r["policy"], r["cap"]): r for r in twins(runs)}
    assert set(pairs) == {("budget", 0.3), ("aah-v3", None)}
    budget = pairs[("budget", 0.3)]
    assert budget["twin"] == "budget-shuffled" and budget["n"] == 2
    assert budget["delta_bpb"] == pytest.approx(((0.10 - 0.30) + (0.20 - 0.10)) / 2)
    assert budget["lower"] == 1 and budget["mixed_layers"] == pytest.approx(0.5)
    aah = pairs[("aah-v3", None)]
    assert aah["delta_bpb"] == pytest.approx(-0.015) and aah["lower"] == 1
    assert aah["mixed_layers"] == pytest.approx(0.25)  # 1 of the 4 layers over both runs
    assert "| `budget` | `budget-shuffled` | 0.30 | 2 | -0.0500 |" in markdown([], runs)


def test_twins_on_a_task_also_pair_far_accuracy():
    runs = [
        RunResult(name, {"bpb": 1.0, "acc": 1.0, "acc_by_distance": {"1-15": 1.0, "16-31": 1.0}}, [
            _row("loss-ablation", 0.3, 0.0, [[4, 64]], far=hit),
            _row("loss-ablation-shuffled", 0.3, 0.1, [[64, 4]], far=miss),
        ])
        for name, hit, miss in (("a", 1.0, 0.25), ("b", 0.5, 0.5))
    ]  # fmt: skip
    (pair,) = twins(runs)
    assert pair["far_bucket"] == "16-31"
    assert pair["far_acc"]["mean"] == pytest.approx(0.375)
    assert "Δ accuracy at 16-31" in markdown([], runs)


def test_accuracy_is_never_given_a_t_interval_or_a_zero_p():
    """Five runs, the plan ahead of its twin by the same 0.5 on every run: a t test would
    give sd 0 and p 0; the exact sign-flip test gives 2 / 2^5, its interval every value."""
    full = {"bpb": 1.0, "acc": 1.0, "acc_by_distance": {"1-15": 1.0, "16-31": 1.0}}
    runs = [
        RunResult(f"r{i}", full, [
            _row("loss-ablation", 0.3, 0.0, [[4, 64]], far=0.5 + 0.1 * i),
            _row("loss-ablation-shuffled", 0.3, 0.1, [[64, 4]], far=0.1 * i),
        ])
        for i in range(5)
    ]  # fmt: skip
    (pair,) = twins(runs)
    assert pair["far_acc"]["p"] == pytest.approx(2 / 2**5)
    assert pair["far_acc"]["ci"] == [-1.0, 1.0] and pair["far_acc"]["higher"] == 5
    rows = {r["policy"]: r for r in summarize(runs)}
    assert rows["loss-ablation"]["far_acc"]["range"] == pytest.approx([0.5, 0.9])
    table = markdown(summarize(runs), runs)
    assert "| 0.700 | 0.500-0.900 |" in table  # mean and range over runs, no t interval
    assert "| +0.500 | 0.0625 | 5/5 |" in table


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
    # Every imposed plan is a plan file; loss-ablation-shuffled permutes within each layer.
    plans = out / "plans" / "full-s0"
    ablation = WindowPlan.load(plans / "loss-ablation-0.2.json").windows
    control = WindowPlan.load(plans / "loss-ablation-shuffled-0.2.json").windows
    assert [sorted(r) for r in ablation] == [sorted(r) for r in control]
    assert WindowPlan.load(plans / "aah-v3.json").windows == next(
        r["windows"] for r in payload["runs"][0]["rows"] if r["policy"] == "aah-v3"
    )
    aah, twin = (
        WindowPlan.load(plans / "aah-v3.json").windows,
        WindowPlan.load(plans / "aah-v3-shuffled.json").windows,
    )
    assert [sorted(r) for r in aah] == [sorted(r) for r in twin]
    assert "| `aah-v3` | `aah-v3-shuffled` | — | 2 |" in (out / "posthoc.md").read_text()
    # A second command with the same settings reuses the stored runs instead of rescoring.
    capsys.readouterr()
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.count("reused") == 2 and ": budget cap 0.2:" not in printed
    assert json.loads((out / "posthoc.json").read_text())["runs"] == payload["runs"]
    # ... but not under other settings.
    assert main([*argv[:-4], "--eval-windows", "3", "--out", str(out)]) == 0
    assert "reused" not in capsys.readouterr().out
    assert main(["posthoc", runs[0], "--coverages", "0,0.5", "--out", str(out)]) == 2
    assert "coverages" in capsys.readouterr().err


def test_score_counts_each_answer_once_whatever_the_batch_size():
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_kv_head=2, d_model=16, max_seq_len=12)).eval()
    windows = torch.randint(0, 256, (5, 13))
    marks = torch.zeros(5, 12, dtype=torch.int64)
    marks[:, 3], marks[1:, 9], marks[4, 11] = 2, 7, 11
    data = EvalSet(windows, marks, ((1, 4), (4, 16)))
    whole, split = score(model, data, batch_size=5), score(model, data, batch_size=2)
    with torch.no_grad():  # brute force: one window at a time
        right = [model(w[None, :-1])[0].argmax(-1) == w[1:] for w in windows]
    hits = [
        (bool(right[b][t]), int(marks[b, t])) for b in range(5) for t in range(12) if marks[b, t]
    ]
    assert split["acc"] == pytest.approx(whole["acc"])
    assert whole["acc"] == pytest.approx(sum(h for h, _ in hits) / len(hits))
    far = [h for h, d in hits if d >= 4]
    assert whole["acc_by_distance"]["4-15"] == pytest.approx(sum(far) / len(far))
    assert split["bpb"] == pytest.approx(whole["bpb"])


def test_posthoc_on_a_recall_run_reports_accuracy(tmp_path, tiny_corpus, capsys):
    sys.path.insert(0, str(Path(__file__).parents[1] / "cli"))
    from cli_helpers import tiny_args

    run = tmp_path / "full-s0"
    args = [*tiny_args(tiny_corpus, run, steps=3), "--data.corpus", "synthetic:recall"]
    args = [a for a in args if a not in ("--data.path", tiny_corpus)]
    assert main(["train", *args, "--controller.policy", "full"]) == 0
    out = tmp_path / "ph"
    argv = ["posthoc", str(run), "--coverages", "0.3", "--eval-windows", "6", "--out", str(out)]
    assert main([*argv, "--policies", "uniform,budget", "--threads", "1", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for row in summary:
        assert 0.0 <= row["acc"]["mean"] <= 1.0 and row["far_bucket"] == "16-31"
        assert 0.0 <= row["far_acc"]["mean"] <= 1.0
    assert "accuracy at 16-31" in (out / "posthoc.md").read_text()
