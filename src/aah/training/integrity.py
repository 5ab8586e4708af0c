"""The digest a checkpoint stores beside its tensors: sha256 of a canonical walk of a payload.

The walk tags every value with its kind and length, so no two payloads share a byte stream:
dicts (in insertion order, which `torch.save` keeps), lists, tuples, strings, bytes, numbers,
None, and tensors (dtype, shape, raw bytes on the CPU). It reads the loaded objects, not the
file, so the hash stays valid for any zip layout `torch.save` writes.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any

import torch

INTEGRITY = "integrity"  # the payload key of {"scheme", "sha256"}
SCHEME = "aah-walk-sha256-v1"


def payload_digest(payload: Any) -> str:
    h = hashlib.sha256()
    _walk(payload, h)
    return h.hexdigest()


def _tag(h: Any, kind: bytes, data: bytes) -> None:
    h.update(kind + struct.pack("<Q", len(data)) + data)


def _walk(value: Any, h: Any) -> None:
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        _tag(h, b"T", f"{t.dtype}{tuple(t.shape)}".encode())
        _tag(h, b"B", t.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(value, dict):
        _tag(h, b"D", str(len(value)).encode())
        for key, item in value.items():
            _walk(key, h)
            _walk(item, h)
    elif isinstance(value, (list, tuple)):
        _tag(h, b"L" if isinstance(value, list) else b"U", str(len(value)).encode())
        for item in value:
            _walk(item, h)
    elif isinstance(value, str):
        _tag(h, b"S", value.encode("utf-8", errors="surrogatepass"))
    elif isinstance(value, bytes):
        _tag(h, b"Y", value)
    else:  # numbers, bools, None, dtypes: their repr round-trips through torch.save
        _tag(h, b"R", f"{type(value).__name__}:{value!r}".encode())
