"""Search signals behind one protocol: a toy signal registered in one line is searched with
end to end (Python and the command line), the built-ins measure what the search allocated on
before, a blend weighs its parts alike, and bad names and signals are refused by name."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
import torch

pytest.importorskip("transformers")

from hf_models import tiny_model

from aah.cli import main
from aah.controller.allocate import kv_head_costs
from aah.hf import search_plan
from aah.integrations.hf.search.measure import blended, measure_signal
from aah.integrations.hf.search.signal_registry import (
    make_signal,
    register_signal,
    signal_names,
    unregister_signal,
)
from aah.integrations.hf.search.signals import Blend, Mass, Output, SearchContext, Signal

T = 32
CANDIDATES = [4, 8, 16, 32]
OPTIONS = {"seq_len": T, "candidates": CANDIDATES, "sinks": 1, "max_batches": 2, "choose": False}


@dataclass(frozen=True)
class PreferLayer:
    """A toy signal: cutting any head of `layer` costs a lot, any other head nothing."""

    layer: int = 0
    name: str = field(default="prefer-layer", init=False)
    unit: str = field(default="", init=False)

    def measure(self, model, batches, candidates, context):  # type: ignore[no-untyped-def]
        n_layer = model.config.num_hidden_layers
        costs = torch.zeros(n_layer, model.config.num_key_value_heads, len(candidates))
        costs[self.layer] = torch.linspace(1.0, 0.0, len(candidates))
        return costs.double()


@pytest.fixture
def toy():  # type: ignore[no-untyped-def]
    register_signal("prefer-layer", PreferLayer)
    yield
    unregister_signal("prefer-layer")


def test_a_registered_toy_signal_is_searched_with(toy) -> None:
    model = tiny_model("llama")
    assert "prefer-layer" in signal_names()
    plan = search_plan(model, kv_fraction=0.6, signal="prefer-layer", **OPTIONS)
    assert plan.info["signal"] == "prefer-layer" and plan.info["lost_mass"] is None
    assert plan.windows[0] == [T] * 4  # the layer it says matters keeps everything
    assert max(plan.windows[1]) < T
    as_object = search_plan(model, kv_fraction=0.6, signal=PreferLayer(1), **OPTIONS)
    assert as_object.windows[1] == [T] * 4 and max(as_object.windows[0]) < T


def test_the_command_line_searches_with_a_registered_signal(toy, tmp_path) -> None:
    folder = tmp_path / "llama"
    tiny_model("llama").save_pretrained(folder)
    out = tmp_path / "plan.json"
    argv = ["plan", "search", str(folder), "--out", str(out), "--no-choose",
            "--signal", "prefer-layer",
            "--seq-len", str(T), "--max-batches", "2", "--candidates", "4,8,16,32",
            "--sinks", "1", "--budget", "0.8", "--threads", "1"]  # fmt: skip
    assert main(argv) == 0
    plan = json.loads(out.read_text())
    assert plan["signal"] == "prefer-layer" and plan["windows"][0] == [T] * 4


def test_built_in_signals_are_the_per_kv_head_sums_of_the_measurements() -> None:
    model = tiny_model("llama")
    batches = [torch.randint(0, 256, (1, T), generator=torch.Generator().manual_seed(i))
               for i in range(2)]  # fmt: skip
    context = SearchContext(sinks=1, seed=3)
    for signal, name in ((Mass(16), "mass"), (Output(16), "output")):
        per_query = measure_signal(model, batches, CANDIDATES, name, sample_queries=16, seed=3,
                                   sinks=1)  # fmt: skip
        got = signal.measure(model, batches, CANDIDATES, context)
        assert got.shape == (2, 2, len(CANDIDATES))  # layers x KV heads x windows
        assert torch.equal(got, kv_head_costs(per_query, 2))
        torch.testing.assert_close(got, per_query.reshape(2, 2, 2, -1).sum(2), rtol=0, atol=0)
    both = Blend((Mass(16), Output(16))).measure(model, batches, CANDIDATES, context)
    parts = [s.measure(model, batches, CANDIDATES, context) for s in (Mass(16), Output(16))]
    assert torch.equal(both, blended(parts))
    assert torch.allclose(both[..., 0].sum(), torch.tensor(2.0, dtype=torch.float64))


def test_names_and_signals_are_checked() -> None:
    assert isinstance(make_signal("suffix-loss", suffix=8), Signal)
    assert make_signal("output+retrieval").name == "output+retrieval"
    with pytest.raises(ValueError, match="already registered"):
        register_signal("output", Output)
    with pytest.raises(ValueError, match="non-empty string"):
        register_signal("", Output)
    with pytest.raises(ValueError, match="got 'nope'"):
        make_signal("nope")
    with pytest.raises(ValueError, match="a name or a Signal"):
        search_plan(tiny_model("llama"), kv_fraction=0.5, signal=object(), **OPTIONS)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one signal"):
        Blend(())


@dataclass(frozen=True)
class Fixed:
    """A toy signal of given costs (L, Hkv, n_w), checking the context it is handed."""

    costs: torch.Tensor
    name: str = field(default="fixed", init=False)
    unit: str = field(default="", init=False)

    def measure(self, model, batches, candidates, context):  # type: ignore[no-untyped-def]
        assert context.seq_len == batches[0].shape[1] == T and context.sinks == 1
        return self.costs[..., : len(candidates)]


def test_a_weighted_blend_scales_each_part_by_its_total_then_its_weight() -> None:
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.rand(2, 2, 4, generator=gen, dtype=torch.float64) for _ in range(2))
    context = SearchContext(sinks=1, seq_len=T)
    ids = [torch.zeros(1, T, dtype=torch.long)]
    got = Blend((Fixed(a), Fixed(b)), weights=(1.0, 3.0)).measure(None, ids, CANDIDATES, context)
    want = a / a[..., 0].sum().item() + 3.0 * (b / b[..., 0].sum().item())
    torch.testing.assert_close(got, want, rtol=1e-15, atol=0)
    even = Blend((Fixed(a), Fixed(b))).measure(None, ids, CANDIDATES, context)
    torch.testing.assert_close(even, a / a[..., 0].sum() + b / b[..., 0].sum(), rtol=1e-15, atol=0)
    for bad in ((1.0,), (1.0, -1.0), (0.0, 0.0), (1.0, float("nan"))):
        with pytest.raises(ValueError, match="one finite weight >= 0 per part"):
            Blend((Fixed(a), Fixed(b)), weights=bad)


@pytest.mark.parametrize("share", [0.5, 1.0])
def test_a_floor_keeps_every_kv_head_at_a_share_of_the_uniform_window(share: float) -> None:
    from aah.attention.kv_bytes import plan_kv_bytes
    from aah.integrations.hf.run.model_layout import kv_shape

    model = tiny_model("llama")
    shape, sinks = kv_shape(model), [[1] * 4] * 2
    # the uniform window at 0.5 of the cache, by brute force over every window
    budget = int(0.5 * plan_kv_bytes([[T] * 4] * 2, None, shape, T))
    fits = [w for w in range(1, T + 1) if plan_kv_bytes([[w] * 4] * 2, sinks, shape, T) <= budget]
    floor = int(share * max(fits))
    costs = torch.zeros(2, 2, 8, dtype=torch.float64)
    costs[0] = torch.linspace(1.0, 0.0, 8)  # only layer 0 asks for context: layer 1 would get
    plain = search_plan(model, kv_fraction=0.5, signal=Fixed(costs), **OPTIONS)  # the least
    assert min(plain.windows[1]) == CANDIDATES[0] and "floor" not in plain.info
    plan = search_plan(model, kv_fraction=0.5, signal=Fixed(costs), floor=share, **OPTIONS)
    assert plan.info["floor"] == floor and min(w for row in plan.windows for w in row) >= floor
    assert floor in plan.info["candidates"] and plan.info["kv_bytes"] <= budget
    assert search_plan(model, kv_fraction=0.5, signal=Fixed(costs), floor=0.0, **OPTIONS) == plain
    with pytest.raises(ValueError, match="floor must be a share in"):
        search_plan(model, kv_fraction=0.5, signal=Fixed(costs), floor=1.5, **OPTIONS)


@dataclass(frozen=True)
class Counted(PreferLayer):
    """PreferLayer that records the sink count of every measurement it makes."""

    calls: list[int] = field(default_factory=list, compare=False, hash=False)

    def measure(self, model, batches, candidates, context):  # type: ignore[no-untyped-def]
        self.calls.append(context.sinks)
        return super().measure(model, batches, candidates, context)


def test_a_signal_named_alone_and_in_a_blend_is_measured_once_per_sink_count() -> None:
    model = tiny_model("llama")
    counted = Counted(1)
    signals = [counted, Blend((counted, PreferLayer(0)), name="both")]
    options = {**OPTIONS, "sinks": None, "choose": True, "max_batches": 4}
    plan = search_plan(model, kv_fraction=0.6, signal=signals, **options)
    assert sorted(counted.calls) == sorted(set(counted.calls)) and len(counted.calls) >= 2
    # a context built by hand keeps no memo: the same signal is measured each time
    context, ids = SearchContext(sinks=1), [torch.zeros(1, T, dtype=torch.long)]
    searched = len(counted.calls)
    Blend((counted, counted)).measure(model, ids, CANDIDATES, context)
    assert len(counted.calls) == searched + 2
    assert plan.info["signal"] in ("prefer-layer", "both", "uniform")
