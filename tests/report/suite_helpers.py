"""A synthetic suite results directory with known numbers, for the suite report's tests.

No training: the cells' files are written directly, so every statistic and verdict in
REPORT.md can be checked against hand-computed values.
"""

from __future__ import annotations

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
