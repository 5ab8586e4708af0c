"""User errors are one line on stderr with exit 2, found before any training or search."""

import errno
import json
import pathlib

import pytest
from cli_helpers import tiny_args

from aah.cli import main


def one_line_error(capsys, *named):
    err = capsys.readouterr().err.strip()
    lines = [x for x in err.splitlines() if not x.startswith(("notice:", "warning:"))]
    assert len(lines) == 1 and "Traceback" not in err, err
    for text in named:
        assert text in lines[0], lines[0]
    return lines[0]


def test_out_that_is_an_existing_file(tmp_path, tiny_corpus, capsys):
    file = tmp_path / "taken"
    file.write_text("not a run")
    assert main(["train", *tiny_args(tiny_corpus, file, steps=2)]) == 2
    one_line_error(capsys, str(file), "existing file")
    assert file.read_text() == "not a run"


def test_out_that_cannot_be_created(tmp_path, tiny_corpus, capsys, monkeypatch):
    real_mkdir = pathlib.Path.mkdir

    def read_only(self, *args, **kwargs):  # the folder is read-only (root ignores chmod)
        if self.name == "run":
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "mkdir", read_only)
    assert main(["train", *tiny_args(tiny_corpus, tmp_path / "run", steps=2)]) == 2
    one_line_error(capsys, "Permission denied", "run")


def test_config_that_is_a_directory(tmp_path, capsys):
    assert main(["train", "--config", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    one_line_error(capsys, str(tmp_path), "directory")


def test_config_that_is_not_utf8_names_the_file(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_bytes(b"[model]\nn_layer = \xff\n")
    assert main(["train", "--config", str(path), "--out", str(tmp_path / "r")]) == 2
    one_line_error(capsys, str(path), "UTF-8")


def test_a_static_plan_that_is_not_json_names_the_file(tmp_path, tiny_corpus, capsys):
    plan = tmp_path / "plan.json"
    plan.write_bytes(b"\x89PNG not a plan")
    args = ["--controller.policy", "static", "--controller.static_plan", str(plan)]
    assert main(["train", *tiny_args(tiny_corpus, tmp_path / "r", steps=2), *args]) == 2
    one_line_error(capsys, str(plan))


def test_disk_full_while_checkpointing(tmp_path, tiny_corpus, capsys, monkeypatch):
    from aah.training import session

    def full(path, payload):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(session, "save_checkpoint", full)
    run = tmp_path / "run"
    assert main(["train", *tiny_args(tiny_corpus, run, steps=2)]) == 2
    one_line_error(capsys, "No space left on device", "checkpoint", "step 2")
    assert not (run / "train.lock").exists()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (
            ["--controller.policy", "aah-v3-full-adaptive", "--controller.group_threshold", "5"],
            "controller.group_threshold",
        ),
        (
            ["--controller.policy", "aah-v3-deep-reuse", "--controller.upper_threshold", "-2"],
            "controller.upper_threshold",
        ),
        (["--model.backend", "nope"], "model.backend"),
        (["--train.device", "tpu"], "train.device"),
    ],
)
def test_out_of_range_config_fails_before_anything_runs(tmp_path, capsys, args, named):
    missing = str(tmp_path / "no-such-corpus")  # the data is never read
    assert main(["train", *tiny_args(missing, tmp_path / "r", steps=2), *args]) == 2
    one_line_error(capsys, named)
    assert not (tmp_path / "r").exists()


def test_a_validation_split_too_small_fails_before_training(tmp_path, capsys):
    text = tmp_path / "small.txt"
    text.write_text("x = 1\n" * 500)  # 3,000 bytes: 1% is 30 tokens, fewer than 33
    run = tmp_path / "run"
    args = [*tiny_args(str(text), run, steps=2), "--data.val_fraction", "0.01"]
    assert main(["train", *args]) == 2
    line = one_line_error(capsys, "validation split has 30 tokens", "data.val_fraction 0.01")
    assert "33" in line
    assert not (run / "metrics.jsonl").exists() or not (run / "metrics.jsonl").read_text()


def test_resuming_with_fewer_steps_changes_nothing(tmp_path, tiny_corpus, capsys):
    run = tmp_path / "run"
    assert main(["train", *tiny_args(tiny_corpus, run, steps=3)]) == 0
    before = {name: (run / name).read_bytes() for name in ("config.toml", "summary.json")}
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--train.max_steps", "2", "--no-progress"]) == 2
    one_line_error(capsys, "train.max_steps 2", "step 3")
    assert {name: (run / name).read_bytes() for name in before} == before


def test_plan_search_checks_its_paths_before_loading(tmp_path, capsys, monkeypatch):
    from aah.cli.hf import plan_args

    def never(*args, **kwargs):
        raise AssertionError("the search ran")

    monkeypatch.setattr(plan_args, "run_plan_search", never)
    text = tmp_path / "calib.txt"
    text.write_text("calibration text " * 20)
    model = tmp_path / "model"
    model.mkdir()
    base = ["plan", "search", "--text", str(text), "--budget", "0.3"]
    assert main([*base, str(tmp_path / "missing" / "model"), "--out", "p.json"]) == 2
    one_line_error(capsys, "does not exist", "missing")
    assert main([*base, str(model), "--out", str(tmp_path / "nodir" / "p.json")]) == 2
    one_line_error(capsys, "--out", "nodir")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe text")
    assert main(["plan", "search", str(model), "--text", str(bad), "--out", "p.json"]) == 2
    one_line_error(capsys, str(bad), "UTF-8")


def test_a_corrupt_summary_names_the_file(tmp_path, tiny_corpus, capsys):
    run = tmp_path / "run"
    assert main(["train", *tiny_args(tiny_corpus, run, steps=2)]) == 0
    (run / "summary.json").write_bytes(b"\xff" + json.dumps({}).encode())
    capsys.readouterr()
    assert main(["report", str(run)]) == 2
    one_line_error(capsys, "summary.json")


@pytest.mark.parametrize(
    ("policy", "extra", "named"),
    [("full", ["--controller.policy", "budget"], "controller.policy"),
     ("budget", ["--controller.budget", "0.5"], "controller.budget")],
)  # fmt: skip
def test_resuming_refuses_a_new_policy_or_option(tmp_path, policy, extra, named) -> None:
    import argparse

    from aah.cli.train_cmd import resolve_config
    from aah.training.run_config import RunConfig

    run = tmp_path / "run"
    run.mkdir()
    config = RunConfig()
    config.controller.policy = policy
    (run / "config.toml").write_text(config.to_toml())
    args = argparse.Namespace(resume=str(run), config=None)
    with pytest.raises(ValueError, match=f"cannot change .*{named}"):
        resolve_config(args, extra)
    resumed = resolve_config(args, ["--train.max_steps", "7"])  # what a resume may change
    assert resumed.train.max_steps == 7 and resumed.controller.policy == policy
