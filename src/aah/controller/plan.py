"""Window plans as plain data: `Plan = windows[layer][head]`, read from and written to JSON."""

from __future__ import annotations

import json

from aah.textfile import read_json

Plan = list[list[int]]


def check_plan(plan: object, n_layer: int | None = None, n_head: int | None = None) -> Plan:
    """`plan` as lists of ints >= 1; ValueError if it is not one or its shape differs."""
    if not isinstance(plan, list) or not all(isinstance(row, list) for row in plan):
        raise ValueError(f"a plan must be a list of per-layer lists of windows, got {plan!r:.80}")
    out: Plan = []
    for layer, row in enumerate(plan):
        for w in row:
            if isinstance(w, bool) or not isinstance(w, int) or w < 1:
                raise ValueError(f"plan layer {layer}: every window must be an int >= 1, got {w!r}")
        out.append([int(w) for w in row])
    if n_layer is not None and len(out) != n_layer:
        raise ValueError(f"plan has {len(out)} layers, the model has {n_layer}")
    if n_head is not None:
        for layer, row in enumerate(out):
            if len(row) != n_head:
                raise ValueError(f"plan layer {layer} has {len(row)} heads, the model has {n_head}")
    return out


def load_plan(path: str) -> Plan:
    """Read a plan JSON: the export format {"windows": [[...]], ...} or a bare [[...]]."""
    data = read_json(path, "plan file")
    if isinstance(data, dict):
        if "windows" not in data:
            raise ValueError(f"plan file {path} has no 'windows' key")
        data = data["windows"]
    return check_plan(data)


def plan_to_json(plan: Plan, **extra: object) -> str:
    """Export format: {"windows": plan, **extra} as one JSON string."""
    return json.dumps({"windows": check_plan(plan), **extra})


def full_plan(n_layer: int, n_head: int, seq_len: int) -> Plan:
    """Every head sees its whole causal context."""
    return [[seq_len] * n_head for _ in range(n_layer)]
