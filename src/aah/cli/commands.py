"""The subcommand table: name -> (help, add_arguments(parser), run(args, extra) -> exit code).

Heavy imports (torch, the model) happen inside each command's run, not at import time.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from aah.cli import (
    bench_cmd,
    eval_cmd,
    generate_cmd,
    lab_cmd,
    plan_cmd,
    posthoc_cmd,
    sweep_cmd,
    train_cmd,
)
from aah.cli.hf import chat_cmd

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
    p.add_argument(
        "path",
        metavar="PATH",
        help="a run directory (from aah train) or a results directory (from aah sweep)",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        default=None,
        help="where to write the report (default RUN_DIR/report for a run, the results "
        "directory itself for a suite report)",
    )


def _run_report(args: argparse.Namespace) -> int:
    """A run directory (summary.json) gets report.html; a results directory (<suite>.csv
    files) gets REPORT.md over its suites. Print the report's path."""
    from pathlib import Path

    from aah import records
    from aah.report import build_report
    from aah.report.suite import build_suite_report, is_results_dir

    path = Path(args.path)
    out = Path(args.out) if args.out else None
    if (path / records.SUMMARY).exists():
        report = build_report(path, out)
    elif is_results_dir(path):
        report = build_suite_report(path, out)
    else:
        raise ValueError(
            f"{str(path)!r} is neither a finished run directory (no "
            f"{str(path / records.SUMMARY)!r}) nor a results directory (no <suite>.csv "
            "from aah sweep)"
        )
    print(report)
    return 0


COMMANDS: dict[str, tuple[str, AddArgs, Run]] = {
    "train": (
        "Train a model (or resume a run) and print its window map.",
        train_cmd.add_arguments,
        train_cmd.run,
    ),
    "sweep": (
        "Train a suite's grid of regimes x seeds (resumable) into OUT/<suite>.csv.",
        sweep_cmd.add_arguments,
        sweep_cmd.run,
    ),
    "eval": (
        "Evaluate a run's last checkpoint: val loss, bits per byte, coverage.",
        eval_cmd.add_arguments,
        eval_cmd.run,
    ),
    "posthoc": (
        "Impose per-head plans on trained full-attention runs at matched coverage; Δ bpb.",
        posthoc_cmd.add_arguments,
        posthoc_cmd.run,
    ),
    "bench": (
        "Benchmarks: training, attention, decode, hf-decode, variants (aah bench NAME --help).",
        bench_cmd.add_arguments,
        bench_cmd.run,
    ),
    "report": (
        "Reports: a run directory's report.html, or a results directory's "
        "REPORT.md over its suites' seeds (paired tables, verdicts, figures).",
        _add_report_arguments,
        _no_extra(_run_report),
    ),
    "generate": (
        "Stream a reply or continuation from a run's or a Hugging Face model, with its "
        "per-head KV cache (--prompt-file, --question, chat templates).",
        generate_cmd.add_generate_arguments,
        _no_extra(generate_cmd.run_generate),
    ),
    "chat": (
        "Chat with a Hugging Face model on stdin/stdout, its per-head KV cache kept across turns.",
        chat_cmd.add_chat_arguments,
        _no_extra(chat_cmd.run_chat),
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
    "train": train_cmd.epilog,
    "sweep": sweep_cmd.EPILOG,
    "posthoc": posthoc_cmd.EPILOG,
    "generate": generate_cmd.EPILOG,
    "chat": chat_cmd.EPILOG,
}
