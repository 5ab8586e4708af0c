"""`aah plan search` and `aah plan apply` on a Hugging Face model, in three phases: the checks
that need the model's files only (`hf.checks` on its config or GGUF header, before the weights
load), the same checks on the loaded model (before any forward pass), then the work. The
search's files (the plan, the heatmap) are staged and land together only once all of it,
the --heldout sweep included, has succeeded.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from aah.cli.hf.checks import (
    MB,
    ModelLimits,
    check_budget,
    check_length,
    check_plan_shape,
    check_tokenizer,
    check_whole_layers,
    model_limits,
    preview_limits,
    sequence_length,
)
from aah.cli.hf.plan_checks import read_text
from aah.cli.hf.search_shortcut import cached_before_load, file_plan, shortcut_key

DEFAULT_BUDGET = 0.3

MEANINGS = (
    "causal coverage: the share of the T(T+1)/2 (query, key) pairs of causal attention that "
    "the windows and sinks compute, over all heads; KV share: the bytes the per-head cache "
    "holds after T tokens over those of the full cache"
)


def budgets(
    args: argparse.Namespace, limits: ModelLimits | None, t: int
) -> tuple[float | None, int | None, str | None]:
    """(coverage budget, KV byte budget, the KV flag as written) from --budget /
    --budget-kv-mb / --kv-fraction, one budget None. A fraction becomes bytes of the full cache
    at T as `Budget.at_kv_fraction` counts them, so it waits for the model's shape (None
    before a hub name loads)."""
    if args.budget_kv_mb is not None:
        return None, int(args.budget_kv_mb * MB), f"--budget-kv-mb {args.budget_kv_mb:g}"
    if args.kv_fraction is not None:
        from aah.attention.kv_bytes import full_kv_bytes

        if limits is None:
            return None, None, None
        full = full_kv_bytes(limits.kv, t)
        kv = max(1, int(args.kv_fraction * full))
        return None, kv, f"--kv-fraction {args.kv_fraction:g} ({kv / MB:.6g} MB)"
    return (DEFAULT_BUDGET if args.budget is None else args.budget), None, None


@dataclass(frozen=True)
class Texts:
    """The command's texts, read once: name -> (flag, path, text)."""

    items: dict[str, tuple[str, str, str]]

    @classmethod
    def read(cls, **flags: str | None) -> Texts:
        """name=path for each text flag given (None: not given)."""
        return cls({
            name: (f"--{name}", path, read_text(path, f"--{name}"))
            for name, path in flags.items() if path is not None
        })  # fmt: skip

    def check(self, t: int, count: Any, unit: str) -> None:
        for flag, path, text in self.items.values():
            check_length(count(text), t, flag, path, unit=unit)


def _prepare(args: argparse.Namespace) -> ModelLimits | None:
    """The model's limits from its files (None for a hub name), after checking the device and
    that text can be read for it; torch's threads set."""
    import torch

    from aah.integrations.hf.run.load import resolve_device

    limits = preview_limits(args.model)
    resolve_device(args.device, "--device")
    check_tokenizer(limits, args.model)
    if args.threads:
        torch.set_num_threads(args.threads)
    return limits


def _load(args: argparse.Namespace) -> tuple[Any, Any, ModelLimits]:
    """The model, the tokenizer its text is read with, and its exact limits."""
    from aah.integrations.hf.run.load import load_model, resolve_tokenizer

    model, tokenizer = load_model(args.model, args.device)
    return model, resolve_tokenizer(model, tokenizer), model_limits(model, tokenizer)


def _token_counter(tokenizer: Any, limits: ModelLimits) -> Any:
    from aah.integrations.hf.run.data import token_stream

    return lambda text: len(token_stream(text, tokenizer, limits.vocab_size))


