"""The loss of single-head cuts without recomputing what a cut cannot change.

`cut_costs` (aah.controller.ablation) needs the model's loss with one head cut to a window
while every other head keeps full attention, for every (layer, head, window). A cut in layer
l leaves the blocks before l and the other heads of block l exactly as they are with no
cut. So, per chunk of calibration windows, one full-attention forward records the residual
stream entering each block and each head's attention output; a cut then recomputes one
head's attention, the rest of its block and the blocks after it. Same operations on the same
inputs as a plain forward under the cut's plan, hence the same losses up to float rounding
(the plain forward may group heads differently inside the attention backend).

Models whose attention is not plain windowed softmax (a variant, a score-bias position) take
the plain route: one whole forward per cut. Attention sinks are off while measuring.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from aah.attention import windowed_attention
from aah.controller.ablation import losses_plan_by_plan
from aah.model import GPT
from aah.plan import Plan, full_plan

#: (layer, head, window): that head alone cut to that window.
Cut = tuple[int, int, int]


class CutProbe:
    """Mean next-byte loss (nats) of `model` on (N, T + 1) `windows`, in eval mode.

    `probe(plan)`: under any plan. `probe.cut_losses(cuts)`: with every head at full attention
    and under each single-head cut, reusing the shared prefix of the forward (module
    docstring). Both restore the plan in force and the training mode before returning.
    """

    def __init__(self, model: GPT, windows: torch.Tensor, batch_size: int) -> None:
        if windows.dim() != 2 or windows.shape[1] < 2:
            raise ValueError(f"windows must be (N, T + 1) with T >= 1, got {tuple(windows.shape)}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model, self.windows, self.batch_size = model, windows, batch_size

    def __call__(self, plan: Plan) -> float:
        with _evaluating(self.model, plan):
            return self._mean_loss()

    def cut_losses(
        self, cuts: Sequence[Cut], progress: Callable[[int, int], None] | None = None
    ) -> tuple[float, list[float]]:
        """(loss with every head at full attention, [loss under each cut])."""
        model = self.model
        cfg = model.config
        full = full_plan(cfg.n_layer, cfg.n_head, cfg.max_seq_len)
        for layer, head, window in cuts:
            if not (0 <= layer < cfg.n_layer and 0 <= head < cfg.n_head and window >= 1):
                raise ValueError(f"cut (layer {layer}, head {head}, window {window}) is invalid")
        if not self._reusable():
            return losses_plan_by_plan(self, full, [(l, h, int(w)) for l, h, w in cuts], progress)
        chunks = torch.split(self.windows, self.batch_size)
        base_sum, sums = 0.0, [0.0] * len(cuts)
        with _evaluating(model, full):
            for i, chunk in enumerate(chunks):
                base, per_cut = self._chunk_sums(chunk, cuts)
                base_sum += base
                sums = [a + b for a, b in zip(sums, per_cut, strict=True)]
                if progress is not None:
                    progress((i + 1) * len(cuts) // len(chunks), len(cuts))
        tokens = self.windows.shape[0] * (self.windows.shape[1] - 1)
        return base_sum / tokens, [s / tokens for s in sums]

    # -- internals -------------------------------------------------------------------------
    def _reusable(self) -> bool:
        return all(block.attn.attend is None for block in self.model.blocks)

    def _mean_loss(self) -> float:
        total = sum(loss for *_, loss in chunk_losses(self.model, self.windows, self.batch_size))
        return total / (self.windows.shape[0] * (self.windows.shape[1] - 1))

    def _chunk_sums(self, chunk: torch.Tensor, cuts: Sequence[Cut]) -> tuple[float, list[float]]:
        """Summed losses of one chunk: full attention, then each cut from the saved prefix."""
        model, target = self.model, chunk[:, 1:]
        x = model.embed_input(chunk[:, :-1])
        inputs, acts = [], []
        for block in model.blocks:
            inputs.append(x)
            x, layer_acts = block(x, model.position)
            acts.append(layer_acts)
        base = summed_loss(model.logits(x), target)
        group = model.config.n_head // model.config.n_kv_head
        per_cut = []
        for layer, head, window in cuts:
            q, k, v, out = acts[layer]
            assert out is not None  # plain softmax without sinks: the forward returns it
            kv = head // group
            heads = out.clone()
            heads[:, head : head + 1] = windowed_attention(
                q[:, head : head + 1],
                k[:, kv : kv + 1],
                v[:, kv : kv + 1],
                (int(window),),
                backend=model.blocks[layer].attn.backend,
            )
            block = model.blocks[layer]
            x = block.after_attention(inputs[layer], block.attn.merge_heads(heads))
            for later in model.blocks[layer + 1 :]:
                x, _ = later(x, model.position)
            per_cut.append(summed_loss(model.logits(x), target))
        return base, per_cut


@torch.no_grad()
def chunk_losses(
    model: GPT, windows: torch.Tensor, batch_size: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor, float]]:
    """Per chunk of (N, T + 1) windows: (logits, targets, summed next-byte loss in nats)."""
    for chunk in torch.split(windows, batch_size):
        logits = model(chunk[:, :-1])
        target = chunk[:, 1:]
        yield logits, target, summed_loss(logits, target)


def summed_loss(logits: torch.Tensor, target: torch.Tensor) -> float:
    """Summed next-byte cross-entropy (nats) of (B, T, V) logits against (B, T) targets."""
    flat = logits.flatten(0, 1).float()
    return float(F.cross_entropy(flat, target.flatten(), reduction="sum"))


@contextmanager
def _evaluating(model: GPT, plan: Plan) -> Iterator[None]:
    """Eval mode, no grad, `plan` in force without sinks; all three restored after."""
    in_force, sinks, was_training = model.window_plan(), model.sink_plan(), model.training
    model.eval()
    try:
        with torch.no_grad():
            model.set_window_plan(plan)  # and no attention sinks
            yield
    finally:
        model.set_window_plan(in_force, sinks)
        model.train(was_training)
