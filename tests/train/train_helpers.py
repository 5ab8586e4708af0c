"""A tiny training config shared by the loop tests."""

import json
from pathlib import Path

import torch

from aah.training.checkpoint import load_checkpoint
from aah.training.loop import TIMING_KEYS, train
from aah.training.run_config import RunConfig


def tiny_config(corpus: str, **overrides: str) -> RunConfig:
    config = RunConfig()
    config.override(
        [
            ("data.path", corpus),
            ("model.n_layer", "2"),
            ("model.n_head", "4"),
            ("model.n_kv_head", "2"),
            ("model.d_model", "32"),
            ("model.max_seq_len", "32"),
            ("train.batch_size", "4"),
            ("train.max_steps", "30"),
            ("train.warmup_steps", "5"),
            ("train.lr", "3e-3"),
            ("train.log_interval", "5"),
            ("train.eval_interval", "10"),
            ("train.eval_batches", "4"),
            ("train.checkpoint_interval", "7"),
            ("train.threads", "1"),
            *overrides.items(),
        ]
    )
    return config


def metrics(path: Path) -> list[dict]:
    """metrics.jsonl records without their timing fields."""
    return [
        {k: v for k, v in json.loads(line).items() if k not in TIMING_KEYS}
        for line in path.read_text().splitlines()
    ]


def assert_resume_is_bit_for_bit(
    tmp_path: Path, corpus: str, extra: dict[str, str], total: int, first: int
) -> list[dict]:
    """Train `total` steps in one go, and `first` steps then the rest with resume; weights,
    metrics (timing aside) and plans must be identical. Returns the plans.jsonl records.
    `first` must be an eval step of the whole run: a run's last step always evaluates."""
    whole, split = tmp_path / "whole", tmp_path / "split"
    train(tiny_config(corpus, **extra, **{"train.max_steps": str(total)}), whole, progress=False)
    part = tiny_config(corpus, **extra, **{"train.max_steps": str(first)})
    train(part, split, progress=False)
    part.train.max_steps = total
    train(part, split, resume=True, progress=False)
    a = load_checkpoint(whole / "checkpoints" / "last.pt")
    b = load_checkpoint(split / "checkpoints" / "last.pt")
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    assert metrics(whole / "metrics.jsonl") == metrics(split / "metrics.jsonl")
    plans = (whole / "plans.jsonl").read_text()
    assert plans == (split / "plans.jsonl").read_text()
    return [json.loads(line) for line in plans.splitlines()]
