"""`torch.compile(fullgraph=True)` over the "aah" attention on CPU, every family: the forward
with and without masks, cached decoding with PerHeadCache and with transformers' caches, and
generate's own compiled static-cache loop, each equal to the same run eager.

Most run dynamo and AOT autograd without inductor (`aot_eager`: any data-dependent branch or
graph break still fails, in a second instead of tens); one runs inductor end to end. The eager
runs themselves are checked against each row alone in test_hf_masks.py / test_hf_cache.py.
"""

from __future__ import annotations

import inspect

import pytest
import torch
from hf_models import VOCAB, tiny_model

from aah.integrations import hf
from aah.integrations.hf.run.cache import PerHeadCache
from aah.model.cache import KVCache

transformers = pytest.importorskip("transformers")
from torch._dynamo.testing import CompileCounterWithBackend  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:Dynamo detected a call to a `functools.lru_cache`")

PLAN = [[4, 6, 128, 3], [5, 2, 8, 8]]
SINKS = [[2, 2, 0, 1], [1, 0, 3, 3]]
PAD = 1
STEPS = 6
TOL = {"atol": 2e-5, "rtol": 2e-5}


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    # Every model's forward is one code object to dynamo (transformers wraps them all in the
    # same function): its graphs from earlier tests would count against the recompile limit.
    torch._dynamo.reset()


def planned(family: str) -> torch.nn.Module:
    model = tiny_model(family)
    hf.apply(model, PLAN, sinks=SINKS)
    return model


def compiled(model: torch.nn.Module, backend: str = "aot_eager"):  # type: ignore[no-untyped-def]
    counter = CompileCounterWithBackend(backend)
    return torch.compile(model.forward, fullgraph=True, backend=counter), counter


def cache_name(model: torch.nn.Module) -> str:
    """The forward's name for a cache object in this transformers version."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def left_padded(lengths: list[int], seed: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.full((len(lengths), width), PAD)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, width - n :] = torch.randint(2, VOCAB, (n,), generator=gen)
        mask[i, width - n :] = 1
    return ids, mask


def greedy_steps(model, forward, ids, mask, cache) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """STEPS greedy tokens by calling `forward` as generate would: the prompt, then one token
    at a time with the grown mask and each row's next position."""
    kwargs = {"use_cache": True, cache_name(model): cache}
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        out = forward(ids, attention_mask=mask, position_ids=positions, **kwargs)
        kwargs[cache_name(model)] = out.past_key_values  # the one the prompt filled
        last, tokens = positions[:, -1:], []
        for _ in range(STEPS):
            tokens.append(out.logits[:, -1:].argmax(-1))
            mask, last = torch.cat([mask, torch.ones_like(tokens[-1])], dim=1), last + 1
            out = forward(tokens[-1], attention_mask=mask, position_ids=last, **kwargs)
    return torch.cat(tokens, dim=1)


def test_compiled_forward_equals_eager(family: str) -> None:
    # No mask, a mask with holes and padding, and packed segments: one graph each, no branch
    # on the mask's values (the eager run checks them and takes the fast path where it can).
    model = planned(family)
    forward, _ = compiled(model)
    ids = torch.randint(2, VOCAB, (2, 15), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[0, 4:7], mask[1, :3], mask[1, -2:] = 0, 0, 0
    holes = {"attention_mask": mask, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0)}
    packed = torch.cat([torch.arange(6), torch.arange(9)])[None].expand(2, -1)
    cases = [({}, None), (holes, mask.bool()), ({"position_ids": packed, "use_cache": False}, None)]
    with torch.no_grad():
        for kwargs, real in cases:
            got, expected = forward(ids, **kwargs).logits, model(ids, **kwargs).logits
            if real is not None:  # pad rows hold what nothing reads
                got, expected = got[real], expected[real]
            torch.testing.assert_close(got, expected, **TOL)


@pytest.mark.parametrize("cache", ["per-head", "dynamic"])
def test_compiled_decoding_equals_eager_without_a_graph_per_step(family: str, cache: str) -> None:
    # Left-padded prompts with sinks (9 + 6 positions stay below Mistral's own window).
    model = planned(family)
    ids, mask = left_padded([9, 6])

    def make() -> PerHeadCache | None:
        return PerHeadCache(model, max_cache_len=9 + STEPS) if cache == "per-head" else None

    expected = greedy_steps(model, model.forward, ids, mask, make())
    forward, counter = compiled(model)
    assert torch.equal(greedy_steps(model, forward, ids, mask, make()), expected)
    # The prompt, the first step, then one graph with a symbolic position for the others (and
    # for Mistral's DynamicCache one more once its sliding-window layers' sizes stop growing),
    # where a graph per step would make 1 + STEPS.
    assert counter.frame_count <= 4 < 1 + STEPS


def test_static_cache_generate_compiles_with_a_plan(family: str) -> None:
    # generate compiles its decoding forward for a static cache (CPU needs the flag below).
    model = planned(family)
    ids, mask = left_padded([9, 6])
    config = transformers.CompileConfig(fullgraph=True, backend="aot_eager", mode=None)
    config._compile_all_devices = True
    kwargs = {"attention_mask": mask, "max_new_tokens": STEPS, "do_sample": False}
    dynamic = model.generate(ids, pad_token_id=PAD, **kwargs)
    model.generation_config.compile_config = config
    static = model.generate(ids, pad_token_id=PAD, cache_implementation="static", **kwargs)
    assert hasattr(model, "_compiled_call")  # the decoding steps ran compiled
    assert torch.equal(static, dynamic)


def test_inductor_decoding_with_the_per_head_cache() -> None:
    # Generated code end to end, once: the cache's in-place writes and masked reads included.
    model = planned("llama")
    ids, mask = left_padded([9, 6])
    expected = greedy_steps(model, model.forward, ids, mask, PerHeadCache(model, 9 + STEPS))
    forward, _ = compiled(model, "inductor")
    assert torch.equal(
        greedy_steps(model, forward, ids, mask, PerHeadCache(model, 9 + STEPS)), expected
    )


def test_fixed_shape_read_equals_the_ring_read() -> None:
    # The compiled decoding step reads each bucket whole under a mask; eager it reads slices.
    # Same keys: equal outputs at every step, through ring wrap-around, with padding and sinks.
    plan, sinks = [[2, 3, 5, 5, 9, 9, 9, 1]], [[1, 0, 2, 2, 0, 3, 3, 0]]
    gen = torch.Generator().manual_seed(0)
    caches = [
        KVCache(plan, n_kv_head=4, head_dim=8, batch=3, max_len=40, sinks=sinks, pads=[0, 3, 7])
        for _ in range(2)
    ]
    prompt = [torch.randn(3, 4, 12, 8, generator=gen) for _ in range(2)]
    for cache in caches:
        cache.prefill(0, *prompt)
        cache.advance(12)
    for _ in range(20):
        q = torch.randn(3, 8, 1, 8, generator=gen)
        k, v = (torch.randn(3, 4, 1, 8, generator=gen) for _ in range(2))
        ring = caches[0].attend(0, q, k, v, 0.5)
        fixed = caches[1]._attend_fixed(0, q, k, v, 0.5, caches[1].length)
        torch.testing.assert_close(fixed, ring, atol=1e-6, rtol=1e-6)
        for cache in caches:
            cache.advance(1)
