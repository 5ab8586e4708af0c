"""The first-order loss estimate against an independent recompute: the gradient of the loss
taken by autograd on the model's own SDPA forward, and the cut layer's output read back from a
forward with the cut imposed through `hf.applied`, every row."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

from hf_models import SEARCH_CANDIDATES, SEARCH_SINKS, SEARCH_T, search_ids, tiny_model

from aah.integrations.hf import applied
from aah.integrations.hf.search.cut_loss import cut_plan
from experiments.gradient_error import measure_gradient_error


def _o_proj_input(model, ids, layer: int, *, grad: bool):
    """What layer `layer`'s o_proj reads (B, T, Hq * D), and d(mean loss)/d(it) when `grad`."""
    seen = {}
    proj = model.model.layers[layer].self_attn.o_proj
    handle = proj.register_forward_pre_hook(lambda _m, a: seen.__setitem__("x", a[0]))
    try:
        with torch.enable_grad():
            logits = model(input_ids=ids, use_cache=False).logits[:, :-1]
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)
            )
            g = torch.autograd.grad(loss, seen["x"])[0] if grad else None
    finally:
        handle.remove()
    return seen["x"].detach(), g


def test_gradient_error_is_the_directional_derivative_along_the_cut() -> None:
    model = tiny_model("llama")
    ids = search_ids(n=2)
    got = measure_gradient_error(
        model, [ids], SEARCH_CANDIDATES, sinks=SEARCH_SINKS, sample_queries=SEARCH_T
    )
    n_layer, n_head, n_kv = 2, 4, 2
    group = n_head // n_kv
    for layer in range(n_layer):
        full, g = _o_proj_input(model, ids, layer, grad=True)
        for kv in range(n_kv):
            for c, w in enumerate(SEARCH_CANDIDATES):
                plan = cut_plan(n_layer, n_head, group, SEARCH_T, layer, kv, w)
                sinks = [[SEARCH_SINKS] * n_head for _ in range(n_layer)]
                with applied(model, plan, sinks=sinks, backend="reference"):
                    cut, _ = _o_proj_input(model, ids, layer, grad=False)
                want = float((g * (cut - full)).double().sum())
                assert got[layer, kv, c] == pytest.approx(want, rel=2e-3, abs=1e-7)
    assert got[..., -1].abs().max() < 1e-6  # the full window changes nothing
    assert got[..., 0].abs().max() > 1e-5  # and the narrowest does


def test_gradient_error_leaves_the_weights_as_they_were() -> None:
    model = tiny_model("llama")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    measure_gradient_error(model, [search_ids()], SEARCH_CANDIDATES)
    for name, p in model.named_parameters():
        assert p.requires_grad and p.grad is None
        assert torch.equal(p, before[name]), name
