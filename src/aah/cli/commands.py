"""The subcommand table: name -> (help, add_arguments(parser), run(args, extra) -> exit code).

Heavy imports (torch, the model) happen inside each command's run, not at import time.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from aah.cli import bench_cmd, eval_cmd, generate_cmd, lab_cmd, plan_cmd, train_cmd

AddArgs = Callable[[argparse.ArgumentParser], None]
Run = Callable[[argparse.Namespace, list[str]], int]


def _no_extra(run: Callable[[argparse.Namespace], int]) -> Run:
    """Adapt a command that takes no pass-through arguments: leftovers are an error."""

    def wrapped(args: argparse.Namespace, extra: list[str]) -> int:
        if extra:
            raise ValueError(f"unrecognized arguments: {' '.join(extra)}")
        return run(args)

    return wrapped


def _add_report_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory (from aah train)")
    p.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help="where to write the report (default RUN_DIR/report)",
    )


def _run_report(args: argparse.Namespace) -> int:
    """Write report.html and its PNG figures; print the page's path."""
    from pathlib import Path

    from aah.report import build_report

    path = build_report(Path(args.run_dir), Path(args.out) if args.out else None)
    print(path)
    return 0


COMMANDS: dict[str, tuple[str, AddArgs, Run]] = {
    "train": (
        "Train a model (or resume a run) and print its window map.",
        train_cmd.add_arguments,
        train_cmd.run,
    ),
    "eval": (
        "Evaluate a run's last checkpoint: val loss, bits per byte, coverage.",
        eval_cmd.add_arguments,
        eval_cmd.run,
    ),
    "bench": (
        "Benchmarks: training, attention, decode, variants (aah bench NAME --help).",
        bench_cmd.add_arguments,
        bench_cmd.run,
    ),
    "report": (
        "One run's report: report.html with loss, coverage and window plots (needs aah[plots]).",
        _add_report_arguments,
        _no_extra(_run_report),
    ),
    "generate": (
        "Stream text sampled from a run's model, with its per-head KV cache.",
        generate_cmd.add_generate_arguments,
        _no_extra(generate_cmd.run_generate),
    ),
    "lab": (
        "Small experiments from the attention-variants chapter: 'masks' (causal vs local).",
        lab_cmd.add_lab_arguments,
        lab_cmd.run_lab,
    ),
    "plan": (
        "Window plans: export a run's plan; search or apply one on a Hugging Face model.",
        plan_cmd.add_arguments,
        plan_cmd.run,
    ),
}

EPILOGS = {
    "train": train_cmd.EPILOG,
}
