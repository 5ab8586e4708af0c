"""The flag vocabulary every subcommand shares (docs/cli.md): one spelling, one meaning.

--batch-size B   windows (sequences) per forward pass, >= 1
--seq-lens T,T   sequence lengths as one comma list
--threads N      torch intra-op threads; 0 (the default) leaves torch's own default
--device D       auto (CUDA when present, else CPU; the default), cpu or cuda
--temperature, --top-k, --top-p, --seed   sampling (`aah generate`, `aah chat`)

Older spellings (--batch; --contexts T T) still parse, hidden from --help.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

DEVICE_HELP = "auto (default: CUDA when present, else CPU), cpu or cuda"
THREADS_HELP = "torch threads (default 0: torch's own default)"


def add_batch_size(p: argparse.ArgumentParser, help_text: str, default: int | None = None) -> None:
    p.add_argument("--batch-size", type=int, default=default, metavar="B", help=help_text)
    p.add_argument(
        "--batch", type=int, dest="batch_size", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )


def check_batch_size(value: int | None) -> None:
    if value is not None and value < 1:
        raise ValueError(f"--batch-size must be >= 1, got {value}")


def add_device(p: argparse.ArgumentParser, default: str = "auto") -> None:
    p.add_argument("--device", default=default, metavar="D", help=DEVICE_HELP)


def add_threads(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, default=0, metavar="N", help=THREADS_HELP)


def check_threads(value: int) -> None:
    if value < 0:
        raise ValueError(f"--threads must be >= 0 (0 = torch's default), got {value}")


def add_sampling(p: argparse.ArgumentParser) -> None:
    """--temperature, --top-k, --top-p, --seed: checked by `aah.model.sampling.Sampling`."""
    p.add_argument("--temperature", type=float, default=1.0,
                   help="sampling temperature, 0 = greedy (default 1.0)")  # fmt: skip
    p.add_argument("--top-k", type=int, default=None, metavar="K", help="sample from the top K")
    p.add_argument("--top-p", type=float, default=None, metavar="P",
                   help="sample from the smallest set holding mass P, in (0, 1]")  # fmt: skip
    p.add_argument("--seed", type=int, default=None, help="sampling seed (reproducible)")


def add_seq_lens(
    p: argparse.ArgumentParser, default: Sequence[int], *, aliases: Sequence[str] = ()
) -> None:
    text = ",".join(str(t) for t in default)
    p.add_argument(
        "--seq-lens", default=list(default), metavar="T,T,...",
        help=f"sequence lengths, a comma list (default {text})",
    )  # fmt: skip
    for alias in aliases:
        p.add_argument(
            alias, nargs="+", dest="seq_lens", default=argparse.SUPPRESS, help=argparse.SUPPRESS
        )


def int_list(
    words: Sequence[object] | str, flag: str = "--seq-lens", minimum: int = 1
) -> list[int]:
    """'1,2' or ['1', '2'] or ['1,2'] -> [1, 2]; ValueError naming the flag and value."""
    parts = [words] if isinstance(words, (str, int)) else list(words)
    text = ",".join(str(w) for w in parts)
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{flag} must be a comma list of ints, got {text!r}") from None
    if not values or min(values) < minimum:
        raise ValueError(f"{flag} must be ints >= {minimum}, got {text!r}")
    return values


def add_default_plan(p: argparse.ArgumentParser) -> None:
    """`--kv-fraction F [--plan-length T]`: a Hugging Face model's default plan instead of
    `--plan FILE` (shipped, cached, else searched once and cached)."""
    p.add_argument(
        "--kv-fraction", type=float, metavar="F",
        help="instead of --plan: the model's default plan keeping F of its full KV cache's bytes "
        "(shipped for SmolLM2-135M and Gemma 3 270M at T=2048 and 4096, F 0.3 and 0.5; else "
        "cached from an earlier search; else searched now, minutes, and cached)",
    )  # fmt: skip
    p.add_argument(
        "--plan-length", type=int, default=2048, metavar="T",
        help="with --kv-fraction: the context length T the default plan is for (default 2048)",
    )  # fmt: skip


def check_default_plan(
    plan: str | None, kv_fraction: float | None, plan_length: int, context: str = ""
) -> None:
    """Exactly one of --plan and --kv-fraction, each in range; ValueError naming the fix
    (after `context`, what the command knows of its target)."""
    if plan is not None and kv_fraction is not None:
        raise ValueError("give --plan FILE or --kv-fraction F, not both")
    if plan is None and kv_fraction is None:
        raise ValueError(
            f"{context}a Hugging Face model runs with a plan: give --plan FILE (from `aah plan "
            "search`) or --kv-fraction F (its default plan at that share of the KV cache, e.g. 0.3)"
        )
    if kv_fraction is not None and not 0 < kv_fraction <= 1:
        raise ValueError(f"--kv-fraction must be in (0, 1], got {kv_fraction}")
    if plan_length < 2:
        raise ValueError(f"--plan-length must be >= 2, got {plan_length}")
