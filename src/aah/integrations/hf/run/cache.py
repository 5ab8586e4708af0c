"""`PerHeadCache`: a transformers `Cache` whose memory and decode work follow the window plan.

    hf.apply(model, plan, sinks=4)
    cache = PerHeadCache(model, max_cache_len=prompt_len + new_tokens)
    model.generate(ids, cache=cache, ...)  # `past_key_values=cache` on older transformers

Each KV head keeps only its sink keys and the last max(window of its query heads) keys, in ring
buffers preallocated at the first forward (`aah.model.cache.KVCache`, the same store the
package's own decoder uses); bytes held are sum over layers and KV heads of
(sinks + min(w, t)) * D * 2 * itemsize (with max_cache_len = t the storage is exactly that).
The prefill writes only those keys (the prompt's attention itself runs over all of them in the
"aah" function). Each decoding step then reads only the rings and sinks: `update` stores
nothing and returns the step's own key tensor, marked (`hf.run.attention.CACHE_MARK`) so the "aah"
attention function hands the step to `KVCache.attend`. Several tokens into a filled cache (the
next turn of a conversation, a question after a cached document: `generate` with the whole
sequence so far feeds only the uncached part) are a chunked prefill over the held keys
(`aah.model.cache_extend`), one row without padding only. `snapshot()` / `restore()` copy the
state and go back to it exactly (one document prefilled, each question answered from it).

Left padding (batched `generate`) is read from the prefill's position ids; each row's sinks are
its own first real tokens. Other padding (right, holes, packed rows, custom masks) is refused:
the rings follow one run of real tokens ending at the last slot. Under `torch.compile` the
decoding step reads each ring whole under a mask (`KVCache` documents it), one graph for every
step; the checks that read tensor values (padding, mask, plan) run only outside compiled code.
Rolling (`PerHeadCache(model, rolling=True)`, for plans whose every head holds a bounded window,
sinks included, within the model's positions): the cache never fills and `generate` runs past
the model's positions. Once a head's window has left its sinks, a query at position p reads its
s sinks and its w last keys with the positions StreamingLLM assigns within the cache (sinks at
0 .. s - 1, the window at s .. s + w - 1, the query at s + w - 1): keys are stored rotated, and
the few sink keys a step reads are rotated forward by p - (s + w - 1) with the model's own
frequencies (`aah.model.cache`, `hf.run.rope_frequencies`). Every forward, the prompt's too,
then runs through the cache (`aah.model.cache_extend`). Refused with ValueError: a head whose
window reaches the model's positions (it would keep everything), a model without rotary
positions, left padding, `torch.compile`.

Needs transformers with layered caches (`cache_utils.CacheLayerMixin`, 4.56+). Refused with
ValueError: several new tokens into a filled cache of a left-padded batch or under
`torch.compile`, beam search, cropping (assisted or speculative decoding), a model not running
"aah" attention, and a plan changed after the cache was built.
"""

from __future__ import annotations

from typing import Any

import torch

from aah.integrations.hf.run.attention import CACHE_MARK, SINKS_ATTR, WINDOWS_ATTR
from aah.integrations.hf.run.model_layout import layout, require_transformers, sliding_windows
from aah.integrations.hf.run.rope_frequencies import rope_shift
from aah.model.cache import UNBOUNDED_LEN, KVCache, refuse_unbounded
from aah.model.cache_extend import extend
from aah.model.cache_snapshot import KVSnapshot, restore_snapshot, take_snapshot
from aah.model.rope_shift import RopeShift

require_transformers()
try:
    from transformers.cache_utils import Cache, CacheLayerMixin
except ImportError as err:  # pragma: no cover - depends on the installed version
    raise ImportError(
        "PerHeadCache needs transformers with layered caches (4.56+): "
        "pip install -U 'aah-attention[hf]'"
    ) from err


def _refuse(what: str) -> ValueError:
    return ValueError(f"PerHeadCache: {what} is not supported (it keeps only each head's window)")