def search(args: argparse.Namespace) -> int:
    from aah.integrations.hf.search.plan_search import default_candidates

    if args.refine and not args.choose:
        raise ValueError("--refine judges plans on the choice's held-out blocks: drop --no-choose")
    if not args.choose and (args.objective is not None or "," in args.signal):
        raise ValueError("--objective and several --signal names judge candidate plans: drop "
                         "--no-choose")  # fmt: skip
    texts = Texts.read(text=args.text, heldout=args.heldout)

    def check(limits: ModelLimits | None) -> tuple[int, float | None, int | None]:
        t = sequence_length(args.seq_len, limits)
        if args.suffix is not None and args.suffix >= t:
            raise ValueError(f"--suffix must be in [1, T={t}), got {args.suffix}")
        cands = args.candidates or default_candidates(t)
        check_whole_layers(args.whole_layers, limits, cands, t)
        budget, kv_budget, shown = budgets(args, limits, t)
        check_budget(budget, kv_budget, args.sinks or 0, t, cands, limits, shown, args.whole_layers)
        return t, budget, kv_budget

    limits = _prepare(args)
    texts.check(check(limits)[0], lambda text: len(text.encode("utf-8")), "bytes")
    text: Any = texts.items["text"][2] if "text" in texts.items else None
    key = None if limits is None else shortcut_key(args, text, *check(limits))
    hit = cached_before_load(key)
    if hit is not None:  # the same command before: its plan, without loading the model
        t, _, kv_budget = check(limits)
        return _write_plan(args, hit, limits, t, kv_budget is not None, {})
    model, tokenizer, exact = _load(args)
    t, budget, kv_budget = check(exact)
    texts.check(t, _token_counter(tokenizer, exact), "tokens")
    if key is not None and (key["seq_len"], key["kv_budget"]) != (t, kv_budget):
        key = None  # the files' preview and the loaded model disagree: key by the model only
    return _search_loaded(args, model, tokenizer, exact, t, budget, kv_budget, texts, key)


def _search_loaded(
    args: argparse.Namespace, model: Any, tokenizer: Any, limits: ModelLimits, t: int,
    budget: float | None, kv_budget: int | None, texts: Texts, key: dict[str, Any] | None,
) -> int:  # fmt: skip
    from aah.integrations.hf.search.plan_search import search_plan
    from aah.integrations.hf.search.sweep import budget_sweep, sweep_json, sweep_table

    options = {
        "seq_len": t, "candidates": args.candidates, "batch_size": args.batch_size,
        "max_batches": args.max_batches, "sample_queries": args.sample_queries,
        "seed": args.seed, "tokenizer": tokenizer, "sinks": args.sinks,
    }  # fmt: skip
    text: Any = texts.items["text"][2] if "text" in texts.items else None
    if text is None:  # the shipped mix, cut at T: what `search_plan` reads when given no text
        from aah.integrations.hf.search.calibration_text import HELD_OUT_BLOCKS, MIX_BLOCKS

        held = f", and {HELD_OUT_BLOCKS} more to judge plans on" if args.choose else ""
        print(f"calibrating on the shipped mix: {args.max_batches or MIX_BLOCKS} blocks of {t} "
              f"tokens{held}", flush=True)  # fmt: skip
    plan = search_plan(
        model, text, budget, kv_budget=kv_budget, suffix=args.suffix,
        signal=args.signal.split(",") if "," in args.signal else args.signal,
        whole_layers=args.whole_layers, choose=args.choose, refine=args.refine,
        objective=args.objective, progress=True, cache=args.cache, **options,
    )  # fmt: skip
    file_plan(key, plan)
    extra: dict[str, Any] = {}
    if args.heldout:
        from aah.integrations.hf.search.calibration_text import shipped_mix

        heldout = texts.items["heldout"][2]
        sweep_text = (
            text if text is not None else shipped_mix(model, tokenizer, t, args.max_batches)
        )
        sweep_options = {**options, "sinks": _most_sinks(plan)}
        rows = budget_sweep(model, sweep_text, heldout, args.sweep_budgets, **sweep_options)
        extra["sweep"] = (sweep_table(rows), json.loads(sweep_json(rows))["rows"])
    return _write_plan(args, plan, limits, t, kv_budget is not None, extra)


