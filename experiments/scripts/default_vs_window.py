"""Does the library's default plan search beat one window on a model? The check a new user makes.

    python -m experiments.scripts.default_vs_window --model M --out DIR --seq-len 2048 \\
        --kv-fraction 0.3 --kinds python,prose,c --blocks-per-kind 12 --threads 2

Plans, all at the same KV bytes (a fraction of the model's own full cache at T):
- `default`: `aah.hf.search_plan(model, kv_fraction=F, seq_len=T)` with no other argument,
  exactly as a user calls it (the shipped mix, the end-to-end choice);
- `uniform-s0` / `uniform-s4`: one window for every head, the widest that fits, without
  sinks and with 4 (StreamingLLM);
- `full`: full attention (the gap's other end);
- `refined` (with --refined, exploratory): the default search with its refine step,
  `search_plan(..., refine=True)`, reported against `default` in a table of its own;
- `healed` (with --healed FILE): a healed plan file (`aah plan heal`, its learned parameters
  installed with it), reported against `default` and against the better window in tables of
  its own. `--healed NAME=FILE` names it otherwise, and the option may be given again: each
  healed plan after the first is also reported against the first (a heal's variant against
  the heal it varies).

Every block is scored as a prompt is read (BOS first where the tokenizer adds one) by its mean
next-token loss. The baseline is the *better* window, the one of the two with the lower pooled
mean on these very blocks (chosen after seeing them: a conservative baseline for the default).
Differences are default minus that window, per kind and pooled, with intervals over documents
(the blocks of one document are one unit, `experiments.pretrained.clusters`); Holm over the
kinds. Cells (one loss per method and block) are appended as they finish, so a stopped run
resumes; the search's plan is saved once and reused.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

METHODS = ("full", "uniform-s0", "uniform-s4", "default")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--kv-fraction", type=float, default=0.3)
    p.add_argument("--kinds", default="python,prose,c")
    p.add_argument("--blocks-per-kind", type=int, default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--first-block", type=int, default=0,
        help="score each kind's blocks from this one on in the seeded order (a confirmation on "
        "documents the first blocks did not read)",
    )  # fmt: skip
    p.add_argument(
        "--methods", default=",".join(METHODS),
        help="the plans to score, of full, uniform-s0, uniform-s4, default (a confirmation "
        "names its baseline in advance)",
    )  # fmt: skip
    p.add_argument(
        "--report-only", action="store_true",
        help="write table.md and results.json again from the folder's cells, loading no model",
    )  # fmt: skip
    p.add_argument(
        "--refined", action="store_true",
        help="also score the search with its refine step against the default",
    )  # fmt: skip
    p.add_argument(
        "--healed", action="append", metavar="[NAME=]FILE",
        help="also score this healed plan (aah plan heal) against the default and the window, "
        "as NAME (default 'healed'); again for more, each also against the first",
    )  # fmt: skip
    return p.parse_args(argv)


def window_plans(model: Any, t: int, fraction: float) -> dict[str, Any]:
    from aah.integrations.hf.search.plan_candidates import uniform_plan
    from aah.integrations.hf.search.plan_search import search_budget

    name = type(model).__name__
    return {
        f"uniform-s{s}": uniform_plan(search_budget(model, t, s, kv_fraction=fraction), name)
        for s in (0, 4)
    }


def score(args: argparse.Namespace) -> None:
    import torch

    from aah.integrations.hf.run.apply_plan import applied
    from aah.integrations.hf.run.load import load_model
    from experiments.pretrained.corpus import block_loss
    from experiments.pretrained.default_search import default_plan
    from experiments.pretrained.kinds import kind_blocks

    torch.set_num_threads(args.threads)
    methods = study_methods(args.methods)
    if args.first_block < 0:
        raise ValueError(f"--first-block must be >= 0, got {args.first_block}")
    cells = folder_cells(args)
    model, tok = load_model(args.model)
    kinds = args.kinds.split(",")
    per_kind = args.first_block + args.blocks_per_kind
    drawn = kind_blocks(tok, kinds, args.seq_len, per_kind, seed=args.seed,
                        vocab_size=model.config.vocab_size)  # fmt: skip
    blocks = [b for i, b in enumerate(drawn) if i % per_kind >= args.first_block]
    plans = {"full": None, **window_plans(model, args.seq_len, args.kv_fraction)}
    plans["default"] = default_plan(model, args.out, args.kv_fraction, args.seq_len, cells)
    plans = {m: plans[m] for m in methods}
    if args.refined:
        plans["refined"] = default_plan(model, args.out, args.kv_fraction, args.seq_len, cells,
                                        refine=True)  # fmt: skip
    for name, plan in plans.items():
        if plan is not None:
            plan.save(args.out / "plans" / f"{name}.json")
    from aah.plan import WindowPlan

    for name, path in healed_plans(args).items():  # scored with their parameters, in place
        plans[name] = WindowPlan.load(path)
    records = [b.record() for b in blocks]
    (args.out / "blocks.json").write_text(json.dumps(records, indent=1) + "\n")
    for i, block in enumerate(blocks):
        ids = torch.tensor(block.ids).view(1, -1)
        for name, plan in plans.items():
            key = f"{name}/{i}"
            if key in cells:
                continue
            if plan is None:
                cells.put(key, block_loss(model, ids))
                continue
            with applied(model, plan):  # windows, sinks and a healed plan's parameters
                cells.put(key, block_loss(model, ids))
        print(f"block {i + 1}/{len(blocks)} ({block.kind}) scored", flush=True)
    report(args, cells, blocks)


def healed_plans(args: argparse.Namespace) -> dict[str, Path]:
    """The --healed plans by name ("healed" where none is given), in the order given;
    ValueError for a name that is taken or given twice."""
    out: dict[str, Path] = {}
    for entry in args.healed or []:
        name, sep, path = entry.partition("=")
        name, path = (name, path) if sep else ("healed", entry)
        if name in out or name in (*METHODS, "refined") or not name:
            raise ValueError(f"--healed {entry!r}: the name {name!r} is empty or taken")
        out[name] = Path(path)
    return out


def folder_cells(args: argparse.Namespace) -> Any:
    """The folder's cells, refused (ValueError) where they were made with other settings."""
    from experiments.pretrained.cells import CellStore

    # --refined and --methods choose which plans score a folder's blocks, and first_block is
    # a setting only where it is used: the folders made before these options stay resumable
    skip = {"out", "threads", "refined", "methods", "report_only", "healed"}
    skip |= {"first_block"} if not args.first_block else set()
    settings = {k: str(v) for k, v in vars(args).items() if k not in skip}
    return CellStore(args.out / "cells.jsonl", settings)


