"""Reading a GGUF file's header without loading it: is it whole, and what model does it hold.

`read_gguf_header(path)` walks the header (magic, metadata, tensor table) with plain reads,
skipping the bulky parts (tokenizer arrays), and checks that the tensor data the table
promises fits in the file. A truncated download, an empty file or one that is not GGUF
becomes one ValueError naming the file, in a fraction of a second, instead of a struct,
reshape or mmap error from deep inside the loader 20 seconds later.

Format (little-endian; version 2 and 3 count with uint64, version 1 with uint32): "GGUF",
uint32 version, tensor count, metadata count; each metadata entry a string key, a uint32 type
and a value (arrays: item type, count, items); each tensor a name, uint32 n_dims, the dims,
uint32 ggml type, uint64 offset into the data section, which starts at the next multiple of
`general.alignment` (default 32) after the table.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

MAGIC = b"GGUF"
# metadata value types -> struct code (fixed-size ones); 8 is a string, 9 an array
_SCALARS = dict(enumerate("BbHhIif?")) | {10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
MAX_DIMS = 4
DEFAULT_ALIGNMENT = 32


class Truncated(Exception):
    """The header, or the tensor data it describes, runs past the end of the file."""

    def __init__(self, needed: int | None = None) -> None:
        super().__init__(needed)
        self.needed = needed


@dataclass(frozen=True)
class GGUFHeader:
    """What a GGUF header says: scalar and string metadata (arrays are skipped, except their
    lengths: key -> count), tensor count, and the size the file must have."""

    version: int
    metadata: dict[str, Any]
    tensor_count: int
    needed_bytes: int
    file_bytes: int


class _Reader:
    def __init__(self, handle: BinaryIO, size: int, order: str) -> None:
        self.handle, self.size, self.order = handle, size, order

    def take(self, n: int) -> bytes:
        if n < 0 or self.handle.tell() + n > self.size:
            raise Truncated
        return self.handle.read(n)

    def skip(self, n: int) -> None:
        if n < 0 or self.handle.tell() + n > self.size:
            raise Truncated
        self.handle.seek(n, 1)

    def unpack(self, code: str) -> Any:
        fmt = self.order + code
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self, count_code: str) -> str:
        return self.take(self.unpack(count_code)).decode("utf-8", errors="replace")


def _value(r: _Reader, kind: int, count_code: str) -> Any:
    if kind in _SCALARS:
        return r.unpack(_SCALARS[kind])
    if kind == _STRING:
        return r.string(count_code)
    if kind == _ARRAY:
        item, count = r.unpack("I"), r.unpack(count_code)
        if item in _SCALARS:
            r.skip(count * struct.calcsize(_SCALARS[item]))
        elif item == _STRING:
            for _ in range(count):
                r.skip(r.unpack(count_code))
        else:
            raise ValueError(f"array of metadata type {item}")
        return count
    raise ValueError(f"metadata type {kind}")


def read_gguf_header(path: str | Path) -> GGUFHeader:
    """The header of the GGUF file at `path`; ValueError naming the file when it is empty,
    not GGUF, or shorter than its own header and tensor table say it must be."""
    path = Path(path)
    size = path.stat().st_size
    hint = "download it again (or give the complete file)"
    if size == 0:
        raise ValueError(f"GGUF file {str(path)!r} is empty: {hint}")
    with open(path, "rb") as handle:
        if handle.read(4) != MAGIC:
            raise ValueError(f"{str(path)!r} is not a GGUF file (it does not start with 'GGUF')")
        try:
            return _read_after_magic(handle, size)
        except Truncated as short:
            what = (
                "its header runs"
                if short.needed is None
                else f"its tensors run to byte {short.needed}"
            )
            raise ValueError(
                f"GGUF file {str(path)!r} is not a complete GGUF file: {what}, past the end of "
                f"the file ({size} bytes); {hint}"
            ) from None
        except (ValueError, struct.error) as err:
            raise ValueError(
                f"GGUF file {str(path)!r} is not a complete GGUF file (bad header: {err}); {hint}"
            ) from None


def _read_after_magic(handle: BinaryIO, size: int) -> GGUFHeader:
    order = "<"
    (version,) = struct.unpack("<I", handle.read(4) or b"\0\0\0\0")
    if version & 0xFFFF == 0 and version:  # written big-endian
        order, version = ">", struct.unpack(">I", struct.pack("<I", version))[0]
    if version not in (1, 2, 3):
        raise ValueError(f"version {version}")
    r = _Reader(handle, size, order)
    count_code = "I" if version == 1 else "Q"
    tensor_count, kv_count = r.unpack(count_code), r.unpack(count_code)
    if tensor_count > size or kv_count > size:  # each entry takes at least a byte
        raise Truncated
    metadata: dict[str, Any] = {}
    for _ in range(kv_count):
        key = r.string(count_code)
        metadata[key] = _value(r, r.unpack("I"), count_code)
    import gguf.constants as constants  # the block sizes of the quantised types

    sizes = {int(k): v for k, v in constants.GGML_QUANT_SIZES.items()}
    data_end = 0
    for _ in range(tensor_count):
        r.string(count_code)
        n_dims = r.unpack("I")
        if n_dims > MAX_DIMS:
            raise ValueError(f"a tensor with {n_dims} dimensions")
        elements = 1
        for _ in range(n_dims):
            elements *= r.unpack(count_code)
        kind, offset = r.unpack("I"), r.unpack("Q")
        if kind not in sizes:
            raise ValueError(f"unknown tensor type {kind}")
        block, type_size = sizes[kind]
        data_end = max(data_end, offset + elements // block * type_size)
    align = int(metadata.get("general.alignment", DEFAULT_ALIGNMENT)) or DEFAULT_ALIGNMENT
    start = -(-handle.tell() // align) * align
    needed = start + data_end
    if needed > size:
        raise Truncated(needed)
    return GGUFHeader(version, metadata, tensor_count, needed, size)
