"""The one atomic file writer: checkpoints, token caches and run records all go through it.

The bytes go to a uniquely named hidden temp file beside the target (`.NAME.XXXX.tmp`), are
fsynced, then `os.replace`d onto the target, and the folder is fsynced so the rename itself
survives a power cut. A crash at any point leaves either the old file or the new one, never
a torn mix; the temp file is removed on the way out of a failed write. Concurrent writers
(several ranks, several hosts on a shared disk) never share a temp file.

`StagedWrites` does the same for the several files of one command (a plan and its heatmap):
all are written to temps first and renamed onto their targets only once the command succeeded.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

#: bytes per write call: large payloads go down in pieces rather than one huge syscall.
CHUNK = 1 << 20


def write_bytes_atomic(path: str | Path, data: bytes | memoryview) -> None:
    """Replace `path` with `data` atomically and durably (creates missing parent folders)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    view = memoryview(data).cast("B")
    fd, tmp = _open_temp(path)
    try:
        with os.fdopen(fd, "wb") as handle:
            for start in range(0, len(view), CHUNK):
                handle.write(view[start : start + CHUNK])
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)


def write_text_atomic(path: str | Path, text: str) -> None:
    """`write_bytes_atomic` of `text` as UTF-8."""
    write_bytes_atomic(path, text.encode("utf-8"))


def _open_temp(path: Path) -> tuple[int, Path]:
    # Not tempfile.mkstemp: its 0600 mode would make every record private; O_EXCL with mode
    # 0666 gives the usual umask-governed permissions and still never opens a file twice.
    while True:
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some filesystems do not open folders; the replace is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:  # nor fsync them (e.g. some network mounts): the data itself is synced
        pass
    finally:
        os.close(fd)


class StagedWrites:
    """Several files that appear together or not at all: `path_for(target)` names a temp file
    beside `target` (same folder, so the final rename stays on one filesystem; same suffix, so
    writers that go by the extension still work), `commit()` renames every temp onto its
    target, `discard()` removes them. As a context manager it commits on success and discards
    on any exception, so a command that fails half way leaves no output behind.

    Between the first and the last rename of `commit` a crash can still leave some targets
    replaced; the window is a few renames long instead of the whole command."""

    def __init__(self) -> None:
        self._pending: list[tuple[Path, Path]] = []

    def path_for(self, target: str | Path) -> Path:
        target = Path(target)
        tmp = target.with_name(
            f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp{target.suffix}"
        )
        self._pending.append((tmp, target))
        return tmp

    def write_text(self, target: str | Path, text: str) -> None:
        """Stage `text` (UTF-8) for `target`, fsynced now, renamed at `commit`."""
        tmp = self.path_for(target)
        with open(tmp, "wb") as handle:
            handle.write(text.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())

    def commit(self) -> None:
        missing = [str(t) for t, _ in self._pending if not t.is_file()]
        if missing:
            self.discard()
            raise FileNotFoundError(f"staged output was never written: {', '.join(missing)}")
        for tmp, target in self._pending:
            os.replace(tmp, target)
        for folder in {target.parent for _, target in self._pending}:
            _fsync_folder(folder)
        self._pending.clear()

    def discard(self) -> None:
        for tmp, _ in self._pending:
            tmp.unlink(missing_ok=True)
        self._pending.clear()

    def __enter__(self) -> StagedWrites:
        return self

    def __exit__(self, kind: object, error: object, trace: object) -> None:
        if kind is None:
            self.commit()
        else:
            self.discard()
