"""The plans of a pretrained study: candidate windows, each method's plan at each KV budget from
the calibration signals (measured once and kept in the cell store), and the key that lets
identical plans share their cells."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import torch

from experiments.pretrained import methods
from experiments.pretrained.cells import CellStore


def candidates(seq_len: int, recent: int) -> list[int]:
    """T/32 .. T/2 (powers of two) with the 1.5x step between each two, duo's `recent`, and T:
    a budget between two powers of two can be spent without jumping a whole octave."""
    from aah.integrations.hf.search.plan_search import default_candidates

    powers = default_candidates(seq_len)
    return sorted({*powers, *(w * 3 // 2 for w in powers if w * 3 // 2 < seq_len), recent})


def digest(plan: Any, sinks: int) -> str:
    """A short key of a plan and its sinks: identical plans share their cells."""
    return hashlib.sha256(json.dumps([plan, sinks]).encode()).hexdigest()[:16]


def measure_signals(
    model, tokenizer, calib, cands, names, args, store: CellStore
) -> dict[str, torch.Tensor]:
    """Each named calibration signal (L, Hq, n_windows), measured once and kept in the store:
    "mass" and "output" on the calibration blocks, "retrieval" the output signal at the answer
    rows of retrieval prompts built on them (`hf.search.retrieval_calib`), "suffix-loss" the loss
    rise over the last --loss-suffix tokens of the first --loss-blocks blocks
    (`hf.search.suffix_loss`), split evenly over each KV head's query heads."""
    from aah.integrations.hf import layout
    from aah.integrations.hf.search.cut_loss import per_query_head
    from aah.integrations.hf.search.measure import measure_retrieval, measure_signal
    from aah.integrations.hf.search.suffix_loss import measure_suffix_loss_costs

    out = {}
    for name in names:
        label = {
            "retrieval": f"retrieval-{args.retrieval_prompts}",
            "suffix-loss": f"suffix-loss-{args.loss_suffix}x{args.loss_blocks}",
        }.get(name, name)  # fmt: skip
        key = f"signal/{label}/{','.join(map(str, cands))}"
        if key not in store:
            t0 = time.time()
            opts = {"seed": args.seed, "sinks": args.sinks, "progress": not args.no_progress}
            if name == "retrieval":
                value = measure_retrieval(model, calib, cands, prompts=args.retrieval_prompts,
                                          tokenizer=tokenizer, **opts)  # fmt: skip
            elif name == "suffix-loss":
                costs = measure_suffix_loss_costs(
                    model, calib[: args.loss_blocks], cands, suffix=args.loss_suffix,
                    sinks=args.sinks, progress=not args.no_progress,
                )  # fmt: skip
                value = per_query_head(costs, layout(model).n_head)
            else:
                value = measure_signal(model, calib, cands, name, **opts)
            store.put(key, {"value": value.tolist(), "seconds": time.time() - t0})
        out[name] = torch.tensor(store.get(key)["value"], dtype=torch.float64)
    return out


def aah_plans(model, block, args, store: CellStore) -> dict[str, Any]:
    """The AAH-v3 decision and its twin on the model's own Q/K/V of one calibration block,
    made once and kept in the store."""
    from aah.integrations.hf import probing

    key = "plans/aah-v3"
    if key not in store:
        qkv: list[tuple[torch.Tensor, ...]] = []

        def keep(module, q, k, v, scale) -> None:  # the layers run in order
            qkv.append((q.detach().float(), k.detach().float(), v.detach().float()))

        with probing(model, keep), torch.no_grad():
            model(input_ids=block.to(next(model.parameters()).device), use_cache=False)
        store.put(key, methods.aah_v3_plans(qkv, seed=args.seed))
    return store.get(key)


def all_plans(model, tokenizer, calib, args, store: CellStore) -> tuple[dict, dict]:
    """Every (method, KV fraction) -> plan, and every KV fraction -> its budget (AAH-v3 adds
    its own fraction, with `uniform` there to compare against)."""
    from aah.controller.allocate import Budget
    from aah.integrations.hf import layout
    from aah.integrations.hf.run.model_layout import kv_shape

    lay, shape, t = layout(model), kv_shape(model), args.seq_len
    cands = candidates(t, args.recent)
    signals = measure_signals(
        model, tokenizer, calib, cands, methods.signals_needed(args.methods), args, store
    )
    budgets = {
        f: Budget.at_kv_fraction(f, t, lay.n_layer, lay.n_head, shape, args.sinks)
        for f in args.kv_fractions
    }
    plans = {
        (m, f): plan
        for f, budget in budgets.items()
        for m, plan in methods.build_plans(
            args.methods, budget, signals, cands, recent=args.recent, seed=args.seed
        ).items()
    }
    if set(methods.AAH_METHODS) & set(args.methods):
        aah = aah_plans(model, calib[0], args, store)
        own = next(iter(budgets.values())).fraction_of(aah["aah-v3"])
        budgets[own] = Budget.at_kv_fraction(own, t, lay.n_layer, lay.n_head, shape, args.sinks)
        plans[("uniform", own)] = methods.uniform_plan(budgets[own])
        plans |= {(m, own): p for m, p in aah.items() if m in args.methods}
    return plans, budgets
