"""A first-order estimate of what cutting a KV head costs in loss, from one forward + backward.

Shapes: q (B, Hq, T, D); k, v (B, Hkv, T, D), query head h reads KV head h // G (G = Hq / Hkv);
grad (B, T, Hq * D), the gradient of the mean next-token loss with respect to the attention
output before the output projection (what `o_proj` reads), from one backward pass with every
head full.

Cutting KV head u to window w (with s sinks) changes its G query heads' outputs at row i from
o to o_w (the renormalised windowed row, as in `hf.search.output_error`). To first order the mean
loss moves by

    dL(u, w) = sum_i sum_{h in u} grad_{i,h} . (o_w - o)_{i,h}

which `gradient_error` estimates from `sample_queries` seeded rows per sequence, scaled to all
T - 1 rows (row 0 sees only itself, which every window keeps). Where the output signal
(`hf.search.output_error`) weighs every direction of the residual stream alike, this weighs each by
how much the loss downstream reacts to it: a large change that later layers ignore costs
little, a small change along a direction the loss is steep in costs much.

The estimate is signed (a cut can lower the loss to first order) and exact only for small
changes; `tests/integrations/test_hf_gradient_error.py` checks it against a full recompute.
It is not a plan-search signal: on SmolLM2-135M (`experiments/scripts/signal_fidelity.py`,
60 measured single-KV-head cuts at T = 2048) it ranks cuts by their measured loss rise with Spearman
rho +0.08, its magnitude with +0.59, against +0.67 for the output signal (`hf.search.output_error`)
and +0.63 for attention mass: cutting context is a large change, where the first-order term is
dominated by what it leaves out. It stays as the measurement behind that finding.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from aah.integrations.hf.search.output_error import sampled_rows
from aah.validate import check_int


def gradient_error(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grad: torch.Tensor,
    candidates: Sequence[int],
    sinks: int = 0,
    *,
    sample_queries: int = 64,
    seed: int = 0,
    scale: float | None = None,
) -> torch.Tensor:
    """(Hkv, n_windows) float64 on CPU: the first-order loss change dL(u, w) of the module
    docstring per KV head u, summed over the batch's sequences (`grad` is that of the batch's
    mean loss, so the sum is the change of that mean)."""
    check_int("sinks", sinks, minimum=0)
    check_int("sample_queries", sample_queries, minimum=1)
    batch, n_q, seq_len, dim = q.shape
    n_kv = k.shape[1]
    if n_q % n_kv or grad.shape != (batch, seq_len, n_q * dim):
        raise ValueError(
            f"{n_q} query heads of dim {dim} do not fit {n_kv} KV heads and a gradient of "
            f"{tuple(grad.shape)} (want {(batch, seq_len, n_q * dim)})"
        )
    scale = dim**-0.5 if scale is None else scale
    total = torch.zeros(n_kv, len(candidates), dtype=torch.float64)
    if seq_len < 2:
        return total
    gen = torch.Generator().manual_seed(seed)
    for b, rows in enumerate(sampled_rows(q, k, v, sample_queries, gen, scale)):
        g = grad[b, rows.pos].float().view(-1, n_q, dim).transpose(0, 1)  # (Hq, S, D)
        for c, w in enumerate(candidates):
            per_head = (g * (rows.windowed(w, sinks) - rows.full)).sum(-1).mean(-1)  # (Hq,)
            total[:, c] += per_head.view(n_kv, n_q // n_kv).sum(-1).double().cpu()
    return total * (seq_len - 1)


def _output_projection_module(module: torch.nn.Module) -> torch.nn.Module:
    for name in ("o_proj", "c_proj"):
        if hasattr(module, name):
            return getattr(module, name)
    raise ValueError(f"{type(module).__name__} has no o_proj or c_proj output projection")


def measure_gradient_error(
    model: torch.nn.Module,
    batches: Sequence[torch.Tensor],
    candidates: Sequence[int],
    *,
    sinks: int = 0,
    sample_queries: int = 64,
    seed: int = 0,
) -> torch.Tensor:
    """(L, Hkv, n_windows) float64: `gradient_error` per layer, the mean over `batches`; one
    forward and one backward per batch, every head full, the model's weights untouched (no
    parameter gradient is kept)."""
    from aah.controller.allocate import check_candidates
    from aah.integrations.hf.run.apply_plan import probing
    from aah.integrations.hf.run.model_layout import layout

    cands = check_candidates(candidates)
    if not batches:
        raise ValueError("no calibration batches")
    lay = layout(model)
    index = {id(m): i for i, m in enumerate(lay.modules)}
    total = torch.zeros(lay.n_layer, lay.n_kv_head, len(cands), dtype=torch.float64)
    grads: list[torch.Tensor | None] = [None] * lay.n_layer
    qkv: list[tuple[torch.Tensor, ...] | None] = [None] * lay.n_layer

    def keep(module: torch.nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             scale: float) -> None:  # fmt: skip
        qkv[index[id(module)]] = (q.detach(), k.detach(), v.detach(), torch.tensor(scale))

    def grad_hook(layer: int):  # what o_proj reads, and its gradient once backward runs
        def hook(_module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            args[0].register_hook(lambda g: grads.__setitem__(layer, g.detach()))

        return hook

    handles = [
        _output_projection_module(m).register_forward_pre_hook(grad_hook(i))
        for i, m in enumerate(lay.modules)
    ]
    frozen = [p for p in model.parameters() if p.requires_grad]
    was_training = model.training
    model.eval()
    try:
        for p in frozen:
            p.requires_grad_(False)
        with probing(model, keep):
            embed = model.get_input_embeddings()
            for i, ids in enumerate(batches):
                ids = ids.to(next(model.parameters()).device)
                inputs = embed(ids).detach().requires_grad_(True)
                logits = model(inputs_embeds=inputs, use_cache=False).logits[:, :-1].float()
                loss = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)
                )
                loss.backward()
                for layer in range(lay.n_layer):
                    q, k, v, scale = qkv[layer]  # type: ignore[misc]
                    grad = grads[layer]
                    if grad is None:
                        raise RuntimeError(f"no gradient reached layer {layer}'s output projection")
                    total[layer] += gradient_error(
                        q, k, v, grad.reshape(grad.shape[0], grad.shape[1], -1), cands, sinks,
                        sample_queries=sample_queries, seed=seed + i, scale=float(scale),
                    )  # fmt: skip
                qkv[:] = [None] * lay.n_layer
                grads[:] = [None] * lay.n_layer
    finally:
        for handle in handles:
            handle.remove()
        for p in frozen:
            p.requires_grad_(True)
        model.train(was_training)
    return total / len(batches)
