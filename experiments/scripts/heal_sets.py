"""Which parameters heal a plan best? Each parameter set healed on the same blocks, compared.

    python -m experiments.scripts.heal_sets --model M --plan P --out DIR --minutes 12 \\
        --sets temperature,lora,temperature+lora --threads 2

Each set is healed by `aah.hf.heal(model, plan, minutes=M, options=HealOptions(kinds=...))`
on the shipped mix (16 training blocks past those a default search reads, 4 held-out blocks
after them), the same blocks and seed for every set. One JSON line per set is appended to
DIR/sets.jsonl as it finishes (the held-out KL before and after, the curve of held-out KL
against steps and seconds, the steps run, the parameters' bytes), so a stopped run resumes
at the next set. This is the exploratory comparison that picks `heal`'s default; the
evidence on documents the heal never saw is `experiments.scripts.default_vs_window`'s.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--plan", required=True, type=Path)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--minutes", type=float, default=12.0)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--rank", type=int, default=4)
    p.add_argument("--sets", default="temperature,lora,temperature+lora")
    p.add_argument("--threads", type=int, default=2)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    import torch

    import aah.hf as hf
    from aah.integrations.hf.search.heal import HealOptions

    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = args.out / "sets.jsonl"
    done = set()
    if rows.exists():
        done = {json.loads(line)["set"] for line in rows.read_text().splitlines() if line.strip()}
    model, _ = hf.load_model(args.model)
    plan = hf.WindowPlan.load(args.plan)
    for name in args.sets.split(","):
        if name in done:
            continue
        opts = HealOptions(kinds=tuple(name.split("+")), rank=args.rank, steps=args.steps)
        healed = hf.heal(model, plan, minutes=args.minutes, options=opts, progress=True)
        record = dict(healed.info.get("heal", {}))
        record["set"] = name
        record["kept"] = bool(healed.params)
        record["param_bytes"] = sum(t.numel() * t.element_size() for t in healed.params.values())
        record["model_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
        with rows.open("a") as f:
            f.write(json.dumps(record) + "\n")
        if healed.params:
            healed.save(args.out / f"{name}.json")
        print(name, record.get("held_out_kl_before"), "->", record.get("held_out_kl_after"))


if __name__ == "__main__":
    main()
