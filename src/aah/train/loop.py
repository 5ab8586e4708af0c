"""The training loop: AdamW, warm-up + cosine LR, accumulation, clipping, control updates,
periodic eval, JSONL metrics, atomic checkpoints, exact resume, graceful stop, DDP, a
divergence guard (aah.train.divergence) and a run-directory lock (aah.train.run_dir).

Step numbering: `step` counts completed optimizer steps. A metrics line for step n is
written after the n-th optimizer step. The controller is asked `wants_update(s)` before the
step that starts with s steps done; if yes, `policy.update(s, qkv)` runs after the optimizer
step, with the Q/K/V of that step's first forward when `wants_activations(s)` (else None),
and a plan it returns is in force from step s + 1 (None keeps the plan). Only rank 0 runs
the controller; the plan is broadcast.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from aah.controller import make_policy
from aah.data import BatchLoader, TokenSplits, load_tokens
from aah.eval import records
from aah.model import GPT
from aah.train import distributed as dist_util
from aah.train import preflight
from aah.train.checkpoint import load_run_checkpoint, save_checkpoint
from aah.train.divergence import DivergenceGuard, TrainingDiverged, loss_limit
from aah.train.metrics import eval_record, log_record, summary_record, wall_seconds
from aah.train.run_config import RunConfig
from aah.train.run_dir import claim
from aah.train.schedule import learning_rate
from aah.train.session import Counters, build_optimizer, checkpoint_payload, restore
from aah.train.signals import StopRequest

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
#: what the guard measured when an update, not the loss it came from, wrecked the weights.
AFTER_UPDATE = "loss after the update"


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
    cfg, seq_len = config.train, config.seq_len
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    wall_start = time.perf_counter()
    payload = load_run_checkpoint(run_dir / records.CHECKPOINT) if resume else None
    if payload is not None:
        preflight.check_steps(payload, config)
    splits = _load_data(config, info, progress and info.is_main)
    preflight.check_splits(splits, config)
    if payload is not None:
        preflight.check_resume(payload, splits, config)
    torch.manual_seed(cfg.seed)
    model = GPT(config.model).to(device)
    mc = config.model
    policy = make_policy(
        config.controller,
        n_layer=mc.n_layer,
        n_head=mc.n_head,
        n_kv_head=mc.n_kv_head,
        seq_len=seq_len,
    )
    model.set_window_plan(policy.initial_plan())
    optimizer = build_optimizer(model, cfg)
    loader = BatchLoader(
        splits.train,
        cfg.batch_size,
        seq_len,
        seed=cfg.seed,
        rank=info.rank,
        world_size=info.world_size,
    )
    torch.manual_seed(cfg.seed + 1 + info.rank)  # training-time randomness (dropout), per rank
    counters = Counters()
    if payload is not None:
        counters = restore(payload, model, optimizer, policy, loader, info)
    if info.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        records.write_text_atomic(run_dir / records.CONFIG, config.to_toml())
        if payload is None:
            records.write_text_atomic(run_dir / records.METRICS, "")
            records.write_text_atomic(run_dir / records.PLANS, "")
            records.append_jsonl(run_dir / records.PLANS, policy.record(0))
        else:  # forget what was logged after the checkpoint we resume from
            records.truncate_after(run_dir / records.METRICS, counters.step)
            # A plan record of step s is written after step s + 1 completed.
            records.truncate_after(run_dir / records.PLANS, counters.step, inclusive=False)
    net: torch.nn.Module = model
    if info.enabled:
        net = DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None)
    amp = autocast_dtype(cfg.dtype, device)
    bar = tqdm(
        total=cfg.max_steps,
        initial=counters.step,
        disable=None if progress and info.is_main else True,  # None: only on a terminal
        dynamic_ncols=True,
        leave=True,
        desc="train",
    )
    window = {"tokens": 0, "seconds": 0.0, "ctrl": 0.0}
    saved_at = counters.step if payload is not None else -1
    interrupted = False
    guard = DivergenceGuard(loss_limit(config.model.vocab_size), info, device, amp, run_dir)
    diverged: str | None = None  # the message, once the guard stopped the run
    batch: tuple[torch.Tensor, torch.Tensor] | None = None  # the last one trained on
    last: dict[str, Any] = {}
    with StopRequest() as stop:
        while counters.step < cfg.max_steps:
            s = counters.step
            want = bool(policy.wants_update(s)) if info.is_main else False
            stop_now, want = _sync_flags(info, device, stop.requested, want)
            # Only rank 0 runs the controller, so only it keeps the step's Q/K/V.
            observe = want and info.is_main and policy.wants_activations(s)
            if stop_now:
                interrupted = True
                break
            t0 = time.perf_counter()
            lr = learning_rate(s, cfg)
            for group in optimizer.param_groups:
                group["lr"] = lr
            step_loss, captured = 0.0, None
            for micro in range(cfg.grad_accum):
                x, y = (t.to(device, non_blocking=True) for t in loader.next_batch())
                capture = observe and micro == 0
                sync = not info.enabled or micro == cfg.grad_accum - 1
                ctx = contextlib.nullcontext() if sync else net.no_sync()
                with ctx:
                    with torch.autocast(
                        device.type, dtype=amp or torch.float32, enabled=amp is not None
                    ):
                        out = net(x, capture_qkv=capture)
                    logits, captured = out if capture else (out, captured)
                    loss = F.cross_entropy(
                        logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1)
                    )
                    (loss / cfg.grad_accum).backward()
                step_loss += float(loss.detach()) / cfg.grad_accum
            batch = (x, y)
            if guard.loss_diverged(step_loss):  # checked before the update can spread it
                diverged = guard.stop("train loss", s + 1, step_loss, lr, counters.tokens, saved_at)
                break
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            n = s + 1
            is_ckpt = (cfg.checkpoint_interval and n % cfg.checkpoint_interval == 0) or (
                n == cfg.max_steps
            )
            # Never checkpoint weights the update wrecked: the one on disk stays the last good.
            if is_ckpt and (bad := guard.weights_loss(model, batch)) is not None:
                diverged = guard.stop(AFTER_UPDATE, n, bad, lr, counters.tokens, saved_at)
                break
            ctrl_s = _control(policy, model, info, s, captured, run_dir) if want else 0.0
            step_s = time.perf_counter() - t0
            step_tokens = cfg.batch_size * seq_len * cfg.grad_accum * info.world_size
            counters.step, counters.tokens = n, counters.tokens + step_tokens
            counters.loss_sum += step_loss
            counters.loss_count += 1
            counters.train_seconds += step_s
            counters.ctrl_seconds += ctrl_s
            counters.ctrl_updates += int(want)
            window["tokens"] += step_tokens
            window["seconds"] += step_s
            window["ctrl"] += ctrl_s
            bar.update(1)
            is_eval = (cfg.eval_interval and n % cfg.eval_interval == 0) or n == cfg.max_steps
            if n % cfg.log_interval == 0 or is_eval:
                # A line forced by eval/the last step keeps the loss average running, so a
                # resumed run's later lines equal those of an uninterrupted one.
                record = log_record(
                    counters,
                    lr,
                    window,
                    model,
                    seq_len,
                    info,
                    device,
                    reset=n % cfg.log_interval == 0,
                    wall_start=wall_start,
                )
                if is_eval and info.is_main:
                    record.update(eval_record(model, splits, cfg, seq_len, device, amp))
                    if echo is not None:
                        with bar.external_write_mode():  # the line goes above the bar
                            echo(_eval_line(record, cfg.max_steps))
                if info.is_main:
                    records.append_jsonl(run_dir / records.METRICS, record)
                    bar.set_postfix(
                        loss=f"{record['train_loss']:.3f}",
                        tok_s=f"{record['tokens_per_s']:.0f}",
                        acr=f"{record['acr']:.2f}",
                    )
                last.update(record)
                window = {"tokens": 0, "seconds": 0.0, "ctrl": 0.0}
            if is_ckpt:
                _checkpoint(config, model, optimizer, policy, loader, counters, info, run_dir,
                            wall_start, splits.content_hash)  # fmt: skip
                saved_at = n
        if interrupted and saved_at != counters.step:
            bad = guard.weights_loss(model, batch)
            if bad is None:
                _checkpoint(config, model, optimizer, policy, loader, counters, info, run_dir,
                            wall_start, splits.content_hash)  # fmt: skip
            else:
                diverged = guard.stop(
                    AFTER_UPDATE, counters.step, bad, lr, counters.tokens, saved_at
                )
    bar.close()
    if diverged is not None:
        raise TrainingDiverged(diverged)
    summary = None
    if not interrupted and info.is_main:
        if "val_loss" not in last:  # resumed at its last step: nothing ran, evaluate anyway
            last.update(eval_record(model, splits, cfg, seq_len, device, amp))
        summary = summary_record(config, model, counters, last, info, splits, wall_start)
        records.write_json(run_dir / records.SUMMARY, summary)
    return TrainResult(run_dir, summary, model.window_plan(), interrupted, info.is_main)


def _eval_line(record: dict[str, Any], max_steps: int) -> str:
    line = (
        f"step {record['step']}/{max_steps}  train loss {record['train_loss']:.4f}"
        f"  val loss {record['val_loss']:.4f} nats  bits/byte {record['val_bpb']:.4f}"
    )
    if "val_acc" in record:
        line += f"  recall {record['val_acc']:.3f}"
    return line + f"  ACR {record['acr']:.3f}"


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


def _control(
    policy: Any, model: GPT, info: dist_util.DistInfo, s: int, captured: list | None, run_dir: Path
) -> float:
    start = time.perf_counter()
    if captured is not None:  # the controller reads float32, whatever the autocast dtype
        captured = [tuple(t.float() for t in qkv) for qkv in captured]
    plan = policy.update(s, captured) if info.is_main else None
    plan = dist_util.broadcast_object(info, plan)
    if plan is not None:  # None: the policy only took measurements
        model.set_window_plan(plan)
        if info.is_main:
            records.append_jsonl(run_dir / records.PLANS, policy.record(s))
    return time.perf_counter() - start


def _checkpoint(
    config: RunConfig,
    model: GPT,
    optimizer: torch.optim.Optimizer,
    policy: Any,
    loader: BatchLoader,
    counters: Counters,
    info: dist_util.DistInfo,
    run_dir: Path,
    wall_start: float,
    data_fingerprint: str,
) -> None:
    prior = counters.wall_seconds
    # The stored total becomes the prior wall time of a resumed run.
    counters.wall_seconds = wall_seconds(counters, wall_start)
    payload = checkpoint_payload(
        config, model, optimizer, policy, loader, counters, info, data_fingerprint
    )
    counters.wall_seconds = prior
    if payload is None:
        return
    path = run_dir / records.CHECKPOINT
    try:
        save_checkpoint(path, payload)
    except OSError as err:  # e.g. disk full: the write is atomic, the old file stays
        raise ValueError(
            f"cannot write checkpoint {str(path)!r} at step {counters.step}: "
            f"{err.strerror or err}; the previous checkpoint, if any, is intact"
        ) from None
