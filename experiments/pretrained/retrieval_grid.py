"""Retrieval probes over distinct conditions: needle kinds x fillers x wordings x lengths x
depths, counted per condition.

Four needle kinds: a pass key (`passkey`); a natural-language fact (`fact`); four labelled
keys side by side of which one is asked (`multikey`); a value set and then reassigned twice,
of which the last is asked (`tracked`). Each has two wordings: `design`, the classic pass-key
phrasing the methods of this project were tuned on, and `heldout`, phrasing no method saw.
Three fillers: `repeat` (the classic repeated sentences, `needles.FILLER`), `prose` (English
documentation, the `prose` kind) and `code` (standard-library packages, the `python` kind);
every prompt of a natural filler cuts its own block from another document. Two grids:
`design` (repeat filler, design wording) and `heldout` (prose and code fillers, held-out
wording): no method was designed on the second.

A **condition** is one (kind, filler, wording, length, depth); its `per_condition` needles
differ only in their keys, so they are replicates, not independent trials. A condition is
retrieved when all its needles are; comparisons count conditions and test them with McNemar's
exact test (`conditions`, `compare`). `distance` is how far back the needle starts from the
prompt's last token: a window narrower than that cannot see the whole needle from the rows
that predict the answer (`unseen_by`), so only those conditions can separate a plan from
full attention.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aah.integrations.hf.run.data import encode, prompt_prefix
from experiments.pretrained.needles import FILLER, Needle
from experiments.pretrained.table import needle_change

NEEDLE_KINDS = ("passkey", "fact", "multikey", "tracked")
FILLERS = ("repeat", "prose", "code")
GRIDS = {"design": (("repeat",), "design"), "heldout": (("prose", "code"), "heldout")}
NAMES = ("Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Henry")
CITIES = ("Lisbon", "Oslo", "Cairo", "Lima", "Seoul", "Quito", "Dublin", "Nairobi")
LABELS = ("red", "green", "blue", "yellow")

Condition = tuple[str, str, str, int, float]  # kind, filler, wording, length, depth


@dataclass(frozen=True)
class Probe:
    """A needle with its condition: `needle` (prompt, answer, question length; its `kind`
    field holds the needle kind), the filler and wording, and `distance`."""

    needle: Needle
    kind: str
    filler: str
    wording: str
    distance: int

    @property
    def condition(self) -> Condition:
        return (self.kind, self.filler, self.wording, self.needle.length, self.needle.depth)


def texts(kind: str, wording: str, rng: random.Random) -> tuple[str, str, str]:
    """(needle sentence(s), question, answer) of one needle, keys drawn from `rng`."""
    key = rng.randrange(10_000, 100_000)
    design = wording == "design"
    if kind == "passkey":
        if design:
            return (f" The pass key is {key}. Remember it. {key} is the pass key.",
                    " What is the pass key? The pass key is", f" {key}")  # fmt: skip
        return (f" Write down the ticket number {key} for later.",
                " What was the ticket number? The ticket number was", f" {key}")  # fmt: skip
    if kind == "fact":
        name, city = rng.choice(NAMES), rng.choice(CITIES)
        if design:
            return (f" Remember this: the secret city of {name} is {city}.",
                    f" What is the secret city of {name}? The secret city of {name} is",
                    f" {city}")  # fmt: skip
        return (f" By the way, {name} moved to {city} last spring.",
                f" Where did {name} move last spring? {name} moved to", f" {city}")  # fmt: skip
    if kind == "multikey":
        keys = rng.sample(range(10_000, 100_000), len(LABELS))
        asked = rng.randrange(len(LABELS))
        label = LABELS[asked]
        if design:
            facts = "".join(
                f" The pass key for {lab} is {k}." for lab, k in zip(LABELS, keys, strict=True)
            )
            return (facts, f" What is the pass key for {label}? The pass key for {label} is",
                    f" {keys[asked]}")  # fmt: skip
        facts = "".join(
            f" Locker {lab} opens with code {k}." for lab, k in zip(LABELS, keys, strict=True)
        )
        return (facts, f" Which code opens locker {label}? Locker {label} opens with code",
                f" {keys[asked]}")  # fmt: skip
    if kind == "tracked":
        a, b, c = rng.sample(range(10, 100), 3)
        if design:
            story = f" The counter starts at {a}. Then it becomes {b}. Then it becomes {c}."
            return story, " What is the counter now? The counter is", f" {c}"
        return (f" The score was {a} at first; later it changed to {b}; in the end it was {c}.",
                " What was the score in the end? In the end it was", f" {c}")  # fmt: skip
    raise ValueError(f"needle kind must be one of {', '.join(NEEDLE_KINDS)}, got {kind!r}")


def _haystacks(filler: str, tokenizer: Any | None, length: int, n: int, seed: int,
               vocab_size: int | None) -> Iterator[list[int]]:  # fmt: skip
    """`n` fillers of `length` tokens: the tiled classic sentences, or blocks of the prose
    or python kind from distinct documents (their BOS, if any, left to the prompt)."""
    if filler == "repeat":
        unit = encode(FILLER, tokenizer, vocab_size)
        tiled = unit * (length // len(unit) + 1)
        for _ in range(n):
            yield tiled[:length]
        return
    from experiments.pretrained.kinds import kind_blocks

    kind = {"prose": "prose", "code": "python"}[filler]
    skip = len(prompt_prefix(tokenizer))
    for block in kind_blocks(tokenizer, [kind], length, n, seed=seed, vocab_size=vocab_size):
        yield list(block.ids)[skip:]


def build_probes(
    tokenizer: Any | None,
    grid: str,
    lengths: Sequence[int],
    depths: Sequence[float],
    per_condition: int = 1,
    *,
    kinds: Sequence[str] = NEEDLE_KINDS,
    seed: int = 0,
    vocab_size: int | None = None,
) -> list[Probe]:
    """Every condition of `grid` ("design" or "heldout") at these lengths and depths, with
    `per_condition` needles each (fillers, kinds, lengths, depths, replicates: that nesting).
    Prompts have exactly `length` tokens: the tokenizer's BOS where it adds one, then
    haystack[:off] + needle + haystack[off:] + question, off = round(depth * haystack tokens).
    Seeded; ValueError for an unknown grid or kind, a depth outside [0, 1], or a length too
    short for its needle and question."""
    if grid not in GRIDS:
        raise ValueError(f"grid must be one of {', '.join(GRIDS)}, got {grid!r}")
    if per_condition < 1 or not lengths or not depths:
        raise ValueError("need per_condition >= 1 and at least one length and depth")
    if any(not 0.0 <= d <= 1.0 for d in depths):
        raise ValueError(f"depths must lie in [0, 1], got {list(depths)}")
    bad = [k for k in kinds if k not in NEEDLE_KINDS]
    if bad or not kinds:
        raise ValueError(f"kinds must be from {', '.join(NEEDLE_KINDS)}, got {list(kinds)}")
    fillers, wording = GRIDS[grid]
    rng = random.Random(seed)
    prefix = prompt_prefix(tokenizer)  # a prompt starts as a user's does
    probes = []
    for filler in fillers:
        for length in lengths:
            count = len(kinds) * len(depths) * per_condition
            # seed + 1: other documents than the loss blocks drawn with `seed`
            hay = _haystacks(filler, tokenizer, length, count, seed + 1, vocab_size)
            for kind in kinds:
                for depth in depths:
                    for _ in range(per_condition):
                        needle_text, question_text, answer_text = texts(kind, wording, rng)
                        if filler != "repeat":  # set off from running text as a paragraph
                            needle_text = f"\n\n{needle_text.lstrip()}\n\n"
                            question_text = f"\n\n{question_text.lstrip()}"
                        needle = encode(needle_text, tokenizer, vocab_size)
                        question = encode(question_text, tokenizer, vocab_size)
                        answer = encode(answer_text, tokenizer, vocab_size)
                        room = length - len(prefix) - len(needle) - len(question)
                        if room < 0:
                            raise ValueError(
                                f"length {length} is too short for the {kind} needle and its "
                                f"question ({len(needle) + len(question)} tokens)"
                            )
                        filler_ids = next(hay)[:room]
                        off = round(depth * room)
                        prompt = prefix + filler_ids[:off] + needle + filler_ids[off:] + question
                        probes.append(Probe(
                            Needle("passkey" if kind == "passkey" else "fact", length,
                                   float(depth), prompt, answer, len(question)),
                            kind, filler, wording, length - len(prefix) - off,
                        ))  # fmt: skip
    return probes


def unseen_by(probes: Sequence[Probe], window: int) -> list[bool]:
    """Per probe: a window of `window` recent tokens cannot see its whole needle from the
    rows that predict the answer (sinks aside)."""
    return [p.distance > window for p in probes]


def conditions(probes: Sequence[Probe], hits: Sequence[bool]) -> dict[Condition, bool]:
    """Each condition -> retrieved (all of its needles hit), in first-seen order."""
    return by_condition([probe.condition for probe in probes], hits)


def by_condition(keys: Sequence[Condition], hits: Sequence[bool]) -> dict[Condition, bool]:
    """Each needle's condition key -> retrieved (all its needles hit), in first-seen order."""
    if len(keys) != len(hits):
        raise ValueError(f"{len(keys)} probes and {len(hits)} hits do not pair")
    out: dict[Condition, bool] = {}
    for key, hit in zip(keys, hits, strict=True):
        out[key] = out.get(key, True) and bool(hit)
    return out


def compare(a: Mapping[Condition, bool], b: Mapping[Condition, bool]) -> tuple[int, int, float]:
    """(conditions a retrieves and b misses, the reverse, McNemar's exact two-sided p)."""
    if set(a) != set(b):
        raise ValueError("the two sets of conditions differ")
    keys = list(a)
    return needle_change([a[k] for k in keys], [b[k] for k in keys])
