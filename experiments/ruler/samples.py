"""The samples a run scores, as one JSON line each: what any runner reads (this project's
methods here, kvpress's presses in their own environment), so every method sees the same ids.

A line holds:

    task, index             which sample (index counts from 0 within its task)
    input_ids               the prompt's token ids as the model reads them (BOS or chat
                            template and RULER's answer prefix included)
    context_tokens          how many of them come before the question (what a press may
                            compress; the rest is the question and the answer prefix)
    answers                 the strings a right answer names
    metric                  `string_match_all` or `string_match_part` (`scoring.METRICS`)
    tokens_to_generate      how many tokens to decode greedily (RULER's per task)
    answer_prefix           the answer's first words, the end of `input_ids`, as text
    haystack_size           the haystack units the prompt holds
    seq_len, seed, template what the sample was made for; a run refuses lines made otherwise
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from aah.records import append_jsonl, read_jsonl


@dataclass(frozen=True)
class RulerSample:
    """One sample's line (module docstring)."""

    task: str
    index: int
    input_ids: list[int]
    context_tokens: int
    answers: list[str]
    metric: str
    tokens_to_generate: int
    answer_prefix: str
    haystack_size: int
    seq_len: int
    seed: int
    template: str

    @property
    def key(self) -> tuple[str, int]:
        return self.task, self.index

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_sample(
    task: str, index: int, seq_len: int, seed: int, prompt_format: Any, words: Any = None
) -> RulerSample:
    """Generate sample `index` of `task` for the tokenizer and template of `prompt_format`
    (`prompts.PromptFormat`)."""
    from experiments.ruler.tasks import generate, task_spec

    spec = task_spec(task)
    text = generate(task, prompt_format.length, seq_len, seed, index, words)
    ids = prompt_format.ids(text.body, text.answer_prefix)
    return RulerSample(
        task=task, index=index, input_ids=ids,
        context_tokens=prompt_format.context_tokens(text.body, text.question_start, ids),
        answers=list(text.answers), metric=spec.metric,
        tokens_to_generate=spec.tokens_to_generate, answer_prefix=text.answer_prefix,
        haystack_size=text.size, seq_len=seq_len, seed=seed, template=prompt_format.template,
    )  # fmt: skip


def read_samples(path: Path) -> list[RulerSample]:
    """Every sample line of `path` ([] when there is no file)."""
    return [RulerSample(**row) for row in read_jsonl(Path(path))]


def sample_file(
    path: Path,
    tasks: list[str],
    count: int,
    seq_len: int,
    seed: int,
    prompt_format: Any,
    words: Any = None,
) -> list[RulerSample]:
    """The first `count` samples of each task, in task order: those already in `path` reused,
    the missing ones generated and appended (so a run can grow its sample count).

    Raises:
        ValueError: a line of `path` made for another seq_len, seed or template."""
    made = {s.key: s for s in read_samples(path)}
    wanted = {"seq_len": seq_len, "seed": seed, "template": prompt_format.template}
    for sample in made.values():
        got = {k: getattr(sample, k) for k in wanted}
        if got != wanted:
            raise ValueError(
                f"{path} holds samples made for {got}, not {wanted}; use another --out folder"
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and not path.read_bytes().endswith(b"\n"):
        with path.open("a", encoding="utf-8") as handle:  # end a line torn by a crash
            handle.write("\n")
    chosen = []
    for task in tasks:
        for index in range(count):
            if (task, index) not in made:
                sample = make_sample(task, index, seq_len, seed, prompt_format, words)
                append_jsonl(path, sample.to_dict())
                made[sample.key] = sample
            chosen.append(made[task, index])
    return chosen


def digest(samples: list[RulerSample]) -> str:
    """A short hash of the samples' ids and answers (two runs read the same samples)."""
    import hashlib

    rows = [[s.task, s.index, s.input_ids, s.answers] for s in samples]
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:16]
