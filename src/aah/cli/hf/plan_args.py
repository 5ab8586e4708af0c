"""The arguments of `aah plan search` and `aah plan apply` on Hugging Face models (their run
logic is in `hf.plan_run`).

    aah plan search MODEL_DIR_OR_NAME --budget 0.3 --text calib.txt --out plan.json \
        [--sinks 4] [--heatmap plan.png] [--heldout heldout.txt]
    aah plan search MODEL_DIR_OR_NAME --budget-kv-mb 64 --sinks 4 --text calib.txt --out plan.json
    aah plan search MODEL_DIR_OR_NAME --signal loss --budget 0.3 --text calib.txt --out plan.json
    aah plan apply MODEL_DIR --plan plan.json --text heldout.txt

The search gives one window per KV head (its query heads share it: a KV head's memory follows
its widest query head) under a causal-coverage cap (`--budget`, default 0.3) or a cap on the
KV bytes the per-head cache holds per sequence at the calibration length (`--budget-kv-mb`,
MB = 2**20 bytes, or `--kv-fraction` of the full cache's); `--sinks N` gives every head N
attention sinks, measured and costed.
`--signal` picks what is allocated on: attention mass beyond each window (`mass`, one pass over
the calibration text), the change of each head's residual-stream contribution (`output`, one
pass; values and output projection included), that plus the same at the answer rows of
retrieval prompts built on the calibration text (`output+retrieval`), or the loss rise of
cutting each KV head alone to each window (`loss`, `hf.search.cut_loss`: one pass per KV head and
candidate).

Models load through `hf.run.load.load_model`: a GGUF file or a folder holding one, or a
transformers folder, work offline; a hub name needs network access (and is cached by
huggingface_hub as usual). The tokenizer is loaded from the same place; a model without one
reads text as UTF-8 bytes only when it is byte-level (vocab_size 256..512, random test
models), and is refused otherwise. Every check that needs no weights runs before they load
(`plan_checks`, then `hf.checks` on the model's config or GGUF header). Both commands print a
human summary and, as their last stdout line, one JSON object.
"""

from __future__ import annotations

import argparse
from typing import get_args

from aah.choices import SearchSignal
from aah.cli import flags

# Only the standard library at import time: the CLI builds its parser without loading torch.
HUB_NOTE = "a GGUF file, a folder (transformers or one .gguf), or a hub name (needs network)"
SIGNALS = get_args(SearchSignal)  # from the torch-free leaf: the parser loads no torch
DEVICE_HELP = "auto (default: CUDA when present, else CPU), cpu, cuda, cuda:N or mps"


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _common(p: argparse.ArgumentParser, model_help: str, text_help: str | None = None) -> None:
    p.add_argument("model", metavar="MODEL", help=model_help)
    p.add_argument(
        "--text", required=text_help is None, metavar="FILE", help=text_help or "UTF-8 text file"
    )
    p.add_argument("--batch-size", type=int, default=1, help="blocks per forward pass")
    p.add_argument("--max-batches", type=int, default=8, help="batches of text to use at most")
    p.add_argument("--device", default="auto", metavar="D", help=DEVICE_HELP)
    flags.add_threads(p)


