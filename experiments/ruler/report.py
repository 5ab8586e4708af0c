"""DIR/table.md and DIR/results.json of a RULER run, from the cells on file.

Each task is scored on the samples every method has answered (a partial run compares like
with like), in points with a 95% percentile bootstrap interval (`scoring`). A task counts
towards the mean only where full attention is well above zero on it: full's mean at least
`FLOOR` points and the low end of its interval above 0. The table shows every task, marks the
others, and names them in a line; without `full` among the methods every task counts.

Cells of kvpress's presses (`kvpress-*`, written into the same cells.jsonl by
`experiments.scripts.ruler_kvpress`) are shown in a second table beside the project's methods,
their KV share the one they measured after the context, on the samples every method answered
(the presses run apart, and may have answered fewer).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from experiments.ruler.scoring import Interval, mean_interval, task_interval

#: full attention's mean score (points) a task needs to count towards the mean
FLOOR = 20.0
#: the methods of experiments.scripts.ruler_kvpress, which has no plan here
PEER_PREFIX = "kvpress-"


def peer_methods(cells: Any) -> list[str]:
    """The `kvpress-*` methods with cells in the file of `cells`, in the order first written."""
    from aah.records import read_jsonl

    keys = [row.get("key", "") for row in read_jsonl(cells.path)]
    return list(dict.fromkeys(k.split("/")[0] for k in keys if k.startswith(PEER_PREFIX)))


def peer_shares(samples: list[Any], cells: Any, methods: list[str],
                peers: list[str]) -> dict[str, float]:  # fmt: skip
    """Each peer method's mean measured KV share over the samples every method answered."""
    done = [s for ss in answered(samples, cells, methods).values() for s in ss]
    return {m: sum(cells.get(f"{m}/{s.task}/{s.index}").get("kv_fraction", 1.0) for s in done)
            / max(len(done), 1) for m in peers}  # fmt: skip


def answered(samples: list[Any], cells: Any, methods: list[str]) -> dict[str, list[Any]]:
    """Per task, its samples that every method has a cell for."""
    done: dict[str, list[Any]] = {}
    for sample in samples:
        if all(f"{m}/{sample.task}/{sample.index}" in cells for m in methods):
            done.setdefault(sample.task, []).append(sample)
    return done


def well_above_zero(full: Interval) -> bool:
    return full.mean >= FLOOR and full.low > 0


def summarize(samples: list[Any], cells: Any, methods: list[str]) -> dict[str, Any]:
    """Scores per task and method, which tasks count, the means over them, and timings."""
    done = answered(samples, cells, methods)
    scores = {m: {t: [cells.get(f"{m}/{t}/{s.index}")["score"] for s in ss]
                  for t, ss in done.items()} for m in methods}  # fmt: skip
    per_task = {m: {t: task_interval(v) for t, v in by_task.items()}
                for m, by_task in scores.items()}  # fmt: skip
    if "full" in methods:
        counted = [t for t in done if well_above_zero(per_task["full"][t])]
    else:
        counted = list(done)
    means = {m: mean_interval({t: scores[m][t] for t in counted}) for m in methods if counted}
    seconds = {m: {t: sum(cells.get(f"{m}/{t}/{s.index}")["seconds"] for s in ss) / len(ss)
                   for t, ss in done.items()} for m in methods}  # fmt: skip
    prompt_tokens = {t: sum(len(s.input_ids) for s in ss) / len(ss) for t, ss in done.items()}
    return {
        "tasks": list(done), "counted": counted, "left_out": [t for t in done if t not in counted],
        "per_task": per_task, "means": means, "seconds": seconds, "prompt_tokens": prompt_tokens,
    }  # fmt: skip


def kv_shares(plans: dict[str, Any], model: Any, seq_len: int) -> dict[str, float]:
    """Each plan's KV bytes at seq_len as a share of the model's full cache (full: 1)."""
    from aah.attention.kv_bytes import full_kv_bytes, plan_kv_bytes
    from aah.integrations.hf.run.model_layout import kv_shape

    shape = kv_shape(model)
    full = full_kv_bytes(shape, seq_len)
    shares = {}
    for name, plan in plans.items():
        held = full if plan is None else plan_kv_bytes(plan.windows, plan.sinks, shape, seq_len)
        shares[name] = held / full
    return shares


def labels(methods: list[str]) -> dict[str, str]:
    """How each method heads its column: a plan file by its name without folder or suffix,
    unless another plan file of the table has that name too (then by its path)."""
    stems = {m: "plan:" + Path(m.removeprefix("plan:")).stem
             for m in methods if m.startswith("plan:")}  # fmt: skip
    taken = list(stems.values())
    return {m: stems[m] if m in stems and taken.count(stems[m]) == 1 else m for m in methods}