class _Layer(CacheLayerMixin):
    """One model layer's view of the shared store: its position count and transformers' hooks."""

    is_compileable = False
    is_croppable = False
    is_sliding = False
    supports_early_init = False

    def __init__(self, owner: PerHeadCache, index: int) -> None:
        super().__init__()
        self.owner, self.index, self.seen = owner, index, 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ):  # type: ignore[no-untyped-def]
        self.is_initialized = True
        return self.owner._update(self.index, key_states, value_states, _position_ids(args, kwargs))

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        # Rolling, the mask spans the new tokens only (their keys before them hold no padding):
        # one that spanned every position seen would cost each step time growing with it.
        if self.owner.rolling:
            return query_length, self.seen
        return self.seen + query_length, 0

    def get_seq_length(self) -> int:
        return self.seen

    def get_max_length(self) -> int:
        return -1 if self.owner.rolling else self.owner.max_cache_len

    def reset(self) -> None:
        self.seen = 0

    def offload(self) -> None:  # the store stays where it is
        return None

    def prefetch(self) -> None:
        return None

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        raise _refuse("beam search (reordering rows)")

    def crop(self, tokens_to_remove: int) -> None:
        raise _refuse("cropping (assisted or speculative decoding)")

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise _refuse("repeating rows (num_return_sequences > 1)")

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        raise _refuse("selecting rows")


