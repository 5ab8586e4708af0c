"""RULER's scores of one answer, and the intervals of a method's scores.

A prediction is the decoded text of the generated tokens, stripped, its control characters
(U+0000-U+001F) turned into newlines, as RULER's evaluation cleans it. Against the reference
strings of a sample (case-insensitive substring tests):

- `string_match_all`: the share of the references the prediction contains (every task here);
- `string_match_part`: 1 if it contains any of them, else 0 (RULER's QA tasks).

Scores are kept per sample in [0, 1] and shown as RULER shows them, in points (x 100).

Intervals are 95% percentile bootstraps, 10,000 seeded resamples: a task's over its samples
(resampled with replacement), the mean over tasks stratified (each task's samples resampled
within that task, then the task means averaged, each task weighing the same). A bootstrap
rather than Student's t because a task's scores are mostly 0 or 1, where a t interval runs past
[0, 1] and is too narrow at a few samples. Where every sample of a task scores alike the
interval is a single point: the bootstrap sees no variation the samples do not show, so read
such a row with its sample count.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

_CONTROL = re.compile(r"[\x00-\x1f]")
RESAMPLES = 10_000
LEVEL = 0.95


def clean_prediction(text: str) -> str:
    """The prediction as RULER's evaluation reads it."""
    return _CONTROL.sub("\n", text.strip()).strip()


def string_match_all(prediction: str, references: Sequence[str]) -> float:
    """The share of `references` that occur in `prediction`, ignoring case."""
    if not references:
        raise ValueError("a sample needs at least one reference answer")
    seen = prediction.lower()
    return sum(r.lower() in seen for r in references) / len(references)


def string_match_part(prediction: str, references: Sequence[str]) -> float:
    """1.0 when any of `references` occurs in `prediction`, ignoring case, else 0.0."""
    if not references:
        raise ValueError("a sample needs at least one reference answer")
    seen = prediction.lower()
    return float(any(r.lower() in seen for r in references))


METRICS: dict[str, Callable[[str, Sequence[str]], float]] = {
    "string_match_all": string_match_all,
    "string_match_part": string_match_part,
}
#: RULER's metric of each task family (`scripts/eval/synthetic/constants.py`)
FAMILY_METRICS = {
    "niah": "string_match_all",
    "variable_tracking": "string_match_all",
    "common_words_extraction": "string_match_all",
    "freq_words_extraction": "string_match_all",
    "qa": "string_match_part",
}


def score(metric: str, prediction: str, references: Sequence[str]) -> float:
    """`metric`'s score in [0, 1] of a raw prediction (cleaned first)."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")
    return METRICS[metric](clean_prediction(prediction), references)


@dataclass(frozen=True)
class Interval:
    """A mean with its 95% bootstrap interval, in points (0-100), over `n` samples."""

    mean: float
    low: float
    high: float
    n: int

    def text(self) -> str:
        return f"{self.mean:.1f} [{self.low:.1f}, {self.high:.1f}]"

    def to_dict(self) -> dict[str, float | int]:
        return {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n}


def _resampled_means(scores: Sequence[float], rng: np.random.Generator) -> np.ndarray:
    values = np.asarray(scores, dtype=float)
    if values.size == 0:
        raise ValueError("no scores to estimate from")
    draws = rng.integers(0, values.size, size=(RESAMPLES, values.size))
    return values[draws].mean(axis=1)


def _interval(mean: float, resampled: np.ndarray, n: int) -> Interval:
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(resampled, [tail, 100 - tail])
    return Interval(100 * mean, 100 * float(low), 100 * float(high), n)


def task_interval(scores: Sequence[float], seed: int = 0) -> Interval:
    """The mean of one task's sample scores and its percentile bootstrap interval."""
    rng = np.random.default_rng(seed)
    return _interval(float(np.mean(scores)), _resampled_means(scores, rng), len(scores))


def mean_interval(scores_by_task: Mapping[str, Sequence[float]], seed: int = 0) -> Interval:
    """The mean over tasks of each task's mean score, with the stratified bootstrap's
    interval (module docstring); n counts every sample."""
    if not scores_by_task:
        raise ValueError("no tasks to average")
    rng = np.random.default_rng(seed)
    resampled = np.mean([_resampled_means(s, rng) for s in scores_by_task.values()], axis=0)
    mean = float(np.mean([np.mean(s) for s in scores_by_task.values()]))
    return _interval(mean, resampled, sum(len(s) for s in scores_by_task.values()))
