"""`aah train`: build the config (TOML + dotted overrides), train or resume, print the result."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from aah.cli.overrides import parse_overrides

EPILOG = """\
config:
  --config FILE.toml    sections [model] [train] [data] [controller], keys = config fields
                        ([controller]: policy, warmup_steps, seed and the policy's options)
  --SECTION.KEY VALUE   override one field, e.g. --model.n_layer 6 --train.max_steps 200
                        --controller.policy budget --controller.windows 128,256,512
resume:
  aah train --resume RUN_DIR [--train.max_steps N]   continue exactly where it stopped
  (only train.max_steps and logging/eval/checkpoint cadence, device, threads may change;
  to extend a run exactly, set train.decay_steps to the final length from the start)
  a run that stopped before its first checkpoint starts again from scratch (with a notice),
  from --out or --resume; a run with a checkpoint or summary.json is never overwritten
run directory lock:
  RUN_DIR/train.lock (pid, host, start time) keeps a second trainer out while one runs;
  a lock left by a trainer that no longer runs on this host is taken over with a notice
divergence:
  a non-finite training loss, or one above 10 x ln(vocab_size) nats (ten times a uniform
  guess), stops the run (exit 2); the last good checkpoint stays, metrics.jsonl ends with
  a line holding "diverged": true, and no summary.json is written
output:
  one line per evaluation (step, train/val loss, bits/byte, ACR) on stdout; progress bars
  on stderr only when it is a terminal; a warning when controller.warmup_steps >=
  train.max_steps for a windowed policy (the run would never leave full attention)
exit codes: 0 done, 2 bad config / run directory in use / training diverged,
  130 stopped by Ctrl-C after writing a checkpoint
distributed: torchrun --nproc_per_node N -m aah train ... (gloo on CPU, nccl on CUDA)
"""


def epilog() -> str:
    """EPILOG, then every config field with its type and default."""
    from aah.cli.config_help import fields_text

    return EPILOG + "\n" + fields_text()


#: fields that may change on --resume without breaking the run's continuity.
RESUMABLE = {
    "train.max_steps",
    "train.eval_interval",
    "train.eval_batches",
    "train.eval_layout",
    "train.log_interval",
    "train.checkpoint_interval",
    "train.device",
    "train.threads",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE.toml", help="TOML config file")
    p.add_argument("--out", metavar="RUN_DIR", help="run directory (default runs/<time>-<policy>)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR")
    p.add_argument(
        "--no-progress", action="store_true", help="no progress bars (also off when not a terminal)"
    )


def resolve_config(args: argparse.Namespace, extra: list[str]):  # -> RunConfig
    from aah.training.run_config import RunConfig

    overrides = parse_overrides(extra)
    if args.resume:
        if args.config:
            raise ValueError("--config cannot be combined with --resume (the run has its config)")
        config = RunConfig.from_toml(Path(args.resume) / "config.toml")
        before = config.flat()
        config.override(overrides)
        after = config.flat()  # a new policy brings other option keys: compare both key sets
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        frozen = [k for k in changed if k not in RESUMABLE]
        if frozen:
            raise ValueError(f"cannot change {', '.join(frozen)} when resuming")
    else:
        config = RunConfig.from_toml(args.config) if args.config else RunConfig()
        config.override(overrides)
    return config.validate()


def run(args: argparse.Namespace, extra: list[str]) -> int:
    config = resolve_config(args, extra)
    if args.resume and args.out and Path(args.out) != Path(args.resume):
        raise ValueError("--out cannot differ from --resume")
    run_dir = Path(args.resume or args.out or default_run_dir(config.controller.policy))
    from aah.cli.run_summary import print_summary
    from aah.training.divergence import TrainingDiverged
    from aah.training.loop import train

    main_rank = os.environ.get("RANK", "0") == "0"
    if main_rank:
        print(f"run: {run_dir}  (policy {config.controller.policy}, T = {config.seq_len}, "
              f"{config.train.max_steps} steps)", flush=True)  # fmt: skip
        if (warning := warmup_warning(config)) is not None:
            print(f"warning: {warning}", file=sys.stderr, flush=True)
        if unused := config.controller.unused():
            names = ", ".join(f"controller.{k}" for k in unused)
            print(f"notice: {names}: not read by policy {config.controller.policy!r}, ignored",
                  file=sys.stderr, flush=True)  # fmt: skip
    # Bars only on a terminal: in a log file their frames are noise.
    progress = not args.no_progress and sys.stderr.isatty()
    try:
        result = train(config, run_dir, resume=bool(args.resume), progress=progress, echo=_echo)
    except TrainingDiverged as err:
        raise ValueError(str(err)) from None  # a one-line error, exit 2
    if not result.is_main:
        return 130 if result.interrupted else 0
    if result.interrupted:
        print(
            f"stopped: checkpoint written to {run_dir / 'checkpoints' / 'last.pt'}; "
            f"continue with: aah train --resume {run_dir}"
        )
        return 130
    run_dir = result.run_dir
    print_summary(run_dir, result.summary or {}, result.plan, config.seq_len)
    print(f"next: aah eval {run_dir} --json   |   aah plan export {run_dir}")
    return 0


def warmup_warning(config) -> str | None:  # config: RunConfig
    """Why a windowed run would never leave full attention, or None."""
    from aah.controller.config import REPLAY_POLICIES

    ctrl, steps = config.controller, config.train.max_steps
    # fixed, static and random may start windowed; the controllers always warm up first;
    # a replay follows its source's schedule, whatever warmup_steps says.
    from_start = getattr(ctrl.options, "windowed_from_start", False)
    replays = ctrl.policy in REPLAY_POLICIES
    if ctrl.policy == "full" or from_start or replays or ctrl.warmup_steps < steps:
        return None
    return (
        f"controller.warmup_steps ({ctrl.warmup_steps}) >= train.max_steps ({steps}): policy "
        f"{ctrl.policy!r} never leaves full attention in this run"
    )


def _echo(line: str) -> None:
    print(line, flush=True)


def default_run_dir(policy: str) -> str:
    return str(Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{policy}")
