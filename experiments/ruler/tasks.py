"""RULER's tasks that need no download, by their `synthetic.yaml` names, and one sample of each.

    niah_single_1    one needle (words key, 7-digit value) in noise lines
    niah_multikey_2  one needle among distractor needles of the same kinds
    niah_multikey_3  the same with uuid keys and uuid values
    vt               variable tracking: a chain of 4 hops in noise lines
    cwe              the 10 most common words of a numbered list
    fwe              the 3 most frequent coded words of a Zipf text

The essay-haystack tasks (niah_single_2/3, niah_multikey_1, niah_multivalue, niah_multiquery)
need RULER's essay download and qa_1/qa_2 their data sets: they are not here.

`generate` sizes a sample to `seq_len - tokens_to_generate` tokens as its prompt is read
(`fitting`), with every draw fixed by (seed, task, index), so a sample is the same whoever
generates it with the same tokenizer and template.
"""

from __future__ import annotations

from dataclasses import dataclass

from experiments.ruler import niah, variable_tracking, word_counts
from experiments.ruler.fitting import BuilderFactory, PromptLength, TaskText, largest_fitting
from experiments.ruler.words import WordLists, wonderwords_lists

#: the word lists of a task that draws none
NO_WORDS = WordLists((), (), ())


@dataclass(frozen=True)
class TaskSpec:
    """One task: its RULER family (which names its template, tokens and metric), the tokens
    a model may generate, the metric (`scoring.METRICS`), its sample builder, and whether it
    draws English words (the wonderwords lists)."""

    name: str
    family: str
    tokens_to_generate: int
    metric: str
    builder: BuilderFactory
    uses_words: bool


_SPECS = (
    TaskSpec("niah_single_1", "niah", niah.TOKENS_TO_GENERATE, "string_match_all",
             niah.niah_builder(niah.NiahConfig("noise", "words", "numbers")), True),
    TaskSpec("niah_multikey_2", "niah", niah.TOKENS_TO_GENERATE, "string_match_all",
             niah.niah_builder(niah.NiahConfig("needle", "words", "numbers")), True),
    TaskSpec("niah_multikey_3", "niah", niah.TOKENS_TO_GENERATE, "string_match_all",
             niah.niah_builder(niah.NiahConfig("needle", "uuids", "uuids")), False),
    TaskSpec("vt", "variable_tracking", variable_tracking.TOKENS_TO_GENERATE,
             "string_match_all", variable_tracking.vt_builder(), False),
    TaskSpec("cwe", "common_words_extraction", word_counts.CWE_TOKENS, "string_match_all",
             word_counts.cwe_builder, True),
    TaskSpec("fwe", "freq_words_extraction", word_counts.FWE_TOKENS, "string_match_all",
             word_counts.fwe_builder, False),
)  # fmt: skip
TASKS: dict[str, TaskSpec] = {spec.name: spec for spec in _SPECS}


def task_spec(name: str) -> TaskSpec:
    """The task called `name`; ValueError listing the known ones."""
    if name not in TASKS:
        raise ValueError(f"unknown RULER task {name!r}; known: {', '.join(TASKS)}")
    return TASKS[name]


def parse_tasks(text: str) -> list[str]:
    """A comma-separated task list, each checked, in the order given, without repeats."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError("--tasks names no task")
    for name in names:
        task_spec(name)
    return list(dict.fromkeys(names))


def sample_seed(seed: int, task: str, index: int) -> str:
    """The string every draw of one sample is seeded from."""
    return f"ruler/{seed}/{task}/{index}"


def generate(
    task: str,
    prompt_length: PromptLength,
    seq_len: int,
    seed: int,
    index: int,
    words: WordLists | None = None,
) -> TaskText:
    """Sample `index` of `task`: the prompt whose length (`prompt_length`) plus the task's
    tokens to generate fits `seq_len`, as full as its haystack allows. `words`: the word
    lists to draw from (default the wonderwords package's, for the tasks that draw words).

    Raises:
        ValueError: an unknown task, or a seq_len too short (or, for cwe, too long) for it.
    """
    spec = task_spec(task)
    if seq_len <= spec.tokens_to_generate:
        raise ValueError(
            f"seq_len {seq_len} leaves no room for {task}'s prompt after its "
            f"{spec.tokens_to_generate} tokens to generate"
        )
    if words is None:
        words = wonderwords_lists() if spec.uses_words else NO_WORDS
    builder = spec.builder(sample_seed(seed, task, index), seq_len, prompt_length, words)
    budget = seq_len - spec.tokens_to_generate
    return largest_fitting(builder, prompt_length, budget, f"{task} at seq_len {seq_len}")
