"""`search_plan(model)` with no text: the shipped calibration mix, the output signal."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from hf_models import tiny_model

from aah.integrations.hf.search.calibration_mix import calibration_mix
from aah.integrations.hf.search.plan_search import search_plan

T = 32
OPTIONS = {"seq_len": T, "candidates": [4, 8, 16, 32], "sinks": 1}


def test_no_text_searches_on_the_shipped_mix_with_the_output_signal() -> None:
    model = tiny_model("llama", max_position_embeddings=256)
    plan = search_plan(model, kv_fraction=0.4, choose=False, **OPTIONS)
    mix = calibration_mix(None, seq_len=T, n_blocks=8, vocab_size=model.config.vocab_size)
    assert plan.info["signal"] == "output"
    assert plan == search_plan(
        model, mix, kv_fraction=0.4, signal="output", choose=False, **OPTIONS
    )
    # max_batches picks how many mix blocks: fewer blocks, another measurement
    two = search_plan(model, kv_fraction=0.4, max_batches=2, choose=False, **OPTIONS)
    assert two == search_plan(model, mix[:2], kv_fraction=0.4, choose=False, **OPTIONS)


def test_the_default_returns_the_chosen_candidate_as_its_settings_make_it() -> None:
    model = tiny_model("llama", max_position_embeddings=256)
    options = {"seq_len": T, "candidates": [4, 8, 16, 32], "kv_fraction": 0.6}
    plan = search_plan(model, **options)
    chosen = plan.info["choice"]["chosen"]
    if chosen.startswith("uniform"):
        window = {w for row in plan.windows for w in row}
        assert len(window) == 1, "a uniform candidate has one window"
        return
    parts = dict(part.split(" ", 1) for part in chosen.split(", ")[1:])
    again = search_plan(
        model, choose=False, sinks=int(parts["sinks"]),
        whole_layers=[int(x) for x in parts["whole"].split(",")] if "whole" in parts else [],
        floor=float(parts.get("floor", 0)), **options,
    )  # fmt: skip
    assert again.windows == plan.windows and again.sinks == plan.sinks


def test_the_mix_is_cut_at_the_models_positions() -> None:
    model = tiny_model("llama", max_position_embeddings=16)
    plan = search_plan(model, kv_fraction=0.5, seq_len=64, candidates=[4, 8, 16], sinks=1)
    assert plan.seq_len == 16
