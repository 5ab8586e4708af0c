"""`aah bench NAME [ARGS]`: run a benchmark's own `main(argv)`; its last stdout line is JSON."""

from __future__ import annotations

import argparse
import importlib
import sys

#: benchmark name -> module with `main(argv) -> int` (imported only when run).
BENCHMARKS = {
    "training": "aah.bench.training",
    "attention": "aah.bench.attention",
    "decode": "aah.bench.decode",
    "hf-decode": "aah.bench.hf_decode",
    "variants": "aah.bench.variants",
    "stream": "aah.bench.stream",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", choices=tuple(BENCHMARKS), help="which benchmark")
    p.add_argument("args", nargs=argparse.REMAINDER,
                   help="the benchmark's own options (aah bench NAME --help)")  # fmt: skip


def run(args: argparse.Namespace, extra: list[str]) -> int:
    if extra:
        raise ValueError(f"unrecognized arguments: {' '.join(extra)}")
    try:
        module = importlib.import_module(BENCHMARKS[args.name])
    except ModuleNotFoundError as err:
        if err.name != BENCHMARKS[args.name]:
            raise
        print(f"aah bench {args.name}: not yet available", file=sys.stderr)
        return 2
    return int(module.main(list(args.args)) or 0)
