"""RULER's aggregation tasks: common words (`cwe`) and frequent coded words (`fwe`).

`cwe`: a numbered list ("1. apple 2. dune buggy 3. ...") of distinct English words drawn
without replacement, 10 of them repeated `common` times each and the rest `uncommon` times,
shuffled; the answer is the 10 common words. At 4096 tokens and more RULER repeats them 30 and
3 times and shows one worked example of 40 words (10 and 3 times); below 4096, 6 and 1 times,
with an example of 20 words (3 and 1). The example is drawn independently of the task's words,
as RULER draws it. A list needing more words than the wonderwords lists hold (RULER then turns
to a word list of its own) is refused.

`fwe`: nonsense 6-letter words whose counts follow Zipf's law, count(rank k) =
int(n k^-alpha / zeta(alpha)) for n words in all and alpha = 2, shuffled; the word of rank 1
is "...", noise the question says to ignore, and the answer is ranks 2 to 4. The vocabulary
has (seq_len - tokens_to_generate) // 50 words, as RULER's.

Changes from RULER: RULER shuffles each list with its one global seed, so every sample of a
run shares one permutation pattern of ranks; here each sample shuffles with its own draws.
"""

from __future__ import annotations

import random

from experiments.ruler.fitting import Builder, PromptLength, TaskText
from experiments.ruler.words import WordLists, coded_words, zeta

CWE_TOKENS, FWE_TOKENS = 120, 50
COMMON_WORDS = 10
#: (common repeats, uncommon repeats, example words, example common, example uncommon) by
#: whether seq_len reaches RULER's 4096
CWE_LONG, CWE_SHORT = (30, 3, 40, 10, 3), (6, 1, 20, 3, 1)
LONG_FROM = 4096
CWE_INSTRUCTION = (
    "Below is a numbered list of words. In these words, some appear more often than others. "
    "Memorize the ones that appear most often.\n"
)
CWE_QUESTION = "\nQuestion: What are the 10 most common words in the above list?"
CWE_PREFIX = " Answer: The top 10 words that appear most often in the list are:"
FWE_INSTRUCTION = (
    "Read the following coded text and track the frequency of each coded word. Find the three "
    "most frequently appeared coded words. "
)
FWE_QUESTION = (
    "\nQuestion: Do not provide any explanation. Please ignore the dots '....'. What are the "
    "three most frequently appeared words in the above coded text?"
)
FWE_PREFIX = (
    " Answer: According to the coded text above, the three most frequently appeared words are:"
)
FWE_ALPHA, FWE_WORD_LETTERS, FWE_NOISE = 2.0, 6, "..."
#: the fewest coded words in a text: enough that ranks 1-5 have different counts
FWE_SMALLEST = 100


def numbered(words: list[str]) -> str:
    return " ".join(f"{i + 1}. {word}" for i, word in enumerate(words))


def word_list(
    rng: random.Random, pool: tuple[str, ...], distinct: int, common: int, uncommon: int
) -> tuple[str, tuple[str, ...]]:
    """(the numbered list, its common words): `distinct` words, the first `COMMON_WORDS`
    drawn repeated `common` times, the others `uncommon` times, shuffled."""
    drawn = rng.sample(pool, distinct)
    frequent, rare = drawn[:COMMON_WORDS], drawn[COMMON_WORDS:]
    entries = frequent * common + rare * uncommon
    rng.shuffle(entries)
    return numbered(entries), tuple(frequent)


def cwe_text(seed: str, size: int, seq_len: int, words: WordLists) -> TaskText:
    """The task listing `size` distinct words, after its worked example."""
    common, uncommon, shown, shown_common, shown_uncommon = (
        CWE_LONG if seq_len >= LONG_FROM else CWE_SHORT
    )
    rng = random.Random(seed)
    example, example_answer = word_list(rng, words.pool, shown, shown_common, shown_uncommon)
    context, answers = word_list(rng, words.pool, size, common, uncommon)
    worked = (
        f"{CWE_INSTRUCTION}{example}{CWE_QUESTION}{CWE_PREFIX} {numbered(list(example_answer))}"
    )
    head = f"{worked}\n{CWE_INSTRUCTION}{context}"
    return TaskText(head + CWE_QUESTION, CWE_PREFIX, answers, len(head), size)


def cwe_builder(seed: str, seq_len: int, prompt_length: PromptLength, words: WordLists) -> Builder:
    """The task's builder (`tasks.TaskSpec.builder`): sizes are distinct words listed."""
    del prompt_length

    def text(size: int) -> TaskText:
        return cwe_text(seed, size, seq_len, words)

    return Builder(text, COMMON_WORDS, len(words.pool), "distinct words")


def zipf_counts(total: int, vocabulary: int, alpha: float = FWE_ALPHA) -> list[int]:
    """How often each rank 1..vocabulary occurs in a text of about `total` words."""
    norm = zeta(alpha)
    return [int(total * k**-alpha / norm) for k in range(1, vocabulary + 1)]


def fwe_text(seed: str, size: int, vocabulary: int) -> TaskText:
    """The coded text of about `size` words over `vocabulary` coded words."""
    rng = random.Random(seed)
    ranked = [FWE_NOISE, *coded_words(rng, vocabulary - 1, FWE_WORD_LETTERS)]
    entries = [w for w, n in zip(ranked, zipf_counts(size, vocabulary), strict=True)
               for _ in range(n)]  # fmt: skip
    rng.shuffle(entries)
    head = FWE_INSTRUCTION + " ".join(entries)
    return TaskText(head + FWE_QUESTION, FWE_PREFIX, tuple(ranked[1:4]), len(head), size)


def fwe_vocabulary(seq_len: int) -> int:
    return (seq_len - FWE_TOKENS) // 50


def fwe_builder(seed: str, seq_len: int, prompt_length: PromptLength, words: WordLists) -> Builder:
    """The task's builder (`tasks.TaskSpec.builder`): sizes are words in the coded text."""
    del prompt_length, words
    vocabulary = fwe_vocabulary(seq_len)
    if vocabulary < 5:
        raise ValueError(
            f"fwe at seq_len {seq_len} would have {vocabulary} coded words; it needs 5 "
            f"(seq_len >= {5 * 50 + FWE_TOKENS})"
        )
    return Builder(lambda size: fwe_text(seed, size, vocabulary), FWE_SMALLEST, None, "words")
