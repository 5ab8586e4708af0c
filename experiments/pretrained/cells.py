"""A resumable record of finished cells: one JSON line per cell, appended as each finishes.

A long evaluation (tens of forwards of thousands of tokens per cell on a CPU) can stop at
any point; run again with the same settings, it skips every cell already on file. The first
line holds the settings; a run whose settings differ refuses the file instead of mixing
numbers from two setups.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aah.records import append_jsonl, read_jsonl

SETTINGS = "settings"


class CellStore:
    """Cells keyed by a string ("loss/output/0.3"), each a JSON object, in `path`."""

    def __init__(self, path: Path, settings: dict[str, Any]) -> None:
        self.path = Path(path)
        rows = read_jsonl(self.path)
        if rows and rows[0].get(SETTINGS) != settings:
            raise ValueError(
                f"{self.path} holds cells of other settings ({rows[0].get(SETTINGS)}); use "
                "another --out folder, or the same settings to resume"
            )
        if rows and not self.path.read_bytes().endswith(b"\n"):
            with self.path.open("a", encoding="utf-8") as handle:  # end a line torn by a crash
                handle.write("\n")
        if not rows:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            append_jsonl(self.path, {SETTINGS: settings})
        self._cells = {r["key"]: r["value"] for r in rows[1:] if "key" in r}

    def get(self, key: str) -> Any | None:
        return self._cells.get(key)

    def put(self, key: str, value: Any) -> None:
        append_jsonl(self.path, {"key": key, "value": value})
        self._cells[key] = value

    def __contains__(self, key: str) -> bool:
        return key in self._cells
