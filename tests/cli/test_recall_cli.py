"""Generated tasks end to end: accuracy in metrics, summary and `aah eval`; the context-use
curve; bad specs exit 2 with one line."""

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from aah.cli import main
from aah.data import DataConfig, load_tokens
from aah.data.loader import answer_marks
from aah.training.run_config import RunConfig

RUN_KEYS = {"step", "train_loss", "val_loss", "acr", "causal_coverage", "tokens_per_s"}
SUMMARY_KEYS = {
    "val_loss", "val_bpb", "acr", "causal_coverage", "executed_ratio", "train_tokens_per_s",
    "peak_rss_mb", "seed", "policy",
}  # fmt: skip


def task_run(out, *, seq_len, steps, corpus="synthetic:recall"):
    """`aah train` arguments of a tiny one-layer full-attention run on a generated task."""
    return [
        "train", "--out", str(out), "--no-progress", "--data.corpus", corpus,
        "--data.max_bytes", "40000", "--model.n_layer", "1", "--model.n_head", "2",
        "--model.n_kv_head", "2", "--model.d_model", "16", "--model.max_seq_len", str(seq_len),
        "--train.batch_size", "4", "--train.max_steps", str(steps), "--train.eval_interval", "2",
        "--train.eval_batches", "2", "--train.log_interval", "2", "--train.threads", "1",
        "--controller.policy", "full",
    ]  # fmt: skip


@pytest.mark.parametrize("corpus", ["synthetic:recall", "synthetic:passkey"])
def test_training_logs_accuracy_beside_the_run_contract(tmp_path, capsys, corpus):
    out = tmp_path / "run"
    assert main(task_run(out, seq_len=32, steps=4, corpus=corpus)) == 0
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in lines if "val_loss" in r]
    assert len(evals) == 2 and all(set(r) >= RUN_KEYS for r in evals)
    assert all(0.0 <= r["val_acc"] <= 1.0 for r in evals)
    assert all(set(r["val_acc_by_distance"]) == {"4-7", "8-15", "16-31"} for r in evals)
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) >= SUMMARY_KEYS
    assert summary["val_acc"] == evals[-1]["val_acc"]
    assert summary["val_acc_by_distance"] == evals[-1]["val_acc_by_distance"]
    capsys.readouterr()
    assert main(["eval", str(out), "--json"]) == 0
    printed = capsys.readouterr().out
    result = json.loads(printed.strip().splitlines()[-1])
    assert result["val_acc"] == pytest.approx(summary["val_acc"])
    assert result["val_answers"] > 0 and "recall accuracy" in printed


def test_cut_windows_curve_and_its_report(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(task_run(out, seq_len=64, steps=2)) == 0
    capsys.readouterr()
    assert main(["eval", str(out), "--cut-windows", "1,4,8", "--json"]) == 0
    printed = capsys.readouterr().out
    result = json.loads(printed.strip().splitlines()[-1])
    rows = {r["cut"]: r for r in result["cut_windows"]}
    assert [r["cut"] for r in result["cut_windows"]] == ["plan in force", "1", "4", "8", "full"]
    assert "every head cut to w" in printed
    # a full-attention run: the plan in force is full attention, and eval left it in force
    assert rows["full"]["val_bpb"] == pytest.approx(rows["plan in force"]["val_bpb"])
    assert result["val_bpb"] == pytest.approx(rows["full"]["val_bpb"])
    assert rows["4"]["val_bpb"] != rows["full"]["val_bpb"]
    assert set(rows["8"]["val_acc_by_distance"]) == {"4-7", "8-15", "16-31", "32-63"}
    # Cut to 1, each position sees only its own byte, so at the answers (after a key) the
    # model is a function of the key: it cannot beat the best such function on these answers.
    assert rows["1"]["val_acc"] <= best_blind_accuracy(seq_len=64, windows=2 * 4) + 1e-9
    assert json.loads((out / "cut_windows.json").read_text()) == result["cut_windows"]
    assert main(["report", str(out)]) == 0
    page = (out / "report" / "report.html").read_text()
    assert (out / "report" / "context_use.png").exists()
    assert (out / "report" / "recall.png").exists()
    assert "cut to w at test time" in page and "<td>plan in force</td>" in page


def best_blind_accuracy(*, seq_len, windows):
    """Accuracy of the best predictor that sees only the byte before each answer, on the
    answers the eval windows count."""
    splits = load_tokens(DataConfig(corpus="synthetic:recall", max_bytes=40000), seq_len=seq_len)
    starts = np.arange(windows) * seq_len
    marks = answer_marks(splits.val_answer_distance, starts, seq_len).numpy()
    by_key: dict[int, Counter] = {}
    for w, t in zip(*np.nonzero(marks), strict=True):
        i = starts[w] + t + 1
        by_key.setdefault(int(splits.val[i - 1]), Counter())[int(splits.val[i])] += 1
    best = sum(max(c.values()) for c in by_key.values())
    return best / int((marks > 0).sum())


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--data.corpus", "synthetic:nope"], "data.corpus"),
        (["--data.corpus", "synthetic:recall", "--data.recall_keys", "30"], "data.recall_keys"),
        (["--data.corpus", "synthetic:recall", "--data.recall_buckets", "8,4"], "recall_buckets"),
        (["--data.corpus", "synthetic:recall", "--model.max_seq_len", "4"], "sequence length"),
    ],
)
def test_bad_task_specs_exit_2_with_one_line(tmp_path, capsys, args, named):
    assert main(["train", "--out", str(tmp_path / "r"), "--no-progress", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert named in err and len(err.splitlines()) == 1


def test_bad_cut_windows_exit_2(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(task_run(out, seq_len=32, steps=2)) == 0
    capsys.readouterr()
    assert main(["eval", str(out), "--cut-windows", "0,4"]) == 2
    assert main(["eval", str(out), "--cut-windows", "a"]) == 2
    assert capsys.readouterr().err.count("--cut-windows") == 2


def test_recall_preset_loads():
    config = RunConfig.from_toml(Path(__file__).parents[2] / "configs" / "recall.toml")
    assert config.validate().data.corpus == "synthetic:recall"
    assert config.controller.policy == "full" and config.train.threads == 1
