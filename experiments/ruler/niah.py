"""RULER's needle-in-a-haystack tasks on the haystacks that need no download.

A needle is "One of the special magic {values} for {key} is: {value}." Each key has
`values_per_key` needles; the needles are shuffled and each put between two haystack units at
a position drawn uniformly (RULER's "noise" and "needle" haystacks: depths are not fixed).
The haystack is either the noise line "The grass is green. The sky is blue. ..." repeated, or
distractor needles with keys and values of the same kinds (`niah_multikey_2`, `_3`). The
question names `queries` of the keys; the answer is every value of those keys.

With one queried value the wording is singular ("A special magic number is hidden ... What is
the special magic number for ..."), as RULER rewrites it. One change from RULER: a
distractor's key is drawn again if it equals a real key, so the question has one answer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from experiments.ruler.fitting import Builder, BuilderFactory, PromptLength, TaskText
from experiments.ruler.words import WordLists, random_item

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
NEEDLE = "One of the special magic {kind} for {key} is: {value}."
HAYSTACKS = ("noise", "needle")
TOKENS_TO_GENERATE = 128


@dataclass(frozen=True)
class NiahConfig:
    """One niah task of RULER's `synthetic.yaml`: the haystack, the key and value kinds
    ("numbers", "words", "uuids"), keys, values per key, and keys asked about."""

    haystack: str
    key_kind: str
    value_kind: str
    keys: int = 1
    values_per_key: int = 1
    queries: int = 1

    def __post_init__(self) -> None:
        if self.haystack not in HAYSTACKS:
            raise ValueError(
                f"niah haystack {self.haystack!r} needs no download only as one of {HAYSTACKS}"
            )
        if not 1 <= self.queries <= self.keys or self.values_per_key < 1:
            raise ValueError(f"niah counts need 1 <= queries <= keys and values >= 1: {self}")


def wording(value_kind: str, query: str, single: bool) -> tuple[str, str, str]:
    """(instruction, question, answer prefix) for the values asked about."""
    if single:
        kind = value_kind.removesuffix("s")
        return (
            f"A special magic {kind} is hidden within the following text. Make sure to "
            f"memorize it. I will quiz you about the {kind} afterwards.",
            f"What is the special magic {kind} for {query} mentioned in the provided text?",
            f" The special magic {kind} for {query} mentioned in the provided text is",
        )
    return (
        f"Some special magic {value_kind} are hidden within the following text. Make sure to "
        f"memorize it. I will quiz you about the {value_kind} afterwards.",
        f"What are all the special magic {value_kind} for {query} mentioned in the provided text?",
        f" The special magic {value_kind} for {query} mentioned in the provided text are",
    )


def joined_keys(keys: list[str]) -> str:
    """How RULER names the keys of one question: "a", "a, and b", "a, b, and c"."""
    return keys[0] if len(keys) == 1 else ", ".join(keys[:-1]) + ", and " + keys[-1]


def niah_text(config: NiahConfig, seed: str, size: int, words: WordLists) -> TaskText:
    """The prompt with `size` haystack units, its random draws fixed by `seed`."""
    rng = random.Random(seed)
    keys: list[str] = []
    while len(keys) < config.keys:
        key = random_item(config.key_kind, rng, words)
        if key not in keys:
            keys.append(key)
    values = [[random_item(config.value_kind, rng, words) for _ in range(config.values_per_key)]
              for _ in keys]  # fmt: skip
    needles = [NEEDLE.format(kind=config.value_kind, key=k, value=v)
               for k, vs in zip(keys, values, strict=True) for v in vs]  # fmt: skip
    rng.shuffle(needles)
    if config.haystack == "noise":
        lines = [NOISE] * size
    else:
        lines = []
        while len(lines) < size:
            key = random_item(config.key_kind, rng, words)
            if key not in keys:
                value = random_item(config.value_kind, rng, words)
                lines.append(NEEDLE.format(kind=config.value_kind, key=key, value=value))
    # Inserting at positions taken from the end keeps the earlier positions where they were.
    for position, needle in zip(sorted(rng.sample(range(size), len(needles)), reverse=True),
                                needles, strict=True):  # fmt: skip
        lines.insert(position, needle)
    asked = rng.sample(range(config.keys), config.queries)
    answers = tuple(v for i in asked for v in values[i])
    single = config.queries * config.values_per_key == 1
    query = joined_keys([keys[i] for i in asked])
    instruction, question, prefix = wording(config.value_kind, query, single)
    head = instruction + "\n" + "\n".join(lines)
    return TaskText(head + "\n" + question, prefix, answers, len(head), size)


def niah_builder(config: NiahConfig) -> BuilderFactory:
    """The task's builder factory (`tasks.TaskSpec.builder`)."""

    def factory(seed: str, seq_len: int, prompt_length: PromptLength, words: WordLists) -> Builder:
        del seq_len, prompt_length  # niah prompts do not depend on them
        needles = config.keys * config.values_per_key
        unit = "noise lines" if config.haystack == "noise" else "distractor needles"
        return Builder(lambda size: niah_text(config, seed, size, words), needles, None, unit)

    return factory
