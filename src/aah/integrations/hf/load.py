"""Load a causal LM for the `aah plan` commands: a hub name, a transformers folder, or GGUF.

    model, tokenizer = load_model("path/to/model.gguf")       # one GGUF file
    model, tokenizer = load_model("path/to/folder")           # config.json, or one .gguf in it
    model, tokenizer = load_model("HuggingFaceTB/SmolLM2-135M")  # hub name (needs network)

A GGUF file is what llama.cpp-style packages ship; transformers dequantises it to float32 when
it loads it (`from_pretrained(folder, gguf_file=name)`), which needs the `gguf` package (and
`accelerate` for its loading path). `pip install 'aah-attention[hf]'` brings both. A folder
with a config.json loads as a transformers folder even if it also holds GGUF files; a folder
with several GGUF files and no config.json is ambiguous and refused with the names listed.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GGUF_SUFFIX = ".gguf"
# Where `load_model` keeps the tokenizer it loaded with the model, so that `search_plan` and
# `apply`'s scoring read text with the model's own tokenizer without being handed it again.
TOKENIZER_ATTR = "_aah_tokenizer"
INSTALL_LINE = "pip install 'aah-attention[hf]'  (or: pip install gguf accelerate)"


@dataclass(frozen=True)
class ModelSource:
    """Where `from_pretrained` should look: `location` (folder or hub name) and, for GGUF, the
    file's name inside that folder."""

    location: str
    gguf_file: str | None = None


def resolve_source(name: str) -> ModelSource:
    """`name` as a `ModelSource` (module docstring); ValueError for a GGUF path that does not
    exist or a folder whose GGUF file is ambiguous."""
    path = Path(name)
    if path.suffix.lower() == GGUF_SUFFIX:
        if not path.is_file():
            raise ValueError(f"GGUF file {name!r} does not exist")
        return ModelSource(str(path.resolve().parent), path.name)
    if not path.is_dir() or (path / "config.json").is_file():
        return ModelSource(name)
    found = sorted(p.name for p in path.iterdir() if p.suffix.lower() == GGUF_SUFFIX)
    if len(found) > 1:
        raise ValueError(
            f"folder {name!r} holds {len(found)} GGUF files and no config.json: pass one of "
            f"{', '.join(found)} as the model"
        )
    if found:
        return ModelSource(str(path.resolve()), found[0])
    return ModelSource(name)


def require_gguf_support() -> None:
    """ImportError naming the install line unless `gguf` and `accelerate` import."""
    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(
            f"loading a GGUF model needs the {' and '.join(missing)} package"
            f"{'s' if len(missing) > 1 else ''}: {INSTALL_LINE}"
        )


def load_model(name: str, device: str = "auto") -> tuple[Any, Any | None]:
    """(model in eval mode on `device`, tokenizer or None when the source has none).

    Without a usable tokenizer, text is read as UTF-8 bytes (`hf.data`), which suits only
    models with vocab_size >= 256 (random test models)."""
    import torch

    from aah.integrations.hf.model_layout import require_transformers

    require_transformers()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = resolve_source(name)
    extra: dict[str, Any] = {}
    if source.gguf_file is not None:
        require_gguf_support()
        extra["gguf_file"] = source.gguf_file
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(
        source.location, attn_implementation="sdpa", **extra
    )
    model = model.to(device).eval()
    try:
        tokenizer = AutoTokenizer.from_pretrained(source.location, **extra)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # none: bytes stand-in
        tokenizer = None
    # Without tokenizer files some versions build an empty one from the model type: unusable.
    if tokenizer is not None and not tokenizer.encode("probe text", add_special_tokens=False):
        tokenizer = None
    tie_tokenizer(model, tokenizer)
    return model, tokenizer


def tie_tokenizer(model: Any, tokenizer: Any | None) -> None:
    """Remember `tokenizer` as `model`'s own (None: the model reads UTF-8 bytes)."""
    setattr(model, TOKENIZER_ATTR, tokenizer)


def resolve_tokenizer(model: Any, tokenizer: Any | None = None) -> Any | None:
    """`tokenizer` if given, else the one `load_model` tied to `model`, else None."""
    if tokenizer is not None:
        return tokenizer
    return getattr(model, TOKENIZER_ATTR, None)
