"""Healing a plan (`aah.hf.heal`): its parameters, their file, and the never-worse rule, on tiny
models in seconds."""

from __future__ import annotations

import json

import pytest
import torch
from hf_models import VOCAB, tiny_model
from test_hf_cache import cache_kwargs, greedy, recompute

from aah.integrations import hf
from aah.integrations.hf.run.heal_params import installed, trainable, uninstall
from aah.integrations.hf.run.model_layout import layout
from aah.integrations.hf.search import heal as heal_module
from aah.integrations.hf.search.heal import HealOptions, cut_layers, heal
from aah.plan import WindowPlan

pytest.importorskip("peft")
T = 48
QUICK = HealOptions(kinds=("temperature", "lora"), steps=12, train_blocks=3, held_out=2,
                    eval_every=4, rank=2)  # fmt: skip


def ids(seed: int = 0, length: int = T) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(seed))


def cut_plan(model) -> WindowPlan:  # type: ignore[no-untyped-def]
    lay = layout(model)
    rows = [[3 + (h % 2) for h in range(lay.n_head)] for _ in range(lay.n_layer)]
    return WindowPlan.of(rows, sinks=0, seq_len=T)


def text() -> list[list[int]]:
    """Token ids the tiny byte-level models read: blocks enough for training and held out."""
    return [ids(seed, 6 * T)[0].tolist() for seed in range(1)]


def logits(model, x: torch.Tensor) -> torch.Tensor:  # type: ignore[no-untyped-def]
    with torch.no_grad():
        return model(x).logits


@pytest.fixture(scope="module")
def healed_llama():  # type: ignore[no-untyped-def]
    model = tiny_model("llama")
    plan = cut_plan(model)
    return model, plan, heal(model, plan, text(), options=QUICK, progress=False)


def test_zero_parameters_change_nothing_bit_for_bit(family):
    model = tiny_model(family)
    plan = cut_plan(model)
    hf.apply(model, plan)
    planned = logits(model, ids())
    kinds = ("temperature",) if family == "gpt2" else ("temperature", "lora")  # GPT-2: Conv1D
    trainable(model, kinds, range(layout(model).n_layer), rank=2)
    assert torch.equal(logits(model, ids()), planned)


def test_gradients_reach_only_the_heal_parameters():
    model = tiny_model("llama")
    hf.apply(model, cut_plan(model))
    for p in model.parameters():
        p.requires_grad_(False)
    params = trainable(model, ("temperature", "lora"), [0, 1], rank=2)
    model(ids()).logits.square().mean().backward()
    own = {id(p) for p in params.values()}
    assert all(p.grad is None for p in model.parameters() if id(p) not in own)
    # LoRA's B starts at 0, so A gets no gradient on the first step; B and the scales do.
    moved = [n for n, p in params.items() if p.grad is not None and p.grad.abs().sum() > 0]
    assert any(n.startswith("temperature") for n in moved)
    assert any(n.endswith(".B") for n in moved)


def test_heal_lowers_the_held_out_kl_and_leaves_the_model_as_it_was(healed_llama):
    model, _, healed = healed_llama
    record = healed.info["heal"]
    assert healed.params, "the tiny heal should find parameters that help"
    assert record["held_out_kl_after"] < record["held_out_kl_before"]
    assert record["curve"][0]["held_out_kl"] == record["held_out_kl_before"]
    assert min(c["held_out_kl"] for c in record["curve"]) == record["held_out_kl_after"]
    assert hf.current_plan(model) is None and installed(model) == {}
    assert all(p.requires_grad for p in model.parameters())  # its flags as they were


def test_apply_then_remove_restores_every_output_bit_for_bit(healed_llama):
    model, plan, healed = healed_llama
    before = logits(model, ids(1))
    hf.apply(model, plan)
    planned = logits(model, ids(1))
    hf.apply(model, healed)
    assert not torch.equal(logits(model, ids(1)), planned)  # the parameters act
    hf.apply(model, plan)  # a plan without parameters takes them out
    assert torch.equal(logits(model, ids(1)), planned)
    hf.apply(model, healed)
    hf.remove(model)
    assert torch.equal(logits(model, ids(1)), before)
    assert installed(model) == {}


