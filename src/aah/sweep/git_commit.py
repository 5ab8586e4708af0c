"""`aah sweep --commit`: each finished cell is committed as it lands, so a suite longer than a
session loses nothing and its history shows when each cell finished.

Only the cell's run directory and the suite CSV are committed (`git commit --only`), whatever
else is staged; `.gitignore` decides which files of the run directory go in (e.g. keep
`checkpoints/` out). A failure (no repository, no git, a lock held by another sweep) is
reported and never stops the sweep: the next cell's commit picks the files up.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

RETRIES = 5
RETRY_S = 1.0


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def commit_paths(paths: Sequence[Path], message: str) -> str | None:
    """Commit exactly `paths` (files or folders inside one work tree); None on success (or
    nothing to commit), else why it failed, in one line."""
    where = Path(paths[0]).resolve().parent
    try:
        top = _git(where, "rev-parse", "--show-toplevel")
    except (OSError, subprocess.SubprocessError) as err:
        return f"git not usable ({err})"
    if top.returncode != 0:
        return f"{where} is not inside a git work tree"
    root = Path(top.stdout.strip())
    rel = [str(Path(p).resolve().relative_to(root)) for p in paths]
    last = ""
    for _ in range(RETRIES):
        added = _git(root, "add", "--", *rel)
        if added.returncode == 0:
            if _git(root, "diff", "--cached", "--quiet", "--", *rel).returncode == 0:
                return None  # nothing new under these paths
            done = _git(root, "commit", "-q", "--only", "-m", message, "--", *rel)
            if done.returncode == 0:
                return None
            last = (done.stderr or done.stdout).strip().splitlines()
        else:
            last = (added.stderr or added.stdout).strip().splitlines()
        last = last[-1] if last else "git failed"
        if "index.lock" not in last:
            break
        time.sleep(RETRY_S)  # another sweep is committing: wait for its lock
    return str(last)
