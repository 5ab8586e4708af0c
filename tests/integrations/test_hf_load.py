"""Loading models from GGUF files: a tiny Llama written as GGUF by the test itself loads with the
same logits as the model it was written from, and the `aah plan` commands accept it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
pytest.importorskip("accelerate")

from hf_models import VOCAB, tiny_model, write_gguf  # noqa: E402

from aah.cli import main  # noqa: E402
from aah.integrations.hf.run.load import (  # noqa: E402
    ModelSource,
    load_model,
    require_gguf_support,
    resolve_source,
)


@pytest.fixture(scope="module")
def gguf_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    source = tiny_model("llama", seed=5)
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf"
    write_gguf(source, path)
    return source, path


def test_gguf_file_and_its_folder_load_the_model_it_was_written_from(gguf_model) -> None:
    source, path = gguf_model
    ids = torch.randint(2, VOCAB, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = source(input_ids=ids).logits
    for name in (str(path), str(path.parent)):
        model, tokenizer = load_model(name, "cpu")
        assert tokenizer is None  # the file carries no tokenizer: bytes stand-in
        with torch.no_grad():
            got = model(input_ids=ids).logits
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_resolve_source_cases(tmp_path: Path) -> None:
    assert resolve_source("org/name") == ModelSource("org/name")
    with pytest.raises(ValueError, match=r"missing\.gguf"):
        resolve_source(str(tmp_path / "missing.gguf"))
    (tmp_path / "a.gguf").write_bytes(b"")
    assert resolve_source(str(tmp_path)) == ModelSource(str(tmp_path.resolve()), "a.gguf")
    (tmp_path / "b.gguf").write_bytes(b"")
    with pytest.raises(ValueError, match=r"a\.gguf, b\.gguf"):
        resolve_source(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")  # a transformers folder wins
    assert resolve_source(str(tmp_path)) == ModelSource(str(tmp_path))


def test_missing_gguf_package_names_the_install_line(monkeypatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a)
    )
    with pytest.raises(ImportError, match=r"gguf package: pip install 'aah-attention\[hf\]'"):
        require_gguf_support()


def test_plan_search_and_apply_take_a_gguf_file(gguf_model, tmp_path: Path, capsys) -> None:
    _, path = gguf_model
    text = tmp_path / "calib.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    plan = tmp_path / "plan.json"
    common = ["--text", str(text), "--seq-len", "32", "--max-batches", "2", "--device", "cpu"]
    search = ["plan", "search", str(path), *common, "--candidates", "4,8,16,32", "--sinks", "2"]
    assert main([*search, "--budget", "0.5", "--out", str(plan)]) == 0
    found = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert found["coverage"] <= 0.5 and plan.is_file()
    assert main(["plan", "apply", str(path), "--plan", str(plan), *common]) == 0
    applied = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert applied["ppl_plan"] > 0 and applied["seq_len"] == 32


def test_plan_apply_takes_any_plan_file_with_its_sinks(gguf_model, tmp_path: Path, capsys) -> None:
    from aah.plan import WindowPlan

    model, path = gguf_model
    n_layer, n_head = model.config.num_hidden_layers, model.config.num_attention_heads
    text = tmp_path / "calib.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    common = ["--text", str(text), "--seq-len", "32", "--max-batches", "2", "--device", "cpu"]
    coverage = {}
    for sinks in (0, 2):  # the format the pretrained study writes: extra keys, its own sinks
        plan = tmp_path / f"bench-{sinks}.json"
        WindowPlan.of([[4] * n_head] * n_layer, sinks, 32, method="output", kv_fraction=0.3).save(
            plan
        )
        assert main(["plan", "apply", str(path), "--plan", str(plan), *common]) == 0
        coverage[sinks] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["coverage"]
    assert coverage[2] > coverage[0]  # the file's sinks were applied, not dropped
