"""The front door: `import aah` names the library's parts lazily (no torch until one is used),
and `import aah.hf` names the Hugging Face integration; each name is the object it stands for."""

from __future__ import annotations

import subprocess
import sys
from importlib import import_module

import pytest

import aah

FLAT = {
    "windowed_attention": "aah.attention", "coverage": "aah.attention", "WindowPlan": "aah.plan",
    "GPT": "aah.model", "GPTConfig": "aah.model", "train": "aah.training",
    "RunConfig": "aah.training", "TrainConfig": "aah.training", "DataConfig": "aah.data",
    "ControllerConfig": "aah.controller",
}  # fmt: skip
HF = {
    "load_model": "aah.integrations.hf.run.load",
    "search_plan": "aah.integrations.hf.search.plan_search",
    "apply": "aah.integrations.hf.run.apply_plan", "remove": "aah.integrations.hf.run.apply_plan",
    "per_head_cache": "aah.integrations.hf.run.apply_plan", "WindowPlan": "aah.plan",
    "stream_perplexity": "aah.integrations.hf.run.streaming",
    "StreamRow": "aah.integrations.hf.run.streaming",
    "calibration_mix": "aah.integrations.hf.search.calibration_mix",
    "default_plan": "aah.integrations.hf.search.default_plan",
    "heal": "aah.integrations.hf.search.heal", "HealOptions": "aah.integrations.hf.search.heal",
    "Signal": "aah.integrations.hf.search.signals", "Blend": "aah.integrations.hf.search.signals",
    "Output": "aah.integrations.hf.search.signals",
    "SuffixLoss": "aah.integrations.hf.search.signals",
    "register_signal": "aah.integrations.hf.search.signal_registry",
    "signal_names": "aah.integrations.hf.search.signal_registry",
    "make_signal": "aah.integrations.hf.search.signal_registry",
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(FLAT))
def test_import_aah_names_the_library(name: str) -> None:
    assert getattr(aah, name) is getattr(import_module(FLAT[name]), name)
    assert name in aah.__all__


def test_import_aah_loads_nothing_heavy_and_refuses_unknown_names() -> None:
    code = "import sys, aah; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr[-2000:]
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        aah.nope  # noqa: B018


@pytest.mark.parametrize("name", sorted(HF))
def test_import_aah_hf_names_the_integration(name: str) -> None:
    facade = import_module("aah.hf")
    assert getattr(facade, name) is getattr(import_module(HF[name]), name)
    assert name in facade.__all__
