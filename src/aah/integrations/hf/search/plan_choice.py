"""A whole plan judged by what the model outputs: the end-to-end objective of the plan search.

A signal prices each KV head's cut on its own, near that head (its layer's output change, or
one cut's loss rise); the plans it leads to can still be bad as a whole: on Gemma 3 270M the
output signal kept sliding layers whole and cut the three layers that read past 512 tokens to
64, a plan 0.7 nats worse than one window of the same bytes. Here a candidate plan is run as a
whole, and scored by how far the model's next-token distributions move from full attention:

    divergence = mean over scored positions of KL(p_full || p_plan)   (nats per token)

on held-out blocks (never the ones the signal measured on). The scored positions of a block
of T tokens are `positions_per_block` evenly spaced ones from T/8 on, where windows cut; only
their logits are computed (`logits_to_keep`), so a 262k-token vocabulary costs little.

With retrieval probes (`FullReference.of(..., probes=...)`: prompts with one fact hidden in
held-out text, then a question and its answer, `hf.search.retrieval_calib`), the divergence is the
mean of two equal parts: the one above, and the same KL at the rows that predict each probe's
answer, where the model must fetch the fact from far back. Running text alone barely weighs
such fetches: a plan can move the text's distributions little and still lose every fact.

`choose` scores every candidate, lowest first. The search (`hf.search.search_choice`) always has one
uniform window (with and without sinks) among them and keeps it unless another plan beats it
by a margin, so the plan returned is never worse than one window on the held-out blocks by
this measure.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from aah.integrations.hf.run.apply_plan import applied
from aah.integrations.hf.run.model_layout import layout, sliding_windows
from aah.plan import WindowPlan, full_plan

#: positions per block whose next-token distributions are compared
POSITIONS_PER_BLOCK = 128


def scored_positions(seq_len: int, count: int = POSITIONS_PER_BLOCK) -> torch.Tensor:
    """(P,) evenly spaced positions in [T/8, T - 1]: the first T/8 tokens see nearly all of
    their context under any window worth searching, so they would only dilute the score."""
    if seq_len < 2:
        raise ValueError(f"a block needs at least 2 tokens, got {seq_len}")
    start = seq_len // 8
    n = min(count, seq_len - start)
    return torch.linspace(start, seq_len - 1, n).round().long().unique()


def _log_probs(model: torch.nn.Module, ids: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """(B, P, V) float32 log-probabilities of the next token at `rows`."""
    try:
        logits = model(ids, logits_to_keep=rows).logits
    except TypeError:  # a model whose forward has no logits_to_keep
        logits = model(ids).logits[:, rows]
    return torch.log_softmax(logits.float(), dim=-1)


@dataclass
class FullReference:
    """The full-attention log-probabilities at each held-out block's scored positions (and at
    each probe's answer rows), computed once and compared with every candidate's."""

    batches: Sequence[torch.Tensor]
    rows: torch.Tensor
    log_probs: list[torch.Tensor] = field(default_factory=list)
    probes: Sequence[tuple[torch.Tensor, torch.Tensor]] = ()
    probe_log_probs: list[torch.Tensor] = field(default_factory=list)

    @classmethod
    def of(
        cls,
        model: torch.nn.Module,
        batches: Sequence[torch.Tensor],
        probes: Sequence[tuple[torch.Tensor, Sequence[int]]] = (),
    ) -> FullReference:
        """The reference of `model` at full attention (each layer with its own sliding
        window, if it has one) on `batches` (B, T) and on `probes`, each (ids (1, T'), the
        rows whose next token is part of its answer)."""
        if not batches:
            raise ValueError("no held-out blocks to judge plans on")
        t = int(batches[0].shape[1])
        probes = [(ids, torch.as_tensor(list(rows), dtype=torch.long)) for ids, rows in probes]
        if any(len(rows) == 0 for _, rows in probes):
            raise ValueError("a retrieval probe has no answer rows to score")
        ref = cls(batches, scored_positions(t), probes=probes)
        lay = layout(model)
        longest = max([t, *(int(ids.shape[-1]) for ids, _ in probes)])
        device = next(model.parameters()).device
        with torch.no_grad(), applied(model, full_plan(lay.n_layer, lay.n_head, longest), sinks=0):
            ref.log_probs = [_log_probs(model, ids.to(device), r) for ids, r in ref._text()]
            ref.probe_log_probs = [_log_probs(model, ids.to(device), r) for ids, r in probes]
        return ref

    def _text(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(batch, self.rows) for batch in self.batches]

    def divergence(self, model: torch.nn.Module, plan: WindowPlan) -> float:
        """Mean KL(full || plan) in nats per scored token, `plan`'s windows and sinks applied
        inside the call (the model is left as it was); with probes, the mean of that and the
        mean KL at the probes' answer rows."""
        with torch.no_grad(), applied(model, plan.windows, sinks=plan.sinks or 0):
            parts = [_mean_kl(model, self._text(), self.log_probs)]
            if self.probes:
                parts.append(_mean_kl(model, self.probes, self.probe_log_probs))
        return sum(parts) / len(parts)


def _mean_kl(
    model: torch.nn.Module,
    inputs: Sequence[tuple[torch.Tensor, torch.Tensor]],
    full: Sequence[torch.Tensor],
) -> float:
    """Mean over every scored row of KL(full || the model as it is now), one input at a time
    (a large vocabulary's log-probabilities are held for one input only)."""
    total, count = 0.0, 0
    device = next(model.parameters()).device
    for (ids, rows), reference in zip(inputs, full, strict=True):
        planned = _log_probs(model, ids.to(device), rows)
        kl = (reference.exp() * (reference - planned)).sum(-1)
        total += float(kl.double().sum())
        count += kl.numel()
    return total / count


@dataclass(frozen=True)
class Scored:
    """A candidate plan, what it was named in the search, and its divergence."""

    name: str
    plan: WindowPlan
    divergence: float


def choose(
    model: torch.nn.Module,
    candidates: Sequence[tuple[str, WindowPlan]],
    held_out: Sequence[torch.Tensor],
    *,
    progress: bool = False,
    reference: FullReference | None = None,
) -> list[Scored]:
    """Every (name, plan) scored on `held_out` (module docstring), lowest divergence first;
    ties keep the candidates' order. The model is left as it was. `reference`: the full
    attention's distributions on `held_out`, when already computed.

    Candidates that are the same plan under other names (on Gemma 3, "layer 0 whole" is a
    window its sliding layer 0 already has) run once and share the score."""
    if not candidates:
        raise ValueError("no candidate plans to choose from")
    bar: Any = contextlib.nullcontext()
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(candidates), desc="judging plans", unit="plan")
    with bar as tick:
        if reference is None:
            reference = FullReference.of(model, held_out)
        scored, seen, caps = [], {}, sliding_windows(model)
        for name, plan in candidates:
            same = _key(plan, caps)
            if same not in seen:
                seen[same] = reference.divergence(model, plan)
            scored.append(Scored(name, plan, seen[same]))
            if tick is not None:
                tick.update(1)
    return sorted(scored, key=lambda s: s.divergence)


def _key(plan: WindowPlan, caps: Sequence[int | None]) -> tuple:
    """What the model computes under `plan`: its windows, each capped at its layer's own
    sliding window `caps` (a wider one changes nothing), and its sinks."""
    windows = tuple(
        tuple(min(w, cap) if cap else w for w in row)
        for row, cap in zip(plan.windows, caps, strict=True)
    )
    return windows, tuple(tuple(row) for row in plan.sinks)
