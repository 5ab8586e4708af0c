"""The `aah` command line: help, config errors, train -> eval --json -> plan export -> load."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from cli_helpers import tiny_args

import aah
from aah.cli import main

SUBCOMMANDS = ["train", "sweep", "eval", "posthoc", "bench", "report", "generate", "chat", "plan"]


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_help_for_each_subcommand(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert f"usage: aah {command}" in capsys.readouterr().out


def test_python_dash_m_help():
    proc = subprocess.run(
        [sys.executable, "-m", "aah", "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0
    for command in SUBCOMMANDS:
        assert command in proc.stdout


def test_report_of_a_missing_run_exits_2(tmp_path, capsys):
    missing = tmp_path / "missing"
    assert main(["report", str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--model.n_layerz", "3"], "model.n_layerz"),
        (["--optim.lr", "3"], "optim.lr"),
        (["--train.max_steps", "many"], "train.max_steps"),
        (["--model.d_model", "30"], "model.d_model"),
        (["--controller.policy", "psychic"], "controller.policy"),
        (["--train.max_steps"], "train.max_steps"),
        (["stray"], "stray"),
    ],
)
def test_bad_config_exits_2_naming_the_key(args, named, capsys, tmp_path):
    assert main(["train", "--out", str(tmp_path / "r"), *args]) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_bad_toml_file_exits_2(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text("[model]\nn_layer = 2\n[trian]\nmax_steps = 3\n")
    assert main(["train", "--config", str(path), "--out", str(tmp_path / "r")]) == 2
    assert "trian" in capsys.readouterr().err


def test_train_eval_plan_load(tmp_path, tiny_corpus, capsys):
    run = tmp_path / "run"
    assert main(["train", *tiny_args(tiny_corpus, run)]) == 0
    out = capsys.readouterr().out
    assert "bits/byte" in out and "ACR" in out and "causal coverage" in out and "L1" in out
    assert main(["eval", str(run), "--json"]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    summary = json.loads((run / "summary.json").read_text())
    assert last["val_loss"] == pytest.approx(summary["val_loss"], rel=1e-6)
    assert last["val_bpb"] == pytest.approx(summary["val_bpb"], rel=1e-6)
    assert main(["plan", "export", str(run)]) == 0
    exported = json.loads(capsys.readouterr().out)
    model = aah.load(run)
    assert exported["windows"] == model.window_plan()
    assert not model.training and model(torch.zeros(1, 5, dtype=torch.long)).shape == (1, 5, 256)
    # the run directory is not overwritten, and a resume may not change the model
    assert main(["train", *tiny_args(tiny_corpus, run)]) == 2
    assert "--resume" in capsys.readouterr().err
    assert main(["train", "--resume", str(run), "--model.n_layer", "3"]) == 2
    assert "model.n_layer" in capsys.readouterr().err
    assert main(["eval", str(tmp_path / "missing")]) == 2


def test_sigint_checkpoints_and_exits_130(tmp_path, tiny_corpus):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "aah", "train", *tiny_args(tiny_corpus, run, steps=100_000)]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        deadline = time.time() + 60
        metrics = run / "metrics.jsonl"
        while time.time() < deadline and not (metrics.exists() and metrics.read_text()):
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr[-2000:]
    assert "--resume" in stdout
    from aah.training.checkpoint import load_checkpoint

    step = load_checkpoint(run / "checkpoints" / "last.pt")["step"]
    assert step >= 3
    # resume to a few steps past the interruption
    assert (
        main(["train", "--resume", str(run), "--train.max_steps", str(step + 2), "--no-progress"])
        == 0
    )
    assert json.loads((run / "summary.json").read_text())["steps"] == step + 2


def test_import_aah_is_light():
    code = "import sys, aah; print('torch' in sys.modules); print(callable(aah.load))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["False", "True"], proc.stderr


REGIMES = ("full-adaptive", "shallow-freeze", "deep-reuse", "grouping-off")


def test_bench_training_last_line_is_json(capsys, monkeypatch):
    assert main(["bench", "training", "--seq-lens", "16", "--steps", "1", "--warmup", "0",
                 "--batch-size", "1", "--threads", "1"]) == 0  # fmt: skip
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["benchmark"] == "training" and result["threads"] == 1
    rows = {r["plan"]: r for r in result["rows"]}
    assert set(rows) == {"full", "fixed-T/4", "budget", *(f"aah-v3-{r}" for r in REGIMES)}
    assert rows["full"]["causal_coverage"] == 1.0 and rows["fixed-T/4"]["acr"] == 0.25
    # The budget policy's own plan never exceeds its budget (0.3 by default).
    assert rows["budget"]["causal_coverage"] <= 0.3
    assert rows["full"]["controller_share"] == 0.0 and rows["budget"]["controller_share"] > 0
    assert main(["bench", "training", "--seq-lens", "x"]) == 2
    assert main(["bench", "training", "--seq-lens", "16", "--feature-rows", "-1"]) == 2
    from aah.bench import training
    from aah.controller.options import AdaptiveOptions

    seen: list[int] = []  # what each AAH-v3 policy (the one reading it) was built with
    real = training.make_policy
    real_gpt = training.GPT

    def spy(cfg, **d):
        if isinstance(cfg.options, AdaptiveOptions):
            seen.append(cfg.options.feature_rows)
        return real(cfg, **d)

    monkeypatch.setattr(training, "make_policy", spy)
    assert main(["bench", "training", "--seq-lens", "16", "--steps", "1", "--warmup", "0",
                 "--batch-size", "1", "--threads", "1", "--feature-rows", "4"]) == 0  # fmt: skip
    sampled = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert sampled["feature_rows"] == 4 and result["feature_rows"] == 0
    assert seen and set(seen) == {4}
    # The model's shape and the policies timed are the user's to choose.
    built = []
    monkeypatch.setattr(training, "GPT", lambda cfg: built.append(cfg) or real_gpt(cfg))
    shape = ["--n-layer", "1", "--d-model", "48", "--n-head", "3", "--d-ff", "64"]
    assert main(["bench", "training", "--seq-lens", "16", "--steps", "1", "--warmup", "0",
                 "--batch-size", "1", "--threads", "1", *shape,
                 "--policies", "aah-v3-grouping-off"]) == 0  # fmt: skip
    shaped = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert shaped["model"] == {"n_layer": 1, "d_model": 48, "n_head": 3, "d_ff": 64}
    assert [(c.n_layer, c.d_model, c.n_head, c.ff_dim) for c in built] == [(1, 48, 3, 64)]
    assert [r["plan"] for r in shaped["rows"]] == ["full", "fixed-T/4", "aah-v3-grouping-off"]
    for bad in (["--policies", "loss-ablation"], ["--d-model", "50", "--n-head", "3"],
                ["--n-layer", "0"], ["--d-ff", "-1"],
                ["--d-model", "60", "--n-head", "4"]):  # odd head dim: RoPE refuses it  # fmt: skip
        assert main(["bench", "training", "--seq-lens", "16", *bad]) == 2
    assert "--policies" in capsys.readouterr().err


def test_heavy_commands_tune_the_allocator_unless_told_not_to(monkeypatch):
    import aah.runtime
    from aah.cli import commands

    tuned, ran = [], []
    monkeypatch.setattr(aah.runtime, "tune_allocator", lambda: tuned.append(True) or True)
    help_text, add_arguments, _ = commands.COMMANDS["bench"]
    monkeypatch.setitem(
        commands.COMMANDS, "bench", (help_text, add_arguments, lambda a, e: ran.append(e) or 0)
    )
    assert main(["bench", "attention", "--reps", "1"]) == 0
    assert tuned == [True]
    assert main(["bench", "attention", "--no-tune-allocator"]) == 0
    assert tuned == [True] and len(ran) == 2
