"""Checks of `aah plan search|apply` arguments that run before any model is loaded, so a
typo costs a second, not a whole search."""

from __future__ import annotations

import argparse
from pathlib import Path

from aah.textfile import read_utf8


def check_model(name: str) -> None:
    """A local model is a directory or a .gguf file; a hub name is NAME or ORG/NAME (no deeper
    path)."""
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir() and path.suffix.lower() != ".gguf":
            raise ValueError(
                f"model {name!r} is a file but not a .gguf; give the model's directory or a "
                "GGUF file"
            )
        return
    if name.startswith(("/", ".", "~")) or name.count("/") > 1 or "\\" in name:
        raise ValueError(
            f"model directory {name!r} does not exist (a hub name is NAME or ORG/NAME)"
        )


def check_output(path: str, flag: str) -> None:
    """`path` can be written: its folder exists and it is not itself a folder."""
    out = Path(path).expanduser()
    parent = out.parent
    if out.is_dir():
        raise ValueError(f"{flag} {path!r} is a directory; give a file name")
    if not parent.is_dir():
        raise ValueError(f"{flag} {path!r}: folder {str(parent)!r} does not exist")


def check_plan_arguments(args: argparse.Namespace) -> None:
    """ValueError naming the first bad argument of `plan search` or `plan apply`."""
    for flag in ("batch_size", "max_batches"):
        value = getattr(args, flag)
        if value < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be >= 1, got {value}")
    check_model(args.model)
    read_utf8(args.text, "--text file")
    if args.action == "search":
        check_budget_flags(args.budget, args.budget_kv_mb, args.sinks)
        check_output(args.out, "--out")
        if args.heatmap:
            check_output(args.heatmap, "--heatmap")
        if args.heldout:
            read_utf8(args.heldout, "--heldout file")
        check_signal_flag(args.signal, args.heldout)
    else:
        read_utf8(args.plan, "--plan file")


def check_budget_flags(budget: float | None, kv_mb: float | None, sinks: int) -> None:
    """One budget at most (--budget in (0, 1] or --budget-kv-mb > 0) and --sinks >= 0."""
    if budget is not None and kv_mb is not None:
        raise ValueError(
            f"give --budget ({budget}) or --budget-kv-mb ({kv_mb}), not both: one cap per search"
        )
    if budget is not None and not 0.0 < budget <= 1.0:
        raise ValueError(f"--budget must be in (0, 1], got {budget}")
    if kv_mb is not None and not (kv_mb > 0 and kv_mb * 2**20 >= 1 and kv_mb != float("inf")):
        raise ValueError(f"--budget-kv-mb must be a finite number of MB > 0, got {kv_mb}")
    if sinks < 0:
        raise ValueError(f"--sinks must be >= 0, got {sinks}")


def check_signal_flag(signal: str, heldout: str | None) -> None:
    """--signal is one of SIGNALS; the --heldout budget sweep allocates on mass only."""
    from aah.cli.hf_plan import SIGNALS

    if signal not in SIGNALS:
        raise ValueError(f"--signal must be one of {', '.join(SIGNALS)}, got {signal!r}")
    if signal != "mass" and heldout:
        raise ValueError(
            f"--heldout sweeps budgets on the mass signal only; with --signal {signal} write the "
            "plan, then score it with `aah plan apply --plan FILE --text HELDOUT`"
        )
