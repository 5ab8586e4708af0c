"""A synthetic suite results directory with known numbers, for the suite report's tests.

No training: the cells' files are written directly, so every statistic and verdict in
REPORT.md can be checked against hand-computed values.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from aah import records
from aah.sweep.results import write_csv
from aah.training.run_config import RunConfig

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
T, BATCH, STEPS, EVAL_EVERY = 64, 2, 40, 10
TOKENS_PER_STEP = BATCH * T
BASE_TPS = {0: 1000.0, 1: 1100.0, 2: 900.0}  # full's train tokens/s per seed
FULL_BPB = {0: 2.00, 1: 2.10, 2: 2.05}
# regime -> (val_bpb - full's per seed, speed ratio to full per seed, ACR, window)
REGIMES: dict[str, tuple[dict[int, float], dict[int, float], float, int]] = {
    "full": ({0: 0.0, 1: 0.0, 2: 0.0}, {0: 1.0, 1: 1.0, 2: 1.0}, 1.0, T),
    "fixed": ({0: -0.10, 1: -0.09, 2: -0.11}, {0: 1.2, 1: 1.2, 2: 1.2}, 0.3, 16),  # clearly better
    "random": ({0: 0.05, 1: -0.06, 2: 0.02}, {0: 1.2, 1: 1.2, 2: 1.2}, 0.4, 32),  # noise
    "aah-v3-shallow-freeze": ({0: -0.02, 1: 0.01, 2: -0.03}, {0: 0.5, 1: 0.52, 2: 0.48}, 0.5, 8),
    "budget": ({0: 0.20, 1: 0.22}, {0: 0.8, 1: 0.8}, 0.3, 4),  # budget-s2 is missing
}


def _config() -> str:
    config = RunConfig()
    config.model.n_layer, config.model.n_head, config.model.n_kv_head = 2, 2, 2
    config.model.d_model, config.model.max_seq_len = 32, T
    config.train.batch_size, config.train.max_steps = BATCH, STEPS
    config.train.eval_interval, config.train.eval_batches, config.train.threads = EVAL_EVERY, 2, 1
    config.data.max_bytes = 200_000  # the reference lines read the corpus: keep it short
    return config.to_toml()


def final_bpb(regime: str, seed: int) -> float:
    return FULL_BPB[seed] + REGIMES[regime][0][seed]


def tps(regime: str, seed: int) -> float:
    return BASE_TPS[seed] * REGIMES[regime][1][seed]


def val_bpb_at_step(regime: str, seed: int, step: int) -> float:
    """Linear in step (so interpolation in train_s is exact): final + 0.1 per 10 steps left."""
    return final_bpb(regime, seed) + 0.01 * (STEPS - step)


def write_cell(run_dir: Path, regime: str, seed: int, *, train_s: bool = True) -> dict:
    run_dir.mkdir(parents=True)
    records.write_json(run_dir / "cell.json", {"regime": regime, "seed": seed})
    (run_dir / records.CONFIG).write_text(_config())
    speed, acr, window = tps(regime, seed), REGIMES[regime][2], REGIMES[regime][3]
    for step in range(EVAL_EVERY, STEPS + 1, EVAL_EVERY):
        record = {
            "step": step,
            "train_loss": 3.0,
            "tokens": step * TOKENS_PER_STEP,
            "acr": acr,
            "causal_coverage": acr,
            "tokens_per_s": speed,
            "val_bpb": val_bpb_at_step(regime, seed, step),
        }
        record["val_loss"] = record["val_bpb"] / 2
        if train_s:
            record["train_s"] = step * TOKENS_PER_STEP / speed
            record["wall_s"] = record["train_s"] + 1.0
        records.append_jsonl(run_dir / records.METRICS, record)
    for step in (0, 20):  # full windows first, then the regime's own
        w = T if step == 0 else window
        plan = {"step": step, "windows": [[w, w], [w, T]], "groups": []}
        records.append_jsonl(run_dir / records.PLANS, plan)
    summary = {
        "seq_len": T,
        "steps": STEPS,
        "tokens": STEPS * TOKENS_PER_STEP,
        "val_loss": final_bpb(regime, seed) / 2,
        "val_bpb": final_bpb(regime, seed),
        "acr": acr,
        "causal_coverage": acr,
        "executed_ratio": acr,
        "train_tokens_per_s": speed,
        "wall_s": STEPS * TOKENS_PER_STEP / speed + 1,
    }
    records.write_json(run_dir / records.SUMMARY, summary)
    return {"regime": regime, **summary, "seed": seed}


def write_suite(root: Path, name: str, regimes: list[str], **kwargs: bool) -> Path:
    rows = []
    for regime in regimes:
        for seed in REGIMES[regime][0]:
            rows.append(write_cell(root / name / f"{regime}-s{seed}", regime, seed, **kwargs))
    write_csv(root / f"{name}.csv", rows)
    return root


#: far-bucket accuracy per regime and seed (the synthetic suite is a generated task here)
FAR_ACC = {
    "full": {0: 0.99, 1: 1.0, 2: 0.98},
    "fixed": {0: 0.12, 1: 0.14, 2: 0.13},
    "random": {0: 0.50, 1: 0.20, 2: 0.90},
    "aah-v3-shallow-freeze": {0: 0.95, 1: 0.13, 2: 0.97},
    "budget": {0: 0.30, 1: 0.25},
}
#: a t test's p does not change when the metric is scaled, and val_loss = val_bpb * ln 2: a
#: comparison on either is the same comparison (the old findings tested val_loss)
SAME_TEST = {"val_loss": "val_bpb"}
P_VALUE = r"(<0\.001|n/a|[0-9.]+)"
HOLM = r"\(Holm p " + P_VALUE


def task_suite(root: Path) -> Path:
    """REGIMES as a generated-task suite `recall`, with FAR_ACC as its far-bucket accuracy."""
    rows = []
    for regime, (deltas, *_) in REGIMES.items():
        for seed in deltas:
            row = write_cell(root / "recall" / f"{regime}-s{seed}", regime, seed)
            acc = FAR_ACC[regime][seed]
            task = {"val_acc": 0.5 + acc / 2, "val_acc_far": acc, "far_bucket": "32-63"}
            rows.append({**row, **task})
    write_csv(root / "recall.csv", rows)
    return root


def _metric(header: list[str]) -> str:
    delta = next(c for c in header if c.startswith("Δ ") and "coverage" not in c)
    name = delta.split()[1]  # "Δ val_bpb mean" -> val_bpb, "Δ accuracy at 32-63" -> accuracy
    return SAME_TEST.get(name, name)


def holm_ps(report: str) -> dict[tuple[frozenset[str], str], list[str]]:
    """(regime pair, metric) -> every Holm p the report prints for it: table rows that name
    a pair, the per-regime sentences against full and the paper checks of the project's
    own report (experiments.suite_report)."""
    found: dict[tuple[frozenset[str], str], list[str]] = defaultdict(list)
    header: list[str] | None = None
    for line in report.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| regime |"):
            header = cells if "Holm p" in cells else None
        elif header and line.startswith("| `"):
            other_col = next((header.index(c) for c in ("control", "vs") if c in header), None)
            other = cells[other_col].strip("`") if other_col is not None else "full"
            holm = cells[header.index("Holm p")]
            if holm:  # "" when the regime shares no seed with the other
                found[(frozenset((cells[0].strip("`"), other)), _metric(header))].append(holm)
        elif not line.startswith("|"):
            header = None
        if m := re.match(r"- `([^`]+)`: .*?Holm p " + P_VALUE, line):  # a regime vs full
            found[(frozenset((m[1], "full")), "val_bpb")].append(m[2])
        if re.match(r"\d\. \*", line):  # a paper check: Δ val_bpb (or val_loss), AAH - other
            pattern = r"`([^`]+)`(?: vs `([^`]+)`)? [+-]?[0-9.]+ (?:\[[^\]]*\]|n/a) " + HOLM
            for m in re.finditer(pattern, line):
                found[(frozenset((m[1], m[2] or "full")), "val_bpb")].append(m[3])
    return found


#: regimes whose pairs several questions share: each AAH regime is clearly apart from
#: `random` (a matched pair and a paper check) but not from `fixed` (a paper check only)
OVERLAP = {
    "aah-v3-shallow-freeze": {0: 0.00, 1: -0.105, 2: -0.035},
    "aah-v3-deep-reuse": {0: 0.01, 1: -0.10, 2: -0.02},
    "budget-shuffled": {0: 0.23, 1: 0.25, 2: 0.24},
}


def overlap_suite(root: Path) -> Path:
    """The screening regimes plus OVERLAP's, every regime on three seeds."""
    saved = dict(REGIMES)
    try:
        for regime, deltas in OVERLAP.items():
            REGIMES[regime] = (deltas, {0: 1.0, 1: 1.0, 2: 1.0}, 0.5, 8)
        REGIMES["budget"] = ({0: 0.20, 1: 0.22, 2: 0.20}, {0: 0.8, 1: 0.8, 2: 0.8}, 0.3, 4)
        return write_suite(root, "overlap", list(REGIMES))
    finally:
        REGIMES.clear()
        REGIMES.update(saved)
