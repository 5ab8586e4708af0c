"""Run a suite's grid: one `aah train` subprocess per cell, finished cells skipped.

Layout under OUT (default `results/`): `OUT/<suite>.csv` and one run directory per cell,
`OUT/<suite>/<regime>-s<seed>/` (with the cell's `train.log`). A cell is finished when its
summary.json exists. A cell cut short resumes from its last checkpoint (bit-for-bit, so the
result is the same as an uninterrupted run); one without a checkpoint starts again. Each
cell runs in its own process (aah.sweep.cell_process), so peak RSS and thread settings are
per cell, and up to `jobs` cells run at once. A cell that replays another cell's plans
(`controller.replay_from`, the replay policies) starts only once that cell
has finished; the others go on meanwhile.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from aah import records
from aah.controller.config import REPLAY_POLICIES
from aah.controller.options import ReplayOptions
from aah.sweep.cell_process import CELL, LOG, CellProcess
from aah.sweep.config import Cell, SweepConfig
from aah.sweep.git_commit import commit_paths
from aah.sweep.results import row_from_summary, write_csv

POLL_S = 2.0


class CellFailed(RuntimeError):
    """A cell's trainer exited with an error; its train.log says why."""


@dataclass
class SweepOutcome:
    csv_path: Path
    finished: int
    total: int
    interrupted: bool


def cell_dir(out: Path, sweep: SweepConfig, cell: Cell) -> Path:
    return out / sweep.name / cell.name


def is_finished(run_dir: Path) -> bool:
    return (run_dir / records.SUMMARY).exists()


def collect_rows(out: Path, sweep: SweepConfig) -> list[dict]:
    """CSV rows of every finished cell of the suite's folder (also cells of earlier
    invocations with other --seeds/--regimes), seeds then regimes in the suite's order."""
    order = {r: i for i, r in enumerate(sweep.regimes)}
    rows = []
    for run_dir in sorted((out / sweep.name).glob("*/")):
        if is_finished(run_dir) and (run_dir / CELL).exists():
            cell = records.read_json(run_dir / CELL)
            summary = records.read_json(run_dir / records.SUMMARY)
            rows.append(row_from_summary(cell["regime"], summary))
    rows.sort(key=lambda r: (r["seed"], order.get(r["regime"], len(order)), r["regime"]))
    return rows


#: fields a cell may change between invocations without changing its result.
FREE_FIELDS = frozenset({"train.threads", "train.device", "train.log_interval"})


def check_unchanged(cell: Cell, run_dir: Path) -> None:
    """ValueError if a started cell was run with a config other than the suite's now."""
    from aah.training.run_config import RunConfig

    if not (run_dir / records.CONFIG).exists():
        return
    before = RunConfig.from_toml(run_dir / records.CONFIG).flat()
    now = cell.config.flat()
    changed = sorted(k for k in now if k not in FREE_FIELDS and before.get(k) != now[k])
    if changed:
        raise ValueError(
            f"cell {cell.name} in {str(run_dir)!r} was run with different "
            f"{', '.join(changed)}: use another --out, or delete that cell to rerun it"
        )


def replay_source(cell: Cell) -> Path | None:
    """The run directory whose plans the cell replays (resolved), or None."""
    ctrl = cell.config.controller
    if ctrl.policy in REPLAY_POLICIES and (source := ctrl.options_as(ReplayOptions).replay_from):
        return Path(source).resolve()
    return None


def check_sources(todo: list[Cell], out: Path, sweep: SweepConfig) -> None:
    """ValueError for a cell that replays a run that has not finished and is not a cell this
    sweep will run first (it could never start)."""
    pending = {cell_dir(out, sweep, c).resolve() for c in todo}
    for cell in todo:
        src = replay_source(cell)
        if src is None or is_finished(src):
            continue
        if src not in pending or src == cell_dir(out, sweep, cell).resolve():
            raise ValueError(
                f"cell {cell.name} replays {str(src)!r}, which has not finished and is not "
                "another cell of this sweep: train that run first (or fix "
                "controller.replay_from)"
            )


