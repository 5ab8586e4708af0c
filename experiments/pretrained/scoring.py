"""Scores of items (blocks, needles) under plans, one cell per item as soon as it is measured."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch

from experiments.pretrained.cells import CellStore
from experiments.pretrained.planning import digest


def _bar(total: int, desc: str, off: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="forward", disable=off, dynamic_ncols=True)


def _under(model: torch.nn.Module, plan: Any, sinks: int) -> Any:
    """The model running `plan` with `sinks` inside the block (None: as it is, full)."""
    from aah.integrations.hf import applied

    return contextlib.nullcontext() if plan is None else applied(model, plan, sinks=sinks)


def evaluate(model, plans, items, score, kind, args, store: CellStore) -> dict[str, list]:
    """`score(model, item)` of every item under every distinct plan (digest -> scores), from
    the store where on file; one progress bar over the items still to run. Each item's score
    is on file as soon as it is measured (`kind/digest/i`), so a stopped run loses at most one
    forward; the plan's whole cell follows its last item. `seconds`: this run's share. A whole
    cell of fewer items than asked (a run asking for more blocks) is extended: its first
    items are the same ones."""

    def done(key: str) -> bool:
        whole = store.get(f"{kind}/{key}")
        return whole is not None and len(whole["scores"]) >= len(items)

    todo = {digest(p, args.sinks): p for p in plans}
    todo = {k: p for k, p in todo.items() if not done(k)}
    left = sum(f"{kind}/{k}/{i}" not in store for k in todo for i in range(len(items)))
    bar = _bar(left, kind, args.no_progress)
    for key, plan in todo.items():
        t0 = time.time()
        with _under(model, plan, args.sinks):
            for i, item in enumerate(items):
                if f"{kind}/{key}/{i}" not in store:
                    store.put(f"{kind}/{key}/{i}", score(model, item))
                    bar.update(1)
        scores = [store.get(f"{kind}/{key}/{i}") for i in range(len(items))]
        store.put(f"{kind}/{key}", {"scores": scores, "seconds": time.time() - t0})
    bar.close()
    keys = [digest(p, args.sinks) for p in plans]
    return {k: store.get(f"{kind}/{k}")["scores"][: len(items)] for k in keys}
