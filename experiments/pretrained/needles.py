"""Needle-in-a-haystack retrieval on a Hugging Face causal LM: a (length x depth) accuracy grid.

Each needle is a prompt of exactly `length` tokens: the classic pass-key filler with one needle
sentence inserted at `depth` (0 = the start of the haystack, 1 = its end), then a question whose
answer is in the needle. Two kinds: a 5-digit pass key, and a (name, city) fact. A needle is hit
when greedy decoding after the prompt reproduces the answer's tokens, which one teacher-forced
forward decides (`needle_hit`). The code runs whatever attention the model has now: a window plan
is applied beforehand (`aah.integrations.hf.applied`), never here.

Text is tokenised with `tokenizer.encode(text, add_special_tokens=False)`, or read as UTF-8
bytes when there is no tokenizer (`aah.integrations.hf.run.data.encode`; a stand-in for tests and
random models that needs vocab_size >= 256).
"""

from __future__ import annotations

import inspect
import itertools
import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from aah.integrations.hf.run.data import encode, prompt_prefix
from aah.report.plots import _pyplot

#: the classic pass-key filler (Mohtashami & Jaggi, 2023); the leading space makes the tiled
#: copies tokenise like one long run of the sentence (word tokens carry their leading space)
FILLER = (
    " The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
)
NAMES = ("Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Henry")
CITIES = ("Lisbon", "Oslo", "Cairo", "Lima", "Seoul", "Quito", "Dublin", "Nairobi")
KINDS = ("passkey", "fact")
PANELS_PER_ROW = 4


@dataclass(frozen=True)
class Needle:
    """One retrieval prompt: `prompt` has exactly `length` token ids, the needle sentence sits at
    `depth` of the haystack, and greedy decoding should continue it with `answer` (>= 1 ids).
    The prompt's last `question` ids are the question (what a KV press leaves uncompressed)."""

    kind: Literal["passkey", "fact"]
    length: int
    depth: float
    prompt: list[int]
    answer: list[int]
    question: int = 0


def _texts(kind: str, keys: Mapping[str, Iterator[Any]]) -> tuple[str, str, str]:
    """(needle sentence, question, answer) of one needle of `kind`; `keys` yields the next
    pass key or (name, city) pair."""
    if kind == "passkey":
        key = next(keys["passkey"])
        return (
            f" The pass key is {key}. Remember it. {key} is the pass key.",
            " What is the pass key? The pass key is",
            f" {key}",
        )
    name, city = next(keys["fact"])
    return (
        f" Remember this: the secret city of {name} is {city}.",
        f" What is the secret city of {name}? The secret city of {name} is",
        f" {city}",
    )


def _fact_pairs(rng: random.Random) -> Iterator[tuple[str, str]]:
    """Every (name, city) pair once in a seeded order, then again reshuffled: no pair
    repeats before all 64 have been used."""
    pairs = list(itertools.product(NAMES, CITIES))
    while True:
        rng.shuffle(pairs)
        yield from pairs


