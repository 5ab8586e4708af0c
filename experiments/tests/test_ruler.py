"""RULER's tasks and scores: every prompt fits its length and fills it, holds its needles as
often as the task says, and has the answer a brute-force reading of its text finds; samples
repeat under a seed; the metrics and intervals against values worked by hand.

Lengths here are counted in whitespace-separated words (any tokenizer-length function will do:
the generators only compare lengths), and words come from a small made-up list, so these tests
need neither a tokenizer nor the wonderwords package (one test reads that package's lists when
it is installed)."""

from __future__ import annotations

import collections
import itertools
import re

import pytest

from experiments.ruler import niah, scoring, variable_tracking, word_counts
from experiments.ruler.fitting import Builder, TaskText, largest_fitting
from experiments.ruler.tasks import TASKS, generate, parse_tasks, sample_seed, task_spec
from experiments.ruler.words import WordLists, zeta

SYLLABLES = ("ba", "ke", "mi", "lo", "tu", "ra", "se", "do")
#: 512 made-up nouns, 64 adjectives and 64 verbs, none of them a word of the templates
WORDS = WordLists(
    nouns=tuple("".join(p) for p in itertools.product(SYLLABLES, repeat=3)),
    adjectives=tuple("z" + "".join(p) for p in itertools.product(SYLLABLES, repeat=2)),
    verbs=tuple("v" + "".join(p) for p in itertools.product(SYLLABLES, repeat=2)),
)
SEQ_LEN = 1500  # words: below RULER's 4096, so cwe uses its short repeat counts


def word_length(body: str, answer_prefix: str) -> int:
    """A stand-in tokenizer-length function: whitespace-separated words."""
    return len((body + answer_prefix).split())


def sample(task: str, index: int = 0, seed: int = 0, seq_len: int = SEQ_LEN):
    return generate(task, word_length, seq_len, seed, index, WORDS)


def builder_of(task: str, index: int = 0, seed: int = 0, seq_len: int = SEQ_LEN) -> Builder:
    return task_spec(task).builder(sample_seed(seed, task, index), seq_len, word_length, WORDS)


@pytest.mark.parametrize("task", list(TASKS))
def test_every_prompt_fits_its_length_and_one_more_unit_would_not(task: str) -> None:
    for index in range(3):
        text = sample(task, index)
        budget = SEQ_LEN - TASKS[task].tokens_to_generate
        assert word_length(text.body, text.answer_prefix) <= budget
        bigger = builder_of(task, index).text(text.size + 1)
        assert word_length(bigger.body, bigger.answer_prefix) > budget  # as full as it goes
        assert text.body[text.question_start :].lstrip().startswith(("What", "Question:"))


NEEDLE_LINE = re.compile(r"One of the special magic (\w+) for (\S+) is: (\S+)\.")


@pytest.mark.parametrize("task", ["niah_single_1", "niah_multikey_2", "niah_multikey_3"])
def test_a_niah_answer_is_the_value_of_the_key_the_question_names(task: str) -> None:
    for index in range(4):
        text = sample(task, index)
        needles = NEEDLE_LINE.findall(text.body)
        asked = re.search(r"magic \w+ for (\S+) mentioned", text.body[text.question_start :])
        assert asked is not None
        found = [value for _, key, value in needles if key == asked.group(1)]
        assert tuple(found) == text.answers  # one needle holds the asked key, and its value
        assert text.body.count(text.answers[0]) == 1
        assert asked.group(1) in text.answer_prefix
        if task == "niah_single_1":
            assert len(needles) == 1 and text.body.count(niah.NOISE) == text.size
        else:  # the haystack is distractor needles, one per unit, plus the real one
            assert len(needles) == text.size + 1
            assert len({key for _, key, _ in needles}) == len(needles)
        kind = "uuids" if task == "niah_multikey_3" else "numbers"
        assert {k for k, _, _ in needles} == {kind}
        assert text.body.startswith(f"A special magic {kind[:-1]} is hidden")


