"""Healing a model to its plan: a short distillation of a few parameters against full attention.

A plan drops context; the model was trained with all of it. `heal` learns a few parameters
(`hf.run.heal_params`: a log-temperature per query head, LoRA on the attention projections)
on the layers the plan cuts, with every weight of the model frozen, so that the planned model's
next-token distributions move back toward the model's own at full attention:

    loss = mean over scored positions of KL(p_full || p_planned + healed)   (nats per token)

the objective the plan choice judges by (`hf.search.plan_choice`): the teacher is the same model
with the plan removed, its distributions computed once before training (no second copy of the
model); the KL is exact over the whole vocabulary at `POSITIONS_PER_BLOCK` evenly spaced
positions per block from T/8 on (logits only there, so a 262k vocabulary costs little).

Blocks: by default the shipped calibration mix, past the blocks a default search reads
(its 8 measured and 4 judged ones), `train_blocks` to train on and `held_out` more to judge on;
with the user's text, its last `held_out` blocks are held out. The held-out KL is measured
before training (the un-healed plan) and every `eval_every` steps; the best parameters seen
are kept, and only if they lower the held-out KL: otherwise the plan comes back unchanged,
with a warning that says so. `minutes` caps the wall time; the heal then stops after the step
in progress, judges once more and keeps the best. With `HealOptions.redecide` the windows are
re-decided while it trains, within the plan's KV bytes (`hf.search.heal_redecide`), and the
best parameters come back with the windows they were judged under.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from aah.attention.kv_bytes import plan_kv_bytes
from aah.integrations.hf.run.apply_plan import apply, current_plan, current_sinks, remove
from aah.integrations.hf.run.heal_params import KINDS, install, installed, trainable, uninstall
from aah.integrations.hf.run.load import resolve_tokenizer
from aah.integrations.hf.run.model_layout import kv_shape, layout, sliding_windows
from aah.integrations.hf.search.calibration_text import (
    HELD_OUT_BLOCKS,
    MIX_BLOCKS,
    calibration_batches,
    model_positions,
    shipped_mix,
)
from aah.integrations.hf.search.heal_redecide import Redecide, WindowRedecider
from aah.integrations.hf.search.plan_choice import FullReference
from aah.plan import HEAL_KEY, WindowPlan
from aah.validate import check_int

#: what `heal` learns when not told: LoRA lowered SmolLM2's held-out KL by 27% in 12 minutes,
#: a per-head temperature by 15% (results/pretrained/LOG.md, "Healing the default plan")
DEFAULT_KINDS = ("lora",)
#: Adam's learning rate per kind: a log-temperature moves in tenths, LoRA's B from zero
LEARNING_RATES = {"temperature": 2e-2, "lora": 1e-3, "sink": 0.2}


@dataclass(frozen=True)
class HealOptions:
    """How a heal runs (every field has a default sized for 2 CPU cores at T = 2048)."""

    kinds: tuple[str, ...] = DEFAULT_KINDS
    rank: int = 4
    steps: int = 200
    minutes: float | None = None
    train_blocks: int = 16
    held_out: int = 4
    eval_every: int = 10
    seed: int = 0
    #: re-decide the windows while training (`hf.search.heal_redecide`); None: they stay fixed
    redecide: Redecide | None = None

    def __post_init__(self) -> None:
        if not self.kinds or any(k not in KINDS for k in self.kinds):
            raise ValueError(f"heal kinds must be some of {', '.join(KINDS)}, got {self.kinds!r}")
        for name in ("rank", "steps", "train_blocks", "held_out", "eval_every"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("seed", self.seed, minimum=0)
        if self.minutes is not None and not (
            isinstance(self.minutes, (int, float))
            and math.isfinite(self.minutes)
            and self.minutes > 0
        ):
            raise ValueError(f"minutes must be a number > 0 or None, got {self.minutes!r}")


def heal(
    model: torch.nn.Module,
    plan: WindowPlan,
    text: Any = None,
    *,
    seq_len: int | None = None,
    minutes: float | None = None,
    options: HealOptions | None = None,
    tokenizer: Any | None = None,
    progress: bool | None = None,
) -> WindowPlan:
    """`plan` with learned parameters that bring the planned model closer to its own full
    attention (module docstring), or `plan` unchanged (with a warning) where they do not.

    Args:
        model: a supported transformers causal LM; its weights are never changed, and it is
            left with the plan it had (or none) on return.
        plan: the plan to heal (its own parameters, if it was healed before, are not reused).
        text: the text to heal on (a string, strings or token ids, as `search_plan` reads
            them); None: the shipped calibration mix.
        seq_len: the block length T (default the plan's own `seq_len`, else 512).
        minutes: a wall-time cap (overrides `options.minutes`).
        options: what to learn and for how long (`HealOptions`).
        progress: a progress bar with the step, the held-out KL and an ETA (None: when stderr
            is a terminal).
    """
    opts = options or HealOptions()
    if minutes is not None:
        opts = replace(opts, minutes=minutes)
    if not isinstance(plan, WindowPlan):
        raise ValueError(f"heal needs a WindowPlan, got {type(plan).__name__}")
    lay = layout(model)
    if len(plan.windows) != lay.n_layer or any(len(r) != lay.n_head for r in plan.windows):
        raise ValueError(
            f"the plan is {len(plan.windows)} x {len(plan.windows[0])} heads, the model "
            f"{lay.n_layer} x {lay.n_head}"
        )
    if progress is None:
        progress = sys.stderr.isatty()
    tokenizer = resolve_tokenizer(model, tokenizer)
    t = model_positions(model, seq_len or plan.seq_len)
    train, held = heal_blocks(model, text, t, opts, tokenizer)
    redecider = None if opts.redecide is None else WindowRedecider(model, plan, t, opts.redecide)
    if redecider is None:
        layers = cut_layers(plan, t, sliding_windows(model))
    else:  # every layer a decision could cut gets parameters
        layers = redecider.layers()
    if not layers:
        warnings.warn("the plan cuts no layer at this length: nothing to heal", stacklevel=2)
        return plan
    before = (current_plan(model), current_sinks(model), installed(model))
    grads = [p.requires_grad for p in model.parameters()]
    try:
        # The teacher: the model itself at full attention without healed parameters (what
        # `FullReference.of` runs), before anything is trained.
        train_ref = FullReference.of(model, train)
        held_ref = FullReference.of(model, held)
        apply(model, replace(plan, params={}))
        baseline = held_out_kl(model, held_ref)  # the plan as it is, before any parameter
        for p in model.parameters():
            p.requires_grad_(False)
        torch.manual_seed(opts.seed)
        params = trainable(model, opts.kinds, layers, opts.rank)
        record = _train(model, params, train_ref, held_ref, opts, progress, baseline, redecider)
    finally:
        uninstall(model)
        for p, flag in zip(model.parameters(), grads, strict=True):
            p.requires_grad_(flag)
        _restore(model, before)
    info = {
        "kinds": list(opts.kinds),
        "rank": opts.rank if "lora" in opts.kinds else None,
        "layers": layers,
        "seq_len": t,
        "text": "shipped mix" if text is None else "user text",
        "train_blocks": len(train),
        "held_out_blocks": len(held),
        **{k: v for k, v in record.items() if k not in ("best", "windows")},
    }
    if redecider is not None:
        info["redecide"] = redecider.record()
    if record["best"] is None:
        warnings.warn(
            f"healing did not lower the held-out KL ({record['held_out_kl_before']:.4f} nats "
            "per token): the plan is returned unchanged",
            stacklevel=2,
        )
        return plan
    if redecider is not None:  # the windows kept with the parameters, and the bytes they hold
        bytes_now = plan_kv_bytes(record["windows"], plan.sinks, kv_shape(model), t)
        plan = replace(plan, windows=record["windows"], info={**plan.info, "kv_bytes": bytes_now})
    return replace(plan, info={**plan.info, HEAL_KEY: info}, params=record["best"])


def cut_layers(plan: WindowPlan, seq_len: int, slides: Sequence[int | None]) -> list[int]:
    """The layers where some head sees less than the model would at `seq_len` (a window
    below the layer's own sliding window and below T)."""
    out = []
    for i, (row, cap) in enumerate(zip(plan.windows, slides, strict=True)):
        full = min(seq_len, cap) if cap else seq_len
        if any(min(w, full) < full for w in row):
            out.append(i)
    return out


def heal_blocks(
    model: torch.nn.Module, text: Any, t: int, opts: HealOptions, tokenizer: Any
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(training blocks, held-out blocks), each (1, T)."""
    if text is None:
        skip = MIX_BLOCKS + HELD_OUT_BLOCKS  # what a default search has read
        mix = shipped_mix(model, tokenizer, t, skip + opts.train_blocks + opts.held_out)
        blocks = calibration_batches(model, mix[skip:], seq_len=t, tokenizer=tokenizer)
    else:
        blocks = calibration_batches(model, text, seq_len=t, tokenizer=tokenizer)
    blocks = [b for b in blocks if b.shape[1] == t]
    if len(blocks) < opts.held_out + 1:
        raise ValueError(
            f"the text gives {len(blocks)} whole blocks of {t} tokens; healing needs at least "
            f"{opts.held_out + 1} ({opts.held_out} held out and one to train on)"
        )
    held = blocks[-opts.held_out :]
    return blocks[: -opts.held_out][: opts.train_blocks], held


def _log_probs(model: torch.nn.Module, ids: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    logits = model(ids, logits_to_keep=rows).logits
    return torch.log_softmax(logits.float(), dim=-1)


def _kl(model: torch.nn.Module, ids: torch.Tensor, rows: torch.Tensor, ref: torch.Tensor) -> Any:
    """Mean KL(ref || model) over the rows, a differentiable scalar."""
    planned = _log_probs(model, ids, rows)
    return (ref.exp() * (ref - planned)).sum(-1).mean()


def held_out_kl(model: torch.nn.Module, ref: FullReference) -> float:
    """The mean KL(full || model as it is now) over `ref`'s blocks and rows, nats per token:
    what the heal judges by (the model's current plan and parameters)."""
    device = next(model.parameters()).device
    with torch.no_grad():
        parts = [
            float(_kl(model, ids.to(device), ref.rows, lp))
            for ids, lp in zip(ref.batches, ref.log_probs, strict=True)
        ]
    return sum(parts) / len(parts)


def _train(
    model: torch.nn.Module,
    params: dict[str, torch.nn.Parameter],
    train_ref: FullReference,
    held_ref: FullReference,
    opts: HealOptions,
    progress: bool,
    baseline: float | None = None,
    redecider: WindowRedecider | None = None,
) -> dict[str, Any]:
    """Adam on `params` for `opts.steps` steps (or until `opts.minutes`), one training block a
    step in a seeded order; the best parameters by held-out KL (with the windows in force
    then), and the curve. `baseline`: the un-healed plan's held-out KL (default: measured now,
    with `params` at their start). `redecider`: re-decides the windows every
    `redecider.options.every` steps, before that step's judgement."""
    groups = [
        {"params": [p for n, p in params.items() if n.startswith(kind)], "lr": LEARNING_RATES[kind]}
        for kind in opts.kinds
    ]
    optimiser = torch.optim.Adam([g for g in groups if g["params"]])
    generator = torch.Generator().manual_seed(opts.seed)
    order: list[int] = []
    device = next(model.parameters()).device
    start = time.monotonic()
    if baseline is None:
        baseline = held_out_kl(model, held_ref)
    curve = [{"step": 0, "seconds": 0.0, "held_out_kl": baseline}]
    best_kl, best = baseline, None
    windows = best_windows = current_plan(model)
    bar = _bar(opts.steps, progress, baseline)
    step = 0
    try:
        while step < opts.steps:
            if not order:
                order = torch.randperm(len(train_ref.batches), generator=generator).tolist()
            i = order.pop()
            loss = _kl(
                model, train_ref.batches[i].to(device), train_ref.rows, train_ref.log_probs[i]
            )
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            step += 1
            if redecider is not None and step % redecider.options.every == 0:
                windows = redecider.decide(step, redecider.next_blocks(train_ref.batches)).windows
            out_of_time = opts.minutes is not None and time.monotonic() - start > 60 * opts.minutes
            if step % opts.eval_every == 0 or step == opts.steps or out_of_time:
                kl = held_out_kl(model, held_ref)
                curve.append(
                    {"step": step, "seconds": round(time.monotonic() - start, 1), "held_out_kl": kl}
                )
                if kl < best_kl:
                    best_kl, best, best_windows = kl, installed(model), windows
                if bar is not None:
                    bar.set_postfix(held_out_kl=f"{kl:.4f}", best=f"{best_kl:.4f}")
            if bar is not None:
                bar.update(1)
            if out_of_time:
                break
    finally:
        if bar is not None:
            bar.close()
    return {
        "steps": step,
        "seconds": round(time.monotonic() - start, 1),
        "held_out_kl_before": baseline,
        "held_out_kl_after": best_kl,
        "curve": curve,
        "best": best,
        "windows": best_windows,
    }


def _bar(total: int, progress: bool, baseline: float) -> Any:
    if not progress:
        return None
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc="healing", unit="step")
    bar.set_postfix(held_out_kl=f"{baseline:.4f}")
    return bar


def _restore(model: torch.nn.Module, before: tuple[Any, Any, dict[str, torch.Tensor]]) -> None:
    windows, sinks, params = before
    if windows is None:
        remove(model)
        return
    apply(model, windows, sinks=sinks or 0)
    if params:
        install(model, params)
