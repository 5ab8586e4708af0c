"""One sweep cell as a submitit job, and the sweep's handle on it.

`CellJob` is what runs on the cluster node (pickled by submitit): the cell's `aah train`
command (`cell_process.train_command`: a start, or `--resume` when the cell left a
checkpoint), as a child process writing the cell's `train.log`, so a cell's run directory is
the one the local executor makes. With several GPUs per cell the command runs under torchrun
(`torch.distributed.run --standalone`), one process per GPU, as `torchrun` does on one machine.

A job stopped early leaves a checkpoint and comes back where it stopped:
- timed out or preempted: Slurm (and submitit's local executor) signals the job first;
  `CellJob.checkpoint` asks the trainer to checkpoint (SIGINT, as Ctrl-C does) and submitit
  requeues the job, which resumes;
- killed or cancelled outright: the job ends without finishing the cell; the sweep submits
  the cell again (at most `RESUBMITS` times per sweep), and it resumes from its last checkpoint.

`SubmittedCell` is the sweep's side: the same `poll` / `follow` / `close` as a local
`CellProcess`, and a record of the job (`OUT/<suite>/.jobs/<cell>.json`: its id and
executor) that `aah sweep --status` reads and that a rerun uses to find a job still running
instead of submitting the cell twice. `close` never cancels a job: a stopped sweep leaves its
jobs running.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from aah import records
from aah.sweep.cell_process import LOG, follow_steps, train_command
from aah.sweep.config import Cell

JOBS = ".jobs"  # OUT/<suite>/.jobs/<cell>.json: each cell's last job
SUBMITIT = ".submitit"  # OUT/<suite>/.submitit/: submitit's pickles and each job's own logs
RESUBMITS = 3
#: a trainer stopped by a signal exits 130 after its checkpoint (`aah train`)
STOPPED = 130
#: Slurm states of a job that has not ended
ALIVE = {"PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "SUSPENDED", "RESIZING"}


def job_command(cell: Cell, run_dir: Path, gpus: int) -> list[str]:
    """`train_command`, under torchrun when the cell has several GPUs."""
    command = train_command(cell, run_dir)
    if gpus <= 1:
        return command
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                f"--nproc_per_node={gpus}", "-m", "aah"]  # fmt: skip
    return launcher + command[3:]  # command[:3] is `python -m aah`


class CellJob:
    """The callable a cell's submitit job runs; returns the trainer's exit code (0 finished,
    130 stopped at a checkpoint), raises RuntimeError if it failed."""

    def __init__(self, cell: Cell, run_dir: Path, gpus: int = 0) -> None:
        self.cell, self.run_dir, self.gpus = cell, Path(run_dir), gpus
        self._child: subprocess.Popen[bytes] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_child": None}  # a process does not travel

    def __call__(self) -> int:
        command = job_command(self.cell, self.run_dir, self.gpus)
        with (self.run_dir / LOG).open("a", encoding="utf-8") as log:
            log.write(f"$ aah {' '.join(command[command.index('aah') + 1 :])}\n")
            log.flush()
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            # Its own session: a signal to the job reaches the trainer only as a request to
            # checkpoint (`_stop`), never as a kill in the middle of writing one.
            self._child = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
            try:
                code = self._child.wait()
            except KeyboardInterrupt:  # a cancel: the trainer checkpoints first
                self._stop()
                raise
        if code not in (0, STOPPED):
            raise RuntimeError(f"cell {self.cell.name} failed (exit {code}); see {log.name}")
        return code

    def checkpoint(self) -> Any:
        """submitit calls this when the job times out or is preempted: the trainer
        checkpoints and exits, and the job is requeued to resume."""
        import submitit

        self._stop()
        return submitit.helpers.DelayedSubmission(CellJob(self.cell, self.run_dir, self.gpus))

    def _stop(self) -> None:
        child = self._child
        if child is None or child.poll() is not None:
            return
        child.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=600)
        if child.poll() is None:
            child.kill()


def job_record_path(suite_dir: Path, cell: Cell) -> Path:
    return suite_dir / JOBS / f"{cell.name}.json"


def read_job(suite_dir: Path, cell: Cell) -> dict[str, Any] | None:
    """The cell's last job record ({"job_id", "executor"}), or None."""
    path = job_record_path(suite_dir, cell)
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None  # a record cut mid-write is no job to wait for


