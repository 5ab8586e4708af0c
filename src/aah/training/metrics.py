"""What the loop writes: metrics lines, eval results, the final summary (pure of file I/O)."""

from __future__ import annotations

import time
from typing import Any

import torch

from aah.data import TokenSplits
from aah.eval.evaluate import evaluate_loss, peak_rss_mb, plan_diagnostics
from aah.training import distributed as dist_util
from aah.training import fingerprint
from aah.training.provenance import provenance
from aah.training.state import Counters, TrainState


def log_record(
    state: TrainState, lr: float, window: dict[str, float], *, reset: bool
) -> dict[str, Any]:
    """One metrics.jsonl line; `reset` starts a new training-loss average (collective)."""
    counters = state.counters
    train_loss = dist_util.mean_across(
        state.info, counters.loss_sum / counters.loss_count, state.device
    )
    if reset:
        counters.loss_sum, counters.loss_count = 0.0, 0
    diag = plan_diagnostics(state.model.window_plan(), state.config.seq_len)
    seconds = window["seconds"]
    return {
        "step": counters.step,
        "train_loss": train_loss,
        "lr": lr,
        "tokens": counters.tokens,
        "acr": diag["acr"],
        "causal_coverage": diag["causal_coverage"],
        "tokens_per_s": window["tokens"] / seconds if seconds > 0 else 0.0,
        "ctrl_s": window["ctrl"],
        "ctrl_share": window["ctrl"] / seconds if seconds > 0 else 0.0,
        # Cumulative clocks (over resumes too): x-axes for quality at equal time.
        "train_s": counters.train_seconds,
        "wall_s": wall_seconds(counters, state.wall_start),
    }


def eval_record(state: TrainState, splits: TokenSplits, amp: torch.dtype | None) -> dict[str, Any]:
    """The validation metrics of the model now (loss, bits/byte, recall on a generated task)."""
    cfg = state.config.train
    ev = evaluate_loss(
        state.model,
        splits.val,
        batch_size=cfg.batch_size,
        seq_len=state.config.seq_len,
        max_batches=cfg.eval_batches,
        device=state.device,
        autocast_dtype=amp,
        answers=splits.val_answer_distance,
        buckets=splits.answer_buckets or (),
        layout=cfg.eval_layout,
    )
    keep = ("val_loss", "val_bpb", "eval_tokens_per_s", "val_acc", "val_acc_by_distance")
    return {k: ev[k] for k in keep if k in ev}


def wall_seconds(counters: Counters, wall_start: float) -> float:
    """Wall seconds over this invocation and every earlier one of the same run."""
    return counters.wall_seconds + time.perf_counter() - wall_start


def summary_record(state: TrainState, last: dict[str, Any], splits: TokenSplits) -> dict[str, Any]:
    """summary.json: the last metrics and the run's totals, cost and provenance."""
    config, model, counters = state.config, state.model, state.counters
    diag = plan_diagnostics(model.window_plan(), config.seq_len)
    train_s = counters.train_seconds
    return {
        "val_loss": last.get("val_loss"),
        "val_bpb": last.get("val_bpb"),
        **{k: last[k] for k in ("val_acc", "val_acc_by_distance") if k in last},
        "acr": diag["acr"],
        "causal_coverage": diag["causal_coverage"],
        "executed_ratio": diag.get("executed_ratio"),
        "executed_backend": diag.get("executed_backend"),
        "train_tokens_per_s": counters.tokens / train_s if train_s > 0 else 0.0,
        "eval_tokens_per_s": last.get("eval_tokens_per_s"),
        "ctrl_s": counters.ctrl_seconds,
        "ctrl_share": counters.ctrl_seconds / train_s if train_s > 0 else 0.0,
        "peak_rss_mb": peak_rss_mb(),
        "seed": config.train.seed,
        "policy": config.controller.policy,
        "world_size": state.info.world_size,
        "steps": counters.step,
        "tokens": counters.tokens,
        "wall_s": wall_seconds(counters, state.wall_start),
        "train_s": train_s,
        "n_params": model.num_params(),
        "seq_len": config.seq_len,
        "corpus": splits.name,
        "backend": config.model.backend,
        fingerprint.KEY: splits.content_hash,
        **provenance(),
    }
