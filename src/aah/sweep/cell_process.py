"""One cell of a sweep as a child `aah train` process, with a step bar that follows it.

The child runs in its own session, so a stop reaches it once, from the sweep: Ctrl-C or
SIGTERM to the sweep sends each running child one SIGINT; the child checkpoints and exits
130, and the next invocation resumes it from that checkpoint.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

from aah import records
from aah.sweep.config import Cell

LOG = "train.log"
CELL = "cell.json"  # {"regime", "seed"}: what the cell is, for the CSV


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


def follow_steps(bar: Any, run_dir: Path) -> None:
    """Move a cell's step bar to the last step its run directory logged."""
    rows = records.read_jsonl(run_dir / records.METRICS)
    if rows:
        bar.n = int(rows[-1].get("step", 0))
        bar.refresh()


class CellProcess:
    """A started cell: `poll()` its exit code, `follow()` its steps, `stop()` it, `close()`."""

    def __init__(self, cell: Cell, run_dir: Path, *, progress: bool, slot: int) -> None:
        from tqdm import tqdm

        self.cell, self.run_dir, self.slot = cell, run_dir, slot
        command = train_command(cell, run_dir)
        self._bar: Any = tqdm(
            total=cell.config.train.max_steps, desc=f"  {cell.name}", unit="step",
            disable=not progress, position=1 + slot, leave=False,
        )  # fmt: skip
        self._log: IO[str] = (run_dir / LOG).open("a", encoding="utf-8")
        self._log.write(f"$ aah {' '.join(command[3:])}\n")  # what ran (a start or a --resume)
        self._log.flush()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self._child = subprocess.Popen(
            command, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

    def poll(self) -> int | None:
        """The child's exit code, or None while it runs."""
        return self._child.poll()

    def follow(self) -> None:
        """Move the step bar to the child's last logged step."""
        follow_steps(self._bar, self.run_dir)

    def stop(self) -> None:
        """Ask the child to checkpoint and exit, and wait for it; a second Ctrl-C while
        waiting sends another SIGINT, which makes the trainer stop at once."""
        if self._child.poll() is not None:
            return
        self._child.send_signal(signal.SIGINT)
        while True:
            try:
                self._child.wait()
                return
            except KeyboardInterrupt:
                self._child.send_signal(signal.SIGINT)

    def close(self) -> None:
        """Stop the child if it still runs (never leave a trainer behind), close the log."""
        self.stop()
        self.follow()
        self._bar.close()
        self._log.close()
