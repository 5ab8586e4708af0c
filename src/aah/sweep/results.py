"""The results CSV of a suite: one row per finished cell, rebuilt from the cells' summaries.

The CSV is derived data: it is rewritten (atomically) from every finished cell's
summary.json after each cell, so it can never disagree with the run directories.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from aah import records

COLUMNS = (
    "regime",
    "seed",
    "seq_len",
    "steps",
    "tokens",
    "val_loss",
    "val_bpb",
    "acr",
    "causal_coverage",
    "executed_ratio",
    "train_tokens_per_s",
    "wall_s",
)
#: On a generated task: accuracy overall and in the farthest distance bucket, and its label.
#: Empty for text corpora; absent from CSVs written before they existed.
TASK_COLUMNS = ("val_acc", "val_acc_far", "far_bucket")
INT_COLUMNS = frozenset({"seed", "seq_len", "steps", "tokens"})
TEXT_COLUMNS = frozenset({"regime", "far_bucket"})


def row_from_summary(regime: str, summary: dict[str, Any]) -> dict[str, Any]:
    """One CSV row from a finished run's summary.json; ValueError if a field is missing."""
    missing = [c for c in COLUMNS[1:] if summary.get(c) is None]
    if missing:
        raise ValueError(f"summary of regime {regime!r} lacks {', '.join(missing)}")
    return {"regime": regime, **{c: summary[c] for c in COLUMNS[1:]}, **task_cells(summary)}


def task_cells(summary: dict[str, Any]) -> dict[str, Any]:
    """The TASK_COLUMNS of a summary (None on text): the farthest bucket with answers."""
    by_distance = summary.get("val_acc_by_distance") or {}
    far = [label for label, acc in by_distance.items() if acc is not None]
    return {
        "val_acc": summary.get("val_acc"),
        "val_acc_far": by_distance[far[-1]] if far else None,
        "far_bucket": far[-1] if far else None,
    }


def format_csv(rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS + TASK_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: _cell(row.get(c)) for c in COLUMNS + TASK_COLUMNS})
    return out.getvalue()


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    return format(value, ".6g") if isinstance(value, float) else value


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    records.write_text_atomic(path, format_csv(rows))


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a results CSV, numbers parsed; ValueError names a missing column or bad value."""
    path = Path(path)
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{str(path)!r} lacks column(s) {', '.join(missing)}")
        rows = []
        for line, raw in enumerate(reader, start=2):
            row: dict[str, Any] = {}
            for column in COLUMNS:
                text = raw[column]
                try:
                    if column in TEXT_COLUMNS:
                        row[column] = text
                    elif column in INT_COLUMNS:
                        row[column] = int(text)
                    else:
                        row[column] = float(text)
                except (TypeError, ValueError):
                    raise ValueError(f"{path}:{line}: bad {column} value {text!r}") from None
                if column not in TEXT_COLUMNS and not math.isfinite(row[column]):
                    raise ValueError(f"{path}:{line}: {column} is not finite ({text!r})")
            row.update(_task_values(raw, path, line))
            rows.append(row)
    return rows


def _task_values(raw: dict[str, str | None], path: Path, line: int) -> dict[str, Any]:
    """TASK_COLUMNS of one CSV line: None where empty or absent."""
    out: dict[str, Any] = {}
    for column in TASK_COLUMNS:
        text = raw.get(column) or ""
        if not text or column in TEXT_COLUMNS:
            out[column] = text or None
            continue
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{path}:{line}: bad {column} value {text!r}") from None
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{path}:{line}: {column} must be in [0, 1], got {text!r}")
        out[column] = value
    return out
