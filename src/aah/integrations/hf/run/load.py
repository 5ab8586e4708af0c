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
import struct
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


def resolve_device(name: str, what: str = "device") -> Any:
    """`name` as a torch.device: "auto" (CUDA when present, else CPU), "cpu", "cuda",
    "cuda:N" or "mps"; ValueError naming `what` (the argument or flag) and the value when it
    is none of these or the machine lacks it (checked before a model is loaded)."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        device = None
    if device is None or device.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"{what} must be auto, cpu, cuda, cuda:N or mps, got {name!r}")
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(
                f"{what} {name!r}: this machine has no CUDA device (torch {torch.__version__}); "
                "use cpu or auto"
            )
        if device.index is not None and device.index >= count:
            raise ValueError(f"{what} {name!r}: there are {count} CUDA devices (0..{count - 1})")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{what} {name!r}: MPS is not available here; use cpu or auto")
    return device


#: `load_model`'s default: load the tokenizer along with the model
LOAD_TOKENIZER: Any = object()


def load_model(
    name: str, device: str = "auto", *, tokenizer: Any = LOAD_TOKENIZER
) -> tuple[Any, Any | None]:
    """(model in eval mode on `device`, tokenizer or None when the source has none).

    The tokenizer is tied to the model (`tie_tokenizer`), so `search_plan` and the scoring
    functions read text with it without being handed it again. Without one, text is read as
    UTF-8 bytes, which only a byte-level model (vocab_size 256..512) accepts (`hf.run.data`).
    `tokenizer`: one `load_tokenizer(name)` gave already (a command that counts its prompt's
    tokens before the weights load), used instead of loading it again (half of a GGUF file's
    load time goes to its tokenizer).

    Raises:
        ValueError: a bad or absent device; a GGUF file that is empty, truncated or not GGUF,
            or a model whose files fail to load (the message names the file or folder).
    """
    from aah.integrations.hf.run.model_layout import require_transformers

    require_transformers()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = resolve_device(device)
    source = resolve_source(name)
    extra: dict[str, Any] = {}
    if source.gguf_file is not None:
        require_gguf_support()
        from aah.integrations.hf.run.gguf_file import read_gguf_header

        read_gguf_header(Path(source.location) / source.gguf_file)  # whole, before 20 s of loading
        extra["gguf_file"] = source.gguf_file
    try:
        model = AutoModelForCausalLM.from_pretrained(
            source.location, attn_implementation="sdpa", **extra
        )
    except LOAD_ERRORS as err:
        raise ValueError(f"{_described(source)} could not be loaded: {_first_line(err)}") from err
    model = model.to(target).eval()
    if tokenizer is LOAD_TOKENIZER:
        tokenizer = _tokenizer_of(source, AutoTokenizer)
    tie_tokenizer(model, tokenizer)
    return model, tokenizer


def load_tokenizer(name: str) -> Any | None:
    """The tokenizer `load_model(name)` would load, or None where the source has none; a
    few seconds instead of the whole load."""
    from aah.integrations.hf.run.model_layout import require_transformers

    require_transformers()
    from transformers import AutoTokenizer

    source = resolve_source(name)
    if source.gguf_file is not None:
        require_gguf_support()
    return _tokenizer_of(source, AutoTokenizer)


def _tokenizer_of(source: ModelSource, auto_tokenizer: Any) -> Any | None:
    extra = {"gguf_file": source.gguf_file} if source.gguf_file is not None else {}
    try:
        tokenizer = auto_tokenizer.from_pretrained(source.location, **extra)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # none: bytes stand-in
        return None
    # Without tokenizer files some versions build an empty one from the model type: unusable.
    if not tokenizer.encode("probe text", add_special_tokens=False):
        return None
    return tokenizer


#: what a damaged or foreign model file raises inside transformers' loaders (a truncated
#: safetensors header, a reshape of a short tensor, an mmap of an empty file, ...)
LOAD_ERRORS = (ValueError, RuntimeError, struct.error, EOFError, IndexError, KeyError)


def _described(source: ModelSource) -> str:
    if source.gguf_file is not None:
        return f"GGUF file {str(Path(source.location) / source.gguf_file)!r}"
    return f"model {source.location!r}"


def _first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return f"{type(err).__name__}: {text.splitlines()[0][:300]}"


def tie_tokenizer(model: Any, tokenizer: Any | None) -> None:
    """Remember `tokenizer` as `model`'s own (None: the model reads UTF-8 bytes)."""
    setattr(model, TOKENIZER_ATTR, tokenizer)


def resolve_tokenizer(model: Any, tokenizer: Any | None = None) -> Any | None:
    """`tokenizer` if given, else the one `load_model` tied to `model`, else None."""
    if tokenizer is not None:
        return tokenizer
    return getattr(model, TOKENIZER_ATTR, None)
