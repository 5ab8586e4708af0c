"""Run a suite's grid: one `aah train` subprocess per cell, finished cells skipped.

Layout under OUT (default `results/`): `OUT/<suite>.csv` and one run directory per cell,
`OUT/<suite>/<regime>-s<seed>/` (with the cell's `train.log`). A cell is finished when its
summary.json exists. A cell cut short resumes from its last checkpoint (bit-for-bit, so the
result is the same as an uninterrupted run); one without a checkpoint starts again. Each
cell runs in its own process (aah.sweep.cell_process), so peak RSS and thread settings are
per cell, and up to `jobs` cells run at once. A cell that replays another cell's plans
(`controller.replay_from`, the replay policies) starts only once that cell
has finished; the others go on meanwhile.

With a submitit executor (`aah.sweep.cluster`: Slurm, or submitit's local executor) each cell
is a job instead (`aah.sweep.cell_job`), with the same run directory, summary and CSV row. The
sweep holds a replay cell back until its source has finished (no Slurm dependency), submits a
cell again when its job ended without finishing it (killed, preempted, cancelled; it resumes
from its checkpoint), and on a stop or a failure leaves its jobs running and says how to cancel
them; a rerun finds a job still running and waits for it rather than submitting it twice.
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
from aah.sweep.cell_job import RESUBMITS, STOPPED, SUBMITIT, SubmittedCell, job_alive, read_job
from aah.sweep.cell_process import CELL, LOG, CellProcess
from aah.sweep.cluster import ClusterOptions
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
    #: submitted jobs still running when the sweep returned: how to cancel each
    left_running: tuple[str, ...] = ()


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


def _next_ready(todo: list[Cell], running: list[Running]) -> Cell | None:
    """The first cell in grid order whose replay source (if any) has finished and exited."""
    busy = {proc.run_dir.resolve() for proc in running}
    for cell in todo:
        src = replay_source(cell)
        if src is None or (is_finished(src) and src not in busy):
            return cell
    return None


Running = CellProcess | SubmittedCell


class _Launcher:
    """Starts cells where the executor says: local child processes, or submitit jobs."""

    def __init__(self, cluster: ClusterOptions, suite_dir: Path, progress: bool) -> None:
        self.cluster, self.suite_dir, self.progress = cluster, suite_dir, progress
        self.executor = cluster.executor_for(suite_dir / SUBMITIT) if cluster.submitted else None
        self.submits: dict[str, int] = {}

    def start(self, cell: Cell, run_dir: Path, slot: int, attach: dict | None = None) -> Running:
        if self.executor is None:
            return CellProcess(cell, run_dir, progress=self.progress, slot=slot)
        if attach is None:
            self.submits[cell.name] = self.submits.get(cell.name, 0) + 1
        return SubmittedCell(cell, run_dir, executor=self.executor, kind=self.cluster.executor,
                             gpus=self.cluster.gpus_per_cell, progress=self.progress, slot=slot,
                             attach=attach)  # fmt: skip

    def still_running(self, todo: list[Cell]) -> list[tuple[Cell, dict]]:
        """Cells whose job, submitted by an earlier sweep, has not ended: to wait for."""
        if self.executor is None:
            return []
        found = []
        for cell in todo:
            record = read_job(self.suite_dir, cell)
            if (
                record
                and record.get("executor") == self.cluster.executor
                and job_alive(self.suite_dir, record)
            ):
                found.append((cell, record))
        return found

    def may_resubmit(self, proc: Running, code: int) -> bool:
        """A job that ended without finishing its cell (killed, preempted, cancelled) is
        submitted again, up to RESUBMITS times per sweep; it resumes from its checkpoint."""
        return (
            isinstance(proc, SubmittedCell)
            and code in (STOPPED, -1)
            and self.submits.get(proc.cell.name, 0) <= RESUBMITS
        )


def run_sweep(
    sweep: SweepConfig,
    out: Path,
    *,
    progress: bool = True,
    commit: bool = False,
    jobs: int | None = 1,
    cluster: ClusterOptions | None = None,
) -> SweepOutcome:
    """Run every unfinished cell in grid order, up to `jobs` at a time (None: 1 locally, every
    cell with a submitit executor); rewrite the CSV as each one finishes (and with `commit`,
    commit the cell's folder and the CSV: aah.sweep.git_commit). A failed cell stops the
    others (local ones checkpoint; submitted jobs run on) and raises CellFailed; Ctrl-C or
    SIGTERM stops them the same way and returns interrupted."""
    from tqdm import tqdm

    cluster = (cluster or ClusterOptions()).check()
    cells = sweep.cells()
    if jobs is None:
        jobs = len(cells) if cluster.submitted else 1
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs must be an int >= 1, got {jobs!r}")
    for cell in cells:
        check_unchanged(cell, cell_dir(out, sweep, cell))
    csv_path = out / f"{sweep.name}.csv"
    todo = [c for c in cells if not is_finished(cell_dir(out, sweep, c))]
    check_sources(todo, out, sweep)
    launcher = _Launcher(cluster, out / sweep.name, progress)
    done = len(cells) - len(todo)
    write_csv(csv_path, collect_rows(out, sweep))
    grid = tqdm(
        total=len(cells), initial=done, desc=f"{sweep.name} cells", unit="cell",
        disable=not progress, position=0,
    )  # fmt: skip
    say = grid.write if progress else lambda line: print(line, flush=True)
    running: list[Running] = []
    for cell, record in launcher.still_running(todo):
        todo.remove(cell)
        running.append(launcher.start(cell, cell_dir(out, sweep, cell), len(running), record))
        say(f"{sweep.name}: {cell.name} still running as job {record['job_id']}: waiting for it")
    failed: tuple[Running, int] | None = None  # (the cell's process or job, its exit code)
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
                    slot = min(set(range(jobs + len(running))) - {p.slot for p in running})
                    proc = launcher.start(cell, cell_dir(out, sweep, cell), slot)
                    running.append(proc)
                    job = f" as job {proc.job_id}" if isinstance(proc, SubmittedCell) else ""
                    say(f"{sweep.name}: {cell.name} started{job}")
                grid.set_postfix_str(", ".join(p.cell.name for p in running))
                time.sleep(POLL_S)
                for proc in list(running):
                    proc.follow()
                    code = proc.poll()
                    if code is None:
                        continue
                    running.remove(proc)
                    proc.close()
                    if launcher.may_resubmit(proc, code) and not is_finished(proc.run_dir):
                        say(f"{sweep.name}: {proc.cell.name}'s job {proc.job_id} ended before "
                            "the cell finished: submitting it again (it resumes)")  # fmt: skip
                        todo.insert(0, proc.cell)
                    elif code == STOPPED and not isinstance(proc, SubmittedCell):
                        interrupted = True  # the trainer itself was stopped
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
    left = tuple(p.cancel_hint() for p in running if isinstance(p, SubmittedCell))
    if failed is not None:
        proc, code = failed
        also = f"; jobs still running: {', '.join(left)}" if left else ""
        raise CellFailed(
            f"cell {proc.cell.name} failed (exit {code}); see {proc.run_dir / LOG}{also}"
        )
    return SweepOutcome(csv_path, done, len(cells), interrupted, left)


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
