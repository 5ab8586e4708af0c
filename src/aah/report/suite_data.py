"""A suite as the report reads it: the results CSV, the cells' run directories, and the
comparison at equal training time."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from aah import records
from aah.report import stats
from aah.sweep.config import cell_name
from aah.sweep.results import read_csv
from aah.sweep.runner import CELL

BASELINE = "full"
Record = dict[str, Any]


@dataclass
class CellRun:
    """One finished cell's run directory."""

    regime: str
    seed: int
    path: Path
    metrics: list[Record]
    plans: list[Record]

    @property
    def name(self) -> str:
        return cell_name(self.regime, self.seed)

    def plan_spans(self, plans: list[Record] | None = None) -> list[tuple[Record, int]]:
        """Each plan (default: all of the run's) with the number of steps it was in force: until
        the next plan, the last one until the run's last logged step (at least one step)."""
        plans = self.plans if plans is None else plans
        if not plans:
            return []
        last_step = max((int(m["step"]) for m in self.metrics if "step" in m), default=0)
        ends = [int(p["step"]) for p in plans[1:]] + [max(last_step, int(plans[-1]["step"]) + 1)]
        return [(plan, end - int(plan["step"])) for plan, end in zip(plans, ends, strict=True)]


@dataclass
class Suite:
    name: str
    rows: list[Record]
    cells: list[CellRun] = field(default_factory=list)  # finished and in the CSV
    unfinished: list[str] = field(default_factory=list)  # cell folders the CSV lacks
    config: dict[str, Any] = field(default_factory=dict)  # one cell's config.toml

    @cached_property
    def regimes(self) -> list[str]:
        """The baseline first, then by mean final val_bpb (best first)."""
        bpb = {
            r: stats.mean(list(stats.by_seed(self.rows, r, "val_bpb").values()))
            for r in stats.regimes_of(self.rows)
        }
        return sorted(bpb, key=lambda r: (r != BASELINE, bpb[r], r))

    @property
    def seeds(self) -> list[int]:
        return sorted({int(r["seed"]) for r in self.rows})

    @property
    def has_baseline(self) -> bool:
        return BASELINE in self.regimes

    @property
    def seq_len(self) -> int:
        """T of the suite's cells: the config's max_seq_len, else the first row's seq_len."""
        return int(self.config.get("model", {}).get("max_seq_len") or self.rows[0]["seq_len"])

    def runs(self, regime: str) -> list[CellRun]:
        return sorted((c for c in self.cells if c.regime == regime), key=lambda c: c.seed)

    def values(self, regime: str, metric: str) -> list[float]:
        return list(stats.by_seed(self.rows, regime, metric).values())


def is_results_dir(path: Path) -> bool:
    """`path` holds results CSVs (from aah sweep), so it gets the suite report."""
    return path.is_dir() and any(path.glob("*.csv"))


def load_suite(csv_path: Path) -> Suite:
    """The CSV's rows and the run directories of its cells (those the CSV lists)."""
    suite = Suite(csv_path.stem, read_csv(csv_path))
    listed = {(r["regime"], int(r["seed"])) for r in suite.rows}
    folder = csv_path.with_suffix("")
    for run_dir in sorted(folder.glob("*/")) if folder.is_dir() else []:
        if not (run_dir / CELL).exists():
            continue
        cell = records.read_json(run_dir / CELL)
        key = (str(cell["regime"]), int(cell["seed"]))
        if key not in listed:  # still training (or the CSV is about to be rewritten)
            suite.unfinished.append(run_dir.name)
            continue
        if not suite.config and (run_dir / records.CONFIG).exists():
            try:
                suite.config = tomllib.loads((run_dir / records.CONFIG).read_text("utf-8"))
            except tomllib.TOMLDecodeError as err:
                raise ValueError(f"{str(run_dir / records.CONFIG)!r}: {err}") from err
        suite.cells.append(
            CellRun(
                *key,
                run_dir,
                records.read_jsonl(run_dir / records.METRICS),
                records.read_jsonl(run_dir / records.PLANS),
            )
        )
    return suite


@dataclass
class EqualTime:
    """val_bpb of every cell at the same training time t*."""

    t_star: float
    fastest: str  # the regime whose mean final train_s is t*
    curves: dict[str, list[list[stats.Point]]]  # regime -> per-seed (train_s, val_bpb)
    values: dict[str, dict[int, float]]  # regime -> seed -> val_bpb at t*
    early: list[str]  # cells whose first eval came after t* (their first eval is used)
    held: list[str]  # cells whose last eval came before t* (their last eval is used)


def equal_time(suite: Suite) -> EqualTime | str:
    """The equal-time comparison, or why it cannot be made (a note for the report)."""
    points: dict[str, dict[int, list[stats.Point]]] = {}
    for cell in suite.cells:
        evals = [r for r in cell.metrics if r.get("val_bpb") is not None]
        if not evals:
            continue
        if any(r.get("train_s") is None for r in evals):
            return f"{cell.name}'s metrics.jsonl has no train_s (an older run)"
        points.setdefault(cell.regime, {})[cell.seed] = sorted(
            (float(r["train_s"]), float(r["val_bpb"])) for r in evals
        )
    if not points:
        return "no cell has evaluation records in its metrics.jsonl"
    finals = {r: stats.mean([p[-1][0] for p in seeds.values()]) for r, seeds in points.items()}
    fastest = min(finals, key=lambda r: finals[r])
    t_star = finals[fastest]
    order = [r for r in suite.regimes if r in points]
    return EqualTime(
        t_star,
        fastest,
        {r: list(points[r].values()) for r in order},
        {r: {s: stats.value_at(p, t_star) for s, p in points[r].items()} for r in order},
        [cell_name(r, s) for r in order for s, p in points[r].items() if p[0][0] > t_star],
        [cell_name(r, s) for r in order for s, p in points[r].items() if p[-1][0] < t_star],
    )
