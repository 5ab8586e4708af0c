"""The library's default plan search, as a user calls it, run once per study folder and kept.

`aah.hf.search_plan(model, kv_fraction=F, seq_len=T)` with no other argument: the shipped mix
and the end-to-end choice. The plan goes to OUT/plans/default.json and its wall-clock seconds
to the folder's cells, so a resumed study reuses the plan and still reports what it cost.
With `refine`, the same search with its refine step (`search_plan(..., refine=True)`), to
OUT/plans/refined.json and the cell `refine_search_seconds`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def default_plan(
    model: Any, out: Path, kv_fraction: float, seq_len: int, cells: Any, refine: bool = False
) -> Any:
    """The default search's `WindowPlan` for `model`, searched once (module docstring)."""
    from aah.integrations.hf.search.plan_search import search_plan
    from aah.plan import WindowPlan

    path = Path(out) / "plans" / ("refined.json" if refine else "default.json")
    if path.exists():
        return WindowPlan.load(path)
    start = time.perf_counter()
    plan = search_plan(
        model, kv_fraction=kv_fraction, seq_len=seq_len, refine=refine, progress=True
    )
    cells.put("refine_search_seconds" if refine else "search_seconds", time.perf_counter() - start)
    path.parent.mkdir(parents=True, exist_ok=True)
    plan.save(path)
    return plan
