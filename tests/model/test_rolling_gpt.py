"""The package's own GPT on a rolling cache against the rolling rule written out in float64.

The rule (as in `aah.model.cache`): a query at position p of a head with window w and s sinks
reads keys p - w < j <= p and the sinks j < s its window has left; once p >= s + w - 1 sink j
is scored as if it sat s + w - 1 - j positions before the query. The reference is the same
model in float64 whose attention is replaced by a loop over queries that moves each sink with
its own rotation (complex pairs, angles from `rope_base`), over the whole stream in one
forward; the cache streams the same bytes in float32, past `max_seq_len`.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools

import pytest
import torch
from torch import nn

from aah.model import GPT, GPTConfig
from aah.model.positions import RotaryPosition

MAX_LEN = 32
STREAM = 150
PLAN = [[8, 8, 12, 5], [16, 6, 6, 10]]
SINKS = [[2, 2, 0, 3], [1, 0, 2, 2]]


def model_for(position: str = "rope") -> GPT:
    torch.manual_seed(0)
    config = GPTConfig(n_layer=2, n_head=4, n_kv_head=2, d_model=64, max_seq_len=MAX_LEN,
                       position=position).validate()  # fmt: skip
    model = GPT(config).eval()
    model.set_window_plan(PLAN, SINKS)
    return model


class RuleAttention(nn.Module):
    """The rolling rule over a whole stream (batch 1) in float64, one query at a time."""

    def __init__(self, sinks: list[int], base: float | None) -> None:
        super().__init__()
        self.sinks, self.base = sinks, base

    def moved(self, key: torch.Tensor, by: int) -> torch.Tensor:
        """key (D,) moved forward by `by` positions: pairs (2i, 2i + 1) times exp(i by f_i)."""
        if self.base is None or by == 0:
            return key
        d = key.shape[-1]
        freq = self.base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        pairs = torch.view_as_complex(key.reshape(-1, 2).contiguous())
        return torch.view_as_real(pairs * torch.polar(torch.ones_like(freq), by * freq)).flatten()

    def forward(self, q, k, v, windows):  # type: ignore[no-untyped-def]
        q, k, v = q[0].double(), k[0].double(), v[0].double()
        n_head, length, d = q.shape
        group = n_head // k.shape[0]
        out = torch.zeros_like(q)
        for h in range(n_head):
            w, s, kv = windows[h], self.sinks[h], h // group
            for p in range(length):
                window = list(range(max(0, p - w + 1), p + 1))
                own = list(range(min(s, max(0, p - w + 1))))
                by = max(0, p - (s + w - 1))
                moved = [self.moved(k[kv, j], by) for j in own]
                keys = torch.stack(moved + [k[kv, j] for j in window])
                values = torch.stack([v[kv, j] for j in own + window])
                out[h, p] = torch.softmax(keys @ q[h, p] / d**0.5, dim=0) @ values
        return out[None]


def reference_logits(model: GPT, idx: torch.Tensor) -> torch.Tensor:
    reference = copy.deepcopy(model).double()
    base = model.config.rope_base if model.config.position == "rope" else None
    for block, sinks in zip(reference.blocks, SINKS, strict=True):
        block.attn.attend = RuleAttention(sinks, base)
    reference.config = dataclasses.replace(model.config, max_seq_len=idx.shape[1])
    with torch.no_grad():
        return reference(idx).float()


@pytest.mark.parametrize("position", ["rope", "none"])
def test_a_rolling_stream_equals_the_float64_rule(position: str) -> None:
    model = model_for(position)
    idx = torch.randint(0, 256, (1, STREAM), generator=torch.Generator().manual_seed(1))
    expected = reference_logits(model, idx)
    cache = model.make_cache(1, rolling=True)
    cuts = [0, 20, 50, 80, 110, *range(111, STREAM + 1)]  # chunks past every window, then steps
    held, got = [], []
    with torch.no_grad():
        for a, b in itertools.pairwise(cuts):
            got.append(model(idx[:, a:b], cache=cache))
            held.append(cache.nbytes())
    torch.testing.assert_close(torch.cat(got, dim=1), expected, rtol=0, atol=2e-5)
    assert cache.length == STREAM > MAX_LEN and len(set(held[1:])) == 1


def test_rotary_angles_past_the_table_equal_a_longer_table() -> None:
    short, long = RotaryPosition(16, 8, 10000.0), RotaryPosition(64, 8, 10000.0)
    q, k = torch.randn(1, 2, 10, 8), torch.randn(1, 2, 10, 8)
    for got, want in zip(short.rotate(q, k, 40), long.rotate(q, k, 40), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


def test_rolling_refuses_learned_positions_unbounded_heads_and_a_length() -> None:
    model = model_for("learned")
    with pytest.raises(ValueError, match="learned positions"):
        model.make_cache(1, rolling=True)
    model = model_for()
    model.set_window_plan([[8, 8, 12, 5], [MAX_LEN, 6, 6, 10]], SINKS)
    with pytest.raises(ValueError, match=r"layer 1 head 0 \(window 32 \+ 1 sinks\)"):
        model.make_cache(1, rolling=True)
    with pytest.raises(ValueError, match="max_len"):
        model.make_cache(1, 64, rolling=True)
    with pytest.raises(ValueError, match="max_len"):
        model.make_cache(1)
