"""Searched plans kept on disk, so the same search twice costs one search.

An entry is one JSON file under the cache folder (`cache_dir()`: `$AAH_CACHE_DIR`, else
`$XDG_CACHE_HOME/aah`, else `~/.cache/aah`; plans in its `plans/`), named by the SHA-256 of
its key: the model's fingerprint (`model_fingerprint`: the weights' bytes and the config), the
search's length, budget and every option, the text searched on (the shipped mix, or the hash
of the user's), and the package version. The file holds the key itself and the plan with its
own SHA-256; an entry whose key differs (a hash collision, another version's file put there
by hand) or whose plan does not match its hash (truncated, edited) is ignored with a warning
and searched again, never trusted. Entries are written atomically (a temporary file, then a
rename), so writers racing on one key leave one whole entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from aah.atomic import write_text_atomic
from aah.plan import WindowPlan

#: the environment variable that moves the cache (tests point it at a temporary folder)
CACHE_ENV = "AAH_CACHE_DIR"
#: the key of the entry format: an entry of another format is ignored
FORMAT = 1


def cache_dir() -> Path:
    """Where cached plans live: `$AAH_CACHE_DIR/plans`, `$XDG_CACHE_HOME/aah/plans` or
    `~/.cache/aah/plans`."""
    root = os.environ.get(CACHE_ENV)
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = str(Path(xdg) / "aah")
    return Path(root) / "plans"


def model_fingerprint(model: torch.nn.Module) -> str:
    """SHA-256 of the model's weights and buffers (names, dtypes, shapes and bytes, in name
    order) and of its config (without the attention implementation, which `apply` switches)."""
    digest = hashlib.sha256()
    config = model.config.to_dict()
    config.pop("_attn_implementation", None)
    config.pop("_attn_implementation_internal", None)
    config.pop("transformers_version", None)
    digest.update(json.dumps(config, sort_keys=True, default=str).encode())
    tensors = dict(model.named_parameters())
    tensors.update(dict(model.named_buffers()))
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensors[name].shape)}".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


#: the files of a model folder that `load_model` may read (weights, config, tokenizer)
MODEL_FILE_SUFFIXES = (".gguf", ".safetensors", ".bin", ".json", ".model", ".txt", ".tiktoken")


def files_fingerprint(name: str) -> str | None:
    """SHA-256 of the files a local model loads from, before it loads: a GGUF file with the
    model files beside it, or a folder's weights, config and tokenizer files (names and bytes,
    in name order); None for a hub name. It keys a search the command line can answer from the
    cache without loading the model (`aah plan search`); `model_fingerprint` keys the rest."""
    from aah.integrations.hf.run.load import resolve_source

    source = resolve_source(name)
    folder = Path(source.location)
    if not folder.is_dir():
        return None
    files = sorted(p for p in folder.iterdir()
                   if p.is_file() and p.suffix.lower() in MODEL_FILE_SUFFIXES)  # fmt: skip
    digest = hashlib.sha256(f"gguf:{source.gguf_file}".encode())
    for path in files:
        digest.update(f"\0{path.name}\0".encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 22), b""):
                digest.update(block)
    return digest.hexdigest()


def text_fingerprint(text: Any) -> str:
    """What a search read: "shipped mix" for None, else the SHA-256 of the text or token ids
    as given (strings, lists of ids, tensors)."""
    if text is None:
        return "shipped mix"
    digest = hashlib.sha256()
    items = [text] if isinstance(text, (str, torch.Tensor)) else list(text)
    for item in items:
        if isinstance(item, torch.Tensor):
            digest.update(item.detach().cpu().long().numpy().tobytes())
        elif isinstance(item, str):
            digest.update(item.encode("utf-8"))
        else:
            digest.update(json.dumps(item, default=str).encode())
        digest.update(b"\0")
    return digest.hexdigest()


def entry_path(key: Mapping[str, Any]) -> Path:
    return cache_dir() / f"{_digest(key)}.json"


def load_cached(key: Mapping[str, Any]) -> WindowPlan | None:
    """The plan cached under `key`, or None (absent, or refused with a warning naming why)."""
    path = entry_path(key)
    if not path.exists():
        return None
    why = None
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(entry, dict) or entry.get("format") != FORMAT:
            why = "not an entry of this version's format"
        elif entry.get("key") != _plain(key):
            why = "its key differs from this search's"
        elif entry.get("plan_sha256") != _digest(entry.get("plan")):
            why = "its plan does not match its hash (truncated or edited)"
        else:
            return WindowPlan.from_data(entry["plan"])
    except (OSError, ValueError) as err:  # unreadable, not JSON, or not a plan
        why = f"unreadable ({str(err).splitlines()[0] if str(err) else type(err).__name__})"
    warnings.warn(f"ignoring the cached plan {path}: {why}; searching again", stacklevel=2)
    return None


def store(key: Mapping[str, Any], plan: WindowPlan) -> Path:
    """Write `plan` under `key` (atomically); its path."""
    data = plan.to_dict()
    entry = {"format": FORMAT, "key": _plain(key), "plan": data, "plan_sha256": _digest(data)}
    path = entry_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(entry) + "\n")
    return path


def _plain(value: Any) -> Any:
    """`value` as JSON would give it back (tuples as lists, keys as strings)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()
