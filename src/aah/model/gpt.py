"""`GPT`: a pre-norm decoder whose attention heads each see their own causal window.

Shapes: B batch, T sequence, V vocab, C d_model, Hq query heads, Hkv key/value heads, D head dim.
Pure model code: no I/O. The window plan is plain data, `[layer][head] -> int`, and so are its
attention sinks (`[layer][head] -> int`, default 0: query i also sees keys j < s).

One path for training, prefill and decoding: `forward(idx, cache=cache)` runs the same blocks;
with a `KVCache` (from `make_cache`) the first call stores the prompt's keys and values and
each later call feeds one token per row at the next position (a rolling cache,
`make_cache(batch, rolling=True)`, takes chunks of any length and streams past max_seq_len).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from aah.attention import windowed_attention
from aah.attention.variants import make_variant
from aah.model.cache import UNBOUNDED_LEN, KVCache, LayerCache, refuse_unbounded
from aah.model.cache_extend import extend
from aah.model.config import SCORE_BIAS_POSITIONS, GPTConfig
from aah.model.positions import NoPosition, make_position
from aah.model.rope_shift import RopeShift
from aah.plan import check_plan, check_sinks

#: One layer's activations for a window controller: q and k after the position transform, v,
#: and the attention output (B, Hq, T, D) where it is plain windowed softmax without sinks
#: (what the controller's attention statistics describe; None otherwise).
Activations = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]


def plain_softmax(config: GPTConfig) -> bool:
    """Softmax attention without a score-bias position: `windowed_attention` itself, the only
    attention that takes sinks and that the KV cache decodes."""
    return config.attention == "softmax" and config.position not in SCORE_BIAS_POSITIONS


def make_norm(config: GPTConfig) -> nn.Module:
    if config.norm == "layernorm":
        return nn.LayerNorm(config.d_model, bias=False)
    return nn.RMSNorm(config.d_model, eps=1e-6)


class Attention(nn.Module):
    """Shared QKV projection, per-head windowed causal attention, flat concat, projection."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.n_kv_head = config.n_kv_head
        self.head_dim = config.head_dim
        self.backend = config.backend
        width = (config.n_head + 2 * config.n_kv_head) * config.head_dim
        self.qkv = nn.Linear(config.d_model, width, bias=False)
        self.proj = nn.Linear(config.d_model, config.d_model, bias=False)
        self.dropout = nn.Dropout(config.dropout)
        self.windows: tuple[int, ...] = (config.max_seq_len,) * config.n_head
        self.sinks: tuple[int, ...] = (0,) * config.n_head
        # Plain softmax without a score bias IS windowed_attention: keep calling it directly.
        self.attend: nn.Module | None = None
        if not plain_softmax(config):
            self.attend = make_variant(
                config.attention,
                n_head=config.n_head,
                n_kv_head=config.n_kv_head,
                head_dim=config.head_dim,
                max_seq_len=config.max_seq_len,
                position=config.position,
                backend=config.backend,
            )

    def forward(
        self, x: torch.Tensor, position: NoPosition, cache: LayerCache | None = None
    ) -> tuple[torch.Tensor, Activations]:
        """x (B, T, C) -> (B, T, C) and this layer's `Activations`. With a cache that has seen
        t > 0 positions, x is one token per row at position t."""
        b, t, _ = x.shape
        hq, hkv, d = self.n_head, self.n_kv_head, self.head_dim
        offset = 0 if cache is None else cache.length
        q, k, v = self.qkv(x).split([hq * d, hkv * d, hkv * d], dim=-1)
        q = q.view(b, t, hq, d).transpose(1, 2)  # (B, Hq, T, D)
        k = k.view(b, t, hkv, d).transpose(1, 2)  # (B, Hkv, T, D)
        v = v.view(b, t, hkv, d).transpose(1, 2)
        q, k = position.rotate(q, k, offset)
        rolling = cache is not None and cache.store.shift is not None
        if rolling and (offset == 0 or t > 1):  # the rolling rule over held and new keys
            y = extend(cache.store, cache.index, q, k, v, 1.0 / math.sqrt(d))  # type: ignore[union-attr]
        elif cache is not None and offset > 0:  # a decoding step: each head's window and sinks
            y = cache.attend(q, k, v, 1.0 / math.sqrt(d))
        elif self.attend is None:
            # K/V stay at Hkv heads: windowed_attention maps query head h to kv head h // G.
            extra = {"sinks": self.sinks} if any(self.sinks) else {}
            y = windowed_attention(q, k, v, self.windows, backend=self.backend, **extra)
        else:  # a variant (or a score-bias position): same windows, same GQA layout
            y = self.attend(q, k, v, self.windows)
        if cache is not None and offset == 0 and not rolling:
            cache.prefill(k, v)
        plain = self.attend is None and not any(self.sinks) and (cache is None or offset == 0)
        acts = (q, k, v, y if plain else None)
        return self.merge_heads(y), acts

    def merge_heads(self, y: torch.Tensor) -> torch.Tensor:
        """Per-head outputs (B, Hq, T, D) -> the layer's output (B, T, C): concat, project."""
        b, hq, t, d = y.shape
        return self.dropout(self.proj(y.transpose(1, 2).reshape(b, t, hq * d)))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.up = nn.Linear(config.d_model, config.ff_dim, bias=False)
        self.down = nn.Linear(config.ff_dim, config.d_model, bias=False)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.down(F.gelu(self.up(x))))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.norm1 = make_norm(config)
        self.attn = Attention(config)
        self.norm2 = make_norm(config)
        self.mlp = MLP(config)

    def forward(
        self, x: torch.Tensor, position: NoPosition, cache: LayerCache | None = None
    ) -> tuple[torch.Tensor, Activations]:
        a, acts = self.attn(self.norm1(x), position, cache)
        return self.after_attention(x, a), acts

    def after_attention(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """The block's output from its input x and its attention's output a."""
        x = x + a
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """Byte-level decoder with tied embeddings and a per-layer, per-head window plan.

    `forward(idx)` -> logits (B, T, V), always. `forward(idx, cache=cache)`: the same, at
    positions `cache.length` onward, through the cache (an empty cache takes the prompt
    (B, T >= 1); a filled one one token per row). `with model.capturing() as acts:` records
    each layer's detached (q, k, v, out) `Activations`: what a window controller reads.
    """

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config.validate()
        self._recording: list[Activations] | None = None
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.position = make_position(config)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.norm = make_norm(config)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2 style init: N(0, 0.02), residual projections scaled by 1/sqrt(2 n_layer)."""
        std = 0.02
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=std)
        for block in self.blocks:
            for proj in (block.attn.proj, block.mlp.down):
                nn.init.normal_(proj.weight, mean=0.0, std=std / math.sqrt(2 * self.config.n_layer))
        for param in self.position.parameters():
            nn.init.normal_(param, mean=0.0, std=std)

    def forward(self, idx: torch.Tensor, *, cache: KVCache | None = None) -> torch.Tensor:
        """(B, T) bytes -> next-byte logits (B, T, V): training and scoring without a cache;
        prefill (an empty cache) and decoding steps with one. Inside `capturing()` each layer's
        detached activations are recorded too."""
        if idx.dim() != 2:
            raise ValueError(f"idx must be (B, T), got shape {tuple(idx.shape)}")
        t = idx.shape[1]
        offset = 0 if cache is None else self._check_cache(cache, idx)
        rolling = cache is not None and cache.shift is not None
        if offset + t > self.config.max_seq_len and not rolling:
            what = f"position {offset} + {t} tokens" if offset else f"sequence length {t}"
            raise ValueError(f"{what} exceeds model.max_seq_len {self.config.max_seq_len}")
        x = self.embed_input(idx, offset)
        record = self._recording
        for i, block in enumerate(self.blocks):
            x, acts = block(x, self.position, None if cache is None else cache.layer(i))
            if record is not None:
                record.append(tuple(None if a is None else a.detach() for a in acts))  # type: ignore[arg-type]
        if cache is not None:
            cache.advance(t)
        return self.logits(x)

    @contextmanager
    def capturing(self) -> Iterator[list[Activations]]:
        """Inside the block, every forward appends each layer's detached (q, k, v, y) to the
        yielded list, layer by layer (y None where the layer's output is not plain attention),
        what the controller's policies read. Works through a DDP wrapper: the wrapper's
        forward runs this model's."""
        if self._recording is not None:
            raise ValueError("capturing() is already active on this model")
        self._recording = []
        try:
            yield self._recording
        finally:
            self._recording = None

    def embed_input(self, idx: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """(B, T) bytes at positions offset.. -> the residual stream entering block 0."""
        x = self.embed(idx)  # (B, T, C)
        pos = self.position.embed(idx.shape[1], idx.device, offset)
        if pos is not None:
            x = x + pos
        return self.drop(x)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """The residual stream after the last block -> next-byte logits (B, T, V)."""
        return F.linear(self.norm(x), self.embed.weight)  # tied embeddings

    def check_decodable(self) -> None:
        """Raise ValueError unless the KV cache can decode this model (see `plain_softmax`)."""
        if not plain_softmax(self.config):
            raise ValueError(
                "cached decoding supports model.attention 'softmax' with rope/learned/none "
                f"positions only, got attention {self.config.attention!r}, "
                f"position {self.config.position!r}"
            )

    def make_cache(
        self,
        batch: int,
        max_len: int | None = None,
        *,
        dtype: torch.dtype | None = None,
        rolling: bool = False,
    ) -> KVCache:
        """An empty `KVCache` for `forward(idx, cache=...)`: `batch` rows, room for `max_len`
        positions, each head sized by the plan and sinks in force. dtype: that of the keys
        (None: the parameters', or autocast's where it is on for their device). `rolling`
        (no `max_len`): a cache that never fills, every head keeping its sinks and window,
        the sinks moved to their StreamingLLM positions (`aah.model.cache`); it takes chunks
        of any length and streams past `max_seq_len`. Needs rotary or no positions and every
        head bounded (window plus sinks within `max_seq_len`)."""
        self.check_decodable()
        if rolling != (max_len is None):
            raise ValueError(
                "give max_len for a cache that fills, or rolling=True (and no max_len) for "
                f"one that rolls; got max_len={max_len}, rolling={rolling}"
            )
        weight = self.embed.weight
        if dtype is None:
            kind = weight.device.type
            on = torch.is_autocast_enabled(kind)
            dtype = torch.get_autocast_dtype(kind) if on else weight.dtype
        cfg = self.config
        return KVCache(
            self.window_plan(),
            n_kv_head=cfg.n_kv_head,
            head_dim=cfg.head_dim,
            batch=batch,
            max_len=UNBOUNDED_LEN if max_len is None else max_len,
            dtype=dtype,
            device=weight.device,
            sinks=self.sink_plan(),
            shift=self._rolling_shift() if rolling else None,
        )

    def _rolling_shift(self) -> RopeShift:
        """How a rolling cache moves this model's sinks: its rotary frequencies (none without
        positions: nothing to move); ValueError for learned positions or an unbounded head."""
        cfg = self.config
        if cfg.position == "learned":
            raise ValueError(
                "a rolling cache needs rotary or no positions: learned positions stop at "
                f"max_seq_len {cfg.max_seq_len}"
            )
        refuse_unbounded(self.window_plan(), self.sink_plan(), cfg.max_seq_len, "max_seq_len")
        inv_freq = getattr(self.position, "inv_freq", torch.zeros(cfg.head_dim // 2))
        return RopeShift.of([inv_freq] * cfg.n_layer, "pairs")

    def _check_cache(self, cache: KVCache, idx: torch.Tensor) -> int:
        """The cache's position count, once it is known to fit idx and the plan in force."""
        t = cache.length
        if t > 0 and idx.shape[1] != 1 and cache.shift is None:
            raise ValueError(f"a filled cache takes one token per row, got idx {tuple(idx.shape)}")
        if idx.shape[0] != cache.batch:
            raise ValueError(f"idx has {idx.shape[0]} rows, the cache {cache.batch}")
        if cache.plan != self.window_plan() or cache.sinks != self.sink_plan():
            raise ValueError(
                "the cache was made for another window plan or sinks; make a new cache "
                "after set_window_plan"
            )
        return t

    def set_window_plan(
        self, plan: Sequence[Sequence[int]], sinks: Sequence[Sequence[int]] | None = None
    ) -> None:
        """Set per-layer, per-head windows (ints >= 1; w >= T is full causal) and sinks (ints
        >= 0 shaped like the plan; None: none). Sinks need plain softmax attention. A
        `aah.plan.WindowPlan` gives both: `set_window_plan(p.windows, p.sinks)`."""
        n_layer, n_head = self.config.n_layer, self.config.n_head
        layers = check_plan(plan, n_layer, n_head)
        if sinks is None:
            sink_rows = [[0] * n_head for _ in range(n_layer)]
        else:
            sink_rows = check_sinks(sinks, n_layer, n_head)
        if any(any(r) for r in sink_rows) and not plain_softmax(self.config):
            raise ValueError(
                "sinks need plain softmax attention; this model runs attention "
                f"{self.config.attention!r} with position {self.config.position!r}"
            )
        for block, row, srow in zip(self.blocks, layers, sink_rows, strict=True):
            block.attn.windows = tuple(row)
            block.attn.sinks = tuple(srow)

    def window_plan(self) -> list[list[int]]:
        """The plan in force, `[layer][head]`."""
        return [list(block.attn.windows) for block in self.blocks]

    def sink_plan(self) -> list[list[int]]:
        """The sinks in force, `[layer][head]` (0: none)."""
        return [list(block.attn.sinks) for block in self.blocks]

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
