"""One optimizer step of the loop: micro-batches, the divergence guard, the control update,
the metrics line and the checkpoint when due. `Invocation` holds what one invocation of
`aah.training.loop.train` keeps beside the `TrainState` (the bar, the guard, the last metrics)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from aah import records
from aah.data import TokenSplits
from aah.training import distributed as dist_util
from aah.training import session
from aah.training.divergence import DivergenceGuard
from aah.training.metrics import eval_record, log_record
from aah.training.schedule import learning_rate
from aah.training.state import TrainState

#: what the guard measured when an update, not the loss it came from, wrecked the weights.
AFTER_UPDATE = "loss after the update"


def _fresh_window() -> dict[str, float]:
    return {"tokens": 0, "seconds": 0.0, "ctrl": 0.0}


@dataclass
class Invocation:
    """What one invocation of the loop keeps beside the `TrainState`."""

    splits: TokenSplits
    net: nn.Module  # the model, or its DDP wrapper
    amp: torch.dtype | None
    guard: DivergenceGuard
    bar: tqdm
    echo: Callable[[str], None] | None
    saved_at: int  # the step of the checkpoint on disk (-1: none)
    window: dict[str, float] = field(default_factory=_fresh_window)  # since the last log line
    last: dict[str, Any] = field(default_factory=dict)  # the latest metrics, merged
    batch: tuple[torch.Tensor, torch.Tensor] | None = None  # the last one trained on
    lr: float = 0.0
    interrupted: bool = False
    diverged: str | None = None  # the message, once the guard stopped the run


def optimizer_step(state: TrainState, run: Invocation, s: int, want: bool, observe: bool) -> bool:
    """Optimizer step s + 1, its control update, log line and checkpoint; False if diverged."""
    cfg, counters, guard = state.config.train, state.counters, run.guard
    t0 = time.perf_counter()
    run.lr = lr = learning_rate(s, cfg)
    for group in state.optimizer.param_groups:
        group["lr"] = lr
    step_loss, captured = _forward_backward(state, run, observe)
    if guard.loss_diverged(step_loss):  # checked before the update can spread it
        run.diverged = guard.stop("train loss", s + 1, step_loss, lr, counters.tokens, run.saved_at)
        return False
    if cfg.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(state.model.parameters(), cfg.grad_clip)
    state.optimizer.step()
    state.optimizer.zero_grad(set_to_none=True)
    n = s + 1
    is_ckpt = (cfg.checkpoint_interval and n % cfg.checkpoint_interval == 0) or n == cfg.max_steps
    # Never checkpoint weights the update wrecked: the one on disk stays the last good.
    if is_ckpt and (bad := guard.weights_loss(state.model, run.batch)) is not None:
        run.diverged = guard.stop(AFTER_UPDATE, n, bad, lr, counters.tokens, run.saved_at)
        return False
    ctrl_s = _control(state, s, captured) if want else 0.0
    step_s = time.perf_counter() - t0
    counters.step, counters.tokens = n, counters.tokens + state.step_tokens
    counters.loss_sum += step_loss
    counters.loss_count += 1
    counters.train_seconds += step_s
    counters.ctrl_seconds += ctrl_s
    counters.ctrl_updates += int(want)
    run.window["tokens"] += state.step_tokens
    run.window["seconds"] += step_s
    run.window["ctrl"] += ctrl_s
    run.bar.update(1)
    _log(state, run, n)
    if is_ckpt:
        session.save(state)
        run.saved_at = n
    return True


def _forward_backward(
    state: TrainState, run: Invocation, observe: bool
) -> tuple[float, list[Any] | None]:
    """Gradients of one optimizer step's micro-batches: (mean loss, Q/K/V of the first
    forward when `observe`, else None)."""
    cfg, info, device = state.config.train, state.info, state.device
    step_loss, captured = 0.0, None
    for micro in range(cfg.grad_accum):
        x, y = (t.to(device, non_blocking=True) for t in state.loader.next_batch())
        capture = observe and micro == 0
        sync = not info.enabled or micro == cfg.grad_accum - 1
        ctx = contextlib.nullcontext() if sync else run.net.no_sync()
        record = state.model.capturing() if capture else contextlib.nullcontext(captured)
        with ctx, record as got:
            with torch.autocast(
                device.type, dtype=run.amp or torch.float32, enabled=run.amp is not None
            ):
                logits = run.net(x)
            captured = got
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
            (loss / cfg.grad_accum).backward()
        step_loss += float(loss.detach()) / cfg.grad_accum
    run.batch = (x, y)
    return step_loss, captured


def _log(state: TrainState, run: Invocation, n: int) -> None:
    """The metrics line of step n when it is due (every log_interval, every eval, the last)."""
    cfg, info = state.config.train, state.info
    is_eval = (cfg.eval_interval and n % cfg.eval_interval == 0) or n == cfg.max_steps
    if not (n % cfg.log_interval == 0 or is_eval):
        return
    # A line forced by eval/the last step keeps the loss average running, so a resumed
    # run's later lines equal those of an uninterrupted one.
    record = log_record(state, run.lr, run.window, reset=n % cfg.log_interval == 0)
    if is_eval and info.is_main:
        record.update(eval_record(state, run.splits, run.amp))
        if run.echo is not None:
            with run.bar.external_write_mode():  # the line goes above the bar
                run.echo(_eval_line(record, cfg.max_steps))
    if info.is_main:
        records.append_jsonl(state.run_dir / records.METRICS, record)
        run.bar.set_postfix(
            loss=f"{record['train_loss']:.3f}",
            tok_s=f"{record['tokens_per_s']:.0f}",
            acr=f"{record['acr']:.2f}",
        )
    run.last.update(record)
    run.window = _fresh_window()


def _eval_line(record: dict[str, Any], max_steps: int) -> str:
    line = (
        f"step {record['step']}/{max_steps}  train loss {record['train_loss']:.4f}"
        f"  val loss {record['val_loss']:.4f} nats  bits/byte {record['val_bpb']:.4f}"
    )
    if "val_acc" in record:
        line += f"  recall {record['val_acc']:.3f}"
    return line + f"  ACR {record['acr']:.3f}"


def _control(state: TrainState, s: int, captured: list[Any] | None) -> float:
    """Run the policy's update after step s (rank 0), broadcast and apply its plan: seconds."""
    start = time.perf_counter()
    if captured is not None:  # the controller reads float32, whatever the autocast dtype
        captured = [tuple(t.float() for t in qkv) for qkv in captured]
    plan = state.policy.update(s, captured) if state.info.is_main else None
    plan = dist_util.broadcast_object(state.info, plan)
    if plan is not None:  # None: the policy only took measurements
        state.model.set_window_plan(plan)
        if state.info.is_main:
            records.append_jsonl(state.run_dir / records.PLANS, state.policy.record(s))
    return time.perf_counter() - start