def test_vt_answer_is_the_chain_a_reader_follows_from_the_value() -> None:
    for index in range(4):
        text = sample("vt", index)
        example, task = text.body.split(variable_tracking.INSTRUCTION)[1:]
        value = re.search(r"assigned the value (\d+) in the text", task).group(1)
        assignments = dict(re.findall(r"VAR (\w+) = (?:VAR )?(\w+) ?$", task, re.MULTILINE))
        chain, frontier = [], {value}
        while frontier:  # every variable whose value comes, through any hops, from `value`
            frontier = {name for name, source in assignments.items() if source in frontier}
            chain += sorted(frontier)
        assert chain == list(text.answers) and len(chain) == variable_tracking.HOPS + 1
        assert all(len(name) == 5 for name in chain)
        assert task.count(niah.NOISE) == text.size
        # the worked example: 3-letter names, its answer shown after it
        shown = re.findall(r"VAR (\w+) = ", example)
        assert all(len(n) == 3 for n in shown) and example.rstrip().endswith(" ".join(shown))


def numbered_words(listing: str) -> list[str]:
    entries = re.split(r"(?:^| )\d+\. ", listing)
    return [e for e in entries if e]


def test_cwe_answer_is_the_ten_words_a_count_puts_on_top() -> None:
    for index in range(3):
        text = sample("cwe", index)
        listing = text.body[: text.question_start].split(word_counts.CWE_INSTRUCTION)[-1]
        counts = collections.Counter(numbered_words(listing))
        common, uncommon = word_counts.CWE_SHORT[:2]
        assert {w for w, n in counts.items() if n == common} == set(text.answers)
        assert set(counts.values()) == {common, uncommon}
        assert len(counts) == text.size
        assert text.body.count(word_counts.CWE_PREFIX) == 1  # the example's, in the body
        assert text.answer_prefix == word_counts.CWE_PREFIX


def test_cwe_uses_its_long_counts_from_4096() -> None:
    text = generate("cwe", word_length, 4096, 0, 0, WORDS)
    listing = text.body[: text.question_start].split(word_counts.CWE_INSTRUCTION)[-1]
    counts = collections.Counter(numbered_words(listing))
    assert set(counts.values()) == set(word_counts.CWE_LONG[:2])


def test_fwe_answer_is_ranks_two_to_four_of_a_count() -> None:
    for index in range(3):
        text = sample("fwe", index)
        coded = text.body[len(word_counts.FWE_INSTRUCTION) : text.question_start].split()
        ranked = collections.Counter(coded).most_common()
        assert ranked[0][0] == "..."
        assert tuple(w for w, _ in ranked[1:4]) == text.answers
        assert ranked[3][1] > ranked[4][1]  # no tie at the answer's edge
        assert len(ranked) <= word_counts.fwe_vocabulary(SEQ_LEN)


def test_zipf_counts_follow_the_law() -> None:
    assert zeta(2.0) == pytest.approx(3.14159265358979**2 / 6, rel=1e-12)
    assert word_counts.zipf_counts(1000, 4) == [607, 151, 67, 37]


@pytest.mark.parametrize("task", list(TASKS))
def test_a_sample_repeats_under_its_seed_and_changes_with_it(task: str) -> None:
    assert sample(task, 1) == sample(task, 1)
    assert sample(task, 1).body != sample(task, 2).body
    assert sample(task, 1).body != sample(task, 1, seed=5).body


def test_bad_tasks_and_lengths_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown RULER task 'niah_single_2'"):
        sample("niah_single_2")
    with pytest.raises(ValueError, match="unknown RULER task 'qa_1'"):
        parse_tasks("vt,qa_1")
    with pytest.raises(ValueError, match="seq_len 100 leaves no room for niah_single_1"):
        sample("niah_single_1", seq_len=100)
    with pytest.raises(ValueError, match=r"vt at seq_len 200: the shortest prompt"):
        sample("vt", seq_len=200)
    with pytest.raises(ValueError, match="fwe at seq_len 250 would have 4 coded words"):
        sample("fwe", seq_len=250)
    with pytest.raises(ValueError, match="all 640 distinct words take only"):
        sample("cwe", seq_len=100_000)
    with pytest.raises(ValueError, match="haystack 'essay'"):
        niah.NiahConfig("essay", "words", "numbers")


