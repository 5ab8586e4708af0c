"""A heal that re-decides its plan's windows while it trains (`HealOptions(redecide=...)`), on
tiny models in seconds: within the plan's KV bytes, the kept windows the ones the kept
parameters were judged under, the EMA of the costs, and the installed parameters untouched."""

from __future__ import annotations

import pytest
import torch
from hf_models import VOCAB, tiny_model

from aah.attention.kv_bytes import plan_kv_bytes
from aah.integrations import hf
from aah.integrations.hf.run.heal_params import installed, trainable, uninstall
from aah.integrations.hf.run.model_layout import kv_shape, layout
from aah.integrations.hf.search.heal import HealOptions, heal, held_out_kl
from aah.integrations.hf.search.heal_redecide import Redecide, WindowRedecider
from aah.integrations.hf.search.output_error import output_projection
from aah.integrations.hf.search.plan_allocation import plan_from_costs
from aah.integrations.hf.search.plan_choice import FullReference
from aah.plan import WindowPlan

pytest.importorskip("peft")
T = 48
CANDIDATES = [4, 8, 16, 48]


def ids(seed: int, length: int = T) -> torch.Tensor:
    return torch.randint(2, VOCAB, (1, length), generator=torch.Generator().manual_seed(seed))


def searched_plan(model, signal: str = "output") -> WindowPlan:  # type: ignore[no-untyped-def]
    """A plan as a search writes it: candidate windows, 2 sinks, the signal it allocated on."""
    lay = layout(model)
    rows = [
        [CANDIDATES[(layer + h) % 3] for h in range(lay.n_head)] for layer in range(lay.n_layer)
    ]
    kv = plan_kv_bytes(rows, [[2] * lay.n_head] * lay.n_layer, kv_shape(model), T)
    return WindowPlan.of(
        rows, sinks=2, seq_len=T, candidates=CANDIDATES, signal=signal, kv_bytes=kv
    )


def test_a_redeciding_heal_keeps_the_windows_its_parameters_were_judged_under():
    model = tiny_model("llama")
    plan = searched_plan(model)
    text = [ids(0, 7 * T)[0].tolist()]
    opts = HealOptions(kinds=("lora",), steps=12, train_blocks=3, held_out=2, eval_every=2,
                       rank=2, redecide=Redecide(every=2, blocks=1, sample_queries=8))  # fmt: skip
    healed = heal(model, plan, text, options=opts, progress=False)
    record = healed.info["heal"]
    decisions = record["redecide"]["decisions"]
    assert [d["step"] for d in decisions] == [2, 4, 6, 8, 10, 12]
    budget = plan_kv_bytes(plan.windows, plan.sinks, kv_shape(model), T)
    assert record["redecide"]["kv_bytes_budget"] == budget
    assert all(d["kv_bytes"] <= budget for d in decisions)
    assert healed.params and healed.info["kv_bytes"] <= budget
    assert {w for row in healed.windows for w in row} <= set(CANDIDATES)
    assert hf.current_plan(model) is None and not installed(model)  # the model as it was
    # Judged again from scratch, the returned windows with the returned parameters give the
    # held-out KL the heal kept (the heal's own held-out blocks: the text's last two).
    held = [ids(0, 7 * T)[:, i * T : (i + 1) * T] for i in (5, 6)]
    ref = FullReference.of(model, held)
    hf.apply(model, healed)
    assert held_out_kl(model, ref) == pytest.approx(record["held_out_kl_after"], rel=1e-5)
    hf.remove(model)


def test_a_decision_changes_windows_and_sinks_only_and_smooths_the_costs(monkeypatch):
    model = tiny_model("llama")
    plan = searched_plan(model)
    hf.apply(model, plan)
    params = trainable(model, ("lora",), [0, 1], rank=2)
    with torch.no_grad():
        for p in params.values():
            p.normal_()
    before = installed(model)
    redecider = WindowRedecider(model, plan, T, Redecide(feature_ema=0.75))
    lay = layout(model)
    first = torch.rand(lay.n_layer, lay.n_kv_head, len(CANDIDATES), dtype=torch.float64)
    second = torch.rand(lay.n_layer, lay.n_kv_head, len(CANDIDATES), dtype=torch.float64)
    measured = iter([first, second])
    monkeypatch.setattr(redecider, "_costs", lambda blocks: next(measured))
    redecider.decide(1, [ids(1)])
    decided = redecider.decide(2, [ids(2)])
    smoothed = (0.75 * first.float() + 0.25 * second.float()).double()
    want = plan_from_costs(smoothed, CANDIDATES, redecider.budget, "LlamaForCausalLM",
                           signal="output", unit="")  # fmt: skip
    assert decided.windows == want.windows and hf.current_plan(model) == want.windows
    assert hf.current_sinks(model) == [[2] * lay.n_head] * lay.n_layer
    now = installed(model)
    assert now.keys() == before.keys() and all(torch.equal(now[k], before[k]) for k in now)
    uninstall(model)
    hf.remove(model)


def test_the_signal_of_a_decision_is_the_plans_own_or_the_one_named():
    model = tiny_model("llama")
    assert WindowRedecider(model, searched_plan(model), T, Redecide()).signal.name == "output"
    named = WindowRedecider(model, searched_plan(model), T, Redecide(signal="mass"))
    assert named.signal.name == "mass"
    costs = named._costs([ids(3)])
    assert costs.shape == (2, layout(model).n_kv_head, len(CANDIDATES))
    assert (costs >= 0).all() and costs[..., -1].abs().max() < 1e-6  # the whole row loses none


def test_a_plan_without_a_search_record_or_bad_options_are_refused_by_name():
    model = tiny_model("llama")
    bare = WindowPlan.of([[8] * 4, [8] * 4], sinks=0, seq_len=T)
    bare_info = {"candidates": CANDIDATES, "signal": "output"}
    with pytest.raises(ValueError, match="candidates"):
        WindowRedecider(model, bare, T, Redecide())
    mixed = WindowPlan.of(bare.windows, sinks=[[0, 2, 2, 2], [2] * 4], seq_len=T, **bare_info)
    with pytest.raises(ValueError, match=r"layers \[0\]"):
        WindowRedecider(model, mixed, T, Redecide())
    with pytest.raises(ValueError, match="every"):
        Redecide(every=0)
    with pytest.raises(ValueError, match="feature_ema"):
        Redecide(feature_ema=1.0)
    with pytest.raises(ValueError, match="signal"):
        Redecide(signal="loss")
    with pytest.raises(ValueError, match="keep_params"):
        healed = WindowPlan(bare.windows, bare.sinks, T, params={"x": torch.zeros(1)})
        hf.apply(model, healed, keep_params=True)


def test_the_output_signal_reads_a_healed_output_projection_with_its_update():
    model = tiny_model("llama")
    module = layout(model).modules[0]
    trainable(model, ("lora",), [0], rank=2)
    with torch.no_grad():
        for table in (module.o_proj.lora_A, module.o_proj.lora_B):
            table["heal"].weight.normal_()
    x = torch.randn(5, module.o_proj.in_features)
    with torch.no_grad():
        assert torch.allclose(x @ output_projection(module).T, module.o_proj(x), atol=1e-5)
    uninstall(model)
