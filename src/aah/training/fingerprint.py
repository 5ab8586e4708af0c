"""The data fingerprint a run keeps (checkpoint and summary.json), and what a change means.

The fingerprint is `TokenSplits.content_hash`: a hash of the exact corpus content and the
split settings (aah.data.token_cache), so an edited, added or removed file changes it.
"""

from __future__ import annotations

from typing import Any

from aah.data import DataConfig

KEY = "data_fingerprint"


def describe(cfg: DataConfig) -> str:
    return f"data.path {cfg.path!r}" if cfg.path is not None else f"data.corpus {cfg.corpus!r}"


def changed(stored: Any, current: str, cfg: DataConfig) -> str | None:
    """Why the data differs from the run's, or None (also for runs that stored none)."""
    if not isinstance(stored, str) or stored == current:
        return None
    return (
        f"the run's data changed: {describe(cfg)} now has fingerprint {current[:12]}, the run "
        f"was trained on {stored[:12]}"
    )
