"""What a plan search allocates on: signals behind one protocol, and the built-in ones.

A signal measures, on calibration batches, a cost per KV head and candidate window: how much
the model loses when that KV head (the unit of KV memory) is cut to that window, lower is
better. `hf.search.plan_search.search_plan` hands every signal the same batches, candidates and
shared settings (`SearchContext`), and allocates windows on the costs with one allocator
(`controller.allocate.allocate`). A signal's own options live on the signal:

    Mass(sample_queries=64)     attention mass beyond each window (one pass)
    Output(sample_queries=64)   the squared change of each head's residual-stream contribution
    Retrieval(prompts=16)       the output change at the answer rows of retrieval prompts
    Loss()                      the calibration loss rise of each single-KV-head cut
    SuffixLoss(suffix=None)     the same rise over the last tokens of each block (default T/16)
    Blend((Output(), Retrieval()), weights=None)   parts, each scaled to weigh the same, summed

A new signal is one class with `name`, `unit` and `measure` (the `Signal` protocol) and one
`register_signal(name, factory)` line (`hf.search.signal_registry`); docs/architecture.md says more.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

from aah.controller.allocate import kv_head_costs
from aah.integrations.hf.run.model_layout import layout


@dataclass(frozen=True)
class SearchContext:
    """The search's settings every signal shares: attention sinks (measured and costed),
    the seed of any sampling, progress bars, the tokenizer text prompts are built with, and
    the calibration length T."""

    sinks: int = 0
    seed: int = 0
    progress: bool = False
    tokenizer: Any | None = None
    seq_len: int | None = None  # T of the calibration batches
    #: costs already measured on these batches, by (signal, sinks, candidates), so that a
    #: signal named twice (alone and inside a blend, say) is measured once: the search shares
    #: one dict between its contexts; None (a context built by hand) measures every time
    memo: dict[Any, torch.Tensor] | None = field(default=None, compare=False, repr=False)

    def costs(
        self,
        signal: Signal,
        model: torch.nn.Module,
        batches: Sequence[torch.Tensor],
        candidates: Sequence[int],
    ) -> torch.Tensor:
        """`signal.measure(...)` on this context, once per `memo` for a hashable signal (the
        built-in ones are frozen dataclasses; an unhashable one is measured every time)."""
        key = (signal, self.sinks, tuple(candidates))
        try:
            hash(key)
        except TypeError:
            key = None
        if self.memo is None or key is None:
            return signal.measure(model, batches, candidates, self)
        if key not in self.memo:
            self.memo[key] = signal.measure(model, batches, candidates, self)
        return self.memo[key]


@runtime_checkable
class Signal(Protocol):
    """Costs per KV head and candidate window, measured on calibration batches.

    `name` goes into the plan's metadata. `unit` says what the costs are, so the plan can
    record them: "mass" (attention mass lost: the plan keeps `lost_mass`), "loss" (nats of
    loss rise: the plan keeps `loss_increase`), or "" (another scale)."""

    name: str
    unit: str

    def measure(
        self,
        model: torch.nn.Module,
        batches: Sequence[torch.Tensor],
        candidates: Sequence[int],
        context: SearchContext,
    ) -> torch.Tensor:
        """(n_layer, n_kv_head, len(candidates)) float64 costs >= 0, lower is better."""
        ...


def _per_kv_head(model: torch.nn.Module, per_query_head: torch.Tensor) -> torch.Tensor:
    return kv_head_costs(per_query_head, layout(model).n_kv_head)


@dataclass(frozen=True)
class _OnePass:
    """A signal of `hf.search.measure.measure_signal` (one pass with a probe in every layer) named
    like the subclass's `name`, on `sample_queries` exact rows per head and batch."""

    sample_queries: int = 64
    name: str = field(default="", init=False)

    def measure(self, model: Any, batches: Any, candidates: Any, context: SearchContext) -> Any:
        from aah.integrations.hf.search.measure import measure_signal

        return _per_kv_head(model, measure_signal(
            model, batches, candidates, self.name, sample_queries=self.sample_queries,
            seed=context.seed, sinks=context.sinks, progress=context.progress,
        ))  # fmt: skip


@dataclass(frozen=True)
class Mass(_OnePass):
    """The attention mass beyond each window and outside the sinks, on `sample_queries` exact
    rows per head and batch."""

    name: str = field(default="mass", init=False)
    unit: str = field(default="mass", init=False)


