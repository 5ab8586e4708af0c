"""Cached generation against token-by-token full recompute (`model(prefix)` each step)."""

import argparse
import io

import pytest
import torch

from aah.cli.generate_cmd import add_generate_arguments, run_generate, utf8_pieces
from aah.model import GPT, GPTConfig
from aah.model.generate import generate, stream
from aah.model.sampling import GREEDY, Sampling


def tiny(**kw):
    base = dict(n_layer=2, n_head=4, n_kv_head=2, d_model=32, max_seq_len=48)
    base.update(kw)
    return GPTConfig(**base)


def model_with(plan, **kw):
    torch.manual_seed(0)
    model = GPT(tiny(**kw)).eval()
    with torch.no_grad():  # larger weights than the init: sharp attention, decisive argmax
        for p in model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.3)
    model.set_window_plan(plan)
    return model


def gen(model, idx, new, **sampling):
    return generate(model, idx, new, Sampling(**sampling))


def recompute_greedy(model, idx, new):
    """Independent path: the whole prefix through the batched forward at every step."""
    with torch.no_grad():
        for _ in range(new):
            idx = torch.cat([idx, model(idx)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return idx


MIXED = [[1, 3, 48, 6], [5, 2, 2, 100]]


@pytest.mark.parametrize("n_kv_head", [4, 2, 1])
@pytest.mark.parametrize("position", ["rope", "learned", "none"])
def test_cached_greedy_equals_full_recompute(n_kv_head, position):
    model = model_with(MIXED, n_kv_head=n_kv_head, position=position)
    idx = torch.randint(0, 256, (2, 7), generator=torch.Generator().manual_seed(1))
    out = gen(model, idx, 30, temperature=0)  # 30 new tokens > every local window
    assert out.shape == (2, 37) and out.dtype == torch.long
    assert torch.equal(out, recompute_greedy(model, idx, 30))


@pytest.mark.parametrize(
    "plan",
    [
        [[1, 1, 1, 1], [1, 1, 1, 1]],  # each token sees only itself
        [[48, 48, 48, 48], [1000, 48, 999, 48]],  # every window >= T: full causal
        [[3, 9, 2, 9], [9, 2, 9, 3]],  # GQA pairs whose windows differ
    ],
)
def test_step_logits_match_the_batched_forward(plan):
    model = model_with(plan)
    idx = torch.randint(0, 256, (1, 40), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        cache = model.make_cache(1, 40)
        torch.testing.assert_close(model(idx[:, :4], cache=cache), model(idx[:, :4]))
        for t in range(4, 40):
            expected = model(idx[:, : t + 1])[:, -1:]
            torch.testing.assert_close(model(idx[:, t : t + 1], cache=cache), expected)
    assert cache.length == 40


def test_full_windows_equal_the_full_plan():
    idx = torch.randint(0, 256, (1, 5), generator=torch.Generator().manual_seed(3))
    wide = gen(model_with([[500] * 4, [49] * 4]), idx, 20, temperature=0)
    full = gen(model_with([[48] * 4, [48] * 4]), idx, 20, temperature=0)
    assert torch.equal(wide, full)


def test_kv_bytes_after_generation_follow_the_formula():
    model = model_with(MIXED, n_kv_head=2)  # KV capacities: layer 0 [3, 48], layer 1 [5, 100]
    idx = torch.zeros(1, 10, dtype=torch.long)
    with torch.inference_mode():
        cache = model.make_cache(1, 30)
        logits = model(idx, cache=cache)[:, -1]
        assert cache.nbytes() == (3 + 10 + 5 + 10) * 8 * 2 * 4
        for _ in range(20):
            logits = model(logits.argmax(-1, keepdim=True), cache=cache)[:, -1]
    assert cache.nbytes() == (3 + 30 + 5 + 30) * 8 * 2 * 4 == cache.reserved_nbytes()


def test_sampling_is_reproducible_per_seed():
    model = model_with(MIXED)
    idx = torch.randint(0, 256, (2, 4), generator=torch.Generator().manual_seed(4))
    a = gen(model, idx, 24, temperature=1.0, seed=7)
    assert torch.equal(a, gen(model, idx, 24, temperature=1.0, seed=7))
    assert not torch.equal(a, gen(model, idx, 24, temperature=1.0, seed=8))
    greedy = gen(model, idx, 24, temperature=0)
    assert torch.equal(gen(model, idx, 24, top_k=1, seed=9), greedy)
    assert torch.equal(gen(model, idx, 24, top_p=1e-6, seed=9), greedy)
    sampled = gen(model, idx, 24, temperature=0.7, top_k=5, top_p=0.9, seed=1)
    assert sampled.shape == (2, 28) and int(sampled.min()) >= 0 and int(sampled.max()) < 256


def test_generate_restores_mode_and_needs_no_grad():
    model = model_with(MIXED).train()
    idx = torch.zeros(1, 3, dtype=torch.long)
    assert torch.equal(generate(model, idx, 0), idx)
    out = gen(model, idx, 5, temperature=0)
    assert model.training and not out.requires_grad and out.shape == (1, 8)
    tokens = []
    for token in stream(model, idx, 5, GREEDY):
        assert not torch.is_inference_mode_enabled()  # not held across a yield
        tokens.append(token)
    assert torch.equal(torch.stack(tokens, 1), out[:, 3:]) and model.training


@pytest.mark.parametrize(
    "kwargs, named",
    [
        (dict(temperature=-0.5), "-0.5"),
        (dict(temperature=float("nan")), "nan"),
        (dict(top_k=0), "top_k"),
        (dict(top_k=True), "top_k"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "1.5"),
        (dict(seed=1.5), "seed"),
    ],
)
def test_bad_sampling_raises_naming_the_value(kwargs, named):
    with pytest.raises(ValueError, match=named):
        Sampling(**kwargs)


@pytest.mark.parametrize("new, named", [(-1, "-1"), (42, "48")])  # 7 + 42 > max_seq_len 48
def test_bad_lengths_raise_naming_the_value(new, named):
    with pytest.raises(ValueError, match=named):
        generate(model_with(MIXED), torch.zeros(1, 7, dtype=torch.long), new)


def test_prompt_longer_than_max_seq_len_raises():
    model = model_with(MIXED)
    with pytest.raises(ValueError, match="prompt length 49"):
        generate(model, torch.zeros(1, 49, dtype=torch.long), 1)
    with pytest.raises(ValueError, match="LongTensor"):
        generate(model, torch.zeros(1, 4), 1)


def test_utf8_pieces_stream_across_multibyte_boundaries():
    text = "naïve € 𝄞 ok"
    pieces = list(utf8_pieces(bytes([b]) for b in text.encode()))
    assert "".join(pieces) == text and "€" in pieces  # a 3-byte char arrives whole
    assert "".join(utf8_pieces([b"ab\xe2\x82"])) == "ab\ufffd"  # truncated tail replaced


def test_cli_streams_text_for_a_trained_run(tmp_path, monkeypatch):
    from aah.training.loop import train
    from aah.training.run_config import RunConfig

    monkeypatch.setenv("AAH_CACHE_DIR", str(tmp_path / "cache"))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("héllo wörld, ça va? " * 400)
    config = RunConfig()
    for key, value in {
        "data.path": str(corpus),
        "model.n_layer": 1,
        "model.n_head": 2,
        "model.n_kv_head": 1,
        "model.d_model": 16,
        "model.max_seq_len": 32,
        "train.batch_size": 2,
        "train.max_steps": 2,
        "train.eval_interval": 2,
        "train.log_interval": 1,
        "train.eval_batches": 1,
        "train.threads": 1,
    }.items():
        config.set(key, value, from_text=False)
    run = tmp_path / "run"
    train(config, run, progress=False)
    parser = argparse.ArgumentParser()
    add_generate_arguments(parser)
    out = io.StringIO()
    args = parser.parse_args([str(run), "--prompt", "hé", "--max-new-tokens", "20", "--seed", "0"])
    assert run_generate(args, out=out) == 0
    text = out.getvalue()
    assert text.startswith("hé") and text.endswith("\n") and len(text.encode()) >= 3
    args = parser.parse_args([str(run), "--prompt", "x" * 40])
    with pytest.raises(ValueError, match="prompt length 40"):
        run_generate(args, out=io.StringIO())


SINKS = [[2, 0, 0, 1], [4, 4, 1, 0]]


@pytest.mark.parametrize("n_kv_head", [4, 2, 1])
def test_cached_greedy_with_sinks_equals_full_recompute(n_kv_head):
    model = model_with(MIXED, n_kv_head=n_kv_head)
    model.set_window_plan(MIXED, sinks=SINKS)
    assert model.sink_plan() == SINKS
    idx = torch.randint(0, 256, (2, 7), generator=torch.Generator().manual_seed(5))
    out = gen(model, idx, 30, temperature=0)
    assert torch.equal(out, recompute_greedy(model, idx, 30))


def test_sinks_change_the_output_and_default_to_none():
    model = model_with(MIXED)
    idx = torch.randint(0, 256, (1, 40), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        plain = model(idx)
        model.set_window_plan(MIXED, sinks=SINKS)
        with_sinks = model(idx)
        model.set_window_plan(MIXED)
        assert model.sink_plan() == [[0] * 4, [0] * 4]
        assert torch.equal(model(idx), plain)
    assert not torch.allclose(with_sinks, plain)


def test_bad_sinks_are_refused():
    model = model_with(MIXED)
    with pytest.raises(ValueError, match="every sink must be an int >= 0"):
        model.set_window_plan(MIXED, sinks=[[0, 0, 0, -1], [0] * 4])
    with pytest.raises(ValueError, match="sinks has 1 layers, the model has 2"):
        model.set_window_plan(MIXED, sinks=[[0] * 4])
    variant = GPT(tiny(position="alibi"))
    with pytest.raises(ValueError, match="plain softmax"):
        variant.set_window_plan(MIXED, sinks=SINKS)


def test_forward_with_a_cache_refuses_what_it_cannot_decode():
    model = model_with(MIXED)
    idx = torch.zeros(2, 5, dtype=torch.long)
    with torch.inference_mode():
        cache = model.make_cache(2, 20)
        with pytest.raises(ValueError, match="3 rows"):
            model(torch.zeros(3, 5, dtype=torch.long), cache=cache)
        model(idx, cache=cache)
        with pytest.raises(ValueError, match=r"one token per row, got idx \(2, 2\)"):
            model(idx[:, :2], cache=cache)
        model.set_window_plan([[4] * 4, [4] * 4])
        with pytest.raises(ValueError, match="another window plan"):
            model(idx[:, :1], cache=cache)
        model.set_window_plan(MIXED)
        full = model.make_cache(2, 48)
        model(torch.zeros(2, 48, dtype=torch.long), cache=full)
        with pytest.raises(ValueError, match="position 48 "):
            model(idx[:, :1], cache=full)
    for kw in (dict(position="alibi"), dict(attention="additive")):
        with pytest.raises(ValueError, match="cached decoding supports"):
            generate(GPT(tiny(**kw)), idx, 1)
