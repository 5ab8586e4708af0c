"""Which layers' windows lose a fact stated at the very start of a long prompt.

    python -m experiments.scripts.first_layer_probe \
        --plans results/pretrained/retrieval-T4096 --out results/pretrained/first-layer-probe.json

A development grid, not a test: the held-out retrieval grid's wording and natural fillers
(`retrieval_grid`, "heldout") with another needle seed (other keys, other filler blocks), at
4096 tokens and depths 0 and 0.25: 16 probes. Each row is a plan read from a study folder's
cells (the `output` and `retrieval` signals that folder measured on the shipped mix), changed as
the row says, and scored on every probe: retrieved (greedy emits the answer) and the answer's
log-probability (teacher forced). Rows that give some layers full attention on top of a
plan exceed its KV budget: they locate the loss, they are not plans to compare at equal bytes;
`-whole0` rows are allocated within the budget (`allocate(..., whole_layers=(0,))`).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

#: (label, base method, layers given full attention on top; None: the method as allocated)
ROWS: tuple[tuple[str, str, tuple[int, ...] | None], ...] = (
    ("full attention", "full", None),
    ("uniform", "uniform", None),
    ("output", "output", None),
    ("output+retrieval", "output+retrieval", None),
    ("output+retrieval, layers 0-9 full (over budget)", "output+retrieval", tuple(range(10))),
    ("output+retrieval, layers 10-19 full (over budget)", "output+retrieval", tuple(range(10, 20))),
    ("output+retrieval, layers 20-29 full (over budget)", "output+retrieval", tuple(range(20, 30))),
    ("output+retrieval, layer 0 full (over budget)", "output+retrieval", (0,)),
    ("output+retrieval, layers 1-2 full (over budget)", "output+retrieval", (1, 2)),
    ("output+retrieval, layers 3-9 full (over budget)", "output+retrieval", tuple(range(3, 10))),
    ("output-whole0", "output-whole0", None),
    ("output+retrieval-whole0", "output+retrieval-whole0", None),
)


def score(model: torch.nn.Module, needle: Any) -> tuple[bool, float]:
    """(retrieved as `needles.needle_hit` decides it, the answer's log-probability), from one
    teacher-forced forward."""
    from experiments.pretrained.needles import answer_logits

    logits, answer = answer_logits(model, needle)
    logp = torch.log_softmax(logits.float(), -1).gather(1, answer[:, None]).sum()
    return bool((logits.argmax(-1) == answer).all()), float(logp)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", required=True, help="a study folder with the signal cells")
    parser.add_argument("--out", required=True, help="JSON to write")
    parser.add_argument("--kv-fraction", type=float, default=0.5)
    parser.add_argument("--needle-seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from aah.controller.allocate import Budget
    from aah.integrations.hf import applied, layout
    from aah.integrations.hf.run.load import load_model
    from aah.integrations.hf.run.model_layout import kv_shape
    from experiments.pretrained import methods, retrieval_grid
    from experiments.pretrained.cells import CellStore
    from experiments.pretrained.model_files import default_model
    from experiments.pretrained.planning import candidates

    model, tokenizer = load_model(default_model())
    t = 4096
    probes = retrieval_grid.build_probes(tokenizer, "heldout", [t], [0.0, 0.25], 1,
                                         seed=args.needle_seed,
                                         vocab_size=model.config.vocab_size)  # fmt: skip
    cells = Path(args.plans) / "cells.jsonl"
    store = CellStore(cells, json.loads(cells.read_text().splitlines()[0])["settings"])
    cands = candidates(t, t // 16)  # the study's ladder (its default duo window, T/16)
    signals = {
        name: torch.tensor(store.get(f"signal/{key}/{','.join(map(str, cands))}")["value"],
                           dtype=torch.float64)
        for name, key in (("output", "output"), ("retrieval", "retrieval-16"))
    }  # fmt: skip
    lay, shape = layout(model), kv_shape(model)
    budget = Budget.at_kv_fraction(args.kv_fraction, t, lay.n_layer, lay.n_head, shape, 4)
    bases = {base for _, base, _ in ROWS if base != "full"}
    plans = methods.build_plans(sorted(bases), budget, signals, cands, recent=t // 16)
    rows = []
    for label, base, full_layers in ROWS:
        plan = plans.get(base)
        if plan is not None and full_layers is not None:
            plan = [[t] * len(r) if i in full_layers else r for i, r in enumerate(plan)]
        t0 = time.time()
        context = applied(model, plan, sinks=4) if plan is not None else torch.no_grad()
        with context:
            got = [score(model, p.needle) for p in probes]
        rows.append({
            "row": label, "retrieved": sum(h for h, _ in got),
            "kv_fraction": None if plan is None else budget.fraction_of(plan),
            "hits": [h for h, _ in got], "logp": [round(lp, 3) for _, lp in got],
        })  # fmt: skip
        print(
            f"{label}: {rows[-1]['retrieved']}/{len(probes)} retrieved, answer log-p "
            f"{' '.join(f'{lp:.1f}' for _, lp in got)} ({time.time() - t0:.0f} s)",
            flush=True,
        )
    conditions = [list(p.condition) for p in probes]
    Path(args.out).write_text(json.dumps({"conditions": conditions, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
