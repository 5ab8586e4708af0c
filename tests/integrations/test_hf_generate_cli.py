"""`aah generate MODEL --plan FILE`: the text is the Python API's greedy output (`hf.apply`,
`hf.per_head_cache`, `model.generate`), which is itself the plan's model run step by step
without a cache; the KV line on stderr reports the bytes that cache held. For a transformers
folder with its tokenizer and for a byte-level GGUF file without one."""

from __future__ import annotations

import re

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytest.importorskip("accelerate")

from hf_models import tiny_model, write_gguf
from hf_tokenized import save_tokenized_llama

from aah.cli import main
from aah.cli.hf.generate import cache_argument
from aah.integrations import hf
from aah.integrations.hf.run.load import load_model
from aah.plan import WindowPlan

PROMPT = "def f(x):\n    return"
NEW = 12


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("generate")
    save_tokenized_llama(root / "llama", seed=4)
    write_gguf(tiny_model("llama", seed=5), root / "tiny.gguf")
    plan = root / "plan.json"
    WindowPlan.of([[4, 4, 8, 8], [2, 2, 16, 16]], 2, 32).save(plan)
    return {"llama": root / "llama", "gguf": root / "tiny.gguf", "plan": plan}


def recompute(model, ids: torch.Tensor, new: int) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """The independent path: every step runs the whole sequence with the plan, no cache."""
    with torch.no_grad():
        for _ in range(new):
            step = model(ids).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, step], dim=1)
            if int(step) == model.generation_config.eos_token_id:
                break
    return ids


def python_api(source, plan_path, prompt_ids):  # type: ignore[no-untyped-def]
    """What the docs' Python recipe gives: (ids, cache bytes, positions seen, model)."""
    model, _ = load_model(str(source), "cpu")
    hf.apply(model, WindowPlan.load(plan_path))
    ids = prompt_ids(model)
    cache = hf.per_head_cache(model, max_cache_len=ids.shape[1] + NEW)
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False,
        pad_token_id=1, **cache_argument(model, cache),
    )  # fmt: skip
    assert torch.equal(out, recompute(model, ids, NEW))
    return out, cache.nbytes(), cache.get_seq_length()


def run_cli(capsys, source, plan, *flags: str) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    capsys.readouterr()
    argv = ["generate", str(source), "--plan", str(plan), "--prompt", PROMPT,
            "--max-new-tokens", str(NEW), *flags]  # fmt: skip
    assert main(argv) == 0
    captured = capsys.readouterr()
    return captured.out, captured.err


def kv_line(err: str) -> re.Match:
    found = re.search(r"held after (\d+) positions.*KV share ([\d.]+)\); (\d+) of (\d+) bytes", err)
    assert found, err
    return found


def test_a_transformers_folder_generates_what_the_python_api_does(sources, capsys) -> None:
    tokenizer = load_model(str(sources["llama"]), "cpu")[1]
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    out, held, seen = python_api(sources["llama"], sources["plan"], lambda m: ids)
    text, err = run_cli(capsys, sources["llama"], sources["plan"], "--temperature", "0")
    expected = tokenizer.decode(out[0], skip_special_tokens=True,
                                clean_up_tokenization_spaces=False)  # fmt: skip
    assert text == expected + "\n" and len(out[0]) > len(tokenizer(PROMPT).input_ids)
    line = kv_line(err)
    assert int(line[1]) == seen and int(line[3]) == held
    full = 2 * 2 * seen * 16 * 2 * 4  # layers x KV heads x positions x head_dim x (k, v) x fp32
    assert int(line[4]) == full and held < full


def test_a_byte_level_gguf_generates_what_the_python_api_does(sources, capsys) -> None:
    as_bytes = torch.tensor([list(PROMPT.encode("utf-8"))])
    out, held, _ = python_api(sources["gguf"], sources["plan"], lambda m: as_bytes)
    text, err = run_cli(capsys, sources["gguf"], sources["plan"], "--temperature", "0")
    expected = bytes(i for i in out[0].tolist() if i < 256).decode("utf-8", errors="replace")
    assert text == expected + "\n"
    assert int(kv_line(err)[3]) == held


def test_sampling_is_seeded_and_stays_within_the_plan(sources, capsys) -> None:
    flags = ("--temperature", "0.9", "--top-k", "20", "--seed", "3")
    text, err = run_cli(capsys, sources["llama"], sources["plan"], *flags)
    again, err_again = run_cli(capsys, sources["llama"], sources["plan"], *flags)
    assert again == text and kv_line(err_again)[0] == kv_line(err)[0]
    greedy, _ = run_cli(capsys, sources["llama"], sources["plan"], "--temperature", "0")
    assert text.startswith(PROMPT) and text != greedy  # sampled, not argmax


def test_generating_past_the_cache_is_refused_with_the_fix(sources) -> None:
    model, tokenizer = load_model(str(sources["llama"]), "cpu")
    hf.apply(model, WindowPlan.load(sources["plan"]))
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    cache = hf.per_head_cache(model, max_cache_len=ids.shape[1] + 2)
    with pytest.raises(ValueError, match=r"max_cache_len >= prompt length \+ max_new_tokens"):
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8,
                       do_sample=False, pad_token_id=1, **cache_argument(model, cache))  # fmt: skip
    for bad in (0, -1):
        with pytest.raises(ValueError, match="max_cache_len must be an int >= 1"):
            hf.per_head_cache(model, max_cache_len=bad)
