"""Claiming a run directory: one trainer at a time (a lock file), and whether this start is a
new run, a resume, or a restart of a run that stopped before its first checkpoint.

The lock is RUN_DIR/train.lock, created exclusively and holding {"pid", "host", "started"}.
A lock whose pid no longer runs on this host is stale (its trainer was killed) and is taken
over with a notice; any other lock stops the start with a one-line error. The lock is
removed when the trainer ends, also on an error.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aah import records
from aah.training import distributed as dist_util

LOCK = "train.lock"


class RunDirBusy(ValueError):
    """Another trainer holds the run directory."""


@dataclass
class RunLock:
    path: Path
    holder: dict[str, Any]
    created_dir: bool  # the directory did not exist before: remove it if nothing was written

    def release(self) -> None:
        """Remove the lock if it is still ours (never a lock someone else took over)."""
        if _read(self.path) == self.holder:
            self.path.unlink(missing_ok=True)
        if self.created_dir:
            with contextlib.suppress(OSError):  # not empty: the run wrote files, keep them
                self.path.parent.rmdir()


def claim(run_dir: Path, resume: bool, info: dist_util.DistInfo) -> tuple[RunLock | None, bool]:
    """Lock `run_dir` (rank 0) and decide whether to resume; every rank gets the decision or
    raises the same ValueError. Returns (the lock on rank 0 else None, resume)."""
    lock, error = None, None
    if info.is_main:
        try:
            if run_dir.exists() and not run_dir.is_dir():
                raise ValueError(f"run directory {str(run_dir)!r} is an existing file")
            try:
                lock = acquire(run_dir)
            except OSError as err:  # e.g. read-only, or a file where the directory should be
                raise ValueError(
                    f"run directory {str(run_dir)!r} cannot be used: {err.strerror or err}"
                ) from None
            resume = start_mode(run_dir, resume)
        except ValueError as err:
            if lock is not None:
                lock.release()
            if not info.enabled:
                raise
            error = str(err)
    error, resume = dist_util.broadcast_object(info, (error, resume))
    if error is not None:
        raise ValueError(error)
    return lock, resume


def acquire(run_dir: Path) -> RunLock:
    """Create the lock file, taking over a stale one; RunDirBusy if a live trainer holds it."""
    created = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK
    holder = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    with _exclusive(run_dir):
        other = _read(path)
        if other is not None:
            if not _is_stale(other):
                raise RunDirBusy(_busy_message(path, other))
            _notice(
                f"taking over the stale lock {path} of pid {other['pid']} (started "
                f"{other.get('started', '?')}), which no longer runs on this host"
            )
            path.unlink(missing_ok=True)
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:  # created from another host since we looked
            raise RunDirBusy(_busy_message(path, _read(path) or {})) from None
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(holder, handle)
    return RunLock(path, holder, created)


def start_mode(run_dir: Path, resume: bool) -> bool:
    """True to resume from the checkpoint, False to start from scratch; ValueError if the
    directory holds a run that must not be overwritten."""
    has_run = (run_dir / records.CONFIG).exists()
    has_checkpoint = (run_dir / records.CHECKPOINT).exists()
    finished = (run_dir / records.SUMMARY).exists()
    if resume and not has_run:
        raise ValueError(f"run directory {str(run_dir)!r} holds no run to resume")
    if has_checkpoint or finished:
        if not resume:
            raise ValueError(f"run directory {str(run_dir)!r} already holds a run; use --resume")
        if not has_checkpoint:
            raise ValueError(
                f"run directory {str(run_dir)!r} has a summary but no checkpoint: it cannot "
                "be resumed; train into another --out"
            )
        return True
    if has_run:  # it stopped before its first checkpoint: nothing to keep
        _notice(
            f"run directory {str(run_dir)!r} holds a run with no checkpoint (it stopped "
            "before its first one): starting it again from scratch"
        )
    return False


def _read(path: Path) -> dict[str, Any] | None:
    """The lock's holder; None if there is no lock, {} if it cannot be read."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _is_stale(holder: dict[str, Any]) -> bool:
    pid = holder.get("pid")
    # Only a pid on this host can be checked; a pid of another host may well be running.
    if holder.get("host") != socket.gethostname() or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # e.g. another user's process: it exists
        return False
    return False


def _busy_message(path: Path, holder: dict[str, Any]) -> str:
    if not holder:
        return (
            f"run directory {str(path.parent)!r} is locked by {path}, which cannot be read; "
            "if no trainer runs there, delete that file"
        )
    return (
        f"run directory {str(path.parent)!r} is in use by pid {holder.get('pid')} on host "
        f"{holder.get('host')} (started {holder.get('started', '?')}, lock {path}); wait for "
        "it to end, or if that trainer is gone, delete the lock file"
    )


def _notice(message: str) -> None:
    print(f"notice: {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _exclusive(run_dir: Path) -> Iterator[None]:
    """Trainers on this host claim the directory one at a time (so two never both take over
    the same stale lock); without flock (not POSIX) the exclusive create still decides."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    fd = os.open(run_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock
