"""`ByteTokenizer`: UTF-8 bytes are the tokens (vocab 256); no external tokenizer."""

from __future__ import annotations

from typing import Any

import numpy as np


class ByteTokenizer:
    """Token id i is the byte value i. Encoding is exact; decoding never fails on bad UTF-8."""

    vocab_size: int = 256

    def encode(self, text: str) -> np.ndarray:
        """UTF-8 bytes of `text` as a writable uint8 array of shape (len(bytes),).

        Lone surrogates cannot be encoded and raise `UnicodeEncodeError` (a `ValueError`).
        """
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()

    def decode(self, ids: Any) -> str:
        """Text for a sequence of ids (bytes, list, numpy array or torch tensor; flattened).

        Invalid UTF-8 becomes U+FFFD (never raises for it); ids outside [0, 255] are a caller
        bug and raise `ValueError`.
        """
        if isinstance(ids, (bytes, bytearray, memoryview)):
            return bytes(ids).decode("utf-8", errors="replace")
        if hasattr(ids, "detach"):  # torch tensor, possibly on an accelerator
            ids = ids.detach().cpu().numpy()
        arr = np.asarray(ids).reshape(-1)
        if arr.size == 0:
            return ""
        if arr.dtype.kind not in "iu":
            raise ValueError(f"token ids must be integers, got dtype {arr.dtype}")
        if arr.dtype != np.uint8 and (arr.min() < 0 or arr.max() > 255):
            raise ValueError(
                f"token ids must be in [0, 255], got range [{int(arr.min())}, {int(arr.max())}]"
            )
        return arr.astype(np.uint8).tobytes().decode("utf-8", errors="replace")
