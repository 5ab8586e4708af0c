"""What `aah generate MODEL` and `aah chat MODEL` do before and while they load a model: the
checks its files allow (`hf.checks`: the plan's shape, a tokenizer to read text with), the
device and threads, the tokenizer loaded first where the model's files are local (so a prompt
is counted in tokens before the weights load, and the same tokenizer then serves the model),
then the model with its exact limits checked again.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from typing import Any

from aah.cli.hf.checks import (
    ModelLimits,
    check_plan_shape,
    check_tokenizer,
    model_limits,
    preview_limits,
)
from aah.cli.hf.plan_checks import check_model


@dataclass(frozen=True)
class Preflight:
    """A command's state before the weights load: its plan (`aah.plan.WindowPlan`), the
    model's limits from its files (None for a hub name) and the tokenizer (`known`: loaded by
    `with_tokenizer`, None for a model without one; a hub name's is known once it loads)."""

    plan: Any  # None: the model's default plan, found once it loads (`planned`)
    limits: ModelLimits | None
    tokenizer: Any | None
    known: bool

    def positions(self) -> int | None:
        return self.limits.max_positions if self.limits is not None else None


def preflight(args: argparse.Namespace) -> Preflight:
    """Every check `args.target`'s files allow, the device and the threads; ValueError naming
    the bad value, before the weights load. The tokenizer is not loaded yet (`with_tokenizer`),
    so a check that needs none costs no tokenizer load (10 s for a GGUF file's)."""
    import torch

    from aah.integrations.hf.run.load import resolve_device
    from aah.plan import WindowPlan

    check_model(args.target)
    plan = WindowPlan.load(args.plan) if args.plan is not None else None  # else the default
    limits = preview_limits(args.target)
    if plan is not None:
        check_plan_shape(plan.windows, limits, args.plan)
    check_tokenizer(limits, args.target)
    resolve_device(args.device, "--device")
    if args.threads:
        torch.set_num_threads(args.threads)
    return Preflight(plan, limits, None, known=False)


def with_tokenizer(pre: Preflight, model: str) -> Preflight:
    """`pre` with the model's tokenizer loaded where its files are local (None for a model
    without one); a hub name's comes with the model."""
    from aah.integrations.hf.run.load import load_tokenizer

    if pre.limits is None:
        return pre
    tokenizer = load_tokenizer(model) if pre.limits.has_tokenizer else None
    return replace(pre, tokenizer=tokenizer, known=True)


def load_planned(args: argparse.Namespace, pre: Preflight) -> tuple[Any, Any | None, ModelLimits]:
    """The model (its plan not applied yet), its tokenizer, and its exact limits, the plan's
    shape checked against them."""
    from aah.integrations.hf.run.load import LOAD_TOKENIZER, load_model

    given = pre.tokenizer if pre.known else LOAD_TOKENIZER
    model, tokenizer = load_model(args.target, args.device, tokenizer=given)
    exact = model_limits(model, tokenizer)
    if pre.plan is not None:
        check_plan_shape(pre.plan.windows, exact, args.plan)
    return model, tokenizer, exact


def planned(args: argparse.Namespace, pre: Preflight, model: Any, tokenizer: Any) -> Any:
    """The plan to run: --plan's, else the model's default plan at --kv-fraction and
    --plan-length (`aah.hf.default_plan`: shipped, cached, else searched with its progress and
    cached), capped at the model's positions."""
    if pre.plan is not None:
        return pre.plan
    from aah.integrations.hf.search.default_plan import default_plan

    return default_plan(model, args.kv_fraction, args.plan_length, tokenizer=tokenizer,
                        progress=True)  # fmt: skip
