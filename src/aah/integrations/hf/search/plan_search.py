"""Post-hoc window plan search for a Hugging Face model under a coverage or KV-byte budget.

1. A signal (`hf.search.signals`: "output" by default, "mass", "output+retrieval", "retrieval",
   "loss", "suffix-loss", or any registered one) measures on calibration batches what cutting
   each KV head to each candidate window costs: (n_layer, n_kv_head, n_windows), lower is
   better, with the search's sinks.
2. The one allocator (`controller.allocate.allocate`, via `hf.search.plan_allocation`) picks one
   candidate per KV head (the unit of KV memory; its query heads share it) over ALL layers,
   minimising the summed cost with the plan's causal coverage (sinks included) or its KV
   bytes at the calibration length within the budget; with `floor`, no KV head goes below
   that share of the uniform window at the same budget.

3. With `choose` (the default), every setting left open (sinks, whole layers, a floor) is
   tried over a small grid (`hf.search.plan_candidates`), one uniform window per sink count joins
   the allocations (on a model with sliding and full layers, also its full layers whole beside
   one window for the sliding layers), and each candidate runs whole on held-out blocks and on
   retrieval prompts built on them: the plan whose next-token distributions move least from
   full attention, the text and the prompts' answer rows weighing equally, is returned
   (`hf.search.plan_choice`, `hf.search.search_choice`), so the search never returns a plan that one
   window beats there; one window is kept unless a plan beats it by 1% (`CHOICE_MARGIN`: a smaller
   lead is noise-sized). With several signals each one's allocations are candidates.
4. With `refine` (off by default), the chosen plan's budget is then exchanged between groups
   of layers, each exchange judged on the same held-out blocks (`hf.search.plan_refine`); it is kept
   only where it lowers the divergence.

The plan is a `WindowPlan` (windows, sinks, seq_len = the calibration length T) whose `info`
records the search: `budget` (a coverage, or bytes), `budget_unit` ("coverage" or
"kv_bytes"), `coverage` (causal, at T, sinks included), `kv_bytes` (what `PerHeadCache` holds
per sequence after T positions; None for a plan of costs given without the model's KV shape),
`candidates`, `model` (its class name), `signal` (its name), `lost_mass` (the mean over query
heads of the chosen attention mass, for a signal whose unit is "mass", else None),
`loss_increase` (the summed single-KV-head loss rises of the chosen windows in nats, for a
"loss" unit, else None), `floor` (the floor window, only when there is one) and `choice`
(with `choose`: the objective, the held-out blocks, every candidate's score, the one chosen)
and `refine` (with `refine`: each step's move and divergence, the start first).
Older plan files (the searched-plan format with `sinks: null`) load the same way
(`WindowPlan.load`).

Layers with a sliding window of their own (Mistral, Qwen and Gemma 3 sliding layers) are
measured and costed in coverage as if full causal (at run time they see min(plan window,
sliding window)); their KV bytes count the capped window, and sinks only on heads cut below
it, as `PerHeadCache` stores them.
"""

from __future__ import annotations

import inspect
import math
import sys
from collections.abc import Sequence
from typing import Any

import torch

from aah.controller.allocate import (
    Budget,
    check_candidates,
    check_whole_layers,
    uniform_window,
)
from aah.integrations.hf.run.data import TextLike
from aah.integrations.hf.run.load import resolve_tokenizer
from aah.integrations.hf.run.model_layout import kv_shape, layout, sliding_windows
from aah.integrations.hf.search.calibration_text import (
    HELD_OUT_BLOCKS,
    MIX_BLOCKS,
    calibration_batches,
    model_positions,
    shipped_mix,
)
from aah.integrations.hf.search.plan_allocation import allocations
from aah.integrations.hf.search.plan_candidates import variants
from aah.integrations.hf.search.search_choice import check_objective, judged, uniform_candidates
from aah.integrations.hf.search.signal_registry import make_signal, signal_factory, signal_names
from aah.integrations.hf.search.signals import SearchContext, Signal
from aah.plan import WindowPlan
from aah.validate import check_int

