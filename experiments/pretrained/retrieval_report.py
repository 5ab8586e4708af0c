"""The needle part of a pretrained study: every probed plan's hits, per needle or per
condition, and the retrieval tables (against the uniform window, and between the searched
plans)."""

from __future__ import annotations

import itertools

from experiments.pretrained.cells import CellStore
from experiments.pretrained.planning import digest
from experiments.pretrained.scoring import evaluate


def needle_results(model, tokenizer, plans, args, store: CellStore) -> tuple[dict, dict, str]:
    """(method, KV fraction) -> its hits, and -> its (length, depth) grid, for full attention
    (under ("full", 1.0)) and the --needle-methods; and a Markdown note. The classic grid
    gives per-needle hits; the design and held-out grids per-condition hits (a condition
    retrieved when all its needles are), with each method against `uniform` per condition."""
    from experiments.pretrained import needles, retrieval_grid

    depths = [i / max(1, args.needle_depths - 1) for i in range(args.needle_depths)]
    vocab = getattr(model.config, "vocab_size", None)
    probes = None
    if args.needle_grid == "classic":
        items = needles.build_needles(tokenizer, args.needle_lengths, depths,
                                      args.needles_per_cell, seed=args.needle_seed,
                                      vocab_size=vocab)  # fmt: skip
        kind = f"needles-{'-'.join(map(str, args.needle_lengths))}-d{args.needle_depths}x"
        kind += str(args.needles_per_cell)
        if args.needle_seed != args.seed:  # a fresh grid: its own cells
            kind += f"-s{args.needle_seed}"
    else:
        probes = retrieval_grid.build_probes(
            tokenizer, args.needle_grid, args.needle_lengths, depths, args.needles_per_cell,
            seed=args.needle_seed, vocab_size=vocab,
        )  # fmt: skip
        items = [p.needle for p in probes]
        kind = (f"probes-{args.needle_grid}-{'-'.join(map(str, args.needle_lengths))}"
                f"-d{args.needle_depths}x{args.needles_per_cell}-s{args.needle_seed}")  # fmt: skip
    probed = [(("full", 1.0), None)]
    probed += [(k, p) for k, p in plans.items() if k[0] in args.needle_methods]
    hits = evaluate(model, [p for _, p in probed], items, needles.needle_hit, kind, args, store)
    got, grids = {}, {}
    for key, plan in probed:
        got[key] = hits[digest(plan, args.sinks)]
        grids[key] = needles.grid_of(items, got[key])
    if probes is None:
        return got, grids, ""
    conds = {k: retrieval_grid.conditions(probes, h) for k, h in got.items()}
    n = len(conds[("full", 1.0)])
    lines = [f"\n## Retrieval, {args.needle_grid} grid: {n} conditions ({len(probes)} needles)\n",
             "Needles columns above count conditions (all needles of a condition retrieved). "
             "Against the uniform window per condition (McNemar's exact test):\n",
             "| KV budget | method | conditions | vs uniform (won / lost, p) | uniform blind to |",
             "|---|---|---|---|---|"]  # fmt: skip
    for (method, fraction), c in conds.items():
        base = conds.get(("uniform", fraction))
        if method in ("full", "uniform") or base is None:
            continue
        window = max(max(row) for row in plans[("uniform", fraction)])
        blind = sum(retrieval_grid.unseen_by(probes, window))
        won, lost, p = retrieval_grid.compare(c, base)
        lines.append(f"| {fraction:g} | {method} | {sum(c.values())}/{n} | {won} / {lost}, "
                     f"p {p:.2g} | {blind} of {len(probes)} needles |")  # fmt: skip
    lines += _between_plans(conds)
    return {k: list(c.values()) for k, c in conds.items()}, grids, "\n".join(lines) + "\n"


def _between_plans(conds: dict) -> list[str]:
    """Every pair of searched plans at one budget, per condition (McNemar's exact test, Holm
    over all the pairs of the table); nothing where a budget has a single searched plan."""
    from aah.report.comparisons import holm
    from experiments.pretrained import retrieval_grid

    searched = [key for key in conds if key[0] not in ("full", "uniform")]
    pairs = [(a, b) for a, b in itertools.combinations(searched, 2) if a[1] == b[1]]
    if not pairs:
        return []
    tests = [retrieval_grid.compare(conds[b], conds[a]) for a, b in pairs]
    adjusted = holm([p for _, _, p in tests])
    lines = [
        "\nBetween the searched plans per condition (McNemar's exact test, Holm over the "
        f"{len(pairs)} pairs):\n",
        "| KV budget | method | against | won / lost | p | Holm p |",
        "|---|---|---|---|---|---|",
    ]
    for (a, b), (won, lost, p), q in zip(pairs, tests, adjusted, strict=True):
        lines.append(f"| {a[1]:g} | {b[0]} | {a[0]} | {won} / {lost} | {p:.2g} | {q:.2g} |")
    return lines