def report_again(args: argparse.Namespace) -> None:
    """The report of a folder's cells and blocks.json as they are, with no model loaded."""
    from types import SimpleNamespace

    path = args.out / "blocks.json"
    if not path.exists():
        raise ValueError(f"--report-only: {path} does not exist; score the folder first")
    blocks = [SimpleNamespace(**r) for r in json.loads(path.read_text())]
    report(args, folder_cells(args), blocks)


def kind_groups(blocks: list[Any]) -> dict[str, list[int]]:
    """The indices of each kind's blocks, in the order the kinds first come, then all as
    "pooled"."""
    groups = {kind: [i for i, b in enumerate(blocks) if b.kind == kind]
              for kind in dict.fromkeys(b.kind for b in blocks)}  # fmt: skip
    groups["pooled"] = list(range(len(blocks)))
    return groups


def comparison(loss: dict[str, list[float]], blocks: list[Any], plan: str, base: str) -> dict:
    """`plan` minus `base` per kind and pooled: the mean per document with its interval, the
    base's gap to full and the share of it closed; Holm over the kinds."""
    from aah.report.comparisons import detectable, holm
    from experiments.pretrained.clusters import clustered_estimate

    groups = kind_groups(blocks)
    named = [k for k in groups if k != "pooled"]
    kinds = {}
    for kind, idx in groups.items():
        docs = [blocks[i].document for i in idx]
        diff = [loss[plan][i] - loss[base][i] for i in idx]
        gap = [loss[base][i] - loss["full"][i] for i in idx]
        est, gap_est = clustered_estimate(diff, docs), clustered_estimate(gap, docs)
        closed = -est.mean / gap_est.mean if gap_est.mean > 0 else float("nan")
        kinds[kind] = {
            "blocks": len(idx), "documents": len(set(docs)), "diff": est.mean,
            "ci": list(est.ci), "p": est.p, "window_gap": gap_est.mean,
            "window_gap_ci": list(gap_est.ci), "gap_closed": closed,
            # the smallest |difference| decided at 80% power (Holm over the kinds; pooled alone)
            "detectable": detectable(est, 1 if kind == "pooled" else len(named)),
        }  # fmt: skip
    for kind, p in zip(named, holm([kinds[k]["p"] for k in named]), strict=True):
        kinds[kind]["holm_p"] = p
    return kinds


def table_rows(kinds: dict[str, Any]) -> list[str]:
    """One row per kind; the difference is bold where its interval lies below zero."""
    rows = []
    for kind, r in kinds.items():
        diff = f"{r['diff']:+.4f}"
        diff = f"**{diff}**" if r["ci"][1] < 0 else diff
        rows.append(
            f"| {kind} | {r['blocks']} / {r['documents']} | {r['window_gap']:+.4f} "
            f"[{r['window_gap_ci'][0]:+.4f}, {r['window_gap_ci'][1]:+.4f}] | {diff} "
            f"[{r['ci'][0]:+.4f}, {r['ci'][1]:+.4f}] | {r.get('holm_p', r['p']):.2g} | "
            f"{r['gap_closed']:.0%} |"
        )
    return rows


