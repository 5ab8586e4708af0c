"""aah: asymmetric attention heads, per-head causal context windows with real savings."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "load"]


def __getattr__(name: str) -> Any:
    # Lazy: `import aah` stays light; torch and the model load only when asked for.
    if name == "load":
        from aah.train.load import load

        return load
    raise AttributeError(f"module 'aah' has no attribute {name!r}")