#: the arguments of `search_plan` a cached plan is not keyed by: the model and the text are
#: fingerprinted, progress shows how, and `heal` runs after the cached search
UNKEYED = ("model", "calib", "tokenizer", "progress", "cache", "heal")
#: search-wide options passed to the signals that take them (ignored by the others)
SHARED_OPTIONS = ("sample_queries",)


def default_candidates(seq_len: int) -> list[int]:
    """T/32, T/16, ..., T/2 (powers of two below T) and T itself (full causal)."""
    below = [1 << p for p in range(max(0, seq_len.bit_length() - 6), seq_len.bit_length())]
    return sorted({w for w in below if w < seq_len} | {seq_len})


def check_signal(signal: str) -> str:
    """`signal` if a signal of that name is known (`hf.search.signal_registry`), else ValueError."""
    if signal not in signal_names():
        raise ValueError(f"signal must be one of {', '.join(signal_names())}, got {signal!r}")
    return signal


def search_budget(
    model: torch.nn.Module,
    seq_len: int,
    sinks: int | tuple[int, ...],
    *,
    budget: float | None = None,
    kv_budget: int | None = None,
    kv_fraction: float | None = None,
) -> Budget:
    """The model's `Budget` at `seq_len` from exactly one of a coverage, KV bytes, or a KV
    fraction in (0, 1] of the full cache's bytes at seq_len."""
    if sum(b is not None for b in (budget, kv_budget, kv_fraction)) != 1:
        raise ValueError("give exactly one of budget, kv_budget and kv_fraction")
    lay, shape = layout(model), kv_shape(model)
    if kv_fraction is not None:
        return Budget.at_kv_fraction(kv_fraction, seq_len, lay.n_layer, lay.n_head, shape, sinks)
    return Budget(seq_len, lay.n_layer, lay.n_head, budget, kv_budget, sinks, shape)


def floor_window(budget: Budget, floor: float) -> int:
    """The window `floor` (a share in [0, 1]) of the uniform window at `budget` is, at least
    1; 0 for no floor."""
    if isinstance(floor, bool) or not math.isfinite(floor) or not 0 <= floor <= 1:
        raise ValueError(f"floor must be a share in [0, 1] of the uniform window, got {floor}")
    if floor == 0:
        return 0
    uniform = uniform_window(budget)
    if uniform is None:
        raise ValueError(f"budget {budget.value:g} is below one window of 1 for every head")
    return max(1, int(floor * uniform))


