"""Atomic, self-verifying checkpoints, loadable with plain `torch.load(path, weights_only=True)`.

File layout: one `torch.save` of the payload dict, which holds beside its own keys an
"integrity" entry: {"scheme", "sha256"}, the digest of a canonical walk over every other key
(names, tensor dtypes, shapes and bytes, numbers, strings; aah.training.integrity). Writes go
through `aah.atomic` (temp file in the same folder, fsync, `os.replace`), so a crash
mid-write leaves the previous checkpoint intact. Loading verifies the digest and raises
ValueError on any mismatch or truncation. Files of the earlier layout (a magic line and the
sha256 of the payload bytes in front of them) are still read.
"""

from __future__ import annotations

import hashlib
import io
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from aah.atomic import write_bytes_atomic
from aah.training.integrity import INTEGRITY, SCHEME, payload_digest

#: the earlier layout's header: magic line, sha256 hex of the payload, newline.
MAGIC = b"AAHCKPT1\n"
DIGEST_LEN = 64
#: payload layout version; 2: RoPE rotates interleaved pairs (format 1 rotated halves, so a
#: format-1 model would load without error and compute something else).
FORMAT = 2


def encode_payload(payload: dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    return buffer.getvalue()


def save_checkpoint(path: str | Path, payload: dict[str, Any]) -> None:
    """Atomically write `payload` (tensors, dicts, lists, numbers, strings) with its digest."""
    body = {k: v for k, v in payload.items() if k != INTEGRITY}
    body[INTEGRITY] = {"scheme": SCHEME, "sha256": payload_digest(body)}
    write_bytes_atomic(Path(path), encode_payload(body))


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read and verify a checkpoint; ValueError names the file if it is missing or corrupt."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ValueError(f"checkpoint {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"checkpoint {str(path)!r} is a directory, not a file") from None
    if raw.startswith(MAGIC):
        return _load_headed(path, raw, map_location)
    try:
        payload = torch.load(io.BytesIO(raw), map_location=map_location, weights_only=True)
    except Exception as err:  # torch raises many types for a damaged zip or pickle
        raise ValueError(
            f"checkpoint {str(path)!r} is corrupt: it does not load ({type(err).__name__})"
        ) from None
    record = payload.get(INTEGRITY) if isinstance(payload, dict) else None
    if not isinstance(record, dict) or record.get("scheme") != SCHEME:
        raise ValueError(f"checkpoint {str(path)!r} is corrupt: no aah integrity record")
    body = {k: v for k, v in payload.items() if k != INTEGRITY}
    _compare(path, payload_digest(body), str(record.get("sha256")))
    return body


def _load_headed(path: Path, raw: bytes, map_location: str | torch.device) -> dict[str, Any]:
    """The earlier layout: MAGIC, the payload's sha256 hex, a newline, the payload."""
    head = len(MAGIC) + DIGEST_LEN + 1
    if len(raw) < head or raw[head - 1 : head] != b"\n":
        raise ValueError(f"checkpoint {str(path)!r} is corrupt: not an aah checkpoint header")
    expected = raw[len(MAGIC) : head - 1].decode("ascii", errors="replace")
    data = raw[head:]
    _compare(path, hashlib.sha256(data).hexdigest(), expected)
    return torch.load(io.BytesIO(data), map_location=map_location, weights_only=True)


def _compare(path: Path, actual: str, expected: str) -> None:
    if actual != expected:
        raise ValueError(
            f"checkpoint {str(path)!r} is corrupt: sha256 {actual[:12]}... does not match the "
            f"stored {expected[:12]}... (truncated or modified file)"
        )


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
