"""`aah generate RUN_DIR --prompt TEXT`: stream a run's continuation of a prompt to stdout.

Tokens are bytes; a character may span several tokens, so text is decoded incrementally and
written as soon as each character is complete (invalid UTF-8 shows as U+FFFD).
"""

from __future__ import annotations

import argparse
import codecs
import sys
from collections.abc import Iterable, Iterator
from typing import TextIO

from aah.cli import flags


def add_generate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory with checkpoints/last.pt")
    p.add_argument("--prompt", required=True, help="text to continue (at least one byte)")
    p.add_argument("--max-new-tokens", type=int, default=256, metavar="N",
                   help="bytes to generate (default 256); prompt + N <= max_seq_len")  # fmt: skip
    p.add_argument("--temperature", type=float, default=1.0,
                   help="sampling temperature, 0 = greedy (default 1.0)")  # fmt: skip
    p.add_argument("--top-k", type=int, default=None, metavar="K", help="sample from the top K")
    p.add_argument("--top-p", type=float, default=None, metavar="P",
                   help="sample from the smallest set holding mass P, in (0, 1]")  # fmt: skip
    p.add_argument("--seed", type=int, default=None, help="sampling seed (reproducible)")
    flags.add_device(p)


def utf8_pieces(chunks: Iterable[bytes]) -> Iterator[str]:
    """Text of a byte stream, each piece yielded once its characters are complete."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for chunk in chunks:
        text = decoder.decode(chunk)
        if text:
            yield text
    tail = decoder.decode(b"", final=True)  # a truncated last character becomes U+FFFD
    if tail:
        yield tail


def run_generate(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Load RUN_DIR's model (its last plan in force) and stream prompt + continuation to
    `out` (stdout). Bad arguments raise ValueError before anything is printed."""
    import torch

    from aah.data import ByteTokenizer
    from aah.model.generate import stream
    from aah.model.sampling import Sampling
    from aah.train.distributed import resolve_device
    from aah.train.load import load

    out = sys.stdout if out is None else out
    sampling = Sampling(args.temperature, args.top_k, args.top_p, args.seed)
    ids = ByteTokenizer().encode(args.prompt)
    if ids.size == 0:
        raise ValueError("--prompt must hold at least one byte, got ''")
    device = resolve_device(args.device, what="--device")
    model = load(args.run_dir, map_location=device)
    idx = torch.tensor(ids, dtype=torch.long, device=device)[None]  # (1, T)
    tokens = stream(model, idx, args.max_new_tokens, sampling)
    out.write(args.prompt)
    out.flush()
    for piece in utf8_pieces(bytes([int(token[0])]) for token in tokens):
        out.write(piece)
        out.flush()
    out.write("\n")
    out.flush()
    return 0