def search_plan(
    model: torch.nn.Module,
    calib: TextLike | None = None,
    budget: float | None = None,
    *,
    kv_budget: int | None = None,
    kv_fraction: float | None = None,
    signal: str | Signal | Sequence[str | Signal] = "output",
    sinks: int | None = None,
    seq_len: int | None = None,
    candidates: Sequence[int] | None = None,
    floor: float | None = None,
    whole_layers: Sequence[int] | None = None,
    choose: bool = True,
    refine: bool = False,
    objective: str | None = None,
    batch_size: int = 1,
    max_batches: int | None = None,
    seed: int = 0,
    tokenizer: Any | None = None,
    progress: bool | None = None,
    sample_queries: int | None = None,
    suffix: int | None = None,
    cache: bool = False,
    heal: bool | Any = False,
) -> WindowPlan:
    """Measure a signal on `calib`, allocate windows per KV head (module docstring), and
    (with `choose`, the default) keep the candidate plan the model itself does best with.

    The choice (`hf.search.plan_candidates`, `hf.search.plan_choice`): every setting of `sinks`,
    `whole_layers` and `floor` left as None is tried over a small grid (0 or 4 sinks; no
    whole layer or the first; no floor or half the uniform window), each an allocation on the
    signal, and one uniform window per sink count joins them (on a hybrid model also its full
    layers whole, the sliding layers one window). Each candidate runs whole on held-out blocks
    (4 more blocks of the shipped mix; a quarter of the user's blocks) and on 8 retrieval
    prompts built on them, and the one whose next-token distributions move least from full
    attention (`objective`) is returned, with `info["choice"]` recording every candidate's
    score. A plan no better than one window there is never returned: the window is.

    Args:
        model: a supported transformers causal LM; left as it was on return.
        calib: calibration text or token ids (see `hf.run.data`; text blocks start with the
            tokenizer's BOS where it adds one, as a prompt does); None (the default): the
            shipped calibration mix (`hf.search.calibration_mix`: English reference prose and Python
            source from the running Python's standard library), `max_batches` blocks of T
            tokens (8 when not given), and 4 held-out blocks for the choice.
        budget: the plan's causal coverage cap (sinks included), in (0, 1]; or
        kv_budget: the cap on KV bytes per sequence after T positions; or
        kv_fraction: that cap as a fraction in (0, 1] of the full cache's bytes at T (one of
            the three).
        signal: a signal's name (`signal_names()`) or a `Signal` object carrying its own
            options (`Output(sample_queries=32)`, `SuffixLoss(suffix=64)`, `Blend(...)`).
            "output" (the default): the squared change of each head's residual-stream
            contribution, `hf.search.output_error`, one pass. "mass": attention mass beyond each
            window, one pass. "output+retrieval": the output signal blended, equally
            weighted, with the same change measured at the answer rows of 16 retrieval
            prompts built on the calibration text. "loss": the loss rise of cutting each KV
            head alone to each window, one pass per (KV head, candidate < T), `hf.search.cut_loss`.
            "suffix-loss": the same rise over the last tokens of each block, the context
            before them frozen at full attention, `hf.search.suffix_loss`. Several signals (a list,
            with `choose`): each one's allocations are candidates.
        sinks: attention sinks of every head, measured and costed; None (the default): chosen
            (0 or 4) with `choose`, else 0.
        seq_len: calibration length T (default 512, capped by the model and the data).
        candidates: ascending windows (default `default_candidates(T)`).
        floor: a share in [0, 1] of the uniform window at the same budget that every KV head
            keeps at least (that window is measured and is a choice); None (the default):
            chosen (0 or 0.5) with `choose`, else 0.
        whole_layers: layers whose KV heads all keep full attention, paid for out of the
            budget first; None (the default): chosen (none or [0]) with `choose`, else none.
        choose: judge the candidates end to end and return the best (default); False: the
            one allocation of the settings given, as measured by the signal alone.
        refine: after the choice, exchange budget between groups of layers, each exchange
            judged end to end on the same held-out blocks (`hf.search.plan_refine`; up to 2 rounds
            of 8 moves, 12 on a hybrid model, each a pass over the held-out blocks and
            prompts); the chosen plan stands unless a move lowers its divergence. Needs
            `choose`.
        objective: what the choice (and refine) judges plans by: "text+retrieval" (None, the
            default), the mean of the KL on the held-out blocks and the KL at the answer rows
            of 8 retrieval prompts built on them (a fact hidden in the text, then a question
            about it; `hf.search.plan_choice`); by default text alone where T is too short to hold a
            prompt (tens of tokens), as the record says. "text": the held-out blocks' KL alone
            (a plan that keeps the running text closest, whatever it loses of far facts).
            Needs `choose`.
        progress: progress bars over the calibration passes and the choice (None: when
            stderr is a terminal).
        sample_queries: exact attention rows per head and batch, for the signals that sample
            rows (a shorthand for their own option; default theirs, 64).
        suffix: the tokens per block the "suffix-loss" signal scores (default T // 16); a
            shorthand for `SuffixLoss(suffix=...)`.
        cache: return the plan a search of the same model, text and options has cached, and
            cache the plan this search finds (`hf.search.plan_cache`; says so on stderr).
        heal: True or a `HealOptions`: heal the plan found (`hf.search.heal`) on the same text
            (the shipped mix past the blocks the search read, or the user's text), at its T;
            the healed plan comes back, or the searched one where healing does not lower the
            held-out KL. The cache holds the searched plan; the heal runs every time.
    """
    if heal is not False:  # the search as asked, then the heal
        options = {k: v for k, v in locals().items() if k != "heal"}
        how = _heal_options(heal)  # a bad value fails before the search
        return _heal_found(search_plan(**options), how, options)
    if cache:  # every argument but the UNKEYED ones is in the key
        options = {k: v for k, v in locals().items() if k not in UNKEYED}
        return _cached_search(model, calib, tokenizer, progress, options)
    tokenizer = resolve_tokenizer(model, tokenizer)  # the one `load_model` tied, if not given
    if progress is None:
        progress = sys.stderr.isatty()
    for flag, value in (("choose", choose), ("refine", refine)):
        if not isinstance(value, bool):
            raise ValueError(f"{flag} must be True or False, got {value!r}")
    if refine and not choose:
        raise ValueError("refine judges plans on the choice's held-out blocks: it needs choose")
    check_objective(objective, choose)
    several = isinstance(signal, Sequence) and not isinstance(signal, str)
    if several and (not signal or not choose):
        raise ValueError(f"several signals need choose and at least one signal, got {signal!r}")
    signals = [resolve_signal(s, sample_queries=sample_queries, suffix=suffix)
               for s in (signal if several else [signal])]  # fmt: skip
    limit = {"budget": budget, "kv_budget": kv_budget, "kv_fraction": kv_fraction}
    if sinks is not None:
        check_int("sinks", sinks, minimum=0)
    settings = variants(sinks, whole_layers, floor, choose, sliding_windows(model))
    for v in settings:  # bad values fail before any measuring
        floor_window(search_budget(model, model_positions(model, seq_len), v.sinks, **limit),
                     v.floor)  # fmt: skip
    from_mix = calib is None
    n_measure = max_batches or MIX_BLOCKS
    if from_mix:
        calib = shipped_mix(model, tokenizer, seq_len, n_measure + HELD_OUT_BLOCKS * choose)
    batches = calibration_batches(
        model, calib, seq_len=seq_len, batch_size=batch_size,
        max_batches=None if from_mix else max_batches, tokenizer=tokenizer,
    )  # fmt: skip
    batches, held_out = _held_out(batches, choose, n_measure if from_mix else None, batch_size)
    t = batches[0].shape[1]
    cands = check_candidates(candidates) if candidates is not None else default_candidates(t)
    n_layer = layout(model).n_layer
    for v in settings:
        check_whole_layers(list(v.whole_layers), n_layer, cands[-1], t)  # before measuring
    caps = [search_budget(model, t, v.sinks, **limit) for v in settings]
    floors = [floor_window(cap, v.floor) for cap, v in zip(caps, settings, strict=True)]
    needed = sorted({*cands, *floors} - {0})  # every window any setting allocates on
    plans, refused = [], []
    memo: dict = {}  # a signal named twice (alone and in a blend) is measured once
    for measured in signals:
        costs_of = {}  # one measurement per sink count; a layer's costs are its own (local cuts)
        for count in sorted({s for v in settings for s in v.sinks_per_layer(n_layer)}):
            context = SearchContext(count, seed, progress, tokenizer, seq_len=t, memo=memo)
            costs_of[count] = context.costs(measured, model, batches, needed)
        plans += allocations(model, measured, settings, caps, floors, costs_of, cands, refused)
    if not plans:  # not one allocation fits: say why, rather than fall back unasked
        raise refused[0]
    if not choose:
        return plans[0][1]

    def budget_of(sinks: int | tuple[int, ...]) -> Budget:
        return search_budget(model, t, sinks, **limit)

    windows = uniform_candidates(model, [v.sinks for v in settings], budget_of)
    return judged(model, plans, windows, held_out, in_sample=held_out is batches,
                  objective=objective, refine=refine, budget_of=budget_of, seed=seed,
                  tokenizer=tokenizer, progress=progress)  # fmt: skip


