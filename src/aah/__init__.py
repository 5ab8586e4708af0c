"""aah: asymmetric attention heads, per-head causal context windows with real savings.

    import aah

    out = aah.windowed_attention(q, k, v, windows)   # per-head windows, any backend
    run = aah.train(aah.RunConfig(...), "runs/x")    # a GPT trained with a window policy

Hugging Face models: `import aah.hf`. The names below load on first use, so `import aah` (and
`aah --help`) stays light.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    "windowed_attention": "aah.attention",
    "coverage": "aah.attention",
    "WindowPlan": "aah.plan",
    "GPT": "aah.model",
    "GPTConfig": "aah.model",
    "train": "aah.training",
    "RunConfig": "aah.training",
    "TrainConfig": "aah.training",
    "DataConfig": "aah.data",
    "ControllerConfig": "aah.controller",
    "load": "aah.training.load",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'aah' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
