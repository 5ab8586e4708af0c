"""Whole-text scoring: every target once, at any length >= 2, strided past the context."""

import numpy as np
import pytest
import torch

from aah.eval.evaluate import evaluate_loss
from aah.eval.strided import score_text, strided_windows
from aah.model import GPT, GPTConfig

CASES = [(2, 8, 4), (9, 8, 4), (10, 8, 4), (100, 8, 3), (100, 8, 8), (57, 16, 1)]


@pytest.mark.parametrize(("n", "seq_len", "stride"), CASES)
def test_every_target_is_scored_once_with_at_least_t_minus_stride_context(n, seq_len, stride):
    seen = []
    for start, length, skip in strided_windows(n, seq_len, stride):
        assert length <= seq_len and start + length + 1 <= n
        targets = range(start + 1 + skip, start + length + 1)  # token index of each target
        seen += targets
        if start > 0:  # after the first window: at least T - stride tokens before each
            assert all(t - start >= seq_len - stride for t in targets)
    assert seen == list(range(1, n))


@pytest.mark.parametrize(("n", "stride"), [(1, 4), (10, 0), (10, 9)])
def test_bad_lengths_and_strides_name_the_value(n, stride):
    with pytest.raises(ValueError, match=str(n if n < 2 else stride)):
        strided_windows(n, 8, stride)


def tiny_model(seq_len=16):
    torch.manual_seed(0)
    return GPT(GPTConfig(n_layer=1, n_head=2, n_kv_head=2, d_model=16, max_seq_len=seq_len))


def test_a_text_shorter_than_the_context_is_scored():
    tokens = np.frombuffer(b"hello", dtype=np.uint8)
    out = score_text(tiny_model(), tokens, seq_len=16, stride=8, batch_size=4)
    assert out["tokens"] == 4 and out["n_windows"] == 1 and out["stride"] is None
    assert np.isfinite(out["bpb"])


def test_stride_t_matches_the_non_overlapping_eval():
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 256, 16 * 5 + 1).astype(np.uint8)
    model = tiny_model()
    whole = score_text(model, tokens, seq_len=16, stride=16, batch_size=2)
    plain = evaluate_loss(model, tokens, batch_size=2, seq_len=16)
    assert whole["tokens"] == plain["eval_tokens"] == 80
    assert whole["loss"] == pytest.approx(plain["val_loss"], rel=1e-5)