@dataclass(frozen=True)
class Output(_OnePass):
    """The squared change of each head's contribution to the residual stream when cut to each
    window (`hf.search.output_error`), on `sample_queries` rows per head and batch."""

    name: str = field(default="output", init=False)
    unit: str = field(default="", init=False)


@dataclass(frozen=True)
class Retrieval:
    """The output change at the answer rows of `prompts` retrieval prompts built on the
    calibration blocks (`hf.search.retrieval_calib`)."""

    prompts: int = 16
    sample_queries: int = 64
    name: str = field(default="retrieval", init=False)
    unit: str = field(default="", init=False)

    def measure(self, model: Any, batches: Any, candidates: Any, context: SearchContext) -> Any:
        from aah.integrations.hf.search.measure import measure_retrieval

        return _per_kv_head(model, measure_retrieval(
            model, batches, candidates, prompts=self.prompts, tokenizer=context.tokenizer,
            sample_queries=self.sample_queries, seed=context.seed, sinks=context.sinks,
            progress=context.progress,
        ))  # fmt: skip


@dataclass(frozen=True)
class Loss:
    """The calibration loss rise of cutting each KV head alone to each window (`hf.search.cut_loss`:
    one pass per KV head and candidate below T)."""

    name: str = field(default="loss", init=False)
    unit: str = field(default="loss", init=False)

    def measure(self, model: Any, batches: Any, candidates: Any, context: SearchContext) -> Any:
        from aah.integrations.hf.search.cut_loss import measure_loss_costs

        return measure_loss_costs(
            model, batches, candidates, sinks=context.sinks, progress=context.progress
        )


@dataclass(frozen=True)
class SuffixLoss:
    """The loss rise of each single-KV-head cut over the last `suffix` tokens of each block,
    the context before them frozen at full attention (`hf.search.suffix_loss`; default T // 16)."""

    suffix: int | None = None
    name: str = field(default="suffix-loss", init=False)
    unit: str = field(default="loss", init=False)

    def measure(self, model: Any, batches: Any, candidates: Any, context: SearchContext) -> Any:
        from aah.integrations.hf.search.suffix_loss import measure_suffix_loss_costs

        t = batches[0].shape[1]
        return measure_suffix_loss_costs(
            model, batches, candidates, suffix=self.suffix or max(2, t // 16),
            sinks=context.sinks, progress=context.progress,
        )  # fmt: skip


@dataclass(frozen=True)
class Blend:
    """Several signals as one: each part's costs divided by their total at the smallest
    candidate (so each weighs the same whatever its units), times its weight (None: all 1),
    then summed. `name` names the blend in plans."""

    parts: tuple[Signal, ...]
    weights: tuple[float, ...] | None = None
    name: str = "blend"
    unit: str = field(default="", init=False)

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError("a blend needs at least one signal")
        object.__setattr__(self, "parts", tuple(self.parts))
        if self.weights is not None:
            weights = tuple(float(w) for w in self.weights)
            if len(weights) != len(self.parts) or not all(
                math.isfinite(w) and w >= 0 for w in weights
            ) or not any(weights):  # fmt: skip
                raise ValueError(
                    f"a blend needs one finite weight >= 0 per part (not all 0), got "
                    f"{self.weights!r} for {len(self.parts)} parts"
                )
            object.__setattr__(self, "weights", weights)

    def measure(self, model: Any, batches: Any, candidates: Any, context: SearchContext) -> Any:
        from aah.integrations.hf.search.measure import blended

        costs = [context.costs(p, model, batches, candidates) for p in self.parts]
        return blended(costs, self.weights)


def output_and_retrieval(sample_queries: int = 64, prompts: int = 16) -> Blend:
    """ "output+retrieval": the output signal of the running text blended with `Retrieval`."""
    parts = (Output(sample_queries), Retrieval(prompts, sample_queries))
    return Blend(parts, name="output+retrieval")


#: built-in name -> factory (`hf.search.signal_registry` lists the names without importing this)
BUILTIN_FACTORIES: dict[str, Callable[..., Any]] = {
    "output": Output, "mass": Mass, "output+retrieval": output_and_retrieval,
    "retrieval": Retrieval, "loss": Loss, "suffix-loss": SuffixLoss,
}  # fmt: skip
