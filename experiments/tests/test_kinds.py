"""Evaluation kinds, the shipped calibration mix and the block sampler: test folders are left
out, blocks lie inside one document and are spread across files and sources, the draw is
seeded and prefix-stable, and no evaluation file is ever a calibration file."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path, PurePath

import pytest

from aah.integrations.hf.search.calibration_mix import (
    MODULES,
    calibration_blocks,
    calibration_files,
    calibration_mix,
    calibration_paths,
    stdlib_root,
)
from aah.integrations.hf.search.text_blocks import (
    FILE_SEPARATOR,
    TextFile,
    block_order,
    build_documents,
    draw_blocks,
)
from experiments.pretrained import kinds
from experiments.pretrained.kinds import is_test_path


def chars(text: str) -> list[int]:
    return [ord(c) for c in text]


@pytest.mark.parametrize(
    ("path", "test"),
    [("idlelib/idle_test/test_x.py", True), ("lib2to3/tests/data/a.py", True),
     ("tkinter/test/b.py", True), ("pkg/test_c.py", True), ("pkg/c_test.py", True),
     ("unittest/case.py", False), ("doctest.py", False), ("unittest/mock.py", False),
     ("contest/latest.py", False)],
)  # fmt: skip
def test_test_paths_are_recognised_in_any_part(path: str, test: bool) -> None:
    assert is_test_path(PurePath(path)) is test


def test_long_files_stand_alone_and_short_ones_join_in_path_order() -> None:
    files = [TextFile("k", "s", "b.txt", "x" * 3), TextFile("k", "s", "a.txt", "y" * 12),
             TextFile("k", "s", "c.txt", "z" * 4), TextFile("k", "s", "d.txt", "w" * 2),
             TextFile("k", "t", "e.txt", "v" * 5)]  # fmt: skip
    docs = build_documents(files, chars, 8)
    sep = chars(FILE_SEPARATOR)
    assert [d.spans for d in docs] == [
        (("a.txt", 0, 12),),
        (("b.txt", 0, 3), ("c.txt", 5, 9)),  # 3 + 2 + 4 = 9 >= 8
    ]  # d.txt (2 ids, never reaching 8) and source t (5 ids) are dropped
    assert list(docs[1].ids) == chars("xxx") + sep + chars("zzzz")
    assert docs[1].paths_in(0, 4) == ("b.txt",) and docs[1].paths_in(2, 6) == ("b.txt", "c.txt")


def brute_slots(documents, seq_len: int) -> int:
    return sum(len(d.ids) // seq_len for d in documents)


def test_blocks_are_inside_one_document_spread_and_prefix_stable() -> None:
    files = [TextFile("k", f"src{s}", f"src{s}/f{i}.txt", chr(65 + s) * (10 + 7 * i))
             for s in range(3) for i in range(5)]  # fmt: skip
    docs = build_documents(files, chars, 8)
    order = list(block_order(docs, 8, seed=1))
    assert len(order) == len(set(order)) == brute_slots(docs, 8)
    for i, start in order:  # non-overlapping slots inside their document
        assert start >= 0 and start + 8 <= len(docs[i].ids)
    for i in range(len(docs)):
        starts = sorted(s for d, s in order if d == i)
        assert all(b - a >= 8 for a, b in itertools.pairwise(starts))
    first = [i for i, _ in order[: len(docs)]]
    assert sorted(first) == list(range(len(docs)))  # every document once before a second
    sources = [docs[i].source for i in first[:3]]
    assert len(set(sources)) == 3  # the sources take turns
    blocks = draw_blocks(docs, 8, 20, seed=1)
    assert draw_blocks(docs, 8, 7, seed=1) == blocks[:7]  # more blocks keep the first ones
    assert draw_blocks(docs, 8, 20, seed=2) != blocks
    for b in blocks:
        doc = next(d for d in docs if d.name == b.document)
        assert b.ids == doc.ids[b.start : b.start + 8] and len(b.ids) == 8
        assert set(b.paths) <= {p for p, _, _ in doc.spans} and b.source == doc.source
    with pytest.raises(ValueError, match=f"holds {len(order)}"):
        draw_blocks(docs, 8, len(order) + 1)


def test_the_python_kind_reads_packages_without_their_tests() -> None:
    files = kinds.python_files()
    sources = {f.source for f in files}
    assert {"asyncio", "email", "idlelib", "xml", "unittest"} <= sources
    assert not sources & {"pydoc_data", "encodings", "site-packages"}
    assert all(not is_test_path(PurePath(f.path)) for f in files)
    assert not any("idle_test" in f.path for f in files)
    assert any(f.path == "unittest/case.py" for f in files)


def test_no_evaluation_file_is_a_calibration_file() -> None:
    calib = {str(Path(p).resolve()) for p in calibration_paths()}
    root = stdlib_root()
    for name in kinds.READERS:
        try:
            files = kinds.kind_files(name)
        except ValueError:  # a kind this machine lacks says so; the others are checked
            continue
        read = {str((root / f.path).resolve()) for f in files if f.kind == "python"}
        assert not read & calib, name
        assert not any(f.path.startswith("pydoc_data") for f in files)
        texts = {f.text for f in files}
        assert not texts & {f.text for f in calibration_files()}, name
    modules = {f"{m}.py" for m in MODULES}
    assert not {f.path for f in kinds.python_files()} & modules


def test_the_prose_kind_keeps_english_prose_only() -> None:
    english = "The file is read by the parser and the result is written to a table. " * 10
    assert kinds.is_english_prose(english)
    assert not kinds.is_english_prose("U+0041 A ok\nU+0042 B ok\n" * 40)
    assert not kinds.is_english_prose("def f(x):\n    return x + 1\n" * 40)


def test_prose_files_skip_changelogs_and_duplicates(tmp_path) -> None:
    import gzip

    text = "This is the manual of the tool and it is written for the user of it. " * 20
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "README").write_text(text)
    (tmp_path / "pkg" / "manual.txt.gz").write_bytes(gzip.compress(text.encode() + b" More."))
    (tmp_path / "pkg" / "changelog.txt").write_text(text + "x")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "README.md").write_text(text)  # the same bytes as pkg/README
    got = kinds.prose_files(tmp_path)  # the first copy in path order is kept
    assert [(f.source, f.path) for f in got] == [("other", "other/README.md"),
                                                 ("pkg", "pkg/manual.txt")]  # fmt: skip


def test_kind_blocks_draw_each_kind_from_several_files() -> None:
    blocks = kinds.kind_blocks(None, ["python"], 512, 12, seed=0)
    assert len(blocks) == 12 and all(len(b.ids) == 512 for b in blocks)
    assert len({b.document for b in blocks}) == 12
    assert len({b.source for b in blocks}) == 12
    assert kinds.kind_blocks(None, ["python"], 512, 12, seed=0) == blocks
    with pytest.raises(ValueError, match="nope"):
        kinds.kind_blocks(None, ["python", "nope"], 512, 2)


def test_the_mix_alternates_prose_and_python_and_is_deterministic() -> None:
    blocks = calibration_blocks(None, seq_len=1024, n_blocks=6)
    assert [b.kind for b in blocks] == ["prose", "python"] * 3
    assert all(p.startswith("pydoc_data/topics.py:") for b in blocks[::2] for p in b.paths)
    assert {b.source for b in blocks[1::2]} <= set(MODULES)
    assert len({b.document for b in blocks}) == 6
    mix = calibration_mix(None, seq_len=1024, n_blocks=6)
    assert mix == [list(b.ids) for b in blocks] and all(len(m) == 1024 for m in mix)
    assert calibration_mix(None, seq_len=1024, n_blocks=6) == mix
    assert calibration_mix(None, seq_len=1024, n_blocks=6, seed=1) != mix
    assert Counter(b.kind for b in calibration_blocks(None, seq_len=256, n_blocks=5)) == {
        "prose": 3, "python": 2}  # fmt: skip
    with pytest.raises(ValueError, match="n_blocks"):
        calibration_mix(None, n_blocks=0)
