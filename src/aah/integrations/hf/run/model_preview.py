"""A model's shape read from its files before the weights load: config.json or a GGUF header.

`preview_model(name)` gives what the checks of a command need to refuse an impossible request
in a second instead of after a 20-second load: layers, query and KV heads, head size, the
dtype's bytes, positions, vocabulary size, each layer's own sliding window (Gemma 3 and Qwen
slide on some layers only) and whether a tokenizer ships with it. None for a hub name (nothing
local to read); the loaded model is checked again exactly.

A GGUF file loads dequantised to float32 (`load_model`), so its itemsize is 4; a transformers
folder loads in its config's dtype (transformers' "auto"), float32 when it names none.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aah.integrations.hf.run.gguf_file import read_gguf_header
from aah.integrations.hf.run.load import GGUF_SUFFIX, resolve_source
from aah.integrations.hf.run.model_layout import FAMILIES

ITEMSIZE = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float64": 8}
#: families whose sliding window applies only with use_sliding_window (which GGUF files do not
#: carry, so never when loaded from one), from max_window_layers on
QWEN = ("qwen2", "qwen3")
#: GGUF architecture -> the model_type transformers loads it as, where the two differ
GGUF_FAMILY = {"gemma3": "gemma3_text"}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


@dataclass(frozen=True)
class ModelPreview:
    """What a model's files say about it (module docstring)."""

    family: str
    n_layer: int
    n_head: int
    n_kv_head: int
    head_dim: int
    itemsize: int
    max_positions: int | None
    vocab_size: int | None
    sliding_windows: tuple[int | None, ...]  # each layer's own window, None where it has none
    has_tokenizer: bool

    @property
    def position_bytes(self) -> int:
        """Bytes one KV head stores per position (keys and values)."""
        return self.head_dim * 2 * self.itemsize


def preview_model(name: str) -> ModelPreview | None:
    """The `ModelPreview` of a local model (a GGUF file, a folder with config.json or one GGUF
    file), None for a hub name. ValueError naming the file when it is an incomplete GGUF file,
    unreadable, or a model family the integration does not support."""
    source = resolve_source(name)
    folder = Path(source.location)
    if source.gguf_file is not None:
        return _from_gguf(folder / source.gguf_file)
    config = folder / "config.json"
    if not config.is_file():
        return None
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise ValueError(f"{str(config)!r} is not a readable config.json: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{str(config)!r} does not hold a JSON object")
    has_tokenizer = any((folder / f).is_file() for f in TOKENIZER_FILES)
    try:
        return _from_config(data, has_tokenizer)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as err:
        raise ValueError(f"{str(config)!r}: {err}") from None


def _supported(family: object, where: str) -> str:
    if family not in FAMILIES:
        raise ValueError(
            f"{where} holds a {family!r} model; the aah integration supports "
            f"{', '.join(sorted(FAMILIES))}"
        )
    return str(family)


def _from_config(data: dict[str, Any], has_tokenizer: bool) -> ModelPreview:
    family = _supported(data.get("model_type"), "config.json")
    if family == "gpt2":
        n_layer, n_head, width = data["n_layer"], data["n_head"], data["n_embd"]
        positions, kv, head_dim = data.get("n_positions"), data["n_head"], None
    else:
        n_layer, n_head = data["num_hidden_layers"], data["num_attention_heads"]
        width, positions = data["hidden_size"], data.get("max_position_embeddings")
        kv, head_dim = data.get("num_key_value_heads") or n_head, data.get("head_dim")
    sliding = data.get("sliding_window")
    if family in QWEN and not data.get("use_sliding_window", False):
        sliding = None
    types = data.get("layer_types") or _default_layer_types(family, data, int(n_layer))
    dtype = str(data.get("dtype") or data.get("torch_dtype") or "float32").replace("torch.", "")
    return ModelPreview(
        family=family, n_layer=int(n_layer), n_head=int(n_head), n_kv_head=int(kv),
        head_dim=int(head_dim or int(width) // int(n_head)), itemsize=ITEMSIZE.get(dtype, 4),
        max_positions=int(positions) if positions else None,
        vocab_size=int(data["vocab_size"]) if data.get("vocab_size") else None,
        sliding_windows=_layer_windows(int(sliding) if sliding else None, int(n_layer), types),
        has_tokenizer=has_tokenizer,
    )  # fmt: skip


def _default_layer_types(family: str, data: dict[str, Any], n_layer: int) -> list[str] | None:
    """Which layers slide when a config names no `layer_types`, by transformers' own defaults
    for the families that mix sliding and full layers; None: every layer alike."""
    if family == "gemma3_text":  # every `sliding_window_pattern`-th layer is full
        pattern = int(data.get("sliding_window_pattern") or 6)
        return [
            "sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n_layer)
        ]
    if family in QWEN:  # layers from `max_window_layers` on slide
        first = int(data.get("max_window_layers", 28))
        return ["sliding_attention" if i >= first else "full_attention" for i in range(n_layer)]
    return None


def _layer_windows(
    window: int | None, n_layer: int, layer_types: Sequence[str] | None
) -> tuple[int | None, ...]:
    """Each layer's own sliding window: `window` on the layers `layer_types` marks sliding (on
    every layer without it), None elsewhere."""
    if not window:
        return (None,) * n_layer
    if layer_types is None:
        return (window,) * n_layer
    if len(layer_types) != n_layer:
        raise ValueError(f"layer_types has {len(layer_types)} entries for {n_layer} layers")
    return tuple(window if t == "sliding_attention" else None for t in layer_types)


def _from_gguf(path: Path) -> ModelPreview:
    if path.suffix.lower() != GGUF_SUFFIX:
        raise ValueError(f"{str(path)!r} is not a .gguf file")
    meta = read_gguf_header(path).metadata
    arch = meta.get("general.architecture")
    family = _supported(GGUF_FAMILY.get(arch, arch), f"GGUF file {str(path)!r}")

    def key(name: str) -> Any:
        return meta.get(f"{arch}.{name}")

    try:
        n_head, n_layer = int(key("attention.head_count")), int(key("block_count"))
        vocab = key("vocab_size") or meta.get("tokenizer.ggml.tokens")
        return ModelPreview(
            family=family, n_layer=n_layer, n_head=n_head,
            n_kv_head=int(key("attention.head_count_kv") or n_head),
            head_dim=int(key("attention.key_length") or int(key("embedding_length")) // n_head),
            itemsize=4, max_positions=int(key("context_length") or 0) or None,
            vocab_size=int(vocab) if vocab else None,
            sliding_windows=_layer_windows(
                None if family in QWEN else int(key("attention.sliding_window") or 0) or None,
                n_layer, _default_layer_types(family, {}, n_layer),
            ),
            has_tokenizer="tokenizer.ggml.model" in meta,
        )  # fmt: skip
    except (TypeError, ValueError, ZeroDivisionError) as err:
        raise ValueError(f"GGUF file {str(path)!r} lacks a model setting it needs: {err}") from None