def build_needles(
    tokenizer: Any | None,
    lengths: Sequence[int],
    depths: Sequence[float],
    per_cell: int,
    *,
    seed: int = 0,
    vocab_size: int | None = None,
) -> list[Needle]:
    """`per_cell` needles for every (length, depth), lengths outermost, kinds alternating
    (passkey first) within a cell.

    The prompt is the tokenizer's BOS where it adds one (`hf.run.data.prompt_prefix`), then
    haystack[:off] + needle + haystack[off:] + question with off = round(depth * haystack
    tokens), the haystack being the filler tokenised once, tiled
    and cut so the prompt has exactly `length` tokens. Needle, question and answer are
    tokenised separately and their ids concatenated, so every boundary is exact. Seeded: the
    same arguments give the same needles; pass keys are all distinct (drawn without
    replacement), fact pairs repeat only after all 64 have been used.

    ValueError (naming the bad value) for empty `lengths` or `depths`, a depth outside [0, 1],
    `per_cell` < 1, a length too short for the needle and question alone, no tokenizer with
    `vocab_size` < 256, or token ids outside [0, vocab_size).
    """
    if not lengths:
        raise ValueError("lengths is empty: give at least one prompt length")
    if not depths:
        raise ValueError("depths is empty: give at least one needle depth")
    for depth in depths:
        if not 0.0 <= depth <= 1.0:  # NaN fails this too
            raise ValueError(f"depth {depth} is outside [0, 1]")
    if per_cell < 1:
        raise ValueError(f"per_cell must be >= 1, got {per_cell}")
    unit = encode(FILLER, tokenizer, vocab_size)
    if not unit:
        raise ValueError("the filler text tokenised to nothing")
    # Tile the filler's ids rather than tokenising per prompt: one tokenisation, and every cut
    # falls on a token boundary of the tokenised filler.
    filler = unit * (max(lengths) // len(unit) + 1)
    prefix = prompt_prefix(tokenizer)  # a prompt starts as a user's does

    rng = random.Random(seed)
    n_cells = len(lengths) * len(depths)
    n_pass = n_cells * ((per_cell + 1) // 2)
    keys = {
        "passkey": iter(rng.sample(range(10_000, 100_000), n_pass)),
        "fact": _fact_pairs(random.Random(rng.random())),
    }
    needles = []
    for length in lengths:
        for depth in depths:
            for i in range(per_cell):
                kind = KINDS[i % 2]
                needle_text, question_text, answer_text = _texts(kind, keys)
                needle = encode(needle_text, tokenizer, vocab_size)
                question = encode(question_text, tokenizer, vocab_size)
                answer = encode(answer_text, tokenizer, vocab_size)
                if not answer:
                    raise ValueError(f"the answer {answer_text!r} tokenised to nothing")
                hay = length - len(prefix) - len(needle) - len(question)
                if hay < 0:
                    raise ValueError(
                        f"length {length} is too short: the {kind} needle and question alone "
                        f"take {len(needle) + len(question)} tokens"
                    )
                off = round(depth * hay)
                prompt = prefix + filler[:off] + needle + filler[off:hay] + question
                if vocab_size is not None and max(prompt + answer) >= vocab_size:
                    raise ValueError(
                        f"token id {max(prompt + answer)} is outside the vocabulary "
                        f"[0, {vocab_size})"
                    )
                needles.append(Needle(kind, length, float(depth), prompt, answer, len(question)))
    return needles


def needle_hit(model: torch.nn.Module, needle: Needle) -> bool:
    """True iff greedy decoding after `needle.prompt` reproduces `needle.answer`.

    One teacher-forced forward over prompt + answer (no KV cache, no gradients) decides it: the
    hit is that at every answer position the argmax of the logits predicting it is the answer
    token. That equals greedy decoding: greedy's k-th token is the argmax given the prompt and
    its own first k - 1 tokens; while those equal the answer's, a causal model sees the same
    prefix here, so all argmaxes match iff greedy emits the answer (ties go to the lowest id in
    both). One forward instead of a prefill plus len(answer) decode steps; floating-point
    differences between cached and uncached attention can flip only exact near-ties.
    """
    logits, answer = answer_logits(model, needle)
    return bool((logits.argmax(dim=-1) == answer).all())


def answer_logits(model: torch.nn.Module, needle: Needle) -> tuple[torch.Tensor, torch.Tensor]:
    """(the logits that predict each answer token (n, vocab), the answer's ids (n,)) from one
    teacher-forced forward over prompt + answer, no KV cache, no gradients."""
    device = next(model.parameters()).device
    ids = torch.tensor([needle.prompt + needle.answer], dtype=torch.long, device=device)
    n = len(needle.answer)
    kwargs: dict[str, Any] = {}
    # Only the last n + 1 positions' logits are needed: at 32k tokens x 150k vocab the full
    # logits alone would take ~10 GB.
    if "logits_to_keep" in inspect.signature(model.forward).parameters:
        kwargs["logits_to_keep"] = n + 1
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False, **kwargs).logits[0]
    return logits[-(n + 1) : -1], ids[0, -n:]  # position p predicts token p + 1


def grid_of(needles: Sequence[Needle], hits: Sequence[bool]) -> dict[tuple[int, float], float]:
    """Share of `hits` (one per needle) per (length, depth), keys in first-seen order."""
    cells: dict[tuple[int, float], list[bool]] = {}
    for needle, hit in zip(needles, hits, strict=True):
        cells.setdefault((needle.length, needle.depth), []).append(bool(hit))
    return {cell: sum(h) / len(h) for cell, h in cells.items()}


def needle_grid(
    model: torch.nn.Module, needles: Sequence[Needle], *, progress: bool = False
) -> dict[tuple[int, float], float]:
    """`grid_of` the needles' `needle_hit`s; `progress` shows a tqdm bar over the needles."""
    from tqdm import tqdm

    bar = tqdm(needles, desc="needles", unit="needle", disable=not progress)
    return grid_of(needles, [needle_hit(model, needle) for needle in bar])


def plot_needle_grids(
    grids: Mapping[str, Mapping[tuple[int, float], float]], path: str | Path
) -> None:
    """One heatmap panel per method (title = its name): rows are lengths, columns depths, cells
    the accuracy written in, one 0..1 colour scale for all panels; saved as a PNG at `path`.
    A cell a method lacks is left blank. ValueError when `grids` is empty."""
    if not grids:
        raise ValueError("no needle grids to plot")
    plt = _pyplot()
    lengths = sorted({length for g in grids.values() for length, _ in g})
    depths = sorted({depth for g in grids.values() for _, depth in g})
    cols = min(len(grids), PANELS_PER_ROW)
    rows = -(-len(grids) // cols)
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(0.8 * len(depths) * cols + 2.5, (0.5 * len(lengths) + 1.5) * rows),
        squeeze=False,
        layout="constrained",  # titles and labels of stacked rows never overlap
    )
    image = None
    for ax in axes.flat[len(grids) :]:
        ax.set_visible(False)
    for ax, (method, grid) in zip(axes.flat, grids.items(), strict=False):
        values = [[grid.get((length, depth), math.nan) for depth in depths] for length in lengths]
        image = ax.imshow(values, vmin=0.0, vmax=1.0, cmap="RdYlGn", aspect="auto")
        for r, row in enumerate(values):
            for c, value in enumerate(row):
                if not math.isnan(value):
                    ax.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=8)
        ax.set_title(method)
        ax.set_xticks(range(len(depths)), [f"{d:g}" for d in depths])
        ax.set_yticks(range(len(lengths)), [str(length) for length in lengths])
    for ax in axes[-1]:
        ax.set_xlabel("needle depth")
    for row in axes:
        row[0].set_ylabel("prompt tokens")  # the rows are the same in every panel
    fig.colorbar(image, ax=axes.ravel().tolist(), label="accuracy", shrink=0.8)
    fig.savefig(str(path), format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
