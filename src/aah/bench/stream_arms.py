"""What `aah bench stream --compare` streams beside the plan: one window with 4 sinks and one
window without sinks, each the widest whose rolling cache holds no more KV bytes than the
plan's, and full attention (up to the model's positions).

A rolling cache holds, per layer and KV head, its sinks plus its ring (the largest window of the
head's queries, capped by the layer's own sliding window): `plan_kv_bytes` at an unbounded
length counts them as `PerHeadCache` does once every window is full.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from aah.attention.kv_bytes import plan_kv_bytes
from aah.integrations.hf.run.model_layout import kv_shape, layout
from aah.model.cache import UNBOUNDED_LEN

COMPARE_SINKS = 4


@dataclass(frozen=True)
class Arm:
    """One stream: its name, windows and sinks ([layer][head]; None: full attention over a
    DynamicCache, stopped at the model's positions)."""

    name: str
    windows: list[list[int]] | None
    sinks: list[list[int]] | None


def rolling_bytes(
    model: torch.nn.Module, windows: Sequence[Sequence[int]], sinks: Sequence[Sequence[int]] | None
) -> int:
    """KV bytes a rolling cache of this plan holds once every window is full."""
    return plan_kv_bytes(windows, sinks, kv_shape(model), UNBOUNDED_LEN)


def same_bytes_window(model: torch.nn.Module, positions: int, budget: int, sinks: int) -> int:
    """The widest window w (every head, `sinks` sinks each) whose rolling cache holds at most
    `budget` bytes and whose window plus sinks stays within the model's `positions`."""
    lay = layout(model)

    def held(w: int) -> int:
        return rolling_bytes(
            model, [[w] * lay.n_head] * lay.n_layer, [[sinks] * lay.n_head] * lay.n_layer
        )

    low, high = 1, positions - sinks - 1
    if high < 1 or held(low) > budget:
        raise ValueError(
            f"no window with {sinks} sinks fits {budget} KV bytes within {positions} positions"
        )
    while low < high:  # the largest w with held(w) <= budget
        mid = (low + high + 1) // 2
        low, high = (mid, high) if held(mid) <= budget else (low, mid - 1)
    return low


def compare_arms(
    model: torch.nn.Module,
    windows: list[list[int]],
    sinks: list[list[int]] | None,
    positions: int,
) -> list[Arm]:
    """The plan, one window + `COMPARE_SINKS` sinks and one window without sinks at the plan's
    bytes, and full attention."""
    lay = layout(model)
    budget = rolling_bytes(model, windows, sinks)
    arms = [Arm("plan", windows, sinks)]
    for n_sink in (COMPARE_SINKS, 0):
        w = same_bytes_window(model, positions, budget, n_sink)
        label = f"window {w} + {n_sink} sinks" if n_sink else f"window {w}, no sinks"
        rows = [[w] * lay.n_head for _ in range(lay.n_layer)]
        arms.append(Arm(label, rows, [[n_sink] * lay.n_head for _ in range(lay.n_layer)]))
    arms.append(Arm("full attention", None, None))
    return arms
