"""`aah sweep`: suite files, the grid, the CSV, skipping finished cells, resuming cut ones."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aah import records
from aah.cli import main
from aah.sweep import COLUMNS, SweepConfig, read_csv, run_sweep
from aah.sweep.results import TASK_COLUMNS
from aah.sweep.runner import CELL

TINY = """
[sweep]
name = "tiny"
regimes = {regimes}
seeds = {seeds}
{variants}

[model]
n_layer = 2
n_head = 4
n_kv_head = 2
d_model = 32
max_seq_len = 32

[train]
max_steps = {steps}
batch_size = 4
warmup_steps = 2
eval_interval = 3
eval_batches = 2
log_interval = 1
checkpoint_interval = 2
threads = 1

[data]
path = "{corpus}"

[controller]
warmup_steps = 1
interval = 1
"""


def suite_file(tmp_path: Path, corpus: str, *, regimes=("full", "budget"), seeds=(0,), steps=6,
               variants: str = "") -> Path:  # fmt: skip
    path = tmp_path / "tiny.toml"
    path.write_text(
        TINY.format(
            regimes=json.dumps(list(regimes)),
            seeds=json.dumps(list(seeds)),
            variants=variants,
            steps=steps,
            corpus=corpus,
        )
    )
    return path


def test_grid_is_seed_major_and_seeds_reach_train_and_controller(tmp_path, tiny_corpus):
    variants = '[sweep.variants."budget-0.5"]\n"controller.policy" = "budget"\n' + (
        '"controller.budget" = 0.5\n'
    )
    sweep = SweepConfig.from_toml(
        suite_file(
            tmp_path, tiny_corpus, regimes=("full", "budget-0.5"), seeds=(3, 1), variants=variants
        )
    )
    cells = sweep.cells()
    assert [c.name for c in cells] == ["full-s3", "budget-0.5-s3", "full-s1", "budget-0.5-s1"]
    for cell in cells:
        assert cell.config.train.seed == cell.seed == cell.config.controller.seed
    assert cells[1].config.controller.policy == "budget"
    assert cells[1].config.controller.options.budget == 0.5
    assert cells[0].config.controller.policy == "full"
    assert sweep.base.train.seed == 0  # the base is not mutated by expanding the grid


def test_seed_placeholder_in_variant_text_values(tmp_path, tiny_corpus):
    plan_file = str(tmp_path / "plans" / "full-s{seed}.json")
    variants = '[sweep.variants."oracle"]\n"controller.policy" = "static"\n' + (
        f'"controller.static_plan" = {json.dumps(plan_file)}\n'
    )
    path = suite_file(tmp_path, tiny_corpus, regimes=("oracle",), seeds=(3, 1), variants=variants)
    cells = SweepConfig.from_toml(path).cells()
    got = [c.config.controller.options.static_plan for c in cells]
    assert got == [plan_file.replace("{seed}", "3"), plan_file.replace("{seed}", "1")]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.replace('[sweep]\nname = "tiny"', '[sweep]\nname = "tiny"\nfoo = 1'),
         "'foo'"),
        (lambda s: s.replace('"budget"]', '"nope"]'), "'nope'"),
        (lambda s: s.replace("seeds = [0]", "seeds = [0, 0]"), "duplicates"),
        (lambda s: s.replace("seeds = [0]", "seeds = [-1]"), "-1"),
        (lambda s: s.replace("seeds = [0]", "seeds = []"), "sweep.seeds"),
        (lambda s: s.replace('name = "tiny"', 'name = "../x"'), "'../x'"),
        (lambda s: s.replace("[sweep]", "[swoop]"), "[sweep]"),
        (lambda s: s.replace("max_steps = 6", "max_stepz = 6"), "max_stepz"),
    ],
)  # fmt: skip
def test_bad_suite_files_name_the_problem(tmp_path, tiny_corpus, edit, message):
    path = suite_file(tmp_path, tiny_corpus)
    path.write_text(edit(path.read_text()))
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(")):
        SweepConfig.from_toml(path)


def test_a_variant_with_a_bad_key_fails_before_anything_runs(tmp_path, tiny_corpus):
    variants = '[sweep.variants.odd]\n"controller.budgett" = 0.5\n'
    path = suite_file(tmp_path, tiny_corpus, regimes=("odd",), variants=variants)
    with pytest.raises(ValueError, match=r"controller\.budgett"):
        SweepConfig.from_toml(path)


def test_missing_suite_file_is_an_error_with_exit_2(tmp_path, capsys):
    assert main(["sweep", str(tmp_path / "none.toml")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_a_suite_file_also_trains_as_a_plain_config(tmp_path, tiny_corpus):
    from aah.training.run_config import RunConfig

    config = RunConfig.from_toml(suite_file(tmp_path, tiny_corpus))
    assert config.model.n_layer == 2  # the [sweep] table is ignored by `aah train`


def test_sweep_writes_csv_skips_finished_and_recovers_cut_cells(tmp_path, tiny_corpus):
    sweep = SweepConfig.from_toml(suite_file(tmp_path, tiny_corpus, seeds=(0, 1)))
    out = tmp_path / "results"
    outcome = run_sweep(sweep, out, progress=False)
    assert (outcome.finished, outcome.total, outcome.interrupted) == (4, 4, False)
    rows = read_csv(out / "tiny.csv")
    with (out / "tiny.csv").open() as handle:
        assert tuple(next(csv.reader(handle))) == COLUMNS + TASK_COLUMNS
    assert [(r["regime"], r["seed"]) for r in rows] == [
        ("full", 0), ("budget", 0), ("full", 1), ("budget", 1)
    ]  # fmt: skip
    for row in rows:
        cell_dir = out / "tiny" / f"{row['regime']}-s{row['seed']}"
        summary = records.read_json(cell_dir / "summary.json")
        assert row["val_bpb"] == pytest.approx(summary["val_bpb"], rel=1e-5)
        assert row["tokens"] == summary["tokens"] == 6 * 4 * 32
        assert row["steps"] == 6 and row["seq_len"] == 32
    full0, budget0 = rows[0], rows[1]
    assert full0["acr"] == 1.0 and budget0["acr"] < 0.5  # the regime really changed the plan
    assert rows[0]["val_bpb"] != rows[2]["val_bpb"]  # and the seed the run

    # A second invocation runs nothing: summaries untouched, the CSV the same.
    cell = out / "tiny" / "budget-s1"
    stamp = (cell / "summary.json").stat().st_mtime_ns
    before = (out / "tiny.csv").read_text()
    run_sweep(sweep, out, progress=False)
    assert (cell / "summary.json").stat().st_mtime_ns == stamp
    assert (out / "tiny.csv").read_text() == before

    # A cell cut after a checkpoint resumes from it; one cut before any restarts.
    (cell / "summary.json").unlink()
    restart = out / "tiny" / "full-s1"
    for path in restart.iterdir():
        if path.name not in (CELL, "cell.toml"):
            path.unlink() if path.is_file() else shutil.rmtree(path)
    outcome = run_sweep(sweep, out, progress=False)
    assert outcome.finished == 4
    assert "$ aah train --no-progress --resume" in (cell / "train.log").read_text()
    assert "--resume" not in (restart / "train.log").read_text()
    assert (out / "tiny.csv").read_text() == _without_timing(before, like=out / "tiny.csv")


def _without_timing(before: str, like: Path) -> str:
    """`before` with the timing columns (which a rerun may change) taken from `like`."""
    new = list(csv.DictReader(like.open()))
    old = list(csv.DictReader(before.splitlines()))
    for o, n in zip(old, new, strict=True):
        o["train_tokens_per_s"], o["wall_s"] = n["train_tokens_per_s"], n["wall_s"]
    return like.read_text() if old == new else "mismatch: " + json.dumps([old, new])


def test_a_changed_suite_refuses_to_mix_with_old_cells(tmp_path, tiny_corpus):
    out = tmp_path / "results"
    run_sweep(SweepConfig.from_toml(suite_file(tmp_path, tiny_corpus, regimes=("full",), steps=3)),
              out, progress=False)  # fmt: skip
    longer = SweepConfig.from_toml(suite_file(tmp_path, tiny_corpus, regimes=("full",), steps=4))
    with pytest.raises(ValueError, match=r"train\.max_steps"):
        run_sweep(longer, out, progress=False)


@pytest.mark.parametrize("stop", ["ctrl-c", "sigterm"])
def test_a_stop_checkpoints_the_cell_and_the_rerun_matches_an_uninterrupted_sweep(
    tmp_path, tiny_corpus, stop
):
    path = suite_file(tmp_path, tiny_corpus, regimes=("budget",), steps=40)
    cmd = [sys.executable, "-m", "aah", "sweep", str(path), "--no-progress", "--out"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cut = tmp_path / "cut"
    # A shell starts background jobs with SIGINT ignored, and a child inherits that (Python
    # then installs no KeyboardInterrupt handler): give the sweep a terminal's default, as
    # the Ctrl-C this test stands for would find it, however pytest itself was started.
    proc = subprocess.Popen([*cmd, str(cut)], env=env, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        checkpoint = cut / "tiny" / "budget-s0" / records.CHECKPOINT
        deadline = time.time() + 90
        while time.time() < deadline and not checkpoint.exists():
            time.sleep(0.1)
        assert checkpoint.exists(), "the cell never checkpointed"
        if stop == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        else:
            proc.send_signal(signal.SIGTERM)  # to the sweep alone, as a scheduler would
        stdout, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert "continue with the same command" in stdout
    assert not (cut / "tiny" / "budget-s0" / "summary.json").exists()
    assert subprocess.run([*cmd, str(cut)], env=env, capture_output=True).returncode == 0
    whole = tmp_path / "whole"
    assert subprocess.run([*cmd, str(whole)], env=env, capture_output=True).returncode == 0
    a, b = read_csv(cut / "tiny.csv"), read_csv(whole / "tiny.csv")
    for key in ("val_loss", "val_bpb", "acr", "causal_coverage", "tokens", "steps"):
        assert a[0][key] == b[0][key], key


def test_a_failing_cell_stops_the_sweep_with_exit_1_and_keeps_finished_cells(
    tmp_path, tiny_corpus, capsys
):
    path = suite_file(tmp_path, tiny_corpus, regimes=("full", "budget"), steps=2)
    # A missing corpus is found only when the cell loads its data, inside the trainer.
    path.write_text(path.read_text().replace('path = "', 'path = "/nonexistent'))
    out = tmp_path / "results"
    assert main(["sweep", str(path), "--out", str(out), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "cell full-s0 failed" in err and "train.log" in err
    assert "does not exist" in (out / "tiny" / "full-s0" / "train.log").read_text()


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout


def test_commit_lands_each_finished_cell_and_nothing_else(tmp_path, tiny_corpus):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    (repo / ".gitignore").write_text("results/*/*/checkpoints/\n")
    (repo / "other.txt").write_text("staged, not part of the sweep\n")
    _git(repo, "add", ".gitignore", "other.txt")
    sweep = SweepConfig.from_toml(suite_file(tmp_path, tiny_corpus, steps=3))
    outcome = run_sweep(sweep, repo / "results", progress=False, commit=True)
    assert outcome.finished == 2
    log = _git(repo, "log", "--format=%s").splitlines()
    assert log == ["tiny: cell budget-s0 finished", "tiny: cell full-s0 finished"]
    tracked = _git(repo, "ls-tree", "-r", "--name-only", "HEAD").split()
    assert "results/tiny.csv" in tracked and "results/tiny/full-s0/summary.json" in tracked
    assert not [f for f in tracked if "checkpoints" in f] and "other.txt" not in tracked
    assert "other.txt" in _git(repo, "diff", "--cached", "--name-only")  # still staged only


def test_jobs_run_cells_at_once_with_the_same_results_as_one_at_a_time(
    tmp_path, tiny_corpus, capsys
):
    sweep = SweepConfig.from_toml(suite_file(tmp_path, tiny_corpus, seeds=(0, 1), steps=4))
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    run_sweep(sweep, serial, progress=False)
    capsys.readouterr()
    outcome = run_sweep(sweep, parallel, progress=False, jobs=3)
    log = capsys.readouterr().out.splitlines()  # without bars, one line per start and finish
    assert log[:3] == [f"tiny: {c} started" for c in ("full-s0", "budget-s0", "full-s1")]
    assert sum("finished (" in line for line in log) == 4 and log[-1].endswith("(4/4)")
    assert (outcome.finished, outcome.total, outcome.interrupted) == (4, 4, False)
    keys = ("regime", "seed", "val_loss", "val_bpb", "acr", "causal_coverage", "tokens")
    a, b = read_csv(serial / "tiny.csv"), read_csv(parallel / "tiny.csv")
    assert [[r[k] for k in keys] for r in a] == [[r[k] for k in keys] for r in b]
    # The cells overlapped: some cell started before another one finished.
    spans = []
    for row in b:
        run_dir = parallel / "tiny" / f"{row['regime']}-s{row['seed']}"
        end = (run_dir / "summary.json").stat().st_mtime
        spans.append(((run_dir / "cell.toml").stat().st_mtime, end))
    assert any(s2 < e1 for s1, e1 in spans for s2, e2 in spans if (s1, e1) != (s2, e2) and s1 <= s2)


def test_a_failing_cell_stops_the_other_running_cells_at_a_checkpoint(tmp_path, tiny_corpus):
    # Diverges a few steps in, when the cell beside it is training too (and has checkpointed).
    variants = '[sweep.variants.broken]\n"controller.policy" = "full"\n"train.lr" = 1e4\n'
    path = suite_file(tmp_path, tiny_corpus, regimes=("budget", "broken"), steps=400,
                      variants=variants)  # fmt: skip
    out = tmp_path / "results"
    with pytest.raises(Exception, match="cell broken-s0 failed"):
        run_sweep(SweepConfig.from_toml(path), out, progress=False, jobs=2)
    budget = out / "tiny" / "budget-s0"
    assert not (budget / "summary.json").exists()  # stopped, not finished
    assert (budget / records.CHECKPOINT).exists()  # and resumable
    assert "stopped: checkpoint written" in (budget / "train.log").read_text()


def test_jobs_must_be_a_positive_int(tmp_path, tiny_corpus):
    sweep = SweepConfig.from_toml(suite_file(tmp_path, tiny_corpus))
    with pytest.raises(ValueError, match="jobs must be an int >= 1, got 0"):
        run_sweep(sweep, tmp_path / "r", progress=False, jobs=0)


SUITE_FILES = sorted(
    path
    for path in (Path(__file__).parents[2] / "configs").glob("*.toml")
    if "[sweep]" in path.read_text(encoding="utf-8")
)


def test_the_committed_suites_are_found():
    assert {p.stem for p in SUITE_FILES} >= {"recall", "text", "screening"}


@pytest.mark.parametrize("path", SUITE_FILES, ids=lambda p: p.name)
def test_every_committed_suite_file_builds_its_grid(path):
    """A suite file with a bad regime or key fails here, not at the start of a sweep."""
    sweep = SweepConfig.from_toml(path)
    cells = sweep.cells()
    assert len(cells) == len(sweep.regimes) * len(sweep.seeds)
    assert len({(c.regime, c.seed) for c in cells}) == len(cells)


def _replay_suite(tmp_path, corpus, source_dir):
    variants = (
        '[sweep.variants."budget-replay-shuffled"]\n"controller.policy" = "replay-shuffled"\n'
        + (f'"controller.replay_from" = {json.dumps(str(source_dir / "budget-s{seed}"))}\n')
    )
    regimes = ("budget-replay-shuffled", "budget")  # the twin first: it must wait all the same
    path = suite_file(tmp_path, corpus, regimes=regimes, seeds=(0,), steps=4, variants=variants)
    return SweepConfig.from_toml(path)


def test_a_replay_cell_waits_for_its_source_and_matches_its_coverage(tmp_path, tiny_corpus, capsys):
    out = tmp_path / "out"
    outcome = run_sweep(_replay_suite(tmp_path, tiny_corpus, out / "tiny"), out, jobs=2,
                        progress=False)  # fmt: skip
    log = capsys.readouterr().out.splitlines()
    assert outcome.finished == 2
    started = [line for line in log if line.endswith("started")]
    assert started == ["tiny: budget-s0 started", "tiny: budget-replay-shuffled-s0 started"]
    assert log.index("tiny: budget-replay-shuffled-s0 started") > next(
        i for i, line in enumerate(log) if line.startswith("tiny: budget-s0 finished")
    )
    rows = {r["regime"]: r for r in read_csv(out / "tiny.csv")}
    assert rows["budget-replay-shuffled"]["causal_coverage"] == rows["budget"]["causal_coverage"]


def test_a_replay_of_a_run_that_will_never_finish_fails_before_anything_runs(tmp_path, tiny_corpus):
    out = tmp_path / "out"
    sweep = _replay_suite(tmp_path, tiny_corpus, tmp_path / "elsewhere")
    with pytest.raises(ValueError, match=r"replays .*elsewhere/budget-s0.*has not finished"):
        run_sweep(sweep, out, progress=False)
    assert not (out / "tiny").exists() or not any((out / "tiny").iterdir())


def test_cells_that_replay_each_other_fail_instead_of_waiting_forever(tmp_path, tiny_corpus):
    out = tmp_path / "out"
    variants = "".join(
        f'[sweep.variants."{a}"]\n"controller.policy" = "replay"\n'
        f'"controller.replay_from" = {json.dumps(str(out / "tiny" / (b + "-s{seed}")))}\n'
        for a, b in (("a", "b"), ("b", "a"))
    )
    path = suite_file(tmp_path, tiny_corpus, regimes=("a", "b"), variants=variants)
    with pytest.raises(ValueError, match="cells a-s0, b-s0 replay each other"):
        run_sweep(SweepConfig.from_toml(path), out, progress=False)