def _most_sinks(plan: Any) -> int:
    return max((s for row in plan.sinks or [[0]] for s in row), default=0)


def _write_plan(
    args: argparse.Namespace, plan: Any, limits: ModelLimits, t: int, kv_capped: bool,
    extra: dict[str, Any],
) -> int:  # fmt: skip
    """What the search found, on stdout, and the plan file (with its heatmap)."""
    from aah.atomic import StagedWrites
    from aah.attention.kv_bytes import full_kv_bytes

    full = full_kv_bytes(limits.kv, t)
    sinks = _most_sinks(plan)
    print_search_summary(plan, limits, full, sinks, kv_capped)
    info = plan.info
    summary: dict[str, Any] = {
        "out": args.out, "budget": info["budget"], "budget_unit": info["budget_unit"],
        "coverage": info["coverage"], "kv_bytes": info["kv_bytes"], "kv_bytes_full": full,
        "kv_share": (info["kv_bytes"] or 0) / full, "seq_len": t, "sinks": sinks,
        "signal": info["signal"],
    }  # fmt: skip
    if "choice" in info:
        summary["chosen"] = info["choice"]["chosen"]
    if "refine" in info:
        summary["refined"] = [move for move, _ in info["refine"]["steps"][1:]]
    if "sweep" in extra:
        table, rows = extra["sweep"]
        print(table)
        summary["sweep"] = rows
    written = [args.out]
    with StagedWrites() as staged:  # both files, or neither
        staged.write_text(args.out, plan.to_json() + "\n")
        if args.heatmap:
            from aah.report.plan_heatmap import save_heatmap

            title = f"{info['model']}, budget {info['budget']}"
            save_heatmap(plan, staged.path_for(args.heatmap), title=title)
            written.append(args.heatmap)
    print(f"wrote {' and '.join(written)}")
    print(json.dumps(summary))
    return 0


def print_search_summary(
    plan: Any, limits: ModelLimits, full: int, sinks: int, kv_capped: bool
) -> None:
    """What the search found, one window per KV head and layer, and what the numbers mean."""
    t, n_kv, info = plan.seq_len, limits.kv.n_kv_head, plan.info
    group = limits.n_head // n_kv
    kv = info["kv_bytes"] or 0
    budget = info["budget"]
    cap = f"{budget / MB:.3f} KV MB" if kv_capped else f"causal coverage {budget}"
    expected = (
        f"summed single-KV-head loss rise {info['loss_increase']:.4f} nats"
        if info["loss_increase"] is not None
        else f"expected lost mass {info['lost_mass']:.4f}"
        if info["lost_mass"] is not None
        else f"allocated on the {info['signal']} signal"
    )
    print(
        f"plan for {info['model']} at T={t} ({info['signal']} signal, {sinks} sinks per head), "
        f"budget {cap}: causal coverage {info['coverage']:.4f}, KV {kv / MB:.3f} MB of the full "
        f"cache's {full / MB:.3f} MB per sequence (KV share {kv / full:.3f}); {expected}"
    )
    print(f"windows per layer, one per KV head ({n_kv} a layer, each read by {group} query heads):")
    for layer, row in enumerate(plan.windows):
        print(f"  layer {layer:3d}: {' '.join(str(w) for w in row[::group])}")
    print(MEANINGS)
    choice = info.get("choice")
    if choice:
        print(f"chosen among {len(choice['scores'])} candidates by {choice['objective']} "
              f"on {choice['held_out_blocks']} {choice['held_out']} blocks (lower is "
              "better):")  # fmt: skip
        scores = choice["scores"]  # lowest first
        for name, score in scores.items():
            print(f"  {'*' if name == choice['chosen'] else ' '} {score:.5f}  {name}")
        lowest = next(iter(scores))
        if lowest != choice["chosen"] and "margin" in choice:
            lead = 1 - scores[lowest] / scores[choice["chosen"]]
            print(f"one window kept: {lowest!r} leads it by {lead:.2%}, under the "
                  f"{choice['margin']:.0%} a plan needs to be chosen over one window")  # fmt: skip
    if all(w >= t for row in plan.windows for w in row):
        print(f"note: every head keeps its whole context at T={t}: the budget cuts nothing")


