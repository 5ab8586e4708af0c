"""synthetic:recall: determinism, answers recoverable from context, buckets, accuracy metric."""

import json

import numpy as np
import pytest
import torch

from aah.cli import main
from aah.data import DataConfig, load_tokens
from aah.data.synthetic import RECORD_LEN, VALUE_AT, distance_buckets, generate_recall
from aah.eval.recall import recall_accuracy

T = 64


def test_same_seed_same_stream_other_seed_differs():
    a, b = generate_recall(20_000, T, 3), generate_recall(20_000, T, 3)
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(
        a.answer_distance, b.answer_distance
    )
    assert not np.array_equal(a.tokens[:5000], generate_recall(20_000, T, 4).tokens[:5000])


def test_every_answer_is_a_copy_of_an_unambiguous_earlier_record():
    s = generate_recall(50_000, T, 1)
    tok, dist = s.tokens, s.answer_distance
    starts = np.nonzero(tok == ord("#"))[0]
    n_queries = 0
    for start in starts:
        d = int(dist[start + VALUE_AT])
        if d == 0:
            assert not dist[start : start + RECORD_LEN].any()
            continue
        n_queries += 1
        src = start - d
        assert bytes(tok[start : start + RECORD_LEN]) == bytes(tok[src : src + RECORD_LEN])
        assert (dist[start + VALUE_AT : start + RECORD_LEN] == d).all()
        # the source is the nearest earlier record with this key: no nearer copy, no other value
        key = bytes(tok[start + 1 : start + 3])
        between = [p for p in starts if src < p < start and bytes(tok[p + 1 : p + 3]) == key]
        assert between == []
    assert n_queries > 100


def test_distances_fill_every_bucket_and_stay_inside_the_sequence_length():
    s = generate_recall(100_000, 256, 2)
    d = s.answer_distance[s.answer_distance > 0]
    buckets = distance_buckets(256)
    assert buckets == [(16, 32), (32, 64), (64, 128), (128, 256)]
    for lo, hi in buckets:
        assert ((d >= lo) & (d < hi)).sum() > 200
    assert d.min() >= 16 and d.max() < 256


class Oracle(torch.nn.Module):
    """Predicts the true next byte (it knows the stream), or a fixed byte."""

    def __init__(self, tokens, seq_len, fixed=None):
        super().__init__()
        self.tokens, self.seq_len, self.fixed = tokens, seq_len, fixed
        self.where = {
            bytes(tokens[s : s + seq_len]): s for s in range(0, tokens.size - seq_len, seq_len)
        }

    def forward(self, x):
        out = torch.full((*x.shape, 256), -1.0)
        for r, row in enumerate(x.numpy().astype(np.uint8)):
            s = self.where[bytes(row)]
            nxt = self.tokens[s + 1 : s + 1 + self.seq_len].astype(np.int64)
            out[
                r,
                torch.arange(self.seq_len),
                torch.from_numpy(nxt) if self.fixed is None else self.fixed,
            ] = 1.0
        return out


def test_accuracy_counts_only_answers_whose_source_is_in_the_window():
    s = generate_recall(20_000, T, 5)
    perfect = recall_accuracy(
        Oracle(s.tokens, T), s.tokens, s.answer_distance, seq_len=T, batch_size=4
    )
    assert perfect["val_acc"] == 1.0 and perfect["val_answers"] > 0
    zeros = recall_accuracy(
        Oracle(s.tokens, T, fixed=ord("0")), s.tokens, s.answer_distance, seq_len=T, batch_size=4
    )
    # by hand: answers with the source inside their window, and how many of them are "0"
    n_win = (s.tokens.size - 1) // T
    count = hit = 0
    for w in range(n_win):
        for j in range(T):
            i = w * T + 1 + j
            d = s.answer_distance[i]
            if d > 0 and j + 1 - d >= 0:
                count += 1
                hit += s.tokens[i] == ord("0")
    assert zeros["val_answers"] == perfect["val_answers"] == count
    assert zeros["val_acc"] == pytest.approx(hit / count)


def recall_run(out, *, seq_len, steps):
    """`aah train` arguments of a tiny full-attention run on synthetic:recall."""
    return [
        "train", "--out", str(out), "--no-progress", "--data.corpus", "synthetic:recall",
        "--data.max_bytes", "40000", "--model.n_layer", "1", "--model.n_head", "2",
        "--model.n_kv_head", "2", "--model.d_model", "16", "--model.max_seq_len", str(seq_len),
        "--train.batch_size", "4", "--train.max_steps", str(steps), "--train.eval_interval", "2",
        "--train.eval_batches", "2", "--train.log_interval", "2", "--train.threads", "1",
        "--controller.policy", "full",
    ]  # fmt: skip


def test_training_on_recall_logs_accuracy(tmp_path):
    out = tmp_path / "run"
    assert main(recall_run(out, seq_len=32, steps=4)) == 0
    evals = [json.loads(l) for l in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(0.0 <= r["val_acc"] <= 1.0 for r in evals if "val_loss" in r)
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["val_acc_by_distance"]) == {"16-31"}
    assert main(["eval", str(out), "--json"]) == 0


def test_recall_needs_a_long_enough_sequence():
    with pytest.raises(ValueError, match="sequence length"):
        load_tokens(DataConfig(corpus="synthetic:recall"), seq_len=16)
    with pytest.raises(ValueError, match="sequence length"):
        load_tokens(DataConfig(corpus="synthetic:recall"))


def test_cut_windows_curve_on_a_recall_run(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(recall_run(out, seq_len=64, steps=2)) == 0
    capsys.readouterr()
    assert main(["eval", str(out), "--cut-windows", "4,16", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    cuts = [r["cut"] for r in result["cut_windows"]]
    assert cuts == ["plan in force", "4", "16", "full"]
    rows = {r["cut"]: r for r in result["cut_windows"]}
    assert rows["full"]["val_bpb"] == pytest.approx(rows["plan in force"]["val_bpb"])
    assert rows["4"]["val_bpb"] != rows["full"]["val_bpb"]
    assert set(rows["16"]["val_acc_by_distance"]) == {"16-31", "32-63"}
    assert json.loads((out / "cut_windows.json").read_text()) == result["cut_windows"]
    assert main(["eval", str(out), "--cut-windows", "0,4"]) == 2
    assert main(["report", str(out)]) == 0
    assert (out / "report" / "context_use.png").exists()
    assert "cut to w at test time" in (out / "report" / "report.html").read_text()