def _heal_options(heal: Any) -> Any:
    """The `HealOptions` of `search_plan`'s `heal` (checked before the search runs)."""
    from aah.integrations.hf.search.heal import HealOptions

    if heal is True:
        return HealOptions()
    if isinstance(heal, HealOptions):
        return heal
    raise ValueError(f"heal must be True, False or a HealOptions, got {heal!r}")


def _heal_found(plan: WindowPlan, options: Any, search: dict[str, Any]) -> WindowPlan:
    from aah.integrations.hf.search.heal import heal

    return heal(search["model"], plan, search["calib"], seq_len=plan.seq_len, options=options,
                tokenizer=search["tokenizer"], progress=search["progress"])  # fmt: skip


def cache_key(model: torch.nn.Module, calib: Any, tokenizer: Any, options: dict) -> dict:
    """What a search's plan depends on (`hf.search.plan_cache`): the model's bytes and config,
    the text, the tokenizer, T, every option of `search_plan` and the package version."""
    import aah
    from aah.integrations.hf.search.plan_cache import model_fingerprint, text_fingerprint

    tok = resolve_tokenizer(model, tokenizer)
    return {
        "model": model_fingerprint(model),
        "text": text_fingerprint(calib),
        "tokenizer": None if tok is None else _tokenizer_id(tok),
        "positions": model_positions(model, options.get("seq_len")),
        "options": {k: repr(v) if isinstance(v, Signal) else v for k, v in options.items()},
        "version": aah.__version__,
    }


