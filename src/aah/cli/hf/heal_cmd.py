"""`aah plan heal MODEL --plan P --out P2`: heal a plan's model to it (`aah.hf.heal`).

    aah plan heal MODEL --plan plan.json --out healed.json [--minutes 20] [--text FILE]
        [--redecide EVERY]

Learns a few parameters (LoRA on the attention projections of the layers the plan cuts, a
temperature or a sink logit per query head) by distillation against the model's own full
attention, every model weight frozen, and writes the plan with them: `healed.json` and, beside it,
`healed.heal.safetensors` (the plan records its name and SHA-256). `aah generate` and
`aah chat --plan healed.json` use them. Where healing does not lower the held-out KL the plan
is written unchanged, and the command says so. `--redecide EVERY` re-decides the windows every
EVERY steps while it trains (the project's budget controller on the model as it adapts, within
the plan's KV bytes, on the signal the plan was searched with). Every check that needs no
weights runs before they load; the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import warnings
from typing import get_args

from aah.choices import HealParameter
from aah.cli import flags

KINDS: tuple[str, ...] = get_args(HealParameter)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", help="the model the plan was searched for")
    parser.add_argument("--plan", required=True, metavar="FILE", help="plan JSON to heal")
    parser.add_argument("--out", required=True, metavar="FILE", help="healed plan JSON to write")
    parser.add_argument(
        "--text", metavar="FILE",
        help="UTF-8 text to heal on (default: the shipped mix; its last 4 blocks are held out)",
    )  # fmt: skip
    parser.add_argument(
        "--minutes", type=float, metavar="M",
        help="stop after M minutes and keep the best parameters seen (default: --steps)",
    )  # fmt: skip
    parser.add_argument("--steps", type=int, default=200, help="training steps at most (200)")
    parser.add_argument(
        "--params", default="lora", metavar="KINDS",
        help="what to learn, comma-separated: 'lora' (default; low-rank updates of the q, k, v "
        "and o projections of the layers the plan cuts; not GPT-2's fused projections), "
        "'temperature' (one per query head of those layers) and/or 'sink' (a sink logit per "
        "query head: the head may attend to nothing; no KV bytes)",
    )  # fmt: skip
    parser.add_argument("--rank", type=int, default=4, help="LoRA rank (with --params lora)")
    parser.add_argument(
        "--redecide", type=int, metavar="EVERY",
        help="re-decide the windows every EVERY steps while healing: the signal the plan was "
        "searched with, measured on the model as it adapts, smoothed (EMA 0.9) and allocated "
        "within the plan's own KV bytes (a searched plan only; default: windows held fixed)",
    )  # fmt: skip
    parser.add_argument(
        "--seq-len", type=int, help="block length (default: the plan's seq_len, else 512)"
    )
    parser.add_argument("--device", default="auto", metavar="D", help="auto, cpu, cuda, ...")
    flags.add_threads(parser)


def check_arguments(args: argparse.Namespace) -> tuple[str, ...]:
    """The kinds to learn, after checking every flag that needs no model (ValueError)."""
    from aah.cli.hf.plan_checks import check_model, check_output, read_text

    check_model(args.model)
    kinds = tuple(k.strip() for k in args.params.split(",") if k.strip())
    bad = [k for k in kinds if k not in KINDS]
    if not kinds or bad:
        raise ValueError(f"--params must name some of {', '.join(KINDS)}, got {args.params!r}")
    if args.minutes is not None and not (math.isfinite(args.minutes) and args.minutes > 0):
        raise ValueError(f"--minutes must be a number > 0, got {args.minutes}")
    for flag in ("steps", "rank", "redecide"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise ValueError(f"--{flag} must be >= 1, got {getattr(args, flag)}")
    if args.seq_len is not None and args.seq_len < 2:
        raise ValueError(f"--seq-len must be >= 2, got {args.seq_len}")
    if args.threads < 0:
        raise ValueError(f"--threads must be >= 0 (0 = torch's default), got {args.threads}")
    check_output(args.out, "--out")
    if args.text is not None:
        read_text(args.text, "--text")
    return kinds


def run(args: argparse.Namespace) -> int:
    import torch

    from aah.cli.hf.checks import check_plan_shape, check_tokenizer, preview_limits
    from aah.integrations.hf.run.load import load_model, resolve_device
    from aah.integrations.hf.search.heal import HealOptions, heal
    from aah.integrations.hf.search.heal_redecide import Redecide, decision_signal
    from aah.plan import WindowPlan, params_file

    kinds = check_arguments(args)
    plan = WindowPlan.load(args.plan)
    limits = preview_limits(args.model)
    check_plan_shape(plan.windows, limits, args.plan)
    if args.redecide is not None:
        decision_signal(plan)  # a plan no search wrote cannot be re-decided: say so now
    check_tokenizer(limits, args.model)
    resolve_device(args.device, "--device")
    if args.threads:
        torch.set_num_threads(args.threads)
    text = None
    if args.text is not None:
        from aah.cli.hf.plan_checks import read_text

        text = read_text(args.text, "--text")
    model, tokenizer = load_model(args.model, args.device)
    redecide = None if args.redecide is None else Redecide(every=args.redecide)
    options = HealOptions(
        kinds=kinds, rank=args.rank, steps=args.steps, minutes=args.minutes, redecide=redecide
    )
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        healed = heal(
            model, plan, text, seq_len=args.seq_len, options=options, tokenizer=tokenizer,
            progress=None,
        )  # fmt: skip
    for w in said:
        print(str(w.message))
    healed.save(args.out)
    record = healed.info.get("heal") if healed.params else None
    if record is not None:
        before, after = record["held_out_kl_before"], record["held_out_kl_after"]
        size = sum(t.numel() * t.element_size() for t in healed.params.values())
        print(
            f"healed {', '.join(kinds)} on layers {record['layers']} in {record['steps']} steps "
            f"({record['seconds']:.0f} s): held-out KL from full attention {before:.4f} -> "
            f"{after:.4f} nats per token ({100 * (1 - after / before):.1f}% lower)"
        )
        if "redecide" in record:
            decisions = record["redecide"]["decisions"]
            print(
                f"re-decided the windows {len(decisions)} times (heads changed: "
                f"{', '.join(str(d['changed_heads']) for d in decisions) or 'none'}); the "
                f"windows kept hold {healed.info['kv_bytes']} KV bytes at T = {record['seq_len']}"
            )
        side = params_file(args.out)
        print(f"wrote {args.out} and {side} ({size / 2**20:.3f} MB of parameters)")
        summary = {"healed": True, "held_out_kl_before": before, "held_out_kl_after": after,
                   "steps": record["steps"], "param_bytes": size}  # fmt: skip
    else:
        print(f"wrote {args.out}: the plan unchanged")
        summary = {"healed": False}
    print(json.dumps(summary))
    return 0
