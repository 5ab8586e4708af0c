"""The random strings RULER's tasks draw: needle keys and values, variable names, the common
words of `cwe` and the coded words of `fwe`, each from a `random.Random` the caller seeds.

Keys of type "words" are adjective-noun pairs ("quizzical-aardvark") and `cwe` draws from
nouns, adjectives and verbs together, all from the `wonderwords` package's lists, as RULER
does. Version 3.0.1's noun list is that of 2.2.0 (the release current when RULER was written)
less four words ("abortion", "brocolli", "idiot", "pray"): 6782 nouns, 912 adjectives, 1042
verbs. RULER builds every adjective-noun string and picks one; an adjective and a noun picked
independently is the same draw except for the handful of pairs that spell alike.
"""

from __future__ import annotations

import functools
import math
import random
import string
import uuid
from dataclasses import dataclass

INSTALL_WORDS = "pip install wonderwords==3.0.1"
#: the needle item kinds of RULER's configs (`type_needle_k`, `type_needle_v`)
ITEM_KINDS = ("numbers", "words", "uuids")


@dataclass(frozen=True)
class WordLists:
    """English words to draw from: needle keys (adjective-noun) and `cwe`'s word pool."""

    nouns: tuple[str, ...]
    adjectives: tuple[str, ...]
    verbs: tuple[str, ...]

    def key_word(self, rng: random.Random) -> str:
        return f"{rng.choice(self.adjectives)}-{rng.choice(self.nouns)}"

    @functools.cached_property
    def pool(self) -> tuple[str, ...]:
        """Every distinct noun, adjective and verb, sorted (so a seed picks the same words)."""
        return tuple(sorted(set(self.nouns) | set(self.adjectives) | set(self.verbs)))


@functools.cache
def wonderwords_lists() -> WordLists:
    """The `wonderwords` package's noun, adjective and verb lists; ValueError saying how to
    install it when it is missing."""
    from importlib.resources import files
    from importlib.util import find_spec

    if find_spec("wonderwords") is None:
        raise ValueError(f"RULER's word tasks draw from the wonderwords lists: {INSTALL_WORDS}")
    assets = files("wonderwords") / "assets"

    def read(name: str) -> tuple[str, ...]:
        lines = (assets / name).read_text(encoding="utf-8").splitlines()
        return tuple(word.strip() for word in lines if word.strip())

    return WordLists(read("nounlist.txt"), read("adjectivelist.txt"), read("verblist.txt"))


def random_number(rng: random.Random, digits: int = 7) -> str:
    """A number of exactly `digits` digits, as text."""
    return str(rng.randint(10 ** (digits - 1), 10**digits - 1))


def random_uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def random_item(kind: str, rng: random.Random, words: WordLists) -> str:
    """One needle key or value of `kind` ("numbers": 7 digits, "words", "uuids")."""
    if kind == "numbers":
        return random_number(rng)
    if kind == "words":
        return words.key_word(rng)
    if kind == "uuids":
        return random_uuid(rng)
    raise ValueError(f"unknown needle item kind {kind!r}; known: {', '.join(ITEM_KINDS)}")


def distinct_strings(
    rng: random.Random, count: int, length: int, letters: str, avoid: frozenset[str] = frozenset()
) -> list[str]:
    """`count` different random strings of `length` characters from `letters`, none in
    `avoid`, in the order drawn."""
    drawn: list[str] = []
    seen = set(avoid)
    while len(drawn) < count:
        word = "".join(rng.choices(letters, k=length))
        if word not in seen:
            seen.add(word)
            drawn.append(word)
    return drawn


def variable_names(rng: random.Random, count: int, length: int) -> list[str]:
    """`count` different upper-case variable names of `length` letters."""
    return distinct_strings(rng, count, length, string.ascii_uppercase)


def coded_words(rng: random.Random, count: int, length: int = 6) -> list[str]:
    """`count` different lower-case nonsense words of `length` letters (`fwe`'s vocabulary)."""
    return distinct_strings(rng, count, length, string.ascii_lowercase)


def zeta(alpha: float, terms: int = 1000) -> float:
    """Riemann's zeta(alpha) for alpha > 1: the first `terms` terms, then the Euler-Maclaurin
    tail (integral, half term, first derivative correction), exact to ~1e-12 here."""
    if not alpha > 1:
        raise ValueError(f"zeta needs alpha > 1, got {alpha}")
    head = math.fsum(k**-alpha for k in range(1, terms))
    n = float(terms)
    tail = n ** (1 - alpha) / (alpha - 1) + n**-alpha / 2 + alpha * n ** (-alpha - 1) / 12
    return head + tail
