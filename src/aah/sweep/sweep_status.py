"""`aah sweep --dry-run` and `--status`: each cell's state from its run directory, and its
last job."""

from __future__ import annotations

from pathlib import Path

from aah import records
from aah.sweep.cell_job import job_state, read_job
from aah.sweep.config import Cell, SweepConfig


def cell_state(run_dir: Path) -> str:
    """done / stopped at step N (a checkpoint to resume from) / todo."""
    if (run_dir / records.SUMMARY).exists():
        return "done"
    if (run_dir / records.CHECKPOINT).exists():
        rows = records.read_jsonl(run_dir / records.METRICS)
        step = int(rows[-1].get("step", 0)) if rows else 0
        return f"stopped at step {step}"
    return "todo"


def cell_states(sweep: SweepConfig, out: Path, *, jobs: bool) -> list[str]:
    """One line per cell: its state and run directory; with `jobs`, its last job's id and
    what the scheduler says of it (where it can be asked)."""
    suite_dir = out / sweep.name
    lines = []
    for cell in sweep.cells():
        run_dir = suite_dir / cell.name
        line = f"{cell_state(run_dir):<20} {run_dir}"
        if jobs:
            line += _job_text(suite_dir, cell)
        lines.append(line)
    return lines


def _job_text(suite_dir: Path, cell: Cell) -> str:
    record = read_job(suite_dir, cell)
    if record is None:
        return ""
    try:
        state = job_state(suite_dir, record)
    except Exception as err:  # no sacct here, or submitit missing: the id is still worth showing
        state = f"state unknown: {err}".splitlines()[0]
    return f"  job {record['job_id']} ({record['executor']}: {state})"
