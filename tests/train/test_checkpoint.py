"""Checkpoints are atomic and verified: crashes mid-write keep the old one; corruption is named."""

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from aah.training import checkpoint as ckpt


def payload(value: float, size: int = 1000):
    return {"step": int(value), "w": torch.full((size,), value), "nested": {"a": [1, 2.5, "x"]}}


def test_round_trip(tmp_path):
    path = tmp_path / "c" / "last.pt"
    ckpt.save_checkpoint(path, payload(3.0))
    out = ckpt.load_checkpoint(path)
    assert out["step"] == 3 and torch.equal(out["w"], torch.full((1000,), 3.0))
    assert out["nested"] == {"a": [1, 2.5, "x"]}
    assert os.listdir(path.parent) == ["last.pt"]  # no temp files left behind


@pytest.mark.parametrize("damage", ["flip", "truncate", "header"])
def test_corruption_is_a_clear_error(tmp_path, damage):
    path = tmp_path / "last.pt"
    ckpt.save_checkpoint(path, payload(1.0))
    raw = bytearray(path.read_bytes())
    if damage == "flip":
        raw[len(raw) // 2] ^= 0xFF
    elif damage == "truncate":
        raw = raw[: len(raw) - 100]
    else:
        raw[:4] = b"JUNK"
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="corrupt"):
        ckpt.load_checkpoint(path)


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        ckpt.load_checkpoint(tmp_path / "nope.pt")


def test_write_failing_midway_keeps_previous(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    ckpt.save_checkpoint(path, payload(1.0))
    real_fsync = os.fsync

    def boom(fd):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError, match="simulated"):
        ckpt.save_checkpoint(path, payload(2.0, size=300_000))
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert ckpt.load_checkpoint(path)["step"] == 1
    assert os.listdir(tmp_path) == ["last.pt"]


KILL_SCRIPT = """
import sys, torch
from aah.training.checkpoint import save_checkpoint
path = sys.argv[1]
torch.manual_seed(0)
big = torch.randn(4_000_000)
i = 1
while True:
    save_checkpoint(path, {"step": i, "w": big})
    print("saved", i, flush=True)
    i += 1
"""
KILL_AFTER = 3  # the child's step the test waits for before it kills mid-write


def test_sigkill_during_writes_leaves_a_loadable_checkpoint(tmp_path):
    path = tmp_path / "last.pt"  # nothing there: only the child writes it
    proc = subprocess.Popen(
        [sys.executable, "-c", KILL_SCRIPT, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        for step in range(1, KILL_AFTER + 1):
            assert proc.stdout.readline().split() == ["saved", str(step)]
        time.sleep(0.3)  # the next 16 MB write is in flight
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    out = ckpt.load_checkpoint(path)
    assert out["step"] >= KILL_AFTER  # written by the child, at or after the known step
    torch.manual_seed(0)
    assert torch.equal(out["w"], torch.randn(4_000_000))


def test_rng_state_round_trip():
    import random

    import numpy as np

    state = ckpt.rng_state()
    expected = (torch.rand(3), np.random.rand(3), random.random())
    ckpt.set_rng_state(state)
    got = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(expected[0], got[0]) and np.array_equal(expected[1], got[1])
    assert expected[2] == got[2]


def test_a_run_checkpoint_of_another_format_is_refused(tmp_path):
    path = tmp_path / "old.pt"
    ckpt.save_checkpoint(path, {"format": 1, "step": 3})
    assert ckpt.load_checkpoint(path)["step"] == 3  # the file layer reads any payload
    with pytest.raises(ValueError, match="format 1"):
        ckpt.load_run_checkpoint(path)


def test_plain_torch_load_with_weights_only_reads_a_checkpoint(tmp_path):
    path = tmp_path / "last.pt"
    ckpt.save_checkpoint(path, payload(2.0))
    plain = torch.load(path, weights_only=True)
    assert torch.equal(plain["w"], torch.full((1000,), 2.0)) and plain["step"] == 2
    assert len(plain["integrity"]["sha256"]) == 64  # the hash sits beside the tensors


def test_a_modified_tensor_is_caught_by_the_stored_hash(tmp_path):
    path = tmp_path / "last.pt"
    ckpt.save_checkpoint(path, payload(2.0))
    plain = torch.load(path, weights_only=True)
    plain["w"][0] = 7.0
    torch.save(plain, path)
    with pytest.raises(ValueError, match="corrupt"):
        ckpt.load_checkpoint(path)


def test_a_checkpoint_of_the_earlier_headed_layout_still_loads(tmp_path):
    import hashlib

    path = tmp_path / "old.pt"
    data = ckpt.encode_payload(payload(4.0))
    path.write_bytes(ckpt.MAGIC + hashlib.sha256(data).hexdigest().encode() + b"\n" + data)
    assert ckpt.load_checkpoint(path)["step"] == 4
