"""The run directory's files: their names, JSONL append/read and strict JSON (the contract
between the trainer and every reader: eval, sweep, report, cli; see the README's "Command line").

RUN_DIR/config.toml, metrics.jsonl, plans.jsonl, summary.json, checkpoints/last.pt.
Every whole-file write goes through `aah.atomic` (temp file, fsync, rename).
JSON is written strictly: a NaN or infinite number becomes null, and the record (a dict)
names such keys in a "nonfinite" list, so every file parses with any JSON reader.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from aah import textfile
from aah.atomic import write_text_atomic
from aah.textfile import read_utf8

__all__ = [
    "CHECKPOINT",
    "CONFIG",
    "METRICS",
    "NONFINITE",
    "PLANS",
    "SUMMARY",
    "append_jsonl",
    "dumps",
    "read_json",
    "read_jsonl",
    "truncate_after",
    "write_json",
    "write_text_atomic",
]

CONFIG = "config.toml"
METRICS = "metrics.jsonl"
PLANS = "plans.jsonl"
SUMMARY = "summary.json"
CHECKPOINT = Path("checkpoints") / "last.pt"
NONFINITE = "nonfinite"  # the key that names a record's non-finite numbers (written as null)


def dumps(record: Any, **kwargs: Any) -> str:
    """Strict JSON text of `record`: non-finite numbers as null, named under NONFINITE."""
    bad: list[str] = []
    clean = _finite(record, "", bad)
    if bad and isinstance(clean, dict):
        named = list(clean.get(NONFINITE) or [])
        clean[NONFINITE] = named + [b for b in bad if b not in named]
    return json.dumps(clean, allow_nan=False, **kwargs)


def _finite(value: Any, where: str, bad: list[str]) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        bad.append(where)
        return None
    if isinstance(value, dict):
        return {k: _finite(v, f"{where}.{k}" if where else str(k), bad) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v, f"{where}[{i}]", bad) for i, v in enumerate(value)]
    return value


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON object as one line and flush it to the OS."""
    with path.open("a", encoding="utf-8") as handle:
        handle.write(dumps(record) + "\n")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON line of `path` ([] if absent); a torn last line is skipped."""
    if not path.exists():
        return []
    records = []
    for line in read_utf8(path, "run record").splitlines():
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
    write_text_atomic(path, "".join(dumps(r) + "\n" for r in kept))


def write_json(path: Path, obj: dict[str, Any]) -> None:
    write_text_atomic(path, dumps(obj, indent=2) + "\n")


def read_json(path: Path) -> dict[str, Any]:
    return textfile.read_json(path, "run record")