def apply(args: argparse.Namespace) -> int:
    from aah.attention.registry import BACKENDS
    from aah.plan import WindowPlan

    texts = Texts.read(text=args.text)
    plan = WindowPlan.load(args.plan)  # any plan file: a search's, a benchmark's, an export
    if args.backend != "auto" and args.backend not in BACKENDS:
        raise ValueError(
            f"--backend must be auto or one of {', '.join(BACKENDS)}, got {args.backend!r}"
        )

    def check(limits: ModelLimits | None) -> int:
        check_plan_shape(plan.windows, limits, args.plan)
        if args.seq_len is None and plan.seq_len is not None:
            positions = limits.max_positions if limits is not None else None
            if positions is not None and plan.seq_len > positions:
                raise ValueError(
                    f"plan file {args.plan!r} was made for T={plan.seq_len}, beyond the model's "
                    f"{positions} positions: give --seq-len {positions} or less"
                )
        return sequence_length(args.seq_len or plan.seq_len, limits)

    limits = _prepare(args)
    texts.check(check(limits), lambda text: len(text.encode("utf-8")), "bytes")
    model, tokenizer, exact = _load(args)
    t = check(exact)
    texts.check(t, _token_counter(tokenizer, exact), "tokens")
    return _apply_loaded(args, model, tokenizer, exact, t, plan, texts.items["text"][2])


def _apply_loaded(
    args: argparse.Namespace, model: Any, tokenizer: Any, limits: ModelLimits, t: int,
    plan: Any, text: str,
) -> int:  # fmt: skip
    from aah.attention import coverage
    from aah.attention.kv_bytes import full_kv_bytes, plan_kv_bytes
    from aah.integrations.hf import applied
    from aah.integrations.hf.search.calibration_text import calibration_batches
    from aah.integrations.hf.search.sweep import perplexity

    batches = calibration_batches(
        model, text, seq_len=t, batch_size=args.batch_size, max_batches=args.max_batches,
        tokenizer=tokenizer,
    )  # fmt: skip
    blocks = sum(int(b.shape[0]) for b in batches)
    print(f"scoring {blocks} blocks of T={t} tokens ({blocks * t} tokens) of {args.text}")
    base = perplexity(model, batches)
    with applied(model, plan, backend=args.backend):
        planned = perplexity(model, batches)
    cov = coverage(plan.windows, t, plan.sinks).causal
    kv = plan_kv_bytes(plan.windows, plan.sinks, limits.kv, t)
    full = full_kv_bytes(limits.kv, t)
    print(f"perplexity without plan: {base:.4f}")
    print(f"perplexity with plan:    {planned:.4f} ({100 * (planned / base - 1):+.3f}%)")
    print(f"causal coverage at T={t}: {cov:.4f}")
    print(
        f"KV cache per sequence at T={t}: {kv / MB:.3f} MB of the full cache's "
        f"{full / MB:.3f} MB (KV share {kv / full:.3f})"
    )
    print(MEANINGS)
    result = {"ppl_full": base, "ppl_plan": planned, "coverage": cov, "seq_len": t}
    result |= {"blocks": blocks, "tokens": blocks * t}
    print(json.dumps({**result, "kv_bytes": kv, "kv_bytes_full": full, "kv_share": kv / full}))
    return 0