def _tokenizer_id(tok: Any) -> list:
    """What tells tokenizers apart in a key (the text's hash covers the rest): its class, its
    vocabulary size and its length with added tokens, where it has them."""
    size = len(tok) if hasattr(tok, "__len__") else None
    return [type(tok).__name__, getattr(tok, "vocab_size", None), size]


def _cached_search(
    model: torch.nn.Module, calib: Any, tokenizer: Any, progress: bool | None, options: dict
) -> WindowPlan:
    """`search_plan(model, calib, **options)` through the plan cache."""
    from aah.integrations.hf.search.plan_cache import entry_path, load_cached, store

    key = cache_key(model, calib, tokenizer, options)
    hit = load_cached(key)
    if hit is not None:
        print(f"plan from the cache: {entry_path(key)} (cache=False or --no-cache searches "
              "anew)", file=sys.stderr)  # fmt: skip
        return hit
    plan = search_plan(model, calib, tokenizer=tokenizer, progress=progress, **options)
    store(key, plan)
    return plan


def _held_out(
    batches: list[torch.Tensor], choose: bool, n_measure: int | None, batch_size: int
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(measured, held-out) batches: the mix's blocks past `n_measure`, else the last quarter
    of the user's blocks (at least one); a single batch is both (recorded as in-sample)."""
    if not choose:
        return batches, []
    if n_measure is not None:
        cut = -(-n_measure // batch_size)
        return batches[:cut], batches[cut:]
    if len(batches) < 2:
        return batches, batches
    cut = len(batches) - max(1, len(batches) // 4)
    return batches[:cut], batches[cut:]


def resolve_signal(signal: str | Signal, **options: Any) -> Signal:
    """`signal` itself, or the registered signal of that name built with the `options` given
    (not None): a `SHARED_OPTIONS` one goes to the signals that take it; any other the
    signal must take, else ValueError. A Signal object carries its own options."""
    given = {k: v for k, v in options.items() if v is not None}
    if not isinstance(signal, str):
        if not isinstance(signal, Signal):
            raise ValueError(
                f"signal must be a name or a Signal (name, unit, measure), got {signal!r}"
            )
        if set(given) - set(SHARED_OPTIONS):
            names = ", ".join(sorted(set(given) - set(SHARED_OPTIONS)))
            raise ValueError(f"{names}: give the signal's options on the signal itself")
        return signal
    check_signal(signal)
    takes = inspect.signature(signal_factory(signal)).parameters
    for name in list(given):
        if name not in takes:
            if name not in SHARED_OPTIONS:
                raise ValueError(f"{name} is not an option of the {signal!r} signal")
            del given[name]
    return make_signal(signal, **given)
