from __future__ import annotations

import pytest

from aah.data import DataConfig


def test_defaults_are_valid() -> None:
    cfg = DataConfig()
    cfg.validate()
    assert (cfg.corpus, cfg.path, cfg.val_fraction, cfg.max_bytes) == (
        "python-stdlib",
        None,
        0.05,
        None,
    )


@pytest.mark.parametrize(
    "corpus", ["python-stdlib", "shakespeare", "hf:wikitext", "hf:wikitext:wikitext-2-raw-v1"]
)
def test_accepted_corpora(corpus: str) -> None:
    DataConfig(corpus=corpus).validate()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("corpus", "wikipedia"),
        ("corpus", "hf:"),
        ("corpus", "hf:a:b:c"),
        ("corpus", 3),
        ("path", ""),
        ("val_fraction", 0.0),
        ("val_fraction", 1.0),
        ("val_fraction", -0.1),
        ("val_fraction", float("nan")),
        ("val_fraction", "0.1"),
        ("val_fraction", True),
        ("max_bytes", 0),
        ("max_bytes", 1.5),
        ("max_bytes", True),
        ("cache_dir", ""),
    ],
)
def test_bad_values_name_the_field(field: str, value: object) -> None:
    cfg = DataConfig(**{field: value})
    with pytest.raises(ValueError, match=f"data.{field}"):
        cfg.validate()


def test_corpus_ignored_when_path_set() -> None:
    DataConfig(corpus="not-a-corpus", path="some/file.txt").validate()
