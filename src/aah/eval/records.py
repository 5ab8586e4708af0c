"""Run-directory files (the run-directory contract; see the README's "Command line").

RUN_DIR/config.toml, metrics.jsonl, plans.jsonl, summary.json, checkpoints/last.pt.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

CONFIG = "config.toml"
METRICS = "metrics.jsonl"
PLANS = "plans.jsonl"
SUMMARY = "summary.json"
CHECKPOINT = Path("checkpoints") / "last.pt"


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON object as one line and flush it to the OS."""
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, sort_keys=False) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON line of `path` ([] if absent); a torn last line is skipped."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by a crash mid-write
    return records


def truncate_after(path: Path, step: int, *, inclusive: bool = True) -> None:
    """Keep records with `step <= step` (`< step` if not inclusive), and always the first one:
    drop what was logged after the checkpoint being resumed."""
    if not path.exists():
        return
    rows = read_jsonl(path)
    kept = rows[:1] + [
        r for r in rows[1:] if (s := int(r.get("step", 0))) < step or (inclusive and s == step)
    ]
    write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in kept))


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json(path: Path, obj: dict[str, Any]) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2) + "\n")


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))
