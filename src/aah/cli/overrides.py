"""Dotted config overrides from leftover command-line words: `--section.key VALUE` or `=VALUE`."""

from __future__ import annotations


def parse_overrides(words: list[str]) -> list[tuple[str, str]]:
    """Pairs (section.key, text) in order; ValueError names anything that is not an override."""
    pairs: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        word = words[i]
        if not word.startswith("--") or "." not in word.split("=", 1)[0]:
            raise ValueError(f"unrecognized argument {word!r}")
        if "=" in word:
            key, value = word[2:].split("=", 1)
            i += 1
        else:
            if i + 1 >= len(words):
                raise ValueError(f"{word} needs a value")
            key, value = word[2:], words[i + 1]
            i += 2
        pairs.append((key, value))
    return pairs
