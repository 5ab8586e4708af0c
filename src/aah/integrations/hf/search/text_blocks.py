"""Blocks of T tokens drawn across the files of several sources, each block inside one document.

Text for calibration or evaluation is a list of `TextFile`s (its kind, its source, a path and
the text). Each source's files, in path order, become documents (`build_documents`): a file of
at least T tokens is a document alone; shorter files of one source are joined in path order
(token ids, a blank line between them) until the document reaches T tokens, and a last run
shorter than T is dropped. `draw_blocks` then cuts every document into non-overlapping slots
of T tokens at a seeded offset and takes them in a seeded order that spreads the blocks: one
block from each document before a second from any, and the documents of one pass visited
source by source in turn, so no source and no file dominates the first blocks. Every block
records its kind, source, document and the files its tokens come from, and the order is a
prefix order: asking for more blocks keeps the first ones.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

#: what goes between two joined files of one document
FILE_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class TextFile:
    """One file of text: `kind` ("python", "prose", ...), `source` (the package or folder it
    belongs to: the unit of independence), `path` (as shown in records) and its `text`."""

    kind: str
    source: str
    path: str
    text: str


@dataclass(frozen=True)
class Document:
    """The token ids of one file, or of short files of one source joined in path order;
    `spans[i]` = (path, first id, end id) of each file in `ids`."""

    kind: str
    source: str
    ids: tuple[int, ...]
    spans: tuple[tuple[str, int, int], ...]

    @property
    def name(self) -> str:
        """The document's key: its kind, source and first file (the unit a cluster interval
        resamples)."""
        return f"{self.kind}:{self.spans[0][0]}" + ("+" if len(self.spans) > 1 else "")

    def paths_in(self, start: int, end: int) -> tuple[str, ...]:
        """The files whose tokens overlap ids[start:end]."""
        return tuple(p for p, a, b in self.spans if a < end and b > start)


@dataclass(frozen=True)
class Block:
    """T consecutive token ids of one document, with where they come from."""

    kind: str
    source: str
    document: str
    paths: tuple[str, ...]
    start: int
    ids: tuple[int, ...]

    def record(self) -> dict[str, object]:
        """The block's provenance as plain data (no token ids)."""
        return {
            "kind": self.kind, "source": self.source, "document": self.document,
            "paths": list(self.paths), "start": self.start, "tokens": len(self.ids),
        }  # fmt: skip


def build_documents(
    files: Sequence[TextFile], encode: Callable[[str], list[int]], seq_len: int
) -> list[Document]:
    """The documents of `files` at T = `seq_len` (module docstring), grouped by (kind, source)
    in first-seen order, each group's files in path order. A file that encodes to nothing is
    skipped."""
    if seq_len < 2:
        raise ValueError(f"seq_len must be >= 2, got {seq_len}")
    groups: dict[tuple[str, str], list[TextFile]] = {}
    for f in files:
        groups.setdefault((f.kind, f.source), []).append(f)
    separator = encode(FILE_SEPARATOR)
    documents: list[Document] = []
    for (kind, source), members in groups.items():
        ids: list[int] = []
        spans: list[tuple[str, int, int]] = []
        for f in sorted(members, key=lambda m: m.path):
            own = encode(f.text)
            if not own:
                continue
            if len(own) >= seq_len:
                documents.append(Document(kind, source, tuple(own), ((f.path, 0, len(own)),)))
                continue
            if ids:
                ids.extend(separator)
            spans.append((f.path, len(ids), len(ids) + len(own)))
            ids.extend(own)
            if len(ids) >= seq_len:
                documents.append(Document(kind, source, tuple(ids), tuple(spans)))
                ids, spans = [], []
    return documents


def slot_count(documents: Sequence[Document], seq_len: int) -> int:
    """How many non-overlapping blocks of T tokens the documents hold."""
    return sum(len(doc.ids) // seq_len for doc in documents)


def block_order(
    documents: Sequence[Document], seq_len: int, seed: int
) -> Iterator[tuple[int, int]]:
    """Every (document index, start) slot of T tokens, in the order blocks are taken
    (module docstring), lazily. Deterministic in (the documents, T, seed)."""
    rng = random.Random(seed)
    slots: list[list[int]] = []
    for doc in documents:
        n = len(doc.ids) // seq_len
        offset = rng.randrange(len(doc.ids) - n * seq_len + 1)  # the spare tokens, split once
        starts = [offset + i * seq_len for i in range(n)]
        rng.shuffle(starts)
        slots.append(starts)
    by_source: dict[str, list[int]] = {}
    for i, doc in enumerate(documents):
        by_source.setdefault(f"{doc.kind}:{doc.source}", []).append(i)
    sources = sorted(by_source)
    rng.shuffle(sources)
    queues = []
    for name in sources:
        rng.shuffle(by_source[name])
        queues.append(by_source[name])
    # pass p: the p-th slot of every document that has one, sources taking turns
    depth = 0
    while queues := [[i for i in q if len(slots[i]) > depth] for q in queues if q]:
        for turn in range(max(len(q) for q in queues)):
            for q in queues:
                if turn < len(q):
                    yield q[turn], slots[q[turn]][depth]
        depth += 1


def draw_blocks(
    documents: Sequence[Document],
    seq_len: int,
    n: int,
    *,
    seed: int = 0,
    prefix: Sequence[int] = (),
) -> list[Block]:
    """The first `n` blocks of `block_order`; a ValueError says how many the documents hold
    when they hold fewer. With a `prefix` (a tokenizer's BOS: `hf.run.data.prompt_prefix`), each
    block is the prefix then seq_len - len(prefix) tokens of its document, as a prompt of
    that text would be read (the slots are cut at that shorter length)."""
    prefix = tuple(int(i) for i in prefix)
    if len(prefix) >= seq_len:
        raise ValueError(f"a prefix of {len(prefix)} ids leaves no text in blocks of {seq_len}")
    blocks = _draw(documents, seq_len - len(prefix), n, seed)
    if not prefix:
        return blocks
    return [dataclasses.replace(b, ids=prefix + b.ids) for b in blocks]


def _draw(documents: Sequence[Document], seq_len: int, n: int, seed: int) -> list[Block]:
    held = slot_count(documents, seq_len)
    if n < 1 or held < n:
        kinds = sorted({d.kind for d in documents})
        raise ValueError(
            f"{n} blocks of {seq_len} tokens were asked for; the {'/'.join(kinds) or 'given'} "
            f"text holds {held} (ask for fewer, or a shorter T)"
        )
    blocks = []
    for i, start in itertools.islice(block_order(documents, seq_len, seed), n):
        doc = documents[i]
        blocks.append(Block(doc.kind, doc.source, doc.name, doc.paths_in(start, start + seq_len),
                            start, doc.ids[start : start + seq_len]))  # fmt: skip
    return blocks
