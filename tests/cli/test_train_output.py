"""What `aah train` prints: bars only on a terminal, a line per evaluation as it happens, a
final bar that stays, and a warning when the run never leaves the warm-up."""

import re
import sys

from cli_helpers import tiny_args

from aah.cli import main


def progress_args(corpus, out, steps=6):
    return [a for a in tiny_args(corpus, out, steps=steps) if a != "--no-progress"]


def test_no_progress_bar_when_stderr_is_not_a_terminal(tmp_path, tiny_corpus, capsys):
    assert main(["train", *progress_args(tiny_corpus, tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and "train:" not in err


def test_a_line_per_evaluation_while_training(tmp_path, tiny_corpus, capsys):
    assert main(["train", *tiny_args(tiny_corpus, tmp_path / "run", steps=12)]) == 0
    out = capsys.readouterr().out.splitlines()
    evals = [x for x in out if re.match(r"step \d+/12 .*val loss [\d.]+ .*bits/byte [\d.]+", x)]
    assert [x.split()[1] for x in evals] == ["6/12", "12/12"]
    assert out.index(evals[-1]) < out.index(next(x for x in out if x.startswith("val bits/byte")))


def test_the_bar_stays_on_a_terminal(tmp_path, tiny_corpus, capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["train", *progress_args(tiny_corpus, tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    bar = [x for x in err.split("\n") if "train:" in x][-1]
    assert "6/6" in bar.split("\r")[-1]  # the last frame is the finished bar, not a blank


def test_warning_when_the_warmup_outlasts_the_run(tmp_path, tiny_corpus, capsys):
    args = tiny_args(tiny_corpus, tmp_path / "fixed", steps=3)
    assert main(["train", *args, "--controller.policy", "fixed"]) == 0
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "warning" in x]
    assert "controller.warmup_steps (100)" in line and "train.max_steps (3)" in line
    args = tiny_args(tiny_corpus, tmp_path / "full", steps=3)
    assert main(["train", *args]) == 0
    assert "warning" not in capsys.readouterr().err
    args = tiny_args(tiny_corpus, tmp_path / "from-start", steps=3)
    assert main(["train", *args, "--controller.policy", "fixed",
                 "--controller.windowed_from_start", "true"]) == 0  # fmt: skip
    assert "warning" not in capsys.readouterr().err
