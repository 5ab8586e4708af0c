"""`aah generate MODEL --plan plan.json --prompt TEXT`: a Hugging Face model (a transformers
folder, a GGUF file or a hub name) continues a prompt with the plan's windows and sinks, its
KV cache the per-head one (`hf.cache.PerHeadCache`): the text streams to stdout as it is made,
then one line on stderr says how many KV bytes the cache held against a full cache's.

The cache is sized for the prompt and every new token (`max_cache_len = prompt + N`), so the
generation never runs out of room; a prompt and N beyond the model's positions are refused
before the first token. The same checks as `aah plan` run before the weights load (`hf_checks`).
"""

from __future__ import annotations

import argparse
import inspect
from typing import Any, TextIO

from aah.cli.hf_checks import (
    check_plan_shape,
    check_tokenizer,
    model_limits,
    preview_limits,
)
from aah.cli.plan_checks import check_model

MB = 2**20


class TextStream:
    """A `generate` streamer that writes the decoded text to `out` as tokens arrive: the whole
    sequence is decoded each time and what is new is written, holding back a character whose
    bytes are not all there yet (U+FFFD at the end)."""

    def __init__(self, decode: Any, out: TextIO) -> None:
        self.decode, self.out = decode, out
        self.ids: list[int] = []
        self.written = ""

    def put(self, value: Any) -> None:
        self.ids.extend(int(i) for i in value.reshape(-1).tolist())
        self._write(final=False)

    def end(self) -> None:
        self._write(final=True)

    def _write(self, final: bool) -> None:
        text = self.decode(self.ids)
        if not final:
            text = text.rstrip("\ufffd")
        if len(text) > len(self.written) and text.startswith(self.written):
            self.out.write(text[len(self.written) :])
            self.out.flush()
            self.written = text


def _decoder(tokenizer: Any | None) -> Any:
    if tokenizer is None:  # a byte-level model
        return lambda ids: bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")
    return lambda ids: tokenizer.decode(
        ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
    )


def prompt_ids(prompt: str, tokenizer: Any | None, vocab_size: int | None) -> Any:
    """(1, P) token ids of the prompt: the tokenizer's, special tokens as it adds them; bytes
    for a byte-level model without one (`hf.data.encode`'s rule)."""
    import torch

    from aah.integrations.hf.data import encode

    if tokenizer is None:
        ids = encode(prompt, None, vocab_size)
    else:
        ids = list(tokenizer(prompt)["input_ids"])
    if not ids:
        raise ValueError(f"--prompt {prompt!r} gives no tokens")
    return torch.tensor([ids], dtype=torch.long)


def sampling_options(args: argparse.Namespace) -> dict[str, Any]:
    """`generate`'s options for --temperature/--top-k/--top-p, with the meanings of the run
    path (`aah.model.sampling.Sampling`, which checks them): temperature 0 is greedy, and no
    top-k or top-p unless given (not transformers' default top_k=50)."""
    from aah.model.sampling import Sampling

    sampling = Sampling(args.temperature, args.top_k, args.top_p, args.seed)
    if sampling.greedy:
        return {"do_sample": False}
    return {
        "do_sample": True,
        "temperature": sampling.temperature,
        "top_k": sampling.top_k or 0,
        "top_p": 1.0 if sampling.top_p is None else sampling.top_p,
    }


def run_hf_generate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Load the model, apply the plan, stream the continuation; ValueError before the model
    loads for anything its files can tell, and before the first token for the rest."""
    import torch

    from aah.integrations.hf.load import resolve_device
    from aah.plan import WindowPlan

    if args.plan is None:
        raise ValueError(
            f"{args.target!r} is not a run directory; a Hugging Face model generates with "
            "--plan FILE (from `aah plan search`)"
        )
    if not args.prompt:
        raise ValueError("--prompt must hold some text, got ''")
    if args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    check_model(args.target)
    plan = WindowPlan.load(args.plan)
    options = sampling_options(args)
    limits = preview_limits(args.target)
    check_plan_shape(plan.windows, limits, args.plan)
    check_tokenizer(limits, args.target)
    positions = limits.max_positions if limits is not None else None
    if positions is not None and args.max_new_tokens >= positions:
        raise ValueError(
            f"--max-new-tokens {args.max_new_tokens} leaves no room for the prompt in the "
            f"model's {positions} positions: give --max-new-tokens {positions - 1} or less"
        )
    resolve_device(args.device, "--device")
    if args.threads:
        torch.set_num_threads(args.threads)

    from aah.integrations.hf import apply, per_head_cache
    from aah.integrations.hf.load import load_model

    model, tokenizer = load_model(args.target, args.device)
    exact = model_limits(model, tokenizer)
    check_plan_shape(plan.windows, exact, args.plan)
    ids = prompt_ids(args.prompt, tokenizer, exact.vocab_size)
    n_prompt, new = ids.shape[1], args.max_new_tokens
    _check_positions(n_prompt, new, exact.max_positions)
    apply(model, plan)
    cache = per_head_cache(model, max_cache_len=n_prompt + new)
    if args.seed is not None:
        torch.manual_seed(args.seed)
    device = next(model.parameters()).device
    stream = TextStream(_decoder(tokenizer), out)
    with torch.no_grad():
        model.generate(
            ids.to(device), attention_mask=torch.ones_like(ids).to(device),
            max_new_tokens=new, streamer=stream, **cache_argument(model, cache),
            pad_token_id=_pad_id(model, tokenizer), **options,
        )  # fmt: skip
    out.write("\n")
    out.flush()
    err.write(kv_line(cache.nbytes(), cache.get_seq_length(), exact) + "\n")
    return 0


def _check_positions(n_prompt: int, new: int, positions: int | None) -> None:
    if positions is None or n_prompt + new <= positions:
        return
    if n_prompt >= positions:
        raise ValueError(
            f"the prompt's {n_prompt} tokens fill the model's {positions} positions: give a "
            "shorter prompt"
        )
    raise ValueError(
        f"the prompt's {n_prompt} tokens + --max-new-tokens {new} exceed the model's "
        f"{positions} positions: give --max-new-tokens {positions - n_prompt} or less (or a "
        "shorter prompt)"
    )


def cache_argument(model: Any, cache: Any) -> dict[str, Any]:
    """`generate`'s name for a cache object in this transformers version."""
    params = inspect.signature(model.forward).parameters
    return {"cache" if "cache" in params else "past_key_values": cache}


def _pad_id(model: Any, tokenizer: Any | None) -> int | None:
    config = model.generation_config
    if config.pad_token_id is not None:
        return config.pad_token_id
    eos = config.eos_token_id
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    return eos if eos is not None else getattr(tokenizer, "pad_token_id", None)


def kv_line(held: int, positions: int, limits: Any) -> str:
    """What the per-head cache held after `positions` positions against a full cache's."""
    from aah.attention.kv_bytes import full_kv_bytes

    full = full_kv_bytes(limits.kv, positions)
    return (
        f"KV cache: {held / MB:.3f} MB held after {positions} positions, of the full cache's "
        f"{full / MB:.3f} MB (KV share {held / full:.3f}); {held} of {full} bytes"
    )
