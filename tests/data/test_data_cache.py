"""The token cache: hits skip encoding, crashes mid-write never leave a readable half entry."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from data_helpers import write_tree

from aah.data import DataConfig, dataset, load_tokens

FILES = {f"f{i}.txt": f"file number {i}\n".encode() * 20 for i in range(12)}


def _corpus(tmp_path: Path) -> DataConfig:
    return DataConfig(path=str(write_tree(tmp_path / "corpus", FILES)), val_fraction=0.25)


def _fail(*args: object, **kwargs: object) -> None:
    raise AssertionError("encoded again although the cache should have hit")


def test_cache_layout_and_env_override(tmp_path: Path, cache_dir: Path) -> None:
    s = load_tokens(_corpus(tmp_path))
    entry = cache_dir / s.content_hash
    assert sorted(p.name for p in entry.iterdir()) == ["meta.json", "train.bin", "val.bin"]
    assert (entry / "train.bin").read_bytes() == s.train.tobytes()
    assert (entry / "val.bin").read_bytes() == s.val.tobytes()
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["n_train_tokens"] == s.train.size and meta["content_hash"] == s.content_hash


def test_cache_dir_field_used_without_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AAH_CACHE_DIR")
    cfg = _corpus(tmp_path)
    cfg.cache_dir = str(tmp_path / "own")
    s = load_tokens(cfg)
    assert (tmp_path / "own" / s.content_hash / "meta.json").is_file()


def test_cache_hit_does_not_reencode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _corpus(tmp_path)
    first = load_tokens(cfg)
    monkeypatch.setattr(dataset, "encode_split", _fail)
    second = load_tokens(cfg)
    assert second.content_hash == first.content_hash
    assert np.array_equal(second.train, first.train) and np.array_equal(second.val, first.val)
    assert (second.n_files_train, second.n_files_val) == (first.n_files_train, first.n_files_val)


def test_edit_invalidates_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _corpus(tmp_path)
    first = load_tokens(cfg)
    target = Path(cfg.path) / "f3.txt"  # type: ignore[arg-type]
    stat = target.stat()
    target.write_bytes(target.read_bytes().replace(b"3", b"9"))  # same size...
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # ...and same mtime
    second = load_tokens(cfg)
    assert second.content_hash != first.content_hash
    both = second.train.tobytes() + second.val.tobytes()
    assert b"file number 9\n" * 20 in both and b"file number 3" not in both


def test_crash_mid_write_then_clean_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_dir: Path
) -> None:
    cfg = _corpus(tmp_path)
    real_replace = os.replace

    def crash_on_val(src: str, dst: os.PathLike) -> None:
        if Path(dst).name == "val.bin":
            raise KeyboardInterrupt("simulated crash")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_val)
    with pytest.raises(KeyboardInterrupt):
        load_tokens(cfg)
    monkeypatch.setattr(os, "replace", real_replace)
    (entry,) = cache_dir.iterdir()
    assert (entry / "train.bin").exists() and not (entry / "meta.json").exists()
    assert not list(entry.glob(".*.tmp"))  # temp file cleaned up on the way out

    calls = []
    real_encode = dataset.encode_split
    monkeypatch.setattr(dataset, "encode_split", lambda plan: calls.append(1) or real_encode(plan))
    s = load_tokens(cfg)
    assert calls == [1]  # half entry not trusted: rebuilt
    fresh = load_tokens(DataConfig(path=cfg.path, val_fraction=0.25, cache_dir=str(tmp_path / "x")))
    assert np.array_equal(s.train, fresh.train) and np.array_equal(s.val, fresh.val)


def test_truncated_bin_is_rebuilt(tmp_path: Path, cache_dir: Path) -> None:
    cfg = _corpus(tmp_path)
    first = load_tokens(cfg)
    expected = first.train.tobytes()
    del first
    train_bin = cache_dir / load_tokens(cfg).content_hash / "train.bin"
    train_bin.write_bytes(expected[:10])  # meta still claims the full size
    again = load_tokens(cfg)
    assert again.train.tobytes() == expected


def test_memmap_is_read_only(tmp_path: Path) -> None:
    s = load_tokens(_corpus(tmp_path))
    with pytest.raises(ValueError):
        s.train[0] = 1
