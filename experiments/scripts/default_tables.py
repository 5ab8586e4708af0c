"""The README's tables of the default search against one window, from the study folders.

    python -m experiments.scripts.default_tables results/pretrained/default-T2048/smollm2 \\
        results/pretrained/default-T4096/smollm2 ...

Each folder is one run of `experiments.scripts.default_vs_window` (its results.json, written
with per-kind means); the rows are printed in the order the folders are named, so the README
quotes exactly what the folders' reports say. Bold: the interval lies below zero.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

WINDOW_NAMES = {"uniform-s0": "one window", "uniform-s4": "one window + 4 sinks"}
HEAD = (
    "| T | kind | full | better window | default | default minus window | gap closed |\n"
    "|---|---|---|---|---|---|---|"
)


def folder_rows(folder: Path) -> list[str]:
    """One row per kind (and pooled) of a folder's results.json."""
    path = folder / "results.json"
    if not path.exists():
        raise ValueError(f"{path} does not exist; run default_vs_window on {folder} first")
    results: dict[str, Any] = json.loads(path.read_text())
    if "kind_means" not in results:
        raise ValueError(f"{path} has no kind_means; write it again with --report-only")
    settings = json.loads((folder / "cells.jsonl").read_text().splitlines()[0])["settings"]
    window = results["better_window"]
    rows = []
    for kind, r in results["kinds"].items():
        means = results["kind_means"][kind]
        diff = f"{r['diff']:+.4f} [{r['ci'][0]:+.4f}, {r['ci'][1]:+.4f}]"
        diff = f"**{diff}**" if r["ci"][1] < 0 else diff
        rows.append(
            f"| {settings['seq_len']} | {kind} | {means['full']:.4f} | {means[window]:.4f} "
            f"({WINDOW_NAMES[window]}) | {means['default']:.4f} | {diff} | "
            f"{r['gap_closed']:.0%} |"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folders", nargs="+", type=Path)
    args = p.parse_args(argv)
    print(HEAD)
    for folder in args.folders:
        print("\n".join(folder_rows(folder)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
