"""`aah sweep SUITE.toml`: train a grid of regimes x seeds, resumable, into results CSVs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import get_args

from aah.choices import SweepExecutor
from aah.cli.overrides import parse_overrides

EPILOG = """\
a suite file is a run config plus a [sweep] table:
  [sweep]
  regimes = ["full", "fixed", "budget"]   # policy names, or names defined in [sweep.variants]
  seeds = [0, 1, 2]                       # each sets train.seed and controller.seed
output:
  OUT/<name>.csv          one row per finished cell (regime, seed, ..., val_bpb, wall_s)
  OUT/<name>/<regime>-s<seed>/   each cell's run directory and train.log
resume: run the same command again; finished cells are skipped, a cell cut short resumes
from its last checkpoint. Ctrl-C checkpoints the running cells and exits 130.
parallel: --jobs 2 trains two cells at once, each in its own process.
cluster: --executor slurm submits one Slurm job per cell through submitit
  (pip install 'aah-attention[cluster]'), e.g.
  aah sweep SUITE.toml --executor slurm --slurm-partition gpu --slurm-time 240 --gpus-per-cell 1
  other sbatch settings go in the suite's [slurm] table (account = "lab", qos = "high", ...);
  --executor submitit-local runs the same path on this machine; --status lists each cell
  and its job; Ctrl-C leaves submitted jobs running and prints how to cancel them.
overrides: --SECTION.KEY VALUE applies to every cell, e.g. --train.max_steps 50
then: aah report OUT
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("suite", metavar="SUITE.toml", help="suite file, e.g. configs/screening.toml")
    p.add_argument(
        "--out", metavar="DIR", default="results", help="results folder (default: results)"
    )
    p.add_argument("--seeds", metavar="LIST", help="comma list replacing sweep.seeds, e.g. 0,1")
    p.add_argument("--regimes", metavar="LIST", help="comma list replacing sweep.regimes")
    p.add_argument(
        "--jobs", metavar="N", type=int,
        help="cells trained at once (default 1; with a submitit executor, every cell); "
        "locally each uses train.threads threads, so keep N x train.threads at or under the "
        "machine's cores",
    )  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="list the cells and their state only")
    p.add_argument(
        "--status", action="store_true",
        help="each cell's state (done, stopped at step N, todo) and its last job",
    )  # fmt: skip
    p.add_argument(
        "--executor", choices=get_args(SweepExecutor), default="local",
        help="where cells run: local processes (default), Slurm jobs through submitit, or "
        "submitit's local executor (the Slurm path without a cluster)",
    )  # fmt: skip
    p.add_argument("--slurm-partition", metavar="NAME", help="the Slurm partition of every job")
    p.add_argument(
        "--slurm-time", metavar="MIN", type=int,
        help="each job's time limit in minutes (required with --executor slurm); a cell that "
        "runs out checkpoints and is requeued, resuming where it stopped",
    )  # fmt: skip
    p.add_argument(
        "--gpus-per-cell", metavar="N", type=int, default=0,
        help="GPUs per cell (default 0); N > 1 trains the cell with DDP across them (torchrun)",
    )  # fmt: skip
    p.add_argument("--cpus-per-cell", metavar="N", type=int, help="CPU cores per cell's job")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument(
        "--commit", action="store_true",
        help="git-commit each finished cell's folder and the CSV as it lands (only those "
        "paths; .gitignore keeps checkpoints out)",
    )  # fmt: skip


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from aah.sweep import SweepConfig, run_sweep
    from aah.sweep.cluster import ClusterOptions
    from aah.sweep.runner import CellFailed

    if args.jobs is not None and args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    sweep = SweepConfig.from_toml(args.suite)
    cluster = ClusterOptions(
        executor=args.executor, partition=args.slurm_partition, time_min=args.slurm_time,
        gpus_per_cell=args.gpus_per_cell, cpus_per_cell=args.cpus_per_cell, slurm=sweep.slurm,
    )  # fmt: skip
    if not (args.dry_run or args.status):
        cluster.check()  # every flag and [slurm] key, before anything is submitted
    if args.seeds:
        sweep.seeds = [_int(s, "--seeds") for s in args.seeds.split(",")]
    if args.regimes:
        sweep.regimes = [r.strip() for r in args.regimes.split(",")]
    sweep.override(parse_overrides(extra))
    out = Path(args.out)
    cells = sweep.cells()
    base = sweep.base
    print(
        f"suite {sweep.name}: {len(sweep.regimes)} regimes x {len(sweep.seeds)} seeds = "
        f"{len(cells)} cells; T = {base.seq_len}, {base.train.max_steps} steps x "
        f"{base.train.batch_size * base.train.grad_accum * base.seq_len:,} tokens per cell",
        flush=True,
    )
    if args.dry_run or args.status:
        from aah.sweep.sweep_status import cell_states

        for line in cell_states(sweep, out, jobs=args.status):
            print(f"  {line}")
        return 0
    try:
        outcome = run_sweep(
            sweep, out, progress=not args.no_progress, commit=args.commit, jobs=args.jobs,
            cluster=cluster,
        )  # fmt: skip
    except CellFailed as err:
        print(f"aah sweep: {err}; finished cells are kept, rerun to continue", file=sys.stderr)
        return 1
    print(f"{outcome.finished}/{outcome.total} cells finished; results: {outcome.csv_path}")
    if outcome.left_running:
        print(f"submitted jobs still running (a rerun waits for them); to cancel: "
              f"{'; '.join(outcome.left_running)}")  # fmt: skip
    if outcome.interrupted:
        print(f"stopped; continue with the same command: aah sweep {args.suite} --out {out}")
        return 130
    print(f"next: aah report {out}")
    return 0


def _int(text: str, flag: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{flag}: {text!r} is not an int") from None