def test_the_fit_search_keeps_the_largest_size_within_the_budget() -> None:
    builder = Builder(lambda n: TaskText("x " * (3 * n), "", ("x",), 0, n), 1)
    assert largest_fitting(builder, word_length, 100, "probe").size == 33
    assert largest_fitting(builder, word_length, 3, "probe").size == 1


def test_the_wonderwords_lists_load_as_ruler_reads_them() -> None:
    pytest.importorskip("wonderwords")
    from experiments.ruler.words import wonderwords_lists

    lists = wonderwords_lists()
    assert (len(lists.nouns), len(lists.adjectives), len(lists.verbs)) == (6782, 912, 1042)
    assert len(lists.pool) == 8166
    text = generate("niah_single_1", word_length, 600, 0, 0)
    key = text.answer_prefix.split(" for ")[1].removesuffix(" mentioned in the provided text is")
    assert "-" in key and key.split("-")[-1] in lists.nouns


def test_string_match_all_and_part_by_hand() -> None:
    refs = ["Apple", "pear", "plum"]
    assert scoring.string_match_all("I saw an apple and a PEAR.", refs) == pytest.approx(2 / 3)
    assert scoring.string_match_part("I saw an apple and a PEAR.", refs) == 1.0
    assert scoring.string_match_all("nothing", refs) == 0.0
    assert scoring.string_match_part("nothing", refs) == 0.0
    assert scoring.string_match_all("pineapple", ["apple"]) == 1.0  # substrings count
    assert scoring.clean_prediction("  1234\x00567\t8 ") == "1234\n567\n8"
    assert scoring.score("string_match_all", "\n 8436384.", ["8436384"]) == 1.0
    with pytest.raises(ValueError, match="unknown metric 'exact'"):
        scoring.score("exact", "a", ["a"])
    assert {TASKS[t].metric for t in TASKS} == {scoring.FAMILY_METRICS[TASKS[t].family]
                                               for t in TASKS}  # fmt: skip


def test_intervals_by_hand() -> None:
    certain = scoring.task_interval([1.0, 1.0, 1.0])
    assert (certain.mean, certain.low, certain.high, certain.n) == (100.0, 100.0, 100.0, 3)
    half = scoring.task_interval([0.0, 1.0] * 20)
    assert half.mean == 50.0 and 30 < half.low < 40 and 60 < half.high < 70
    # the mean over tasks weighs each task alike, not each sample
    mean = scoring.mean_interval({"a": [1.0] * 8, "b": [0.0, 0.0]})
    assert (mean.mean, mean.low, mean.high, mean.n) == (50.0, 50.0, 50.0, 10)
    assert scoring.task_interval([0.0, 1.0], seed=3) == scoring.task_interval([0.0, 1.0], seed=3)


def test_the_report_averages_only_tasks_where_full_attention_scores() -> None:
    from types import SimpleNamespace

    from experiments.ruler.report import summarize

    samples = [SimpleNamespace(task=t, index=i, input_ids=[0] * 10) for t in "ab" for i in range(4)]
    full = {"a": [1, 1, 1, 0], "b": [0, 0, 0, 1]}  # b: 25 points, but its interval reaches 0
    window = {"a": [1, 0, 0, 0], "b": [1, 1, 1, 1]}
    cells = {
        f"{m}/{t}/{i}": {"score": float(v[t][i]), "seconds": 2.0}
        for m, v in (("full", full), ("window", window))
        for t in "ab"
        for i in range(4)
    }
    del cells["window/a/3"]  # unfinished: task a is compared on its first 3 samples
    summary = summarize(samples, cells, ["full", "window"])
    assert summary["counted"] == ["a"] and summary["left_out"] == ["b"]
    assert summary["per_task"]["full"]["a"].n == 3
    assert summary["means"]["full"].mean == 100.0
    assert summary["means"]["window"].mean == pytest.approx(100 / 3)
