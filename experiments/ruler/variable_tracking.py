"""RULER's variable tracking (`vt`): one chain of assignments hidden in noise lines.

The chain is "VAR AAAAA = 12345", then `hops` lines "VAR BBBBB = VAR AAAAA " (RULER's
trailing space kept), each name 5 upper-case letters; its lines are put in order between noise
lines at positions drawn uniformly. The question gives the value; the answer is every name in
the chain (hops + 1 of them).

As RULER does, one worked example comes first: the same task at about 500 tokens, with
3-letter names, followed by its answer. RULER builds that example once and renames its
variables and value for each sample; here each sample draws its own example, which is the same
thing. Changes from RULER: the names of a chain are always distinct (RULER's draw can repeat a
name), and the example's value never equals the sample's.
"""

from __future__ import annotations

import itertools
import random

from experiments.ruler.fitting import (
    Builder,
    BuilderFactory,
    PromptLength,
    TaskText,
    largest_fitting,
)
from experiments.ruler.niah import NOISE
from experiments.ruler.words import WordLists, variable_names

TOKENS_TO_GENERATE = 30
HOPS = 4
NAME_LETTERS, EXAMPLE_NAME_LETTERS = 5, 3
#: the worked example's budget in tokens (RULER's `max_seq_length=500` for it)
EXAMPLE_TOKENS = 500
INSTRUCTION = (
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
)


def chain_lines(names: list[str], value: int) -> list[str]:
    """The assignment lines of one chain: the value into the first name, then name to name."""
    first = [f"VAR {names[0]} = {value}"]
    return first + [f"VAR {new} = VAR {old} " for old, new in itertools.pairwise(names)]


def vt_text(seed: str, size: int, hops: int, letters: int, value: int) -> TaskText:
    """The task with `size` noise lines and a chain of `hops` hops (names of `letters`
    letters) from `value`, its draws fixed by `seed`."""
    rng = random.Random(seed)
    names = variable_names(rng, hops + 1, letters)
    lines = [NOISE] * size
    chain = chain_lines(names, value)
    for offset, position in enumerate(sorted(rng.sample(range(size), len(chain)))):
        lines.insert(position + offset, chain[offset])  # after the chain lines before it
    head = INSTRUCTION + "\n".join(lines)
    question = (
        f"\nQuestion: Find all variables that are assigned the value {value} in the text above."
    )
    prefix = (
        f" Answer: According to the chain(s) of variable assignment in the text above, "
        f"{hops + 1} variables are assigned the value {value}, they are: "
    )
    return TaskText(head + question, prefix, tuple(names), len(head), size)


def chain_values(seed: str) -> tuple[int, int]:
    """(the example's value, the sample's): two different 5-digit numbers."""
    rng = random.Random(seed)
    example, value = rng.sample(range(10000, 99999), 2)
    return example, value


def worked_example(seed: str, prompt_length: PromptLength, hops: int, value: int) -> TaskText:
    """The example shown before the task, sized to `EXAMPLE_TOKENS` as RULER sizes it."""
    builder = Builder(
        lambda size: vt_text(seed, size, hops, EXAMPLE_NAME_LETTERS, value),
        hops + 1, None, "noise lines",
    )  # fmt: skip
    return largest_fitting(builder, prompt_length, EXAMPLE_TOKENS, "vt's worked example")


def vt_builder(hops: int = HOPS) -> BuilderFactory:
    """The task's builder factory (`tasks.TaskSpec.builder`)."""

    def factory(seed: str, seq_len: int, prompt_length: PromptLength, words: WordLists) -> Builder:
        del seq_len, words
        example_value, value = chain_values(seed + "/values")
        example = worked_example(seed + "/example", prompt_length, hops, example_value)
        # RULER's example is its prompt, the answer prefix and then the answer, on one line.
        shown = f"{example.body}{example.answer_prefix} {' '.join(example.answers)}\n\n"

        def text(size: int) -> TaskText:
            task = vt_text(seed, size, hops, NAME_LETTERS, value)
            return TaskText(shown + task.body, task.answer_prefix, task.answers,
                            len(shown) + task.question_start, size)  # fmt: skip

        return Builder(text, hops + 1, None, "noise lines")

    return factory
