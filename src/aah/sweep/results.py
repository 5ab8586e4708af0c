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

from aah.eval import records

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
INT_COLUMNS = frozenset({"seed", "seq_len", "steps", "tokens"})
TEXT_COLUMNS = frozenset({"regime"})


def row_from_summary(regime: str, summary: dict[str, Any]) -> dict[str, Any]:
    """One CSV row from a finished run's summary.json; ValueError if a field is missing."""
    missing = [c for c in COLUMNS[1:] if summary.get(c) is None]
    if missing:
        raise ValueError(f"summary of regime {regime!r} lacks {', '.join(missing)}")
    return {"regime": regime, **{c: summary[c] for c in COLUMNS[1:]}}


def format_csv(rows: list[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: _cell(row[c]) for c in COLUMNS})
    return out.getvalue()


def _cell(value: Any) -> Any:
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
            rows.append(row)
    return rows