def _position_ids(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """The step's position ids, wherever this transformers version passes them."""
    for bag in (kwargs, kwargs.get("kwargs"), kwargs.get("cache_kwargs"), *args):
        if isinstance(bag, dict) and isinstance(bag.get("position_ids"), torch.Tensor):
            return bag["position_ids"]
    return None


class _Step:
    """What `update` hands the "aah" attention function for one layer and one forward."""

    def __init__(self, cache: PerHeadCache, layer: int, seen: int, decoding: bool) -> None:
        self.cache, self.layer, self.seen, self.decoding = cache, layer, seen, decoding
        self.consumed = False

    def mask_length(self, q_len: int) -> int:
        """Keys the step's mask spans: every position so far, padding included; on a rolling
        cache the new positions only (`_Layer.get_mask_sizes`)."""
        self.consumed = True
        return q_len if self.cache.rolling else self.seen + q_len

    def check_prefill(self, allowed, padding) -> None:  # type: ignore[no-untyped-def]
        """ValueError unless the prompt's mask is causal with the left padding the cache read
        off the position ids (`allowed` (B, 1 or H, T, T) or None, `hf.run.padding.Padding`)."""
        self.cache._check_prefill(allowed, padding)

    def attend(self, q, k, v, scale, windows, sinks, allowed, logit=None):  # type: ignore[no-untyped-def]
        """(B, Hq, 1, D): the decoding step over the store, after checking that the plan and
        the step's mask (B, 1 or H, 1, Tk) or None are those the cache was built for; with a
        sink logit per query head where `logit` (Hq,) is given."""
        return self.cache._attend(self.layer, q, k, v, scale, windows, sinks, allowed, logit)


class PerHeadCache(Cache):
    """Per-KV-head ring buffers and sinks for a model that `hf.apply` gave a plan.

    Args:
        model: a supported transformers model running "aah" attention (after `hf.apply`).
        max_cache_len: the most positions it will hold (prompt, padding and new tokens);
            default the config's max_position_embeddings. Full-window heads reserve this many.
        rolling: never fill (module docstring); then `max_cache_len` is not given.
    """

    def __init__(
        self, model: torch.nn.Module, max_cache_len: int | None = None, *, rolling: bool = False
    ) -> None:
        lay = layout(model)
        config = model.config
        if rolling and max_cache_len is not None:
            raise ValueError(
                f"a rolling PerHeadCache has no length limit: drop max_cache_len={max_cache_len}"
            )
        limit = (
            getattr(config, "max_position_embeddings", None)
            if max_cache_len is None
            else max_cache_len
        )
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"max_cache_len must be an int >= 1, got {max_cache_len!r}")
        self.max_cache_len = UNBOUNDED_LEN if rolling else limit
        self.windows, self.sinks = [], []
        for module, cap in zip(lay.modules, sliding_windows(model), strict=True):
            if not hasattr(module, WINDOWS_ATTR):
                raise ValueError(
                    f"{type(module).__name__} has no aah plan: call "
                    "aah.hf.apply(model, plan) before building a PerHeadCache"
                )
            planned = getattr(module, WINDOWS_ATTR)
            row = [limit] * lay.n_head if planned is None else [int(w) for w in planned]
            self.windows.append([min(w, int(cap)) if cap else w for w in row])
            sinks = getattr(module, SINKS_ATTR, None)
            self.sinks.append([0] * lay.n_head if sinks is None else [int(s) for s in sinks])
        self.sliding = sliding_windows(model)  # each layer's own window: its mask hides older keys
        self.shift: RopeShift | None = None  # set: the cache rolls
        if rolling:
            refuse_unbounded(self.windows, self.sinks, limit, "the model's positions")
            self.shift = rope_shift(model)
        self.n_kv_head = lay.n_kv_head
        self.head_dim = lay.head_dim
        self.store: KVCache | None = None
        self.pending: list[_Step | None] = [None] * lay.n_layer
        super().__init__(layers=[_Layer(self, i) for i in range(lay.n_layer)])

    @property
    def rolling(self) -> bool:
        """Whether the cache rolls (it never fills; its sinks move, `aah.model.cache`)."""
        return self.shift is not None

    def nbytes(self) -> int:
        """Bytes of keys and values held (0 before the first forward); see `KVCache.nbytes`."""
        return 0 if self.store is None else self.store.nbytes()

    def reserved_nbytes(self) -> int:
        """Bytes of the preallocated storage (0 before the first forward)."""
        return 0 if self.store is None else self.store.reserved_nbytes()

    def reset(self) -> None:
        super().reset()
        self.store, self.pending = None, [None] * len(self.layers)

    def snapshot(self) -> KVSnapshot:
        """A copy of what the cache holds now (after a prefill), for `restore`: e.g. a
        document prefilled once, each question answered from it. It costs
        `reserved_nbytes()` once more."""
        if self.store is None:
            raise ValueError("PerHeadCache.snapshot: the cache holds nothing yet; prefill first")
        return take_snapshot(self.store)

    def restore(self, snapshot: KVSnapshot) -> None:
        """Go back to `snapshot` (taken from this cache since its last reset): the store holds
        exactly, to the bit, what it held then, and the next forward continues from there."""
        if self.store is None:
            raise ValueError("PerHeadCache.restore: the cache was reset since the snapshot")
        restore_snapshot(self.store, snapshot)
        for layer in self.layers:
            layer.seen = snapshot.length
        self.pending = [None] * len(self.layers)

    def _build(self, k: torch.Tensor, position_ids: torch.Tensor | None) -> KVCache:
        pads = None
        if self.rolling and torch.compiler.is_compiling():
            raise _refuse("a rolling cache inside torch.compile")
        if position_ids is not None:
            # generate numbers each row's real tokens from 0: the last one's id gives the pad.
            last = position_ids.expand(k.shape[0], -1)[:, -1].long()
            pads = (k.shape[2] - 1) - last
            if not torch.compiler.is_compiling() and bool((pads < 0).any()):
                raise ValueError(
                    f"PerHeadCache: position ids {last.tolist()} do not start at 0 after left "
                    "padding"
                )
            if self.rolling and bool((pads > 0).any()):
                raise _refuse(
                    f"left padding ({pads.tolist()} slots) on a rolling cache (each row's "
                    "positions move with its own stream): stream one unpadded row at a time"
                )
        return KVCache(
            self.windows, n_kv_head=self.n_kv_head, head_dim=self.head_dim, batch=k.shape[0],
            max_len=self.max_cache_len, dtype=k.dtype, device=k.device, sinks=self.sinks,
            pads=pads, shift=self.shift,
        )  # fmt: skip

    def _update(self, layer: int, k: torch.Tensor, v: torch.Tensor, position_ids):  # type: ignore[no-untyped-def]
        previous = self.pending[layer]
        if previous is not None and not previous.consumed:
            raise ValueError(
                "PerHeadCache: the model is not running 'aah' attention (the last step's keys "
                "were never read); call aah.hf.apply(model, plan)"
            )
        seen, n_new = self.layers[layer].seen, k.shape[2]
        if not self.rolling and seen + n_new > self.max_cache_len:
            raise ValueError(
                f"PerHeadCache: {seen + n_new} positions exceed max_cache_len="
                f"{self.max_cache_len}; build the cache with max_cache_len >= prompt length + "
                "max_new_tokens"
            )
        if seen == 0:
            if layer == 0:
                self.store = self._build(k, position_ids)
            elif self.store is None or self.store.length != 0:
                raise ValueError("PerHeadCache: layers must run in order, from layer 0")
            if not self.rolling:  # a rolling prompt is attended and stored by `_attend`
                self.store.prefill(layer, k, v)  # only each head's sinks and last C positions
                if layer == len(self.layers) - 1:
                    self.store.advance(n_new)
        elif n_new != 1 and (self.store.pads is not None or torch.compiler.is_compiling()):
            raise _refuse(
                f"feeding {n_new} tokens to a filled cache of a left-padded batch or under "
                "torch.compile (chunked prefill)"
            )
        step = _Step(self, layer, seen, decoding=seen > 0 or self.rolling)
        self.pending[layer] = step
        self.layers[layer].seen = seen + n_new
        setattr(k, CACHE_MARK, step)
        return k, v

    def _check_prefill(self, allowed: torch.Tensor | None, padding: Any) -> None:
        store = self.store
        assert store is not None  # built by the prefill's first update
        if allowed is not None and padding is None:
            raise ValueError(
                "PerHeadCache: the prompt's attention mask has holes, packed sequences or a "
                "custom pattern; the per-head cache keeps left-padded batches only (pad on the "
                "left, as generate expects), or use a DynamicCache"
            )
        if padding is not None and padding.right:
            raise ValueError(
                "PerHeadCache: right padding is not supported (new tokens would follow the pad "
                "slots); pad on the left (tokenizer.padding_side = 'left')"
            )
        pads = padding.first.cpu() if padding is not None and padding.left else None
        built = store.pads
        if (pads is None) != (built is None) or (pads is not None and not torch.equal(pads, built)):
            raise ValueError(
                "PerHeadCache: the prompt's position ids and attention mask disagree on the "
                "left padding; number each row's real tokens from 0 (what generate does)"
            )

    def _attend(self, layer, q, k, v, scale, windows, sinks, allowed, logit=None):  # type: ignore[no-untyped-def]
        store = self.store
        assert store is not None  # a decoding step follows a prefill
        t = store.length
        if not torch.compiler.is_compiling():  # the checks branch on t and on the mask's values
            self._check_step(layer, windows, sinks, allowed, t, q.shape[2])
        n_new = q.shape[2]
        if n_new == 1:
            out = store.attend(layer, q, k, v, scale, logit)
        else:  # several new tokens after the held ones: a chunked prefill over them
            out = extend(store, layer, q, k, v, scale, logit)
        if layer == len(self.layers) - 1:
            store.advance(n_new)
        return out

    def _check_step(self, layer, windows, sinks, allowed, t: int, n: int) -> None:  # type: ignore[no-untyped-def]
        end = t + n  # positions after the step
        if [min(w, end) for w in windows] != [min(w, end) for w in self.windows[layer]] or [
            int(s) for s in sinks
        ] != self.sinks[layer]:
            raise ValueError(
                f"PerHeadCache: layer {layer}'s windows or sinks differ from those the cache "
                "was built with; build a new cache after changing the plan"
            )
        if not self._mask_matches(layer, allowed, t):
            raise ValueError(
                "PerHeadCache: the step's attention mask differs from the prompt's left padding "
                "(a new pad slot, a hole or a custom mask); pass generate's own attention mask"
            )

    def _mask_matches(self, layer: int, allowed: torch.Tensor | None, t: int) -> bool:
        """Whether the step's mask (B, 1 or H, n, t + n; rolling: n, n, the new slots only)
        shows each new query exactly the real slots up to its own, after the prompt's left
        padding, within the layer's own sliding window (its mask hides the rest)."""
        pads = self.store.pads if self.store is not None else None
        if allowed is None:
            return pads is None
        n = allowed.shape[-2]
        slots = torch.arange(t + n - allowed.shape[-1], t + n, device=allowed.device)
        query = torch.arange(t, t + n, device=allowed.device)[:, None]  # (n, 1)
        first = torch.zeros(1, dtype=torch.long) if pads is None else pads
        real = (slots >= first.to(allowed.device)[:, None, None]) & (slots <= query)
        cap = self.sliding[layer]
        recent = slots > query - cap if cap else torch.ones_like(real[0])
        return bool(((allowed == real[:, None]) | ~recent).all())
