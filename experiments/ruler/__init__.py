"""RULER (Hsieh et al., 2024), the long-context suite, for the pretrained-model studies.

This package regenerates RULER's synthetic tasks that need no download (`tasks`: niah_single_1,
niah_multikey_2, niah_multikey_3, vt, cwe, fwe), scores answers with its metrics (`scoring`)
and runs this project's methods on them (`run`). The behaviour follows RULER's generator and
evaluation as read at commit c3f5e3b4f87f97e048793bb510a3a6b19a46bf3a of its repository
(`scripts/data/synthetic/{niah,variable_tracking,common_words_extraction,
freq_words_extraction,constants}.py`, `scripts/synthetic.yaml`, `scripts/data/prepare.py`,
`scripts/eval/synthetic/constants.py`, `scripts/eval/evaluate.py`); the code is this
project's own.

Followed: each task's template wording and answer prefix, its tokens to generate, its
haystack, needle, key and value kinds and counts, the singular wording for one value, vt's
worked example (about 500 tokens) before the task, cwe's repeat counts and worked example
(which change at 4096 tokens), fwe's Zipf counts and vocabulary size, prompts filled up to
seq_len minus the tokens to generate, the prediction's cleaning, and string_match_all /
string_match_part with the same metric per task.

Changed, each said where it is done: every draw is seeded per (seed, task, sample) with
Python's `random`, so samples are not RULER's own strings; each sample is sized on its own
(`fitting`); a distractor needle never reuses a real key (`niah`); a vt chain's names are
distinct (`variable_tracking`); cwe and fwe shuffle per sample, not with one fixed
permutation (`word_counts`); the wonderwords lists are version 3.0.1's (`words`). Prompts read
raw by default (RULER's base-model template) or through the tokenizer's chat template
(`prompts`).
"""