def _next_ready(todo: list[Cell], running: list[CellProcess]) -> Cell | None:
    """The first cell in grid order whose replay source (if any) has finished and exited."""
    busy = {proc.run_dir.resolve() for proc in running}
    for cell in todo:
        src = replay_source(cell)
        if src is None or (is_finished(src) and src not in busy):
            return cell
    return None


def run_sweep(
    sweep: SweepConfig,
    out: Path,
    *,
    progress: bool = True,
    commit: bool = False,
    jobs: int = 1,
) -> SweepOutcome:
    """Run every unfinished cell in grid order, up to `jobs` at a time; rewrite the CSV as
    each one finishes (and with `commit`, commit the cell's folder and the CSV:
    aah.sweep.git_commit). A failed cell stops the others (they checkpoint) and raises
    CellFailed; Ctrl-C or SIGTERM stops them all the same way and returns interrupted."""
    from tqdm import tqdm

    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be an int >= 1, got {jobs!r}")
    cells = sweep.cells()
    for cell in cells:
        check_unchanged(cell, cell_dir(out, sweep, cell))
    csv_path = out / f"{sweep.name}.csv"
    todo = [c for c in cells if not is_finished(cell_dir(out, sweep, c))]
    check_sources(todo, out, sweep)
    done = len(cells) - len(todo)
    write_csv(csv_path, collect_rows(out, sweep))
    grid = tqdm(
        total=len(cells), initial=done, desc=f"{sweep.name} cells", unit="cell",
        disable=not progress, position=0,
    )  # fmt: skip
    say = grid.write if progress else lambda line: print(line, flush=True)
    running: list[CellProcess] = []
    failed: tuple[CellProcess, int] | None = None  # (the cell's process, its exit code)
    interrupted = False
    try:
        with _sigterm_as_interrupt():
            while (todo or running) and not (interrupted or failed):
                while todo and len(running) < jobs:
                    cell = _next_ready(todo, running)
                    if cell is None and not running:  # they wait on each other
                        names = ", ".join(c.name for c in todo)
                        raise ValueError(f"cells {names} replay each other: none can start")
                    if cell is None:  # every cell left waits for a running source
                        break
                    todo.remove(cell)
                    slot = min(set(range(jobs)) - {p.slot for p in running})
                    run_dir = cell_dir(out, sweep, cell)
                    running.append(CellProcess(cell, run_dir, progress=progress, slot=slot))
                    say(f"{sweep.name}: {cell.name} started")
                grid.set_postfix_str(", ".join(p.cell.name for p in running))
                time.sleep(POLL_S)
                for proc in list(running):
                    proc.follow()
                    code = proc.poll()
                    if code is None:
                        continue
                    running.remove(proc)
                    proc.close()
                    if code == 130:  # the trainer itself was stopped
                        interrupted = True
                    elif code != 0 or not is_finished(proc.run_dir):
                        failed = (proc, code)
                    else:
                        done += 1
                        grid.update(1)
                        _land(proc.run_dir, out, sweep, csv_path, commit)
                        say(f"{sweep.name}: {proc.cell.name} finished ({done}/{len(cells)})")
    except KeyboardInterrupt:
        interrupted = True
    finally:
        for proc in running:  # a stop, a failure elsewhere, or an unexpected error
            proc.close()
        grid.close()
    if failed is not None:
        proc, code = failed
        raise CellFailed(f"cell {proc.cell.name} failed (exit {code}); see {proc.run_dir / LOG}")
    return SweepOutcome(csv_path, done, len(cells), interrupted)


def _land(run_dir: Path, out: Path, sweep: SweepConfig, csv_path: Path, commit: bool) -> None:
    """A finished cell: the CSV rewritten, and with `commit` its folder and the CSV committed."""
    write_csv(csv_path, collect_rows(out, sweep))
    if commit:
        why = commit_paths([run_dir, csv_path], f"{sweep.name}: cell {run_dir.name} finished")
        if why is not None:
            print(f"aah sweep: {run_dir.name} not committed: {why}", file=sys.stderr)


@contextlib.contextmanager
def _sigterm_as_interrupt():  # type: ignore[no-untyped-def]
    """SIGTERM (a scheduler, `kill`) stops the sweep like Ctrl-C does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
