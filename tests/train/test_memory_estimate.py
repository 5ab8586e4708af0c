"""The pre-training memory bound: a true lower bound on the parameters, and a clear refusal."""

import pytest
import torch

from aah.model import GPT, GPTConfig
from aah.training import memory_estimate
from aah.training.memory_estimate import check_memory, parameter_count, training_bytes_lower_bound


@pytest.mark.parametrize("kv", [1, 2, 4])
def test_parameter_count_is_a_close_lower_bound(kv):
    cfg = GPTConfig(n_layer=2, n_head=4, n_kv_head=kv, d_model=32, max_seq_len=16)
    actual = sum(p.numel() for p in GPT(cfg).parameters())
    assert parameter_count(cfg) <= actual <= 1.05 * parameter_count(cfg)


def test_bound_grows_with_tokens_and_refuses_what_cannot_fit(monkeypatch):
    small = GPTConfig(n_layer=2, n_head=4, d_model=32, max_seq_len=64)
    huge = GPTConfig(n_layer=2, n_head=4, d_model=32, max_seq_len=10_000_000)
    assert training_bytes_lower_bound(huge, 8) > 1000 * training_bytes_lower_bound(small, 8)
    monkeypatch.setattr(memory_estimate, "available_bytes", lambda device: 2**30)
    check_memory(small, 8, torch.device("cpu"))  # fits: no error
    with pytest.raises(ValueError, match=r"model.max_seq_len 10000000 x train.batch_size 8"):
        check_memory(huge, 8, torch.device("cpu"))


def test_unknown_free_memory_never_refuses(monkeypatch):
    monkeypatch.setattr(memory_estimate, "available_bytes", lambda device: None)
    check_memory(GPTConfig(max_seq_len=10_000_000), 64, torch.device("cpu"))


def test_cpu_free_memory_is_read():
    free = memory_estimate.available_bytes(torch.device("cpu"))
    assert free is None or free > 0


def test_aah_train_refuses_a_run_that_cannot_fit_before_reading_data(tmp_path, capsys):
    from aah.cli import main

    out = tmp_path / "run"
    argv = ["train", "--out", str(out), "--no-progress", "--model.max_seq_len", "50000000",
            "--train.batch_size", "64", "--train.max_steps", "1"]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "model.max_seq_len 50000000 x train.batch_size 64 needs at least" in err
