"""Replaying the first decoder layers: the loss signal equals whole forwards under each cut."""

from __future__ import annotations

import pytest
import torch
from hf_models import SEARCH_CANDIDATES, SEARCH_SINKS, SEARCH_T, search_ids, tiny_model

from aah.integrations import hf
from aah.integrations.hf.run.model_layout import decoder_layers, layout
from aah.integrations.hf.search.cut_loss import Imposed, cut_plan, loss_increase, mean_loss
from aah.integrations.hf.search.layer_replay import recording, replaying


@pytest.mark.parametrize("family", ["llama", "gpt2", "qwen2", "qwen3", "mistral"])
def test_every_cut_equals_a_whole_forward_under_its_plan(family) -> None:
    model = tiny_model(family)
    batches = [search_ids()[:1], search_ids()[1:]]
    raw = loss_increase(model, batches, SEARCH_CANDIDATES, sinks=SEARCH_SINKS)
    lay = layout(model)
    group = lay.n_head // lay.n_kv_head
    sinks = [[SEARCH_SINKS] * lay.n_head for _ in range(lay.n_layer)]
    full = [[SEARCH_T] * lay.n_head for _ in range(lay.n_layer)]
    with hf.applied(model, Imposed(full, sinks)):
        base = mean_loss(model, batches)
    for layer in range(lay.n_layer):
        for kv in range(lay.n_kv_head):
            for j, window in enumerate(SEARCH_CANDIDATES):
                if window >= SEARCH_T:
                    assert raw[layer, kv, j] == 0
                    continue
                plan = cut_plan(lay.n_layer, lay.n_head, group, SEARCH_T, layer, kv, window)
                with hf.applied(model, Imposed(plan, sinks)):
                    whole = mean_loss(model, batches) - base
                assert float(raw[layer, kv, j]) == pytest.approx(whole, abs=1e-7)
    assert raw[1:].abs().max() > 1e-4  # cuts past layer 0 (the replayed ones) do move the loss
    assert all("forward" not in layer.__dict__ for layer in decoder_layers(model))


def test_replaying_skips_the_layers_and_puts_back_what_was_there() -> None:
    model = tiny_model("llama")
    layers = decoder_layers(model)
    ids = search_ids()
    with recording(layers) as outputs:
        expected = model(input_ids=ids, use_cache=False).logits
    wrapper = layers[1].forward
    layers[1].forward = wrapper  # an instance-level forward, as accelerate's hooks install
    calls = []
    handle = layers[0].self_attn.register_forward_hook(lambda *a: calls.append(1))
    with replaying(layers, outputs, upto=2):
        replayed = model(input_ids=ids, use_cache=False).logits
    handle.remove()
    assert calls == []  # layer 0's attention never ran
    torch.testing.assert_close(replayed, expected, rtol=0, atol=0)
    assert "forward" not in layers[0].__dict__ and layers[1].__dict__["forward"] is wrapper
    with pytest.raises(ValueError, match="no recorded output"), replaying(layers, [None], upto=1):
        pass
