"""The `aah` command: its parser and `main` (also `python -m aah`): train, sweep, eval, bench,
report, generate, chat, plan, lab.

Exit codes: 0 success, 2 usage or config error (message on stderr, no traceback), 130 a
training run stopped by SIGINT/SIGTERM after checkpointing.
"""

from __future__ import annotations

import argparse
import sys

from aah.cli import commands

PROG = "aah"
# Commands that allocate large tensors repeatedly; see aah.runtime.tune_allocator.
HEAVY_COMMANDS = frozenset({"train", "eval", "bench", "generate", "chat"})


class LazyHelpParser(argparse.ArgumentParser):
    """A parser whose epilog may be a function, called only when help is printed (the train
    epilog lists config fields, and building it imports torch)."""

    def format_help(self) -> str:
        if callable(self.epilog):
            self.epilog = self.epilog()
        return super().format_help()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Asymmetric attention heads: per-head causal windows, trained and measured.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=LazyHelpParser)
    sub.required = True
    for name, (help_text, add_arguments, _) in commands.COMMANDS.items():
        p = sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            allow_abbrev=False,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            epilog=commands.EPILOGS.get(name),
        )
        add_arguments(p)
    return parser


def _version() -> str:
    from aah import __version__

    return f"aah {__version__}"


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    _, _, run = commands.COMMANDS[args.command]
    # A benchmark's own --no-tune-allocator (parsed later, by the benchmark) must win: tuning
    # is process-wide and cannot be undone once applied.
    passed_on = [*extra, *getattr(args, "args", [])]
    if args.command in HEAVY_COMMANDS and "--no-tune-allocator" not in passed_on:
        from aah.runtime import tune_allocator

        tune_allocator()
    try:
        return int(run(args, extra) or 0)
    except ValueError as err:
        print(f"{PROG} {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG} {args.command}: interrupted", file=sys.stderr)
        return 130
