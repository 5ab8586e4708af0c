"""Markdown pieces of the suite report: numbers as text, tables."""

from __future__ import annotations

import math

from aah.report import stats


def fmt(value: float | None, spec: str = ".4f") -> str:
    """A number as the report shows it: "n/a" for a missing or nan value."""
    if value is None or math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return format(value, spec)


def pm(values: list[float], spec: str = ".4f") -> str:
    return f"{fmt(stats.mean(values), spec)} ± {fmt(stats.sd(values), spec)}"


def ci_text(ci: tuple[float, float], spec: str = "+.4f") -> str:
    return "n/a" if math.isnan(ci[0]) else f"[{fmt(ci[0], spec)}, {fmt(ci[1], spec)}]"


def p_text(p: float) -> str:
    return "<0.001" if p < 0.001 else fmt(p, ".3f")  # nan (one seed) -> "n/a"


def count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def seeds_text(n: int) -> str:
    return count(n, "seed")


def threads_text(threads: int) -> str:
    return count(threads, "thread") if threads else "torch's default threads"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]
