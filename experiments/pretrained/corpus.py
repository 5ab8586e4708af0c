"""The earlier single stream of standard-library source, kept bit for bit so the folders
measured on it (results/pretrained/) resume and rerun to the same numbers.

The `.py` files of the named packages are sorted by path and joined into one token stream,
cut into consecutive blocks of T tokens from the start: a run reads only the first files by
path (the calibration "json, email, http" is all `email`; the held-out "asyncio, importlib,
unittest, concurrent, logging" all `asyncio`), and the test filter (`"test" in f.parts`)
misses folders such as `idlelib/idle_test`. `results/pretrained/TEXT.md` lists what each
result read. New runs use `--kinds` (`kinds.py`: blocks drawn across files and sources, test
folders left out, calibrated on the shipped mix). `block_loss` serves both.
"""

from __future__ import annotations

import sysconfig
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from aah.integrations.hf.run.data import encode, prompt_prefix

#: what the searches measure on
CALIB_PACKAGES = ("json", "email", "http")
#: what every loss is measured on (no search sees these)
HELDOUT_PACKAGES = ("asyncio", "importlib", "unittest", "concurrent", "logging")


def package_files(packages: Sequence[str]) -> list[Path]:
    """The `.py` files of the named standard-library packages outside test folders, sorted by
    path; ValueError naming a package this Python does not have."""
    root = Path(sysconfig.get_paths()["stdlib"])
    missing = [p for p in packages if not (root / p).is_dir()]
    if missing:
        raise ValueError(f"no standard-library package {', '.join(missing)} under {root}")
    return sorted(f for p in packages for f in (root / p).rglob("*.py") if "test" not in f.parts)


def stdlib_text(packages: Sequence[str]) -> str:
    """The `.py` files of the named standard-library packages, sorted by path, joined."""
    files = package_files(packages)
    return "\n\n".join(f.read_text(encoding="utf-8", errors="replace") for f in files)


def text_blocks(
    tokenizer: Any | None,
    text: str,
    seq_len: int,
    n: int,
    skip: int = 0,
    *,
    vocab_size: int | None = None,
) -> list[torch.Tensor]:
    """Blocks `skip .. skip + n - 1` of `seq_len` tokens of `text`, each (1, T): the
    tokenizer's BOS where it adds one (`hf.run.data.prompt_prefix`), then the next T minus that
    many consecutive tokens of the text. UTF-8 bytes stand in for a missing tokenizer
    (`hf.run.data.encode`)."""
    if seq_len < 2 or n < 1 or skip < 0:
        raise ValueError(f"need seq_len >= 2, n >= 1, skip >= 0; got {seq_len}, {n}, {skip}")
    ids = encode(text, tokenizer, vocab_size)
    prefix = prompt_prefix(tokenizer)
    step = seq_len - len(prefix)
    if len(ids) < (skip + n) * step:
        raise ValueError(
            f"the text has {len(ids)} tokens; {skip + n} blocks of {seq_len} were asked for"
        )
    return [
        torch.tensor(prefix + ids[i * step : (i + 1) * step]).view(1, seq_len)
        for i in range(skip, skip + n)
    ]


def block_loss(model: torch.nn.Module, ids: torch.Tensor) -> float:
    """Mean next-token cross-entropy (nats) of one (1, T) block, with whatever attention the
    model runs now."""
    ids = ids.to(next(model.parameters()).device)
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits[0, :-1].float()
    return float(torch.nn.functional.cross_entropy(logits, ids[0, 1:]))
