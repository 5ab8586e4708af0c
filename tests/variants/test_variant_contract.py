"""Every variant: shape, causality by perturbing the future, finite gradients, GQA/MQA."""

from __future__ import annotations

import pytest
import torch
from variant_oracle import qkv

from aah.attention.variants import available, make_variant

# Small options so every chunked path runs several chunks at T = 40.
OPTIONS: dict[str, dict] = {
    "softmax": {},
    "bilinear": {},
    "additive": {"chunk": 16},
    "block-sparse": {"block": 4, "local_blocks": 1, "stride": 3},
    "global-tokens": {"n_global": 3},
    "low-rank": {"segment": 8, "rank": 2},
    "kernel": {"chunk": 8},
    "kernel-favor": {"chunk": 8, "n_features": 16},
}
CASES = [
    (name, pos, hkv)
    for name in OPTIONS
    for pos in ("none", "alibi", "relative")
    for hkv in (4, 2, 1)
    if not (pos != "none" and name in ("low-rank", "kernel", "kernel-favor"))
    if not (pos != "none" and hkv == 2)  # positions x sharing: MHA and MQA are enough
]
T, D = 40, 8


def _build(name: str, pos: str, hkv: int):  # type: ignore[no-untyped-def]
    module = make_variant(
        name, n_head=4, n_kv_head=hkv, head_dim=D, max_seq_len=T, position=pos, **OPTIONS[name]
    )
    if pos == "relative":  # a zero table would hide a wrong bias; give it values
        with torch.no_grad():
            module.bias.table.normal_(generator=torch.Generator().manual_seed(3))
    return module


def test_available_lists_every_kind() -> None:
    names = available()
    assert set(names["scores"]) == {"softmax", "additive", "bilinear"}
    assert set(names["connectivity"]) == {"block-sparse", "global-tokens"}
    assert {"low-rank", "kernel"} <= set(names["approximations"])
    assert set(names["positions"]) == {"rope", "alibi", "relative", "learned", "none"}
    assert set(names["kv_sharing"]) == {"mha", "gqa", "mqa"}


@pytest.mark.parametrize(("name", "pos", "hkv"), CASES)
def test_shape_causality_and_backward(name: str, pos: str, hkv: int) -> None:
    module = _build(name, pos, hkv)
    windows = [3, T, 17, 9] if module.supports_windows else None
    q, k, v = qkv(2, 4, hkv, T, D, seed=1)
    out = module(q, k, v, windows)
    assert out.shape == (2, 4, T, D)
    # Perturb everything at and after t0: earlier outputs must not move at all.
    t0 = 23
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    for x in (q2, k2, v2):
        x[:, :, t0:] += 5.0 * torch.randn_like(x[:, :, t0:])
    out2 = module(q2, k2, v2, windows)
    torch.testing.assert_close(out2[:, :, :t0], out[:, :, :t0], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(out2[:, :, t0:], out[:, :, t0:])
    # Backward: finite gradients for inputs and every parameter.
    q.requires_grad_(True)
    k.requires_grad_(True)
    v.requires_grad_(True)
    module(q, k, v, windows).square().mean().backward()
    for t in (q, k, v, *module.parameters()):
        assert t.grad is not None and torch.isfinite(t.grad).all()


@pytest.mark.parametrize("name", ["low-rank", "kernel", "kernel-favor"])
def test_no_future_gradient_path(name: str) -> None:
    """d out[:t0] / d k[t0:] and d v[t0:] are exactly zero: no future key leaks."""
    module = _build(name, "none", 2)
    q, k, v = qkv(1, 4, 2, T, D, seed=2)
    k.requires_grad_(True)
    v.requires_grad_(True)
    for t0 in (1, 8, 9, 31):
        module(q, k, v)[:, :, :t0].sum().backward()
        assert k.grad[:, :, t0:].abs().max() == 0 and v.grad[:, :, t0:].abs().max() == 0
        k.grad = v.grad = None


@pytest.mark.parametrize("name", ["low-rank", "kernel", "kernel-favor"])
def test_narrow_plan_raises_naming_the_variant(name: str) -> None:
    module = _build(name, "none", 4)
    q, k, v = qkv(1, 4, 4, T, D)
    module(q, k, v, [T, T, 10 * T, T])  # full windows are fine
    with pytest.raises(ValueError, match=name):
        module(q, k, v, [T, T, T - 1, T])


def test_factory_rejects_bad_names_and_combinations() -> None:
    dims = {"n_head": 4, "n_kv_head": 2, "head_dim": D, "max_seq_len": T}
    with pytest.raises(ValueError, match="unknown attention variant"):
        make_variant("flash-sparse", **dims)
    with pytest.raises(ValueError, match="kernel"):
        make_variant("kernel", position="alibi", **dims)
    with pytest.raises(ValueError, match="position"):
        make_variant("softmax", position="sinusoid", **dims)
    with pytest.raises(ValueError, match="bad option"):
        make_variant("softmax", n_global=3, **dims)
    with pytest.raises(ValueError, match="n_kv_head"):
        make_variant("softmax", n_head=4, n_kv_head=3, head_dim=D, max_seq_len=T)


def test_wrong_head_count_raises() -> None:
    module = make_variant("softmax", n_head=4, n_kv_head=2, head_dim=D, max_seq_len=T)
    q, k, v = qkv(1, 4, 4, T, D)
    with pytest.raises(ValueError, match="Hkv=2"):
        module(q, k, v)
