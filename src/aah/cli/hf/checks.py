"""Checks of the Hugging Face commands against the model: once before it loads, from its files
(`hf.run.model_preview`: config.json or the GGUF header, a fraction of a second), and once after,
exactly, before any forward pass. A request no model could serve (T beyond the positions, a
text shorter than T, a budget below the smallest plan or at the full cache, sinks >= T, a plan
of another shape) costs a second, not a load and a search.

The preview's numbers are the ones `load_model` will produce, except a hub name (nothing to
read: only the model-free checks run before loading) and the per-layer sliding windows of a
config (taken as every layer's, which can only lower the smallest plan's cost: never a false
refusal); the checks after loading use the model itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from aah.attention.kv_bytes import KVShape, plan_kv_bytes
from aah.integrations.hf.run.data import BYTE_VOCAB

DEFAULT_SEQ_LEN = 512
MB = 2**20


@dataclass(frozen=True)
class ModelLimits:
    """What the checks need to know of a model: its plan shape, the shape its KV bytes are
    priced with (`kv`, each layer's own sliding window included: read from its files before
    loading, exactly as the loaded model has it), positions, vocabulary and whether it has a
    tokenizer (None: not known)."""

    n_layer: int
    n_head: int
    kv: KVShape
    max_positions: int | None
    vocab_size: int | None
    has_tokenizer: bool | None


def preview_limits(name: str) -> ModelLimits | None:
    """The limits of a local model read from its files; None for a hub name."""
    from aah.integrations.hf.run.model_preview import preview_model

    p = preview_model(name)
    if p is None:
        return None
    return ModelLimits(
        n_layer=p.n_layer, n_head=p.n_head,
        kv=KVShape(p.n_kv_head, p.position_bytes, p.sliding_windows),
        max_positions=p.max_positions, vocab_size=p.vocab_size, has_tokenizer=p.has_tokenizer,
    )  # fmt: skip


def model_limits(model: Any, tokenizer: Any | None) -> ModelLimits:
    """The limits of a loaded model, exactly."""
    from aah.integrations.hf import layout
    from aah.integrations.hf.run.model_layout import kv_shape

    lay, shape, config = layout(model), kv_shape(model), model.config
    positions = getattr(config, "max_position_embeddings", None) or getattr(
        config, "n_positions", None
    )
    return ModelLimits(
        n_layer=lay.n_layer, n_head=lay.n_head, kv=shape,
        max_positions=int(positions) if positions else None,
        vocab_size=getattr(config, "vocab_size", None), has_tokenizer=tokenizer is not None,
    )  # fmt: skip


def sequence_length(asked: int | None, limits: ModelLimits | None, flag: str = "--seq-len") -> int:
    """T: `asked` (>= 2, within the model's positions), else 512 or the positions if fewer."""
    positions = limits.max_positions if limits is not None else None
    if asked is None:
        return DEFAULT_SEQ_LEN if positions is None else min(DEFAULT_SEQ_LEN, positions)
    if asked < 2:
        raise ValueError(f"{flag} must be >= 2 (a token and the next one to predict), got {asked}")
    if positions is not None and asked > positions:
        raise ValueError(
            f"{flag} {asked} is beyond the model's {positions} positions: give {flag} "
            f"{positions} or less"
        )
    return asked


def check_length(count: int, t: int, flag: str, path: str, *, unit: str = "tokens") -> None:
    """A text of `count` tokens (or bytes: a token takes at least one, and a tokenizer adds
    at most one prefix token) can fill one block of T tokens; else ValueError naming the fix."""
    if count >= t or (unit != "tokens" and count + 1 >= t):
        return
    smaller = f"--seq-len {max(2, count)} or less" if unit == "tokens" else "a smaller --seq-len"
    if count == 1:
        unit = unit[:-1]
    raise ValueError(
        f"{flag} {path!r} gives {count} {unit}, too few for one block of T={t} tokens: give a "
        f"longer text or {smaller}"
    )


def check_tokenizer(limits: ModelLimits | None, model: str) -> None:
    """Text can be read for this model: it has a tokenizer, or it is byte-level."""
    if limits is None or limits.has_tokenizer is not False or limits.vocab_size is None:
        return
    if limits.vocab_size not in BYTE_VOCAB:
        raise ValueError(
            f"model {model!r} comes without a tokenizer and has a {limits.vocab_size}-token "
            "vocabulary: text read as UTF-8 bytes would be garbage to it; give a folder or "
            "GGUF file that includes the tokenizer"
        )


def check_plan_shape(windows: list[list[int]], limits: ModelLimits | None, path: str) -> None:
    """The plan has one row per layer and one window per query head of the model."""
    if limits is None:
        return
    rows = [len(row) for row in windows]
    if len(rows) != limits.n_layer or any(n != limits.n_head for n in rows):
        heads = sorted(set(rows))
        raise ValueError(
            f"plan file {path!r} is {len(rows)} layers x {'/'.join(map(str, heads))} heads, the "
            f"model has {limits.n_layer} layers x {limits.n_head} query heads: give a plan "
            "searched for this model"
        )


def check_budget(
    budget: float | None,
    kv_budget: int | None,
    sinks: int,
    t: int,
    candidates: list[int],
    limits: ModelLimits | None,
    shown: str | None = None,
    whole_layers: list[int] | None = None,
) -> None:
    """The budget can be met by some plan and does not already allow the full cache; --sinks
    below T. Without `limits` (a hub name before loading) the KV-byte checks wait. `shown`:
    the KV flag as the user wrote it ("--budget-kv-mb 13.5", "--kv-fraction 0.3 (...)"), for
    the messages. `whole_layers` (checked by `check_whole_layers` first) keep the largest
    candidate in the smallest plan, as the search's allocation does."""
    if sinks >= t:
        raise ValueError(
            f"--sinks {sinks} is not below T={t}: every head would see every token; give fewer "
            "sinks (4 is typical)"
        )
    c0 = candidates[0]
    whole = sorted(set(whole_layers or ())) if limits is not None else []
    others = ["a smaller --candidates window"] * (c0 > 1) + ["fewer --sinks"] * (sinks > 0)
    others += ["fewer --whole-layers"] * bool(whole)
    fixes = "".join(f" or {fix}" for fix in others)
    kept = f", layers {','.join(map(str, whole))} whole at {candidates[-1]}" if whole else ""
    smallest = f"window {c0} and {sinks} sinks for every head{kept}, at T={t}"
    if budget is not None:
        from aah.attention import coverage

        if whole and limits is not None:
            rows = _smallest_rows(c0, candidates[-1], whole, limits)
            floor = coverage(rows, t, [[sinks] * limits.n_head for _ in rows]).causal
        else:
            floor = coverage([[c0]], t, [[sinks]]).causal
        if floor > budget:
            least = math.ceil(floor * 10_000) / 10_000
            raise ValueError(
                f"--budget {budget} is below the smallest plan's causal coverage {floor:.4f} "
                f"({smallest}); give --budget {least} or more{fixes}"
            )
        return
    if limits is None or kv_budget is None:
        return
    n_head = limits.n_head
    flag = shown or f"--budget-kv-mb {kv_budget / MB:.6g}"
    cut = _smallest_rows(c0, candidates[-1], whole, limits)
    floor = plan_kv_bytes(cut, [[sinks] * n_head for _ in cut], limits.kv, t)
    if floor > kv_budget:
        least = math.ceil(floor / MB * 1000) / 1000
        raise ValueError(
            f"{flag} ({kv_budget} bytes) is below the smallest "
            f"plan's {floor / MB:.3f} MB ({floor} bytes: {smallest}); give --budget-kv-mb "
            f"{least} or more{fixes}"
        )
    full = plan_kv_bytes([[t] * n_head for _ in cut], None, limits.kv, t)
    if kv_budget >= full:
        raise ValueError(
            f"{flag} is at or above the full cache's "
            f"{full / MB:.3f} MB at T={t}: no head would be cut; give less than {full / MB:.3f}"
        )


def _smallest_rows(
    smallest: int, largest: int, whole: list[int], limits: ModelLimits
) -> list[list[int]]:
    """The cheapest plan the search may return: `smallest` everywhere, `largest` on the whole
    layers."""
    return [
        [largest if layer in whole else smallest] * limits.n_head for layer in range(limits.n_layer)
    ]


def check_whole_layers(
    layers: list[int] | None, limits: ModelLimits | None, candidates: list[int], t: int
) -> None:
    """--whole-layers names distinct layers of the model (checked when its shape is known),
    and the largest candidate window, which those layers keep, is full attention at T."""
    if not layers:
        return
    shown = ",".join(map(str, layers))
    if limits is not None:
        n = limits.n_layer
        if any(not 0 <= layer < n for layer in layers) or len(set(layers)) != len(layers):
            raise ValueError(
                f"--whole-layers {shown}: the model has {n} layers, 0..{n - 1}; give distinct "
                "layers among them"
            )
    if candidates[-1] < t:
        raise ValueError(
            f"--whole-layers {shown} keeps its layers at the largest candidate window, "
            f"{candidates[-1]}, which is not full attention at T={t}: add a candidate >= {t} "
            "to --candidates"
        )
