"""Checks that run before the first training step, so a run fails in seconds, not at its
first evaluation: the splits are long enough, and a resumed run finds its own data and a
step it has not passed yet."""

from __future__ import annotations

from typing import Any

from aah.data import TokenSplits
from aah.training import fingerprint
from aah.training.run_config import RunConfig


def check_splits(splits: TokenSplits, config: RunConfig) -> None:
    """Each split holds at least one window of max_seq_len + 1 tokens; ValueError otherwise."""
    need = config.seq_len + 1
    total = int(splits.train.size + splits.val.size)
    for name, part in (("validation", splits.val), ("training", splits.train)):
        if part.size < need:
            raise ValueError(
                f"the {name} split has {part.size:,} tokens, fewer than model.max_seq_len + 1 "
                f"= {need:,} (data.val_fraction {config.data.val_fraction} of {total:,} tokens "
                f"of {splits.name}); change data.val_fraction, lower model.max_seq_len or give "
                "more text"
            )


def check_resume(payload: dict[str, Any], splits: TokenSplits, config: RunConfig) -> None:
    """ValueError when the data changed since the checkpoint (its fingerprint differs)."""
    why = fingerprint.changed(payload.get(fingerprint.KEY), splits.content_hash, config.data)
    if why is not None:
        raise ValueError(f"cannot resume: {why}; restore that data, or train a new run")


def check_steps(payload: dict[str, Any], config: RunConfig) -> None:
    """A resumed run cannot end before the step its checkpoint holds."""
    step, steps = int(payload["step"]), config.train.max_steps
    if steps < step:
        raise ValueError(
            f"train.max_steps {steps} is below the checkpoint's step {step}: a run cannot be "
            f"shortened (resume with --train.max_steps >= {step}; the run is left unchanged)"
        )
