"""Run a suite's grid: one `aah train` subprocess per cell, finished cells skipped.

Layout under OUT (default `results/`): `OUT/<suite>.csv` and one run directory per cell,
`OUT/<suite>/<regime>-s<seed>/` (with the cell's `train.log`). A cell is finished when its
summary.json exists. A cell cut short resumes from its last checkpoint (bit-for-bit, so the
result is the same as an uninterrupted run); one without a checkpoint starts again. Each
cell runs in its own process, so peak RSS and thread settings are per cell.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from aah import records
from aah.sweep.config import Cell, SweepConfig
from aah.sweep.git_commit import commit_paths
from aah.sweep.results import row_from_summary, write_csv

LOG = "train.log"
CELL = "cell.json"  # {"regime", "seed"}: what the cell is, for the CSV
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
    from aah.train.run_config import RunConfig

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


def train_command(cell: Cell, run_dir: Path) -> list[str]:
    """The `aah train` invocation of a cell: resume if it left a checkpoint, else start."""
    base = [sys.executable, "-m", "aah", "train", "--no-progress"]
    if (run_dir / records.CHECKPOINT).exists():
        return [*base, "--resume", str(run_dir)]
    if run_dir.exists():  # cut before its first checkpoint: nothing worth keeping
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    records.write_json(run_dir / CELL, {"regime": cell.regime, "seed": cell.seed})
    config_path = run_dir / "cell.toml"
    records.write_text_atomic(config_path, cell.config.to_toml())
    return [*base, "--config", str(config_path), "--out", str(run_dir)]


def run_sweep(
    sweep: SweepConfig, out: Path, *, progress: bool = True, commit: bool = False
) -> SweepOutcome:
    """Run every unfinished cell in grid order; rewrite the CSV after each one (and with
    `commit`, commit the cell's folder and the CSV: aah.sweep.git_commit)."""
    from tqdm import tqdm

    cells = sweep.cells()
    for cell in cells:
        check_unchanged(cell, cell_dir(out, sweep, cell))
    csv_path = out / f"{sweep.name}.csv"
    todo = [c for c in cells if not is_finished(cell_dir(out, sweep, c))]
    done = len(cells) - len(todo)
    write_csv(csv_path, collect_rows(out, sweep))
    grid = tqdm(
        total=len(cells), initial=done, desc=f"{sweep.name} cells", unit="cell",
        disable=not progress, position=0,
    )  # fmt: skip
    interrupted = False
    try:
        for cell in todo:
            grid.set_postfix_str(cell.name)
            code = _run_cell(cell, cell_dir(out, sweep, cell), progress)
            if code == 130:
                interrupted = True
                break
            if code != 0 or not is_finished(cell_dir(out, sweep, cell)):
                log = cell_dir(out, sweep, cell) / LOG
                raise CellFailed(f"cell {cell.name} failed (exit {code}); see {log}")
            done += 1
            grid.update(1)
            write_csv(csv_path, collect_rows(out, sweep))
            if commit:
                paths = [cell_dir(out, sweep, cell), csv_path]
                why = commit_paths(paths, f"{sweep.name}: cell {cell.name} finished")
                if why is not None:
                    print(f"aah sweep: {cell.name} not committed: {why}", file=sys.stderr)
    finally:
        grid.close()
    return SweepOutcome(csv_path, done, len(cells), interrupted)


def _run_cell(cell: Cell, run_dir: Path, progress: bool) -> int:
    """Train one cell in a child process; a step bar follows its metrics.jsonl.

    The child runs in its own session, so a stop reaches it once, from here: Ctrl-C or
    SIGTERM to the sweep forwards one SIGINT, the child checkpoints and exits 130.
    """
    from tqdm import tqdm

    command = train_command(cell, run_dir)
    steps = tqdm(
        total=cell.config.train.max_steps, desc=f"  {cell.name}", unit="step",
        disable=not progress, position=1, leave=False,
    )  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with (run_dir / LOG).open("a", encoding="utf-8") as log:
        log.write(f"$ aah {' '.join(command[3:])}\n")  # what ran (a start or a --resume)
        log.flush()
        child = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            with _sigterm_as_interrupt():
                while child.poll() is None:
                    time.sleep(POLL_S)
                    _follow(steps, run_dir)
        except KeyboardInterrupt:
            _stop(child)
            return 130
        finally:
            if child.poll() is None:  # an unexpected error here: never leave a trainer behind
                _stop(child)
            _follow(steps, run_dir)
            steps.close()
    return child.returncode


def _stop(child: subprocess.Popen) -> None:
    """Ask the child to checkpoint and exit; a second Ctrl-C here makes it stop at once."""
    child.send_signal(signal.SIGINT)
    while True:
        try:
            child.wait()
            return
        except KeyboardInterrupt:
            child.send_signal(signal.SIGINT)


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


def _follow(bar, run_dir: Path) -> None:  # type: ignore[no-untyped-def]
    rows = records.read_jsonl(run_dir / records.METRICS)
    if rows:
        bar.n = int(rows[-1].get("step", 0))
        bar.refresh()