def test_the_per_head_cache_decodes_a_healed_plan_as_a_full_recompute(healed_llama):
    model, _, healed = healed_llama
    hf.apply(model, healed)
    try:
        prompt = ids(2, 20)
        cached = greedy(model, prompt, 12, cache=hf.per_head_cache(model, max_cache_len=64))
        assert torch.equal(cached, recompute(model, prompt, 12))
    finally:
        hf.remove(model)


def test_save_load_round_trip_and_a_changed_file_is_refused(healed_llama, tmp_path):
    _, _, healed = healed_llama
    path = tmp_path / "healed.json"
    healed.save(path)
    side = tmp_path / "healed.heal.safetensors"
    record = json.loads(path.read_text())["heal"]
    assert record["file"] == side.name and len(record["sha256"]) == 64
    back = WindowPlan.load(path)
    assert sorted(back.params) == sorted(healed.params)
    assert all(torch.equal(back.params[k], healed.params[k]) for k in back.params)
    assert back.windows == healed.windows and back.info["heal"]["kinds"] == ["temperature", "lora"]
    side.write_bytes(side.read_bytes()[:-1] + b"\0")
    with pytest.raises(ValueError, match="does not match the SHA-256"):
        WindowPlan.load(path)
    side.unlink()
    with pytest.raises(ValueError, match="cannot read its healed parameters"):
        WindowPlan.load(path)


def test_parameters_that_do_not_fit_the_model_are_refused(healed_llama):
    model, plan, _ = healed_llama
    wrong = {"temperature.0": torch.zeros(3)}
    with pytest.raises(ValueError, match=r"temperature\.0: shape"):
        hf.apply(model, WindowPlan(plan.windows, plan.sinks, T, params=wrong))
    with pytest.raises(ValueError, match="does not fit this model"):
        alien = {"lora.9.q_proj.A": torch.zeros(1)}
        hf.apply(model, WindowPlan(plan.windows, plan.sinks, T, params=alien))
    uninstall(model)
    hf.remove(model)


def test_a_heal_that_cannot_help_returns_the_plan_unchanged(monkeypatch):
    model = tiny_model("llama")
    plan = cut_plan(model)
    monkeypatch.setattr(heal_module, "LEARNING_RATES", {"temperature": 0.0, "lora": 0.0})
    with pytest.warns(UserWarning, match="returned unchanged"):
        same = heal(model, plan, text(), options=QUICK, progress=False)
    assert same is plan and not same.params


def test_a_plan_that_cuts_nothing_is_not_healed():
    model = tiny_model("llama")
    lay = layout(model)
    whole = WindowPlan.of([[T] * lay.n_head for _ in range(lay.n_layer)], seq_len=T)
    assert cut_layers(whole, T, [None] * lay.n_layer) == []
    with pytest.warns(UserWarning, match="cuts no layer"):
        assert heal(model, whole, text(), options=QUICK, progress=False) is whole


def test_the_minutes_cap_stops_after_the_step_in_progress():
    model = tiny_model("llama")
    refs = [heal_module.FullReference.of(model, [ids(seed)]) for seed in (0, 1)]
    hf.apply(model, cut_plan(model))
    params = trainable(model, ("temperature",), [0, 1])
    opts = HealOptions(kinds=("temperature",), steps=50, minutes=1e-9, eval_every=10)
    record = heal_module._train(model, params, refs[0], refs[1], opts, progress=False)
    assert record["steps"] == 1 and [c["step"] for c in record["curve"]] == [0, 1]
    hf.remove(model)


def test_bad_options_are_refused_by_name():
    with pytest.raises(ValueError, match="heal kinds"):
        HealOptions(kinds=("sinks",))
    with pytest.raises(ValueError, match="minutes"):
        HealOptions(minutes=0)
    with pytest.raises(ValueError, match="steps"):
        HealOptions(steps=0)
    model = tiny_model("llama")
    with pytest.raises(ValueError, match="blocks"):
        heal(model, cut_plan(model), [ids(0, T + 1)[0].tolist()], options=QUICK, progress=False)


