"""Terminal output of a finished run: headline numbers and the window map."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aah.eval.windowmap import window_map


def _fmt(value: Any, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def print_summary(
    run_dir: Path, summary: dict[str, Any], plan: list[list[int]], seq_len: int
) -> None:
    print(f"run: {run_dir}")
    print(
        f"val bits/byte {_fmt(summary.get('val_bpb'), '.4f')}"
        f"  (val loss {_fmt(summary.get('val_loss'), '.4f')} nats)"
        f" | ACR {_fmt(summary.get('acr'), '.3f')}"
        f" | causal coverage {_fmt(summary.get('causal_coverage'), '.3f')}"
        f" | executed ratio {_fmt(summary.get('executed_ratio'), '.3f')}"
    )
    if "train_tokens_per_s" in summary:
        print(
            f"train {_fmt(summary.get('train_tokens_per_s'), ',.0f')} tok/s"
            f" | controller {_fmt(100 * (summary.get('ctrl_share') or 0.0), '.2f')}% of step time"
            f" | peak RSS {_fmt(summary.get('peak_rss_mb'), ',.0f')} MB"
            f" | wall {_fmt(summary.get('wall_s'), '.1f')} s"
        )
    print("window map (per layer x head):")
    print(window_map(plan, seq_len))
