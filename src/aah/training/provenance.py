"""What produced a result: package, torch and Python versions, the git commit of the source
(when it is a checkout), and the date. Recorded in summary.json and shown in reports."""

from __future__ import annotations

import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

import aah


def git_commit(where: Path | None = None) -> str | None:
    """The commit of the checkout holding the aah source ("-dirty" with local edits to
    tracked files), or None outside a checkout or without git. Read-only: no index lock."""
    cwd = where or Path(aah.__file__).resolve().parent
    head = _git(cwd, "rev-parse", "--short=12", "HEAD")
    if head is None:
        return None
    status = _git(cwd, "--no-optional-locks", "status", "--porcelain", "--untracked-files=no")
    return f"{head}-dirty" if status else head


def _git(cwd: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def provenance() -> dict[str, Any]:
    return {
        "aah_version": aah.__version__,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "git_commit": git_commit(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
