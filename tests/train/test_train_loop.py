"""The loop end to end on a tiny corpus: learning, run-dir contract, exact resume."""

import json
import math

import pytest
from train_helpers import assert_resume_is_bit_for_bit, tiny_config

from aah.controller import POLICIES
from aah.controller.config import REPLAY_POLICIES
from aah.training.checkpoint import load_checkpoint
from aah.training.loop import train

FROM_FILE = ("static", *REPLAY_POLICIES)


def test_loss_falls_and_run_dir_contract(tmp_path, tiny_corpus):
    run = tmp_path / "run"
    result = train(tiny_config(tiny_corpus, **{"train.max_steps": "40"}), run, progress=False)
    assert not result.interrupted
    for name in ("config.toml", "metrics.jsonl", "plans.jsonl", "summary.json"):
        assert (run / name).is_file(), name
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [5, 10, 15, 20, 25, 30, 35, 40]
    assert lines[-1]["train_loss"] < lines[0]["train_loss"] - 0.5
    evals = [r for r in lines if "val_loss" in r]
    assert [r["step"] for r in evals] == [10, 20, 30, 40]
    for r in evals:
        assert {"val_bpb", "acr", "causal_coverage", "tokens_per_s"} <= r.keys()
        assert math.isclose(r["val_bpb"], r["val_loss"] / math.log(2))
    assert evals[-1]["val_loss"] < evals[0]["val_loss"]
    summary = json.loads((run / "summary.json").read_text())
    required = {
        "val_loss",
        "val_bpb",
        "acr",
        "causal_coverage",
        "executed_ratio",
        "train_tokens_per_s",
        "peak_rss_mb",
        "seed",
        "policy",
        "world_size",
        "steps",
        "tokens",
        "wall_s",
    }
    assert required <= summary.keys()
    assert summary["steps"] == 40 and summary["tokens"] == 40 * 4 * 32
    assert summary["val_loss"] == evals[-1]["val_loss"] and summary["world_size"] == 1
    plans = [json.loads(line) for line in (run / "plans.jsonl").read_text().splitlines()]
    assert plans[0]["step"] == 0 and len(plans[0]["windows"]) == 2
    assert load_checkpoint(run / "checkpoints" / "last.pt")["step"] == 40


def test_resume_is_bit_for_bit(tmp_path, tiny_corpus):
    # Dropout, accumulation and a controller that changes windows all must continue exactly.
    extra = {
        "model.dropout": "0.1",
        "train.grad_accum": "2",
        "train.decay_steps": "24",
        "controller.policy": "random",
        "controller.random_resample": "true",
        "controller.warmup_steps": "3",
        "controller.interval": "4",
        "train.log_interval": "4",
        "train.eval_interval": "6",
    }
    records = assert_resume_is_bit_for_bit(tmp_path, tiny_corpus, extra, total=24, first=12)
    windows = [r["windows"] for r in records]
    assert len({json.dumps(w) for w in windows}) > 2  # the plan really changed along the way


# static and the replays read a file: their own tests (test_static_policy_..., test_replay.py)
@pytest.mark.parametrize("policy", [p for p in POLICIES if p not in FROM_FILE])
def test_every_policy_drives_the_model(tmp_path, tiny_corpus, policy):
    config = tiny_config(
        tiny_corpus,
        **{
            "train.max_steps": "6",
            "train.eval_interval": "0",
            "train.checkpoint_interval": "0",
            "controller.policy": policy,
            "controller.warmup_steps": "1",
            "controller.interval": "2",
            "controller.min_group_size": "1",
        },
    )
    result = train(config, tmp_path / policy, progress=False)
    plans = [json.loads(x) for x in (tmp_path / policy / "plans.jsonl").read_text().splitlines()]
    assert plans[-1]["windows"] == result.plan
    assert all(len(row) == 4 for row in result.plan) and len(result.plan) == 2
    assert result.summary["policy"] == policy and math.isfinite(result.summary["val_loss"])
    if policy != "full":  # the policy decided, and the model trained under what it decided
        assert result.plan != [[config.model.max_seq_len] * 4 for _ in range(2)]
        assert result.summary["causal_coverage"] < 1.0


def test_static_policy_reads_a_plan_file(tmp_path, tiny_corpus):
    plan = [[4, 8, 16, 32], [32, 16, 8, 4]]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"windows": plan}))
    config = tiny_config(
        tiny_corpus,
        **{"train.max_steps": "3", "controller.policy": "static", "controller.warmup_steps": "0"},
        **{"controller.static_plan": str(path)},
    )
    assert train(config, tmp_path / "run", progress=False).plan == plan
