"""`load(run_dir)`: the trained model of a run, with the window plan it ended on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from aah import records
from aah.model import GPT
from aah.training.checkpoint import load_run_checkpoint
from aah.training.run_config import RunConfig


def load_run(
    run_dir: str | Path, map_location: str | torch.device = "cpu"
) -> tuple[GPT, RunConfig, dict[str, Any]]:
    """(model in eval mode, resolved config, checkpoint payload) of RUN_DIR's last checkpoint."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"run directory {str(run_dir)!r} does not exist")
    payload = load_run_checkpoint(run_dir / records.CHECKPOINT, map_location=map_location)
    config = RunConfig.from_dict(payload["config"], source=f"{run_dir} checkpoint")
    model = GPT(config.model)
    model.load_state_dict(payload["model"])
    model.set_window_plan(payload["plan"])
    model.to(map_location).eval()
    return model, config, payload


def load(run_dir: str | Path, map_location: str | torch.device = "cpu") -> GPT:
    """The model of RUN_DIR (from checkpoints/last.pt) in eval mode, its last plan in force."""
    return load_run(run_dir, map_location)[0]
