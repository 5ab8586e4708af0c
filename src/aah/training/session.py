"""A `TrainState` into and out of a checkpoint (the payload layout is `checkpoint.FORMAT`)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from aah import records
from aah.training import fingerprint
from aah.training.checkpoint import FORMAT, rng_state, save_checkpoint, set_rng_state
from aah.training.distributed import gather_objects
from aah.training.metrics import wall_seconds
from aah.training.state import Counters, TrainState


def checkpoint_payload(state: TrainState) -> dict[str, Any] | None:
    """The checkpoint dict on rank 0 (None elsewhere); collective: every rank must call it."""
    info = state.info
    per_rank = gather_objects(info, {"rng": rng_state(), "data": state.loader.state_dict()})
    if not info.is_main:
        return None
    return {
        "format": FORMAT,
        "step": state.counters.step,
        "config": state.config.to_dict(),
        "model": state.model.state_dict(),
        "optimizer": state.optimizer.state_dict(),
        "plan": state.model.window_plan(),
        "controller": state.policy.state_dict(),
        "counters": asdict(state.counters),
        "world_size": info.world_size,
        "ranks": per_rank,
        fingerprint.KEY: state.data_fingerprint,
    }


def save(state: TrainState) -> None:
    """Write RUN_DIR/checkpoints/last.pt (collective); ValueError when the write fails."""
    counters = state.counters
    prior = counters.wall_seconds
    # The stored total becomes the prior wall time of a resumed run.
    counters.wall_seconds = wall_seconds(counters, state.wall_start)
    payload = checkpoint_payload(state)
    counters.wall_seconds = prior
    if payload is None:
        return
    path = state.run_dir / records.CHECKPOINT
    try:
        save_checkpoint(path, payload)
    except OSError as err:  # e.g. disk full: the write is atomic, the old file stays
        raise ValueError(
            f"cannot write checkpoint {str(path)!r} at step {counters.step}: "
            f"{err.strerror or err}; the previous checkpoint, if any, is intact"
        ) from None


def restore(payload: dict[str, Any], state: TrainState) -> None:
    """Put a checkpoint back into the live objects; ValueError if the world size changed."""
    info = state.info
    if payload["world_size"] != info.world_size:
        raise ValueError(
            f"checkpoint was written with world_size {payload['world_size']}, this run has "
            f"{info.world_size}: resume with the same number of processes"
        )
    state.model.load_state_dict(payload["model"])
    state.model.set_window_plan(payload["plan"])
    state.optimizer.load_state_dict(payload["optimizer"])
    state.policy.load_state_dict(payload["controller"])
    mine = payload["ranks"][info.rank]
    state.loader.load_state_dict(mine["data"])
    set_rng_state(mine["rng"])
    state.counters = Counters(**payload["counters"])