def detectable_line(
    vs_default: dict[str, Any], vs_window: dict[str, Any], name: str = "healed"
) -> str:
    """What the healed-minus-default test could see, pooled, in nats and in points of the
    better window's gap (the unit of the 75% bar)."""
    nats = vs_default["detectable"]
    return (
        f"smallest pooled {name} minus default this test decides at 80% power: {nats:.4f} nats "
        f"per token, {nats / vs_window['window_gap']:.1%} of the better window's gap"
    )


def kind_means(loss: dict[str, list[float]], blocks: list[Any]) -> dict[str, dict[str, float]]:
    """Each method's mean loss per kind and pooled, over blocks."""
    groups = kind_groups(blocks)
    return {kind: {m: sum(v[i] for i in idx) / len(idx) for m, v in loss.items()}
            for kind, idx in groups.items()}  # fmt: skip


def study_methods(text: str) -> list[str]:
    """The methods named, in METHODS' order; ValueError for an unknown one, or a set without
    full, default and a window (what the comparison needs)."""
    names = {m.strip() for m in text.split(",") if m.strip()}
    unknown = sorted(names - set(METHODS))
    if unknown:
        raise ValueError(f"unknown method {unknown[0]!r}; known: {', '.join(METHODS)}")
    if not {"full", "default"} <= names or not names & {"uniform-s0", "uniform-s4"}:
        raise ValueError(f"--methods needs full, default and a window, got {text!r}")
    return [m for m in METHODS if m in names]


def report(args: argparse.Namespace, cells: Any, blocks: list[Any]) -> None:
    methods = study_methods(args.methods) + (["refined"] if args.refined else [])
    healed_files = healed_plans(args)
    methods += list(healed_files)
    loss = {m: [cells.get(f"{m}/{i}") for i in range(len(blocks))] for m in methods}
    pooled = {m: sum(v) / len(v) for m, v in loss.items()}
    windows = [m for m in ("uniform-s0", "uniform-s4") if m in loss]
    better = min(windows, key=pooled.__getitem__)
    kinds = comparison(loss, blocks, "default", better)
    results = {"better_window": better, "pooled_means": pooled, "kinds": kinds,
               "kind_means": kind_means(loss, blocks)}  # fmt: skip
    plan = json.loads((args.out / "plans" / "default.json").read_text())
    results["default_choice"] = plan.get("choice")
    results["search_seconds"] = cells.get("search_seconds")
    columns = (
        "| kind | blocks / documents | {base} minus full | {plan} minus {base} | Holm p | "
        "share of {base}'s gap closed |\n|---|---|---|---|---|---|"
    )
    head = (
        f"default plan minus the better window (`{better}`), nats per token; mean per document, "
        "95% t interval over documents; Holm p: over the kinds (the pooled row's p is "
        "unadjusted)\n\n" + columns.format(base="better window", plan="default")
    )
    means = ", ".join(f"{m} {v:.4f}" for m, v in pooled.items())
    chosen = (results["default_choice"] or {}).get("chosen")
    text = f"{head}\n" + "\n".join(table_rows(kinds))
    text += f"\n\npooled means: {means}\n\ndefault chose: {chosen}\n"
    if args.refined:
        refined = comparison(loss, blocks, "refined", "default")
        steps = json.loads((args.out / "plans" / "refined.json").read_text())["refine"]["steps"]
        results["refined"] = {"kinds": refined, "steps": steps,
                              "vs_better_window": comparison(loss, blocks, "refined", better),
                              "search_seconds": cells.get("refine_search_seconds")}  # fmt: skip
        text += (
            "\n## Exploratory: the search with its refine step (`refined`) minus `default`\n\n"
            + columns.format(base="default", plan="refined") + "\n"
            + "\n".join(table_rows(refined))
            + "\n\nrefine steps (move, held-out KL): "
            + ", ".join(f"{m} {d:.4f}" for m, d in steps) + "\n"
        )  # fmt: skip
    first = next(iter(healed_files), None)
    for name, path in healed_files.items():
        healed = comparison(loss, blocks, name, "default")
        healed_vs_window = comparison(loss, blocks, name, better)
        results[name] = {"plan": str(path), "kinds": healed,
                         "vs_better_window": healed_vs_window}  # fmt: skip
        text += (
            f"\n## The healed default (`{name}`, {path}) minus `default`\n\n"
            + columns.format(base="default", plan=name) + "\n"
            + "\n".join(table_rows(healed))
            + "\n\n" + detectable_line(healed["pooled"], healed_vs_window["pooled"], name)
            + f"\n\n## `{name}` minus the better window\n\n"
            + columns.format(base="better window", plan=name) + "\n"
            + "\n".join(table_rows(healed_vs_window)) + "\n"
        )  # fmt: skip
        if name != first:
            versus = comparison(loss, blocks, name, first)
            results[name]["vs_" + first] = versus
            text += (
                f"\n## `{name}` minus `{first}`\n\n"
                + columns.format(base=first, plan=name) + "\n"
                + "\n".join(table_rows(versus)) + "\n"
            )  # fmt: skip
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / "table.md").write_text(text)
    print(text)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.report_only:
        report_again(args)
    else:
        score(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
