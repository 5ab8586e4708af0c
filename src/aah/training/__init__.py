"""Training: the loop (loop.py, one optimizer step in step.py) over a `TrainState`
(state.py); checkpoints and loading a finished run (checkpoint.py, session.py, load.py); the
run-directory lock, resume checks and DDP helpers.

From Python, without a TOML file:

    from aah.controller import ControllerConfig
    from aah.model import GPTConfig
    from aah.training import RunConfig, TrainConfig, train

    config = RunConfig(model=GPTConfig(n_layer=2, d_model=64, max_seq_len=256),
                       train=TrainConfig(max_steps=200),
                       controller=ControllerConfig(policy="budget", budget=0.3))
    run = train(config, "runs/demo")  # a TrainResult: run_dir, summary, plan

The names are loaded on first use (module `__getattr__`), so `import aah.training.checkpoint`
stays as light as that module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aah.training.config import TrainConfig
    from aah.training.loop import TrainResult, train
    from aah.training.run_config import RunConfig

#: public name -> the module that defines it
_EXPORTS = {
    "train": "aah.training.loop",
    "TrainResult": "aah.training.loop",
    "RunConfig": "aah.training.run_config",
    "TrainConfig": "aah.training.config",
}
__all__ = ["RunConfig", "TrainConfig", "TrainResult", "train"]  # = _EXPORTS


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'aah.training' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_EXPORTS[name]), name)
