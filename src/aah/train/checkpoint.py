"""Atomic, self-verifying checkpoints.

File layout: a magic line, the sha256 hex of the payload, a newline, then the payload (a
`torch.save` byte string). Writes go to a temp file in the same folder, are fsynced, then
`os.replace`d over the target, so a crash mid-write leaves the previous checkpoint intact.
Loading verifies the digest and raises ValueError on any mismatch or truncation.
"""

from __future__ import annotations

import hashlib
import io
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

MAGIC = b"AAHCKPT1\n"
DIGEST_LEN = 64
#: payload layout version; 2: RoPE rotates interleaved pairs (format 1 rotated halves, so a
#: format-1 model would load without error and compute something else).
FORMAT = 2


def encode_payload(payload: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return buffer.getvalue()


def write_bytes_atomic(path: Path, data: bytes, *, chunk: int = 1 << 20) -> None:
    """Write `data` to `path` via temp file + fsync + os.replace (+ fsync of the folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as handle:
            for start in range(0, len(data), chunk):
                handle.write(data[start : start + chunk])
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # some filesystems do not open folders; the replace is still atomic
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """Atomically write `payload` (tensors, dicts, lists, numbers, strings) with its sha256."""
    data = encode_payload(payload)
    digest = hashlib.sha256(data).hexdigest().encode()
    write_bytes_atomic(Path(path), MAGIC + digest + b"\n" + data)


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read and verify a checkpoint; ValueError names the file if it is missing or corrupt."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ValueError(f"checkpoint {str(path)!r} does not exist") from None
    head = len(MAGIC) + DIGEST_LEN + 1
    if len(raw) < head or not raw.startswith(MAGIC) or raw[head - 1 : head] != b"\n":
        raise ValueError(f"checkpoint {str(path)!r} is corrupt: not an aah checkpoint header")
    expected = raw[len(MAGIC) : head - 1].decode("ascii", errors="replace")
    data = raw[head:]
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise ValueError(
            f"checkpoint {str(path)!r} is corrupt: sha256 {actual[:12]}... does not match the "
            f"stored {expected[:12]}... (truncated or modified file)"
        )
    return torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)


def load_run_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """`load_checkpoint` of a training run's checkpoint, refusing other payload formats."""
    payload = load_checkpoint(path, map_location)
    if payload.get("format") != FORMAT:
        raise ValueError(
            f"checkpoint {str(path)!r} has format {payload.get('format')!r}; this aah reads "
            f"format {FORMAT} (its RoPE pairs dimensions differently): retrain the run"
        )
    return payload


def rng_state() -> dict[str, Any]:
    """torch (CPU and CUDA), numpy and Python RNG states in weights_only-loadable form."""
    np_state = np.random.get_state()
    py_state = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "name": np_state[0],
            "keys": torch.from_numpy(np_state[1].astype(np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": [py_state[0], list(py_state[1]), py_state[2]],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"].cpu())
    np_state = state["numpy"]
    np.random.set_state(
        (
            np_state["name"],
            np_state["keys"].numpy().astype(np.uint32),
            np_state["pos"],
            np_state["has_gauss"],
            np_state["cached_gaussian"],
        )
    )
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
