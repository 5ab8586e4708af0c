"""The training loop: AdamW, warm-up + cosine LR, accumulation, clipping, control updates,
periodic eval, JSONL metrics, atomic checkpoints, exact resume, graceful stop, DDP, a
divergence guard (aah.training.divergence) and a run-directory lock (aah.training.run_dir).
The run's live objects are one `TrainState` (state.py), shared with the checkpoint
(session.py) and the metrics (metrics.py); one optimizer step is step.py.

Step numbering: `step` counts completed optimizer steps. A metrics line for step n is
written after the n-th optimizer step. The controller is asked `wants_update(s)` before the
step that starts with s steps done; if yes, `policy.update(s, qkv)` runs after the optimizer
step, with the Q/K/V of that step's first forward when `wants_activations(s)` (else None),
and a plan it returns is in force from step s + 1 (None keeps the plan). Only rank 0 runs
the controller; the plan is broadcast.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from aah import records
from aah.data import TokenSplits, load_tokens
from aah.training import distributed as dist_util
from aah.training import preflight, session
from aah.training.checkpoint import load_run_checkpoint
from aah.training.divergence import DivergenceGuard, TrainingDiverged, loss_limit
from aah.training.memory_estimate import check_memory
from aah.training.metrics import eval_record, summary_record
from aah.training.run_config import RunConfig
from aah.training.run_dir import claim
from aah.training.state import TrainState, build_state
from aah.training.step import AFTER_UPDATE, Invocation, optimizer_step
from aah.training.stop_request import StopRequest

#: metrics keys that measure time; everything else is a pure function of config and seed.
TIMING_KEYS = (
    "tokens_per_s",
    "ctrl_s",
    "ctrl_share",
    "elapsed_s",
    "eval_tokens_per_s",
    "train_s",
    "wall_s",
)


@dataclass
class TrainResult:
    run_dir: Path
    summary: dict[str, Any] | None  # None when stopped early
    plan: list[list[int]]
    interrupted: bool
    is_main: bool


def _load_data(config: RunConfig, info: dist_util.DistInfo, progress: bool) -> TokenSplits:
    # Rank 0 fills the token cache first; the others then read it.
    if info.is_main:
        splits = load_tokens(config.data, progress=progress, seq_len=config.seq_len)
    if info.enabled:
        torch.distributed.barrier()
    if not info.is_main:
        splits = load_tokens(config.data, seq_len=config.seq_len)
    return splits


def train(
    config: RunConfig,
    run_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    echo: Callable[[str], None] | None = None,
) -> TrainResult:
    """Train (or resume) the run in `run_dir`; see the module docstring for the contract.

    A run directory holding a run without a checkpoint starts again from scratch (also when
    asked to resume). `progress` shows bars on a terminal; `echo` (rank 0) receives one
    line per evaluation. TrainingDiverged when the loss blows up (the last good checkpoint
    stays); ValueError when another trainer holds `run_dir`.
    """
    config.validate()
    info, device = dist_util.setup(config.train.device)
    lock = None
    try:
        # Every rank uses rank 0's directory (a default name holds a timestamp).
        run_dir = Path(dist_util.broadcast_object(info, str(run_dir)))
        lock, resume = claim(run_dir, resume, info)
        return _train(config, run_dir, resume, progress, info, device, echo)
    finally:
        if lock is not None:
            lock.release()
        dist_util.teardown(info)


def _train(
    config: RunConfig,
    run_dir: Path,
    resume: bool,
    progress: bool,
    info: dist_util.DistInfo,
    device: torch.device,
    echo: Callable[[str], None] | None,
) -> TrainResult:
    if config.train.threads:
        torch.set_num_threads(config.train.threads)
    wall_start = time.perf_counter()
    check_memory(config.model, config.train.batch_size, device)  # before data and model
    payload, splits = _inputs(config, run_dir, resume, info, progress)
    state = build_state(config, splits, info, device, run_dir, wall_start)
    if payload is not None:
        session.restore(payload, state)
    if info.is_main:
        _open_records(state, resumed=payload is not None)
    loop = _start_loop(state, splits, progress, echo, resumed=payload is not None)
    with StopRequest() as stop:
        _run(state, loop, stop)
    loop.bar.close()
    if loop.diverged is not None:
        raise TrainingDiverged(loop.diverged)
    summary = None
    if not loop.interrupted and info.is_main:
        summary = _finish(state, loop)
    return TrainResult(run_dir, summary, state.model.window_plan(), loop.interrupted, info.is_main)


def _inputs(
    config: RunConfig, run_dir: Path, resume: bool, info: dist_util.DistInfo, progress: bool
) -> tuple[dict[str, Any] | None, TokenSplits]:
    """(the checkpoint to resume from or None, the token splits), checked against the config."""
    payload = load_run_checkpoint(run_dir / records.CHECKPOINT) if resume else None
    if payload is not None:
        preflight.check_steps(payload, config)
    splits = _load_data(config, info, progress and info.is_main)
    preflight.check_splits(splits, config)
    if payload is not None:
        preflight.check_resume(payload, splits, config)
    return payload, splits


def _open_records(state: TrainState, *, resumed: bool) -> None:
    """config.toml, and fresh metrics/plans files (or, on resume, those cut to the checkpoint)."""
    run_dir = state.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    records.write_text_atomic(run_dir / records.CONFIG, state.config.to_toml())
    if not resumed:
        records.write_text_atomic(run_dir / records.METRICS, "")
        records.write_text_atomic(run_dir / records.PLANS, "")
        records.append_jsonl(run_dir / records.PLANS, state.policy.record(0))
    else:  # forget what was logged after the checkpoint we resume from
        records.truncate_after(run_dir / records.METRICS, state.counters.step)
        # A plan record of step s is written after step s + 1 completed.
        records.truncate_after(run_dir / records.PLANS, state.counters.step, inclusive=False)


def _start_loop(
    state: TrainState,
    splits: TokenSplits,
    progress: bool,
    echo: Callable[[str], None] | None,
    *,
    resumed: bool,
) -> Invocation:
    info, device, cfg = state.info, state.device, state.config.train
    net: nn.Module = state.model
    if info.enabled:
        net = DistributedDataParallel(
            state.model, device_ids=[device] if device.type == "cuda" else None
        )
    amp = autocast_dtype(cfg.dtype, device)
    bar = tqdm(
        total=cfg.max_steps,
        initial=state.counters.step,
        disable=None if progress and info.is_main else True,  # None: only on a terminal
        dynamic_ncols=True,
        leave=True,
        desc="train",
    )
    guard = DivergenceGuard(
        loss_limit(state.config.model.vocab_size), info, device, amp, state.run_dir
    )
    saved_at = state.counters.step if resumed else -1
    return Invocation(splits, net, amp, guard, bar, echo, saved_at)


def _run(state: TrainState, loop: Invocation, stop: StopRequest) -> None:
    """Optimizer steps until max_steps, a stop request (checkpointed) or a divergence."""
    info, policy = state.info, state.policy
    while state.counters.step < state.config.train.max_steps:
        s = state.counters.step
        want = bool(policy.wants_update(s)) if info.is_main else False
        stop_now, want = _sync_flags(info, state.device, stop.requested, want)
        # Only rank 0 runs the controller, so only it keeps the step's Q/K/V.
        observe = want and info.is_main and policy.wants_activations(s)
        if stop_now:
            loop.interrupted = True
            break
        if not optimizer_step(state, loop, s, want, observe):
            return
    if loop.interrupted and loop.saved_at != state.counters.step:
        bad = loop.guard.weights_loss(state.model, loop.batch)
        if bad is None:
            session.save(state)
        else:
            c = state.counters
            loop.diverged = loop.guard.stop(
                AFTER_UPDATE, c.step, bad, loop.lr, c.tokens, loop.saved_at
            )


def _finish(state: TrainState, loop: Invocation) -> dict[str, Any]:
    """Write and return summary.json (rank 0, after the last step)."""
    if "val_loss" not in loop.last:  # resumed at its last step: nothing ran, evaluate anyway
        loop.last.update(eval_record(state, loop.splits, loop.amp))
    summary = summary_record(state, loop.last, loop.splits)
    records.write_json(state.run_dir / records.SUMMARY, summary)
    return summary


def autocast_dtype(name: str, device: torch.device) -> torch.dtype | None:
    """None for plain float32; bfloat16 when asked, or for "auto" on CUDA."""
    if name == "bfloat16" or (name == "auto" and device.type == "cuda"):
        return torch.bfloat16
    return None


def _sync_flags(
    info: dist_util.DistInfo, device: torch.device, stop: bool, want: bool
) -> tuple[bool, bool]:
    """Every rank agrees on stopping and on capturing: one tiny all-reduce per step."""
    if not info.enabled:
        return stop, want
    flags = torch.tensor([int(stop), int(want)], dtype=torch.int32, device=device)
    torch.distributed.all_reduce(flags, op=torch.distributed.ReduceOp.MAX)
    return bool(flags[0]), bool(flags[1])