def job_state(suite_dir: Path, record: dict[str, Any]) -> str:
    """What the scheduler says of a recorded job: a Slurm state, or for submitit's local
    executor RUNNING / ENDED by whether its controller process lives."""
    job_id = str(record["job_id"])
    if record["executor"] == "submitit-local":
        try:
            os.kill(int(job_id), 0)
        except (ProcessLookupError, ValueError):
            return "ENDED"
        except PermissionError:
            pass
        # A recorded id another process now has (ids are reused) is no job of ours.
        cmdline = Path(f"/proc/{job_id}/cmdline")
        if cmdline.exists() and b"submitit" not in cmdline.read_bytes():
            return "ENDED"
        return "RUNNING"
    from aah.sweep.cluster import import_submitit

    submitit = import_submitit("slurm")
    return str(submitit.SlurmJob(folder=suite_dir / SUBMITIT, job_id=job_id).state).upper()


def job_alive(suite_dir: Path, record: dict[str, Any]) -> bool:
    state = job_state(suite_dir, record)
    return state in ALIVE or state.startswith("RUNNING") or state.startswith("PENDING")


class SubmittedCell:
    """A cell submitted through submitit (or a job of an earlier sweep found still running):
    `poll()` its exit code (None while it runs), `follow()` its steps, `close()`."""

    def __init__(
        self,
        cell: Cell,
        run_dir: Path,
        *,
        executor: Any,
        kind: str,
        gpus: int,
        progress: bool,
        slot: int,
        attach: dict[str, Any] | None = None,
    ) -> None:
        from tqdm import tqdm

        self.cell, self.run_dir, self.slot, self.kind = cell, run_dir, slot, kind
        self.suite_dir = run_dir.parent
        if attach is None:
            self._job: Any = executor.submit(CellJob(cell, run_dir, gpus))
            self.job_id = str(self._job.job_id)
            path = job_record_path(self.suite_dir, cell)
            path.parent.mkdir(parents=True, exist_ok=True)
            records.write_text_atomic(
                path, json.dumps({"job_id": self.job_id, "executor": kind}) + "\n"
            )
        else:  # a job an earlier sweep submitted: watched, not submitted again
            self._job, self.job_id = None, str(attach["job_id"])
        self._bar: Any = tqdm(
            total=cell.config.train.max_steps, desc=f"  {cell.name} (job {self.job_id})",
            unit="step", disable=not progress, position=1 + slot, leave=False,
        )  # fmt: skip

    def poll(self) -> int | None:
        """0 finished, 130 stopped at a checkpoint, 1 failed, -1 ended without a result
        (killed); None while the job runs."""
        if self._job is None:  # attached: only whether it still runs, then the run's files
            if job_alive(self.suite_dir, {"job_id": self.job_id, "executor": self.kind}):
                return None
            return 0 if (self.run_dir / records.SUMMARY).exists() else -1
        if not self._job.done():
            return None
        try:
            return int(self._job.result())
        except Exception as err:  # the job's own error, or submitit's word that it died
            killed = "UncompletedJobError" in type(err).__name__
            return -1 if killed else 1

    def follow(self) -> None:
        follow_steps(self._bar, self.run_dir)

    def close(self) -> None:
        """Stop following; the job itself runs on (a stopped sweep leaves its jobs)."""
        self.follow()
        self._bar.close()

    def cancel_hint(self) -> str:
        return f"scancel {self.job_id}" if self.kind == "slurm" else f"kill -INT {self.job_id}"
