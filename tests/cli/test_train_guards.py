"""`aah train` guards: divergence, non-finite config values, the run-directory lock, and a
restart in place of a run that stopped before its first checkpoint."""

import json
import os
import socket
import subprocess
import sys

import pytest
from cli_helpers import tiny_args

from aah.cli import main

LOCK = "train.lock"


def refuse(name):
    raise AssertionError(f"non-standard JSON constant {name}")


def test_divergence_exits_2_with_one_clear_line(tmp_path, tiny_corpus, capsys):
    run = tmp_path / "run"
    blow_up = ["--train.lr", "1e30", "--train.min_lr", "1", "--train.grad_clip", "0"]
    assert main(["train", *tiny_args(tiny_corpus, run, steps=6), *blow_up]) == 2
    captured = capsys.readouterr()
    (line,) = [x for x in captured.err.splitlines() if "diverged" in x]
    assert line.startswith("aah train: error: training diverged at step") and "train.lr" in line
    assert "Traceback" not in captured.err and "nan" not in captured.out
    for row in (run / "metrics.jsonl").read_text().splitlines():
        json.loads(row, parse_constant=refuse)
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["diverged"] is True
    assert not (run / "summary.json").exists() and not (run / "checkpoints" / "last.pt").exists()
    assert not (run / LOCK).exists()


@pytest.mark.parametrize("value", ["inf", "nan"])
def test_non_finite_lr_exits_2_naming_the_field(tmp_path, value, capsys):
    assert main(["train", "--out", str(tmp_path / "r"), "--train.lr", value]) == 2
    err = capsys.readouterr().err
    assert "train.lr" in err and "finite" in err
    assert not (tmp_path / "r").exists()


def write_lock(run, pid, host=None):
    run.mkdir(parents=True, exist_ok=True)
    info = {"pid": pid, "host": host or socket.gethostname(), "started": "2025-01-01T00:00:00Z"}
    (run / LOCK).write_text(json.dumps(info))


def test_a_live_lock_refuses_a_second_trainer(tmp_path, tiny_corpus, capsys):
    run = tmp_path / "run"
    write_lock(run, os.getpid())  # this test process: alive on this host
    assert main(["train", *tiny_args(tiny_corpus, run, steps=3)]) == 2
    err = capsys.readouterr().err
    assert f"pid {os.getpid()}" in err and LOCK in err and len(err.strip().splitlines()) == 1
    assert not (run / "metrics.jsonl").exists()
    assert (run / LOCK).exists()  # the holder's lock stays


def test_a_lock_from_another_host_is_not_taken(tmp_path, tiny_corpus, capsys):
    run = tmp_path / "run"
    write_lock(run, 1, host="elsewhere.invalid")
    assert main(["train", *tiny_args(tiny_corpus, run, steps=3)]) == 2
    assert "elsewhere.invalid" in capsys.readouterr().err


def test_a_stale_lock_is_taken_over_with_a_notice(tmp_path, tiny_corpus, capsys):
    run = tmp_path / "run"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    write_lock(run, int(dead.stdout))
    assert main(["train", *tiny_args(tiny_corpus, run, steps=3)]) == 0
    err = capsys.readouterr().err
    assert "stale" in err and dead.stdout.strip() in err
    assert (run / "summary.json").exists() and not (run / LOCK).exists()


def test_the_lock_is_released_after_an_error(tmp_path, tiny_corpus, capsys):
    run = tmp_path / "run"
    args = tiny_args(tiny_corpus, run, steps=3)
    assert main(["train", *args, "--model.backend", "nope"]) == 2
    capsys.readouterr()
    assert not (run / LOCK).exists()
    assert main(["train", *args]) == 0


def died_before_first_checkpoint(run):
    """What a run that stopped before its first checkpoint leaves: config and metrics only."""
    (run / "checkpoints" / "last.pt").unlink()
    (run / "summary.json").unlink()
    (run / "metrics.jsonl").write_text('{"step": 99, "train_loss": 1.0}\n')


def test_a_run_without_checkpoint_restarts_in_place(tmp_path, tiny_corpus, capsys):
    run = tmp_path / "run"
    args = tiny_args(tiny_corpus, run, steps=3)
    assert main(["train", *args]) == 0
    died_before_first_checkpoint(run)
    capsys.readouterr()
    assert main(["train", *args]) == 0
    captured = capsys.readouterr()
    assert "no checkpoint" in captured.err and "from scratch" in captured.err
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [3]
    # The same through --resume: nothing to resume from, so it starts again.
    died_before_first_checkpoint(run)
    assert main(["train", "--resume", str(run), "--no-progress"]) == 0
    assert "from scratch" in capsys.readouterr().err
    assert json.loads((run / "summary.json").read_text())["steps"] == 3


def test_a_finished_run_is_still_protected(tmp_path, tiny_corpus, capsys):
    run = tmp_path / "run"
    assert main(["train", *tiny_args(tiny_corpus, run, steps=3)]) == 0
    assert main(["train", *tiny_args(tiny_corpus, run, steps=3)]) == 2
    assert "--resume" in capsys.readouterr().err