def add_plan_search_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `aah plan search`."""
    _common(
        parser, f"model to search a plan for: {HUB_NOTE}",
        "UTF-8 calibration text (default: the shipped mix of English reference prose and "
        "Python source from the standard library, --max-batches blocks of T tokens)",
    )  # fmt: skip
    parser.add_argument(
        "--budget", type=float, help="causal coverage cap in (0, 1], sinks included (default 0.3)"
    )
    parser.add_argument(
        "--budget-kv-mb",
        type=float,
        metavar="MB",
        help="instead, a cap on KV cache MB (2**20 bytes) per sequence at the calibration length",
    )
    parser.add_argument(
        "--kv-fraction",
        type=float,
        metavar="F",
        help="instead, a cap on the KV bytes as a fraction in (0, 1) of the full cache's at the "
        "calibration length (0.3: the per-head cache keeps 30%% of what DynamicCache holds)",
    )
    parser.add_argument(
        "--sinks", type=int, default=None, metavar="N",
        help="attention sinks per head (default: chosen end to end, 0 or 4; see --no-choose)",
    )  # fmt: skip
    parser.add_argument(
        "--no-choose", dest="choose", action="store_false",
        help="return the signal's one allocation (sinks, whole layers and floor as given, else "
        "none) instead of judging candidate plans, one uniform window among them, by the "
        "model's own next-token distributions on 4 held-out blocks (default: judge them)",
    )  # fmt: skip
    parser.add_argument(
        "--refine", action="store_true",
        help="after the choice, exchange budget between groups of layers (quarters; on a "
        "hybrid model also its sliding and its full layers), each exchange judged on the same "
        "held-out blocks; the chosen plan stands unless one helps (up to 16 passes over them, "
        "24 on a hybrid model)",
    )  # fmt: skip
    parser.add_argument(
        "--objective", choices=("text", "text+retrieval"), default=None,
        help="what the choice judges plans by: 'text+retrieval' (default), the mean of the KL "
        "of the next token from full attention on the held-out blocks and the same KL at the "
        "answer rows of 8 retrieval prompts built on them (a fact hidden in the text, a "
        "question about it, its answer; text alone where T is too short for one); 'text', "
        "the held-out blocks alone",
    )  # fmt: skip
    parser.add_argument(
        "--signal",
        metavar="NAME",
        default="output",
        help="what to allocate on; several, comma-separated (with the choice), make each "
        f"one's allocations candidates. One of {', '.join(SIGNALS)} or a signal registered with "
        "aah.hf.register_signal in the running process: 'output' (default), the squared "
        "change of each head's "
        "contribution to the residual stream (values and output projection included), one "
        "forward (it beat one uniform window on every kind of text measured on SmolLM2-135M, "
        "docs/pretrained.md); 'mass', attention mass beyond each window, one forward over the "
        "calibration batches; 'output+retrieval', the output signal blended with the same "
        "change at the answer rows of 16 retrieval prompts built on the calibration text, "
        "equally weighted (17 more forwards); 'loss', the rise of the "
        "mean next-token loss when one KV head alone is cut to each window, one forward over "
        "the calibration batches per "
        "(KV head, candidate < T), i.e. layers x KV heads x candidates passes: slower, but it "
        "keeps heads that retrieve rare far tokens, which carry little mean mass; "
        "'suffix-loss', the same rise over the last --suffix tokens of each block with the "
        "context before them frozen at full attention (each cut reruns only those tokens: "
        "about 1/8 of 'loss''s time at the default suffix)",
    )
    parser.add_argument(
        "--suffix", type=int, metavar="N",
        help="tokens per block the suffix-loss signal scores (default T/16)",
    )  # fmt: skip
    parser.add_argument("--out", required=True, metavar="FILE", help="plan JSON to write")
    parser.add_argument(
        "--no-cache", dest="cache", action="store_false",
        help="search anew: neither return the plan an identical search cached on this machine "
        "(same model bytes, text, options and version; under $AAH_CACHE_DIR, else "
        "$XDG_CACHE_HOME/aah, else ~/.cache/aah) nor cache this one",
    )  # fmt: skip
    parser.add_argument("--heatmap", metavar="PNG", help="also write a layer x head heatmap")
    parser.add_argument(
        "--seq-len", type=int,
        help="calibration length T (default 512, or the model's positions if fewer); the text "
        "must give at least T tokens",
    )  # fmt: skip
    parser.add_argument(
        "--candidates", type=_ints, help="comma-separated windows (default T/32..T)"
    )
    parser.add_argument(
        "--whole-layers", type=_ints, default=None, metavar="L,L",
        help="layers whose KV heads all keep full attention, paid for out of the budget first "
        "(default: chosen end to end, none or the first layer; on SmolLM2-135M the first "
        "layer brings back facts stated at the very start of a long prompt)",
    )  # fmt: skip
    parser.add_argument("--sample-queries", type=int, default=64, help="exact rows per head, batch")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampled query rows")
    parser.add_argument("--heldout", metavar="FILE", help="also sweep budgets: held-out perplexity")
    parser.add_argument(
        "--sweep-budgets",
        type=_floats,
        default=[0.2, 0.4, 0.6, 0.8],
        help="coverage budgets for --heldout",
    )


def add_plan_apply_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `aah plan apply`."""
    _common(parser, f"model to evaluate: {HUB_NOTE}")
    parser.add_argument("--plan", required=True, metavar="FILE", help="plan JSON (plan search)")
    parser.add_argument(
        "--seq-len", type=int,
        help="block length (default: the plan's seq_len, else 512 or the model's positions)",
    )  # fmt: skip
    parser.add_argument(
        "--backend", default="auto", help="windowed attention backend (auto, grouped, flex, ...)"
    )


def run_plan_search(args: argparse.Namespace) -> int:
    """Search a plan; with --heldout also print a budget sweep; then write the plan (and the
    heatmap) together, only once everything succeeded."""
    from aah.cli.hf.plan_run import search

    return search(args)


def run_plan_apply(args: argparse.Namespace) -> int:
    """Print held-out perplexity of the model without and with the plan (and its sinks), with
    the plan's causal coverage and per-head cache KV bytes at the block length."""
    from aah.cli.hf.plan_run import apply

    return apply(args)
