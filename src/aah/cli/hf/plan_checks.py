"""Checks of `aah plan search|apply` arguments that run before any model is loaded, so a
typo costs a second, not a whole search. These need neither torch nor the model; the checks
against the model's shape follow in `hf.checks`, still before it loads."""

from __future__ import annotations

import argparse
import importlib.util
import os
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
    """`path` can be written: its folder exists and is writable, and it is not a folder or a
    read-only file."""
    out = Path(path).expanduser()
    parent = out.parent
    if out.is_dir():
        raise ValueError(f"{flag} {path!r} is a directory; give a file name")
    if not parent.is_dir():
        raise ValueError(f"{flag} {path!r}: folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {path!r}: folder {str(parent)!r} is not writable")
    if out.exists() and not os.access(out, os.W_OK):
        raise ValueError(f"{flag} {path!r} exists and is not writable")


def read_text(path: str, flag: str) -> str:
    """The UTF-8 text of `path`, which must hold something besides whitespace."""
    text = read_utf8(path, f"{flag} file")
    if not text.strip():
        raise ValueError(f"{flag} file {path!r} is empty: give a text to read")
    return text


def check_counts(args: argparse.Namespace) -> None:
    """Every count flag of `plan search|apply` in its range."""
    for flag in ("batch_size", "max_batches", "sample_queries"):
        value = getattr(args, flag, 1)
        if value < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be >= 1, got {value}")
    if args.seq_len is not None and args.seq_len < 2:
        raise ValueError(
            f"--seq-len must be >= 2 (a token and the next one to predict), got {args.seq_len}"
        )
    if args.threads < 0:
        raise ValueError(f"--threads must be >= 0 (0 = torch's default), got {args.threads}")


def check_plan_arguments(args: argparse.Namespace) -> None:
    """ValueError naming the first bad argument of `plan search` or `plan apply`."""
    check_counts(args)
    check_model(args.model)
    if args.text is not None:  # `plan search` without it reads the shipped mix
        read_text(args.text, "--text")
    if args.action == "search":
        check_budget_flags(args.budget, args.budget_kv_mb, args.sinks, args.kv_fraction)
        check_output(args.out, "--out")
        if args.heatmap:
            check_heatmap(args.heatmap, args.out)
        if args.heldout:
            read_text(args.heldout, "--heldout")
        check_signal_flag(args.signal, args.heldout)
        check_suffix(args.suffix, args.signal, args.seq_len)
        if args.candidates is not None:
            check_candidate_flag(args.candidates)
    else:
        read_utf8(args.plan, "--plan file")


def check_heatmap(path: str, out: str) -> None:
    """--heatmap can be written, is not --out, and matplotlib is there to draw it."""
    check_output(path, "--heatmap")
    if Path(path).expanduser().resolve() == Path(out).expanduser().resolve():
        raise ValueError(f"--heatmap {path!r} is the --out file; give another name")
    if importlib.util.find_spec("matplotlib") is None:
        raise ValueError("--heatmap needs matplotlib: pip install matplotlib")


def check_suffix(suffix: int | None, signal: str, seq_len: int | None) -> None:
    """--suffix is for the suffix-loss signal, and leaves a context before it."""
    if suffix is None:
        return
    if "suffix-loss" not in signal.split(","):
        raise ValueError(f"--suffix is for --signal suffix-loss, not {signal!r}")
    if suffix < 1 or (seq_len is not None and suffix >= seq_len):
        raise ValueError(f"--suffix must be in [1, --seq-len), got {suffix}")


def check_candidate_flag(candidates: list[int]) -> None:
    if not candidates or any(c < 1 for c in candidates) or sorted(set(candidates)) != candidates:
        text = ",".join(map(str, candidates))
        raise ValueError(
            f"--candidates must be distinct ints >= 1 in ascending order, got {text!r}"
        )


def check_budget_flags(
    budget: float | None,
    kv_mb: float | None,
    sinks: int | None,
    kv_fraction: float | None = None,
) -> None:
    """One budget at most (--budget in (0, 1], --budget-kv-mb > 0 or --kv-fraction in (0, 1))
    and --sinks >= 0 (None: chosen by the search)."""
    given = {"--budget": budget, "--budget-kv-mb": kv_mb, "--kv-fraction": kv_fraction}
    named = [f"{flag} ({value})" for flag, value in given.items() if value is not None]
    if len(named) > 1:
        raise ValueError(f"give one of {' and '.join(named)}, not both: one cap per search")
    if budget is not None and not 0.0 < budget <= 1.0:
        raise ValueError(f"--budget must be in (0, 1], got {budget}")
    if kv_mb is not None and not (kv_mb > 0 and kv_mb * 2**20 >= 1 and kv_mb != float("inf")):
        raise ValueError(f"--budget-kv-mb must be a finite number of MB > 0, got {kv_mb}")
    if kv_fraction is not None and not 0.0 < kv_fraction < 1.0:
        raise ValueError(
            f"--kv-fraction must be in (0, 1), got {kv_fraction} (1 would cut no head)"
        )
    if sinks is not None and sinks < 0:
        raise ValueError(f"--sinks must be >= 0, got {sinks}")


def check_signal_flag(signal: str, heldout: str | None) -> None:
    """--signal names a known signal (`hf.search.signal_registry`); the --heldout budget sweep
    allocates on mass only."""
    from aah.integrations.hf.search.signal_registry import signal_names

    names = signal.split(",")
    for name in names:
        if name not in signal_names():
            raise ValueError(f"--signal must be one of {', '.join(signal_names())} (or several, "
                             f"comma-separated), got {name!r}")  # fmt: skip
    if signal != "mass" and heldout:
        raise ValueError(
            f"--heldout sweeps budgets on the mass signal only: add --signal mass, or with "
            f"--signal {signal} write the plan, then score it with `aah plan apply --plan FILE "
            "--text HELDOUT`"
        )