def table(args: argparse.Namespace, summary: dict[str, Any], methods: list[str],
          shares: dict[str, float]) -> str:  # fmt: skip
    """The markdown table and its notes."""
    label = labels(methods).__getitem__
    head = (
        f"RULER at T = {args.seq_len}, template {args.template}, KV {args.kv_fraction} of the "
        f"full cache, seed {args.seed}. Score in points (RULER's string_match_all x 100), mean "
        "over samples [95% percentile bootstrap interval]; the mean over tasks bootstraps "
        "within each task.\n\n"
        f"| task | samples | prompt tokens | {' | '.join(map(label, methods))} |\n"
        f"|---|---|---|{'---|' * len(methods)}"
    )
    rows = []
    for task in summary["tasks"]:
        cells = [summary["per_task"][m][task].text() for m in methods]
        mark = "" if task in summary["counted"] else " (left out)"
        n = summary["per_task"][methods[0]][task].n
        rows.append(f"| {task}{mark} | {n} | {summary['prompt_tokens'][task]:.0f} | "
                    f"{' | '.join(cells)} |")  # fmt: skip
    if summary["means"]:
        means = [f"**{summary['means'][m].text()}**" for m in methods]
        rows.append(f"| **mean over {len(summary['counted'])} tasks** | | | {' | '.join(means)} |")
    notes = [""]
    left = ", ".join(summary["left_out"]) or "none"
    if "full" in methods:
        notes.append(
            f"Left out of the mean (full attention not well above zero: its mean under "
            f"{FLOOR:g} points or its interval reaching 0): {left}."
        )
    else:
        notes.append("No `full` among the methods: every task counts towards the mean.")
    if not summary["means"]:
        notes.append("No task counts, so there is no mean.")
    own = [m for m in methods if not m.startswith(PEER_PREFIX)]
    notes.append("KV bytes at T, share of the full cache: "
                 + ", ".join(f"{label(m)} {shares[m]:.3f}" for m in own) + ".")  # fmt: skip
    if len(own) < len(methods):
        notes.append("kvpress, KV bytes held after the context, share of the full cache's "
                     "(measured; AdaKV holds every position and masks the pruned): "
                     + ", ".join(f"{m} {shares[m]:.3f}" for m in methods if m not in own)
                     + ".")  # fmt: skip
    per_sample = {label(m): sum(summary["seconds"][m].values()) / max(len(summary["tasks"]), 1)
                  for m in methods}  # fmt: skip
    notes.append("Seconds per sample (mean over tasks): "
                 + ", ".join(f"{m} {s:.1f}" for m, s in per_sample.items()) + ".")  # fmt: skip
    files = [f"{label(m)}: `{m.removeprefix('plan:')}`" for m in methods if label(m) != m]
    if files:
        notes.append("Plan files: " + ", ".join(files) + ".")
    return head + "\n" + "\n".join(rows) + "\n" + "\n".join(notes) + "\n"


def summary_record(summary: dict[str, Any], shares: dict[str, float]) -> dict[str, Any]:
    """What results.json keeps of one summary."""
    return {
        "tasks": summary["tasks"], "counted": summary["counted"], "left_out": summary["left_out"],
        "scores": {m: {t: i.to_dict() for t, i in by_task.items()}
                   for m, by_task in summary["per_task"].items()},
        "means": {m: i.to_dict() for m, i in summary["means"].items()},
        "seconds_per_sample": summary["seconds"], "prompt_tokens": summary["prompt_tokens"],
        "kv_share": shares,
    }  # fmt: skip


def write_report(
    args: argparse.Namespace, samples: list[Any], cells: Any, plans: dict[str, Any], model: Any
) -> dict[str, Any]:
    """Write table.md and results.json into args.out; the results.

    The project's methods are compared on the samples they all answered; kvpress's presses,
    which run apart and may have answered fewer, in a second table on the samples every
    method answered (like with like in each)."""
    from experiments.ruler.samples import digest

    own = list(plans)
    summary = summarize(samples, cells, own)
    shares = kv_shares(plans, model, args.seq_len)
    text = table(args, summary, own, shares)
    default = plans.get("default")
    results = {
        "settings": {k: str(v) for k, v in vars(args).items()},
        "samples_digest": digest(samples),
        "rule": f"a task counts when full's mean >= {FLOOR:g} points and its interval's low > 0",
        **summary_record(summary, shares),
        "default_choice": None if default is None else default.info.get("choice"),
        "search_seconds": cells.get("search_seconds"),
    }  # fmt: skip
    peers = peer_methods(cells)
    if peers:
        methods = own + peers
        joint = summarize(samples, cells, methods)
        joint_shares = {**shares, **peer_shares(samples, cells, methods, peers)}
        text += ("\n## With kvpress's presses, on the samples every method answered\n\n"
                 + table(args, joint, methods, joint_shares))  # fmt: skip
        results["with_peers"] = summary_record(joint, joint_shares)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / "table.md").write_text(text)
    print(text, flush=True)
    return results
