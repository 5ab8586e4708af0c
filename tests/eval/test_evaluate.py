import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from aah.eval import evaluate_loss, peak_rss_mb, plan_diagnostics, window_map
from aah.model import GPT, GPTConfig


def test_eval_loss_matches_an_independent_loop():
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_kv_head=2, d_model=16, max_seq_len=8))
    tokens = np.random.default_rng(0).integers(0, 256, size=100).astype(np.uint8)
    out = evaluate_loss(model, tokens, batch_size=3, seq_len=8)
    losses = []
    with torch.no_grad():
        for j in range((len(tokens) - 1) // 8):  # every window once, in order
            x = torch.tensor(tokens[j * 8 : j * 8 + 8], dtype=torch.long)[None]
            y = torch.tensor(tokens[j * 8 + 1 : j * 8 + 9], dtype=torch.long)
            losses.append(F.cross_entropy(model(x)[0], y, reduction="none"))
    expected = torch.cat(losses).mean().item()
    assert out["val_loss"] == pytest.approx(expected, rel=1e-5)
    assert out["val_bpb"] == pytest.approx(expected / math.log(2), rel=1e-5)
    assert out["eval_tokens"] == 12 * 8 and model.training  # training mode restored


def test_plan_diagnostics():
    full = plan_diagnostics([[64] * 4] * 2, 64)
    assert full["acr"] == 1.0 and full["causal_coverage"] == 1.0
    half = plan_diagnostics([[32] * 4] * 2, 64)
    assert half["acr"] == 0.5
    # sum_i min(i + 1, 32) over T=64, over T(T+1)/2
    assert half["causal_coverage"] == pytest.approx((32 * 33 / 2 + 32 * 32) / (64 * 65 / 2))
    assert half["executed_ratio"] > 0 and half["executed_backend"]


def test_window_map_grid():
    text = window_map([[8, 64, 128], [16, 32, 64]], 64)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["h0", "h1", "h2"]
    assert lines[1].split()[:4] == ["L0", "8", "64", "64"]  # w >= T shown as T
    assert lines[2].split()[:4] == ["L1", "16", "32", "64"]
    assert lines[1].split()[-1] == "░██" and lines[2].split()[-1] == "▒▓█"
    assert window_map([[1, 64]], 64).splitlines()[1].split()[-1] == "·█"


def test_peak_rss_is_positive():
    assert peak_rss_mb() > 1.0


def test_truncate_after_keeps_first_record_and_cuts_later_ones(tmp_path):
    from aah import records

    path = tmp_path / "m.jsonl"
    for step in (0, 0, 5, 10, 15):
        records.append_jsonl(path, {"step": step})
    with path.open("a") as handle:
        handle.write('{"step": 20, "torn')  # a line cut by a crash
    records.truncate_after(path, 10)
    assert [r["step"] for r in records.read_jsonl(path)] == [0, 0, 5, 10]
    records.truncate_after(path, 5, inclusive=False)
    assert [r["step"] for r in records.read_jsonl(path)] == [0, 0]