def test_search_plan_with_heal_is_the_search_then_the_heal_on_the_same_text(monkeypatch):
    from aah.integrations.hf.search import plan_search

    model = tiny_model("llama", max_position_embeddings=256)
    search = {"seq_len": T, "candidates": [4, 8, 16, T], "sinks": 0, "choose": False}
    searched = plan_search.search_plan(model, text(), 0.3, **search)
    healed = plan_search.search_plan(model, text(), 0.3, heal=QUICK, **search)
    assert (healed.windows, healed.sinks) == (searched.windows, searched.sinks)
    by_hand = heal(model, searched, text(), options=QUICK, progress=False)
    assert healed.params and healed.params.keys() == by_hand.params.keys()
    for name, value in healed.params.items():  # the same seeded heal, bit for bit
        assert torch.equal(value, by_hand.params[name]), name
    assert healed.info["heal"]["steps"] == by_hand.info["heal"]["steps"]
    # A bad value fails before anything is measured.
    monkeypatch.setattr(plan_search, "calibration_batches", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(ValueError, match="heal must be True, False or a HealOptions"):
        plan_search.search_plan(model, text(), 0.3, heal="yes", **search)


def sink_logits(model, low: float = -1.0, high: float = 2.0) -> dict[str, torch.Tensor]:  # type: ignore[no-untyped-def]
    lay = layout(model)
    row = torch.linspace(low, high, lay.n_head)
    return {f"sink.{layer}": row + 0.1 * layer for layer in range(lay.n_layer)}


def test_sink_logits_prefill_cached_decode_and_masked_decode_agree(family):
    """The prefill (windowed backends), the per-head cache's decode and transformers' own
    cache (the masked path) give one model with sink logits: the same greedy tokens as a
    full recompute at every step, on every family (Gemma 3's sliding layers included)."""
    model = tiny_model(family)
    plan = cut_plan(model)
    prompt = ids(3, 20)
    hf.apply(model, plan)
    try:
        without = logits(model, prompt)
        hf.apply(model, WindowPlan(plan.windows, plan.sinks, T, params=sink_logits(model)))
        assert not torch.allclose(logits(model, prompt), without, atol=1e-4)  # they act
        want = recompute(model, prompt, 10)
        cached = greedy(model, prompt, 10, cache=hf.per_head_cache(model, max_cache_len=64))
        assert torch.equal(cached, want)
        assert torch.equal(greedy(model, prompt, 10), want)  # DynamicCache: the masked path
        # Several tokens into a filled per-head cache (a question after a document): `extend`.
        cache = hf.per_head_cache(model, max_cache_len=64)
        with torch.no_grad():
            model(prompt[:, :12], **cache_kwargs(model, cache))
            chunked = model(prompt[:, 12:], **cache_kwargs(model, cache)).logits
        torch.testing.assert_close(chunked, logits(model, prompt)[:, 12:], atol=1e-5, rtol=1e-4)
    finally:
        hf.remove(model)


def test_a_very_low_sink_logit_is_the_plan_without_it():
    model = tiny_model("llama")
    plan = cut_plan(model)
    hf.apply(model, plan)
    without = logits(model, ids(4))
    hf.apply(model, WindowPlan(plan.windows, plan.sinks, T, params=sink_logits(model, -40, -30)))
    torch.testing.assert_close(logits(model, ids(4)), without, atol=1e-5, rtol=1e-5)
    hf.remove(model)


def test_a_sink_heal_starts_from_the_unhealed_plans_held_out_kl():
    model = tiny_model("llama")
    plan = cut_plan(model)
    opts = HealOptions(kinds=("sink",), steps=8, train_blocks=3, held_out=2, eval_every=4)
    healed = heal(model, plan, text(), options=opts, progress=False)
    _, held = heal_module.heal_blocks(model, text(), T, opts, None)
    ref = heal_module.FullReference.of(model, held)
    hf.apply(model, plan)
    unhealed = heal_module.held_out_kl(model, ref)
    hf.remove(model)
    record = healed.info["heal"]
    assert record["held_out_kl_before"] == pytest.approx(unhealed, rel=1e-6)
    assert record["held_out_kl_after"] < record["held_out_kl_before"]
    assert sorted(healed.params) == [f"sink.{i}" for i in range(layout(model).n_layer)]
