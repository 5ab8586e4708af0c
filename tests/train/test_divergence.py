"""The divergence guard: a blown-up loss stops the run, keeps the last good checkpoint and
leaves only strict JSON behind."""

import json
import math

import pytest
import torch
from train_helpers import tiny_config

from aah.training import loop
from aah.training import step as train_step
from aah.training.checkpoint import load_checkpoint
from aah.training.divergence import TrainingDiverged
from aah.training.schedule import learning_rate


def strict_json(text: str):
    def refuse(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def explode_from(monkeypatch, step: int) -> None:
    """The learning rate jumps to 1e30 at `step` (an ordinary schedule before it)."""

    def rate(s, cfg):
        return 1e30 if s >= step else learning_rate(s, cfg)

    monkeypatch.setattr(train_step, "learning_rate", rate)


@pytest.mark.parametrize("interval", ["1", "2"])
def test_divergence_stops_and_keeps_the_last_good_checkpoint(tmp_path, tiny_corpus, monkeypatch,
                                                             interval):  # fmt: skip
    explode_from(monkeypatch, 4)
    config = tiny_config(
        tiny_corpus,
        **{"train.max_steps": "12", "train.grad_clip": "0", "train.log_interval": "1"},
        **{"train.checkpoint_interval": interval, "train.eval_interval": "2"},
    )
    run = tmp_path / "run"
    with pytest.raises(TrainingDiverged, match="diverged at step") as err:
        loop.train(config, run, progress=False)
    assert "\n" not in str(err.value)
    # Step 5's update blew the weights up: with checkpoints at every step, step 5's is refused.
    payload = load_checkpoint(run / "checkpoints" / "last.pt")
    assert payload["step"] == 4
    assert all(torch.isfinite(t).all() for t in payload["model"].values())
    lines = [strict_json(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["diverged"] is True and lines[-1]["step"] <= 6
    assert all(r.get("diverged") is None for r in lines[:-1])
    assert not (run / "summary.json").exists()  # the run did not finish


def test_an_exploding_but_finite_loss_also_stops(tmp_path, tiny_corpus, monkeypatch):
    # Far above a uniform guess's loss (ln 256 nats) the model is no longer learning.
    config = tiny_config(tiny_corpus, **{"train.max_steps": "6", "train.checkpoint_interval": "0"})
    real = torch.nn.functional.cross_entropy
    monkeypatch.setattr(train_step.F, "cross_entropy", lambda *a, **k: real(*a, **k) * 100)
    with pytest.raises(TrainingDiverged, match="diverged at step 1"):
        loop.train(config, tmp_path / "run", progress=False)
    line = strict_json((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert line["diverged"] is True and math.isfinite(line["train_loss"])
