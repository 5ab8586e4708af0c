"""`Policy`: what the training loop asks of a window policy (and nothing more).

A policy owns the plan in force (`windows[layer][head]`, plain ints). Before the step that
starts with `step` steps done the loop asks `wants_update(step)`; when yes, it runs the step
(capturing Q/K/V only if `wants_activations(step)`) and calls `update(step, qkv)`, whose plan
is in force from step + 1 (None keeps the plan). `state_dict` holds everything needed to
continue bit for bit (plain data and tensors, loadable with `torch.load(weights_only=True)`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import torch

from aah.plan import Plan

#: per layer, the detached (q, k, v) of one forward: (B, H, T, D) and (B, Hkv, T, D), and
#: optionally a 4th item, the attention output (B, H, T, D) that forward computed under the
#: plan in force (plain windowed softmax without sinks; None otherwise), as `GPT` captures.
QKV = Sequence[
    tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    | tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]
]


@runtime_checkable
class Policy(Protocol):
    """The window policy contract; every policy in `POLICIES` implements it."""

    #: the policy name as in `POLICIES`.
    name: str

    def initial_plan(self) -> Plan:
        """The plan in force at step 0."""
        ...

    def current_plan(self) -> Plan:
        """The plan in force now (a copy)."""
        ...

    def wants_update(self, step: int) -> bool:
        """True when `update` should run after optimizer step `step`."""
        ...

    def wants_activations(self, step: int) -> bool:
        """True when that update reads step `step`'s Q/K/V (otherwise it gets None)."""
        ...

    def update(self, step: int, qkv: QKV | None) -> Plan | None:
        """The plan in force from step + 1, or None when the plan stays as it is."""
        ...

    def record(self, step: int) -> dict[str, Any]:
        """One plans.jsonl object for the plan now in force."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@runtime_checkable
class ProbesLoss(Protocol):
    """A policy that measures the model's loss under plans of its choosing (loss-ablation).

    The loop attaches a probe once the model exists: a function from a plan to the mean
    next-byte loss (nats) of the model as it stands under that plan, on fixed calibration
    data; the probe restores the plan in force and the training mode before it returns.
    """

    def attach_probe(self, probe: Callable[[Plan], float]) -> None: ...
