"""One streamed `generate` call of the Hugging Face commands (`aah generate MODEL`, `aah chat`)
over a per-head cache: the text written as tokens arrive, the new ids returned, the prefill's
and the decoding's times measured.

The cache may already hold a prefix of the ids (a cached document, the turns of a chat):
`generate` then feeds only the uncached part (`hf.run.cache.PerHeadCache` takes several new tokens
after held ones as a chunked prefill).
"""

from __future__ import annotations

import argparse
import inspect
import time
from dataclasses import dataclass
from typing import Any, TextIO


class TextStream:
    """A `generate` streamer that writes the decoded text to `out` as tokens arrive: the whole
    sequence is decoded each time and what is new is written, holding back a character whose
    bytes are not all there yet (U+FFFD at the end). With `skip_prompt` the ids `generate`
    hands over first (the prompt) are not written. `times`: when each put arrived."""

    def __init__(self, decode: Any, out: TextIO, skip_prompt: bool = False) -> None:
        self.decode, self.out, self.skip_prompt = decode, out, skip_prompt
        self.ids: list[int] = []
        self.written = ""
        self.times: list[float] = []

    def put(self, value: Any) -> None:
        self.times.append(time.perf_counter())
        if self.skip_prompt and len(self.times) == 1:
            return
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


def decoder(tokenizer: Any | None) -> Any:
    """ids -> text: the tokenizer's, special tokens skipped; UTF-8 bytes without one."""
    if tokenizer is None:  # a byte-level model
        return lambda ids: bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")
    return lambda ids: tokenizer.decode(
        ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
    )


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


def cache_argument(model: Any, cache: Any) -> dict[str, Any]:
    """`generate`'s name for a cache object in this transformers version."""
    from aah.integrations.hf.run.model_layout import cache_keyword

    return {cache_keyword(model): cache}


def pad_id(model: Any, tokenizer: Any | None) -> int | None:
    config = model.generation_config
    if config.pad_token_id is not None:
        return config.pad_token_id
    eos = config.eos_token_id
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    return eos if eos is not None else getattr(tokenizer, "pad_token_id", None)


@dataclass
class Generated:
    """What one call made: the new ids, how many ids it fed, and its times in seconds (the
    prefill of the uncached ids up to the first new token, then the rest)."""

    new_ids: list[int]
    fed: int
    prefill_s: float
    decode_s: float

    @property
    def tokens_per_s(self) -> float | None:
        """Decoding speed after the first new token (None with fewer than two)."""
        if len(self.new_ids) < 2 or self.decode_s <= 0:
            return None
        return (len(self.new_ids) - 1) / self.decode_s


def generate(
    model: Any, tokenizer: Any | None, ids: list[int], cache: Any, new: int,
    options: dict[str, Any], out: TextIO, skip_prompt: bool,
) -> Generated:  # fmt: skip
    """Generate up to `new` tokens after `ids` (the cache holding any prefix of them), writing
    the text to `out` as it comes (`ids` too unless `skip_prompt`)."""
    import torch

    device = next(model.parameters()).device
    tensor = torch.tensor([ids], dtype=torch.long, device=device)
    held = cache.get_seq_length()
    stream = TextStream(decoder(tokenizer), out, skip_prompt)
    start = time.perf_counter()
    with torch.no_grad():
        result = model.generate(
            tensor, attention_mask=torch.ones_like(tensor), max_new_tokens=new, streamer=stream,
            pad_token_id=pad_id(model, tokenizer), **cache_argument(model, cache), **options,
        )  # fmt: skip
    new_ids = [int(i) for i in result[0, len(ids) :].tolist()]
    times = stream.times[1:] or [time.perf_counter()]  # the first put is the prompt
    return Generated(new_ids, len(ids) - held, times[0] - start, times[-1] - times[0])


def prefill(model: Any, cache: Any, ids: list[int]) -> None:
    """Feed `ids` into `cache` (one forward, logits of the last position only where the model
    allows: a document's logits alone would be T x vocabulary floats)."""
    import torch

    device = next(model.parameters()).device
    tensor = torch.tensor([ids], dtype=torch.long, device=device)
    takes_keep = "logits_to_keep" in inspect.signature(model.forward).parameters
    keep = {"logits_to_keep": 1} if takes_keep else {}
    with torch.no_grad():
        model(tensor, use_cache=True, **cache_argument(model, cache), **keep)
