"""The built-in calibration text: a mix of English prose and Python source from the running
Python's standard library, so a plan search needs no text from the user.

Every machine with Python installed has both:

- **prose**: the 79 reference topics of `pydoc_data/topics.py` (the text `help()` shows:
  the language reference and its statements, operators and data model; about 465,000
  characters, ~100,000 SmolLM2 tokens), joined in topic-name order into documents of at least
  T tokens;
- **python**: twelve large single-file standard-library modules (`MODULES`, about 1.1 MB of
  source with its docstrings), each file its own document.

Blocks are drawn as `hf.search.text_blocks.draw_blocks` does (seeded, one block per document before
a second, sources taking turns), alternating prose and python. None of these files is read by
any evaluation text of `python -m experiments.pretrained` (its Python kind reads standard-library
packages, not single-file modules, and never `pydoc_data`); `tests/bench/test_kinds.py`
checks that no file is shared.
"""

from __future__ import annotations

import sysconfig
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aah.integrations.hf.run.data import encode, prompt_prefix
from aah.integrations.hf.search.text_blocks import Block, TextFile, build_documents, draw_blocks

#: single-file standard-library modules read as the mix's Python source (all present in
#: Python 3.11-3.13)
MODULES = (
    "argparse", "configparser", "dataclasses", "difflib", "doctest", "enum", "inspect",
    "pickle", "pydoc", "subprocess", "tarfile", "typing",
)  # fmt: skip
#: the prose: `help()`'s reference topics
TOPICS_FILE = "pydoc_data/topics.py"
KINDS = ("prose", "python")


def stdlib_root() -> Path:
    """The running Python's standard-library folder."""
    return Path(sysconfig.get_paths()["stdlib"])


def calibration_files() -> list[TextFile]:
    """Every file of the mix: one per reference topic (path `pydoc_data/topics.py:NAME`) and
    one per module of `MODULES` (path relative to the standard library). ValueError naming a
    module this Python lacks."""
    from pydoc_data.topics import topics

    root = stdlib_root()
    missing = [m for m in MODULES if not (root / f"{m}.py").is_file()]
    if missing:
        raise ValueError(f"the standard library under {root} lacks {', '.join(missing)}.py")
    prose = [TextFile("prose", "pydoc_data", f"{TOPICS_FILE}:{name}", topics[name])
             for name in sorted(topics)]  # fmt: skip
    code = [
        TextFile("python", m, f"{m}.py", (root / f"{m}.py").read_text(encoding="utf-8"))
        for m in MODULES
    ]
    return prose + code


def calibration_blocks(
    tokenizer: Any | None = None,
    *,
    seq_len: int = 2048,
    n_blocks: int = 8,
    vocab_size: int | None = None,
    seed: int = 0,
) -> list[Block]:
    """`n_blocks` blocks of `seq_len` tokens of the mix with their provenance, alternating
    prose and python (prose first). Token ids from `tokenizer`, or UTF-8 bytes without one
    (`hf.run.data.encode`); each block starts with the tokenizer's BOS where it adds one
    (`hf.run.data.prompt_prefix`), as a prompt of that text would."""
    if n_blocks < 1:
        raise ValueError(f"n_blocks must be >= 1, got {n_blocks}")
    files = calibration_files()
    prefix = prompt_prefix(tokenizer)
    drawn = {}
    for i, kind in enumerate(KINDS):
        want = len(range(i, n_blocks, len(KINDS)))
        if want:
            docs = build_documents([f for f in files if f.kind == kind],
                                   lambda s: encode(s, tokenizer, vocab_size), seq_len)  # fmt: skip
            drawn[kind] = iter(draw_blocks(docs, seq_len, want, seed=seed, prefix=prefix))
    return [next(drawn[KINDS[i % len(KINDS)]]) for i in range(n_blocks)]


def calibration_mix(
    tokenizer: Any | None = None,
    *,
    seq_len: int = 2048,
    n_blocks: int = 8,
    vocab_size: int | None = None,
    seed: int = 0,
) -> list[list[int]]:
    """The mix as `n_blocks` token-id lists of exactly `seq_len` ids each (module docstring),
    ready for `search_plan(model, calib)`: cut at the same T, each list is one calibration
    block. Deterministic in its arguments and the Python version."""
    blocks = calibration_blocks(
        tokenizer, seq_len=seq_len, n_blocks=n_blocks, vocab_size=vocab_size, seed=seed
    )
    return [list(b.ids) for b in blocks]


def calibration_paths() -> Sequence[str]:
    """The files the mix can read, as absolute paths (for disjointness checks)."""
    root = stdlib_root()
    return [str(root / TOPICS_FILE), *(str(root / f"{m}.py") for m in MODULES)]
