"""`aah plan search|apply` and `aah generate MODEL` on bad input: exit 2 with one line naming
the bad value and the fix, no traceback, nothing written, and, for everything a model's files
can tell, before the weights load (the tests make loading itself an error). The rest is caught
after loading and before any forward pass."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("gguf")
pytest.importorskip("accelerate")

from hf_models import tiny_model, write_gguf
from hf_tokenized import TEXT, save_tokenized_llama

from aah.cli import main
from aah.plan import WindowPlan


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("inputs")
    save_tokenized_llama(root / "llama")
    write_gguf(tiny_model("llama", seed=5), root / "tiny.gguf")
    whole = (root / "tiny.gguf").read_bytes()
    (root / "truncated.gguf").write_bytes(whole[: len(whole) // 3])
    (root / "empty.gguf").write_bytes(b"")
    (root / "garbage.gguf").write_bytes(b"not a model at all " * 50)
    tiny_model("llama", vocab_size=1000).save_pretrained(root / "no-tokenizer")
    texts = {"text": TEXT, "empty": "", "blank": " \n\t\n", "one": "x", "short": "x" * 20}
    for name, text in texts.items():
        (root / f"{name}.txt").write_text(text)
    WindowPlan.of([[8] * 4] * 2, 2, 32).save(root / "plan.json")
    WindowPlan.of([[8] * 3] * 5, 0, 32).save(root / "other-shape.json")
    (root / "deep.json").write_text("[" * 100_000)
    return {p.stem if p.suffix != ".gguf" else p.name: p for p in root.iterdir()}


@pytest.fixture
def out(tmp_path: Path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    return folder


@pytest.fixture
def never_loads(monkeypatch):  # type: ignore[no-untyped-def]
    def load_model(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the model was loaded before a check that needs no model")

    monkeypatch.setattr("aah.integrations.hf.run.load.load_model", load_model)


def refused(argv: list[str], capsys, out: Path, *named: str) -> str:  # type: ignore[no-untyped-def]
    capsys.readouterr()
    assert main(argv) == 2
    captured = capsys.readouterr()
    # transformers' loading bars may come first; the error is the one line of ours
    lines = [line for line in captured.err.splitlines() if line.startswith("aah ")]
    assert len(lines) == 1 and "error:" in lines[0] and "Traceback" not in captured.err, lines
    assert captured.err.rstrip().endswith(lines[0])
    for word in named:
        assert word in lines[0], (word, lines[0])
    assert list(out.iterdir()) == [], "a refused command wrote a file"
    return lines[0]


def search(files, out, *flags: str, model: str = "llama", text: str = "text") -> list[str]:  # type: ignore[no-untyped-def]
    return ["plan", "search", str(files[model]), "--text", str(files[text]),
            "--out", str(out / "plan.json"), "--max-batches", "1", *flags]  # fmt: skip


def apply(files, *flags: str, model: str = "llama", plan: str = "plan") -> list[str]:  # type: ignore[no-untyped-def]
    return ["plan", "apply", str(files[model]), "--text", str(files["text"]),
            "--plan", str(files[plan]), "--max-batches", "1", *flags]  # fmt: skip


def generate(files, *flags: str, model: str = "llama", plan: str = "plan") -> list[str]:  # type: ignore[no-untyped-def]
    return ["generate", str(files[model]), "--plan", str(files[plan]), "--prompt", "def f(",
            "--max-new-tokens", "4", *flags]  # fmt: skip


BROKEN_GGUF = [
    ("truncated.gguf", "is not a complete GGUF file"),
    ("empty.gguf", "is empty"),
    ("garbage.gguf", "is not a GGUF file"),
]


@pytest.mark.parametrize(("name", "named"), BROKEN_GGUF)
def test_a_broken_gguf_file_is_named_before_loading(files, out, capsys, never_loads, name, named):
    refused(search(files, out, model=name), capsys, out, name, named)
    refused(apply(files, model=name), capsys, out, name, named)
    refused(generate(files, model=name), capsys, out, name, named)


@pytest.mark.parametrize("device", ["gpu", "cuda", "cuda:7", "tpu"])
def test_a_device_the_machine_lacks(files, out, capsys, never_loads, device):
    index = int(device.split(":")[1]) if ":" in device else 0
    if device.startswith("cuda") and torch.cuda.device_count() > index:
        pytest.skip("this machine has that CUDA device")
    for argv in (search(files, out), apply(files), generate(files)):
        refused([*argv, "--device", device], capsys, out, "--device", repr(device))


SEARCH_PROBES = [
    (("--seq-len", "0"), {}, ("--seq-len must be >= 2", "got 0")),
    (("--seq-len", "1000"), {}, ("--seq-len 1000 is beyond the model's 128 positions", "128")),
    ((), {"text": "empty"}, ("empty.txt", "is empty")),
    ((), {"text": "blank"}, ("blank.txt", "is empty")),
    ((), {"text": "one"}, ("one.txt", "gives 1 byte,", "longer text")),
    (("--seq-len", "64"), {"text": "short"}, ("short.txt", "gives 20 bytes", "T=64")),
    (("--seq-len", "32", "--budget-kv-mb", "0.0001"), {},
     ("--budget-kv-mb 0.0001 (104 bytes) is below the smallest plan's", "512 bytes")),
    (("--seq-len", "32", "--budget-kv-mb", "1"), {},
     ("--budget-kv-mb 1 is at or above the full cache's 0.016 MB", "T=32")),
    (("--seq-len", "32", "--sinks", "32"), {}, ("--sinks 32 is not below T=32",)),
    (("--seq-len", "32", "--budget", "0.001", "--candidates", "8,16,32"), {},
     ("--budget 0.001 is below the smallest plan's causal coverage", "smaller --candidates")),
    (("--seq-len", "32", "--candidates", "16,8"), {}, ("--candidates", "ascending")),
    (("--suffix", "4"), {}, ("--suffix is for --signal suffix-loss",)),
    (("--threads", "-1"), {}, ("--threads must be >= 0",)),
    (("--heatmap", "missing/h.png"), {}, ("--heatmap", "does not exist")),
    ((), {"model": "no-tokenizer"}, ("without a tokenizer", "1000-token vocabulary")),
]  # fmt: skip


@pytest.mark.parametrize(("flags", "where", "named"), SEARCH_PROBES)
def test_search_probes_fail_before_loading(files, out, capsys, never_loads, flags, where, named):
    line = refused(search(files, out, *flags, **where), capsys, out, *named)
    assert ("candidates" in line) == ("--candidates" in flags)  # no advice that cannot help


def test_out_paths_are_checked_before_loading(files, out, capsys, never_loads):
    argv = search(files, out)
    argv[argv.index("--out") + 1] = str(out / "missing" / "plan.json")
    refused(argv, capsys, out, "--out", "does not exist")
    refused([*search(files, out), "--heatmap", str(out / "plan.json")], capsys, out, "is the --out")


APPLY_PROBES = [
    ({"plan": "deep"}, (), ("deep.json", "nests arrays/objects 100000 deep")),
    ({"plan": "other-shape"}, (), ("5 layers x 3 heads", "2 layers x 4 query heads")),
    ({}, ("--seq-len", "1000"), ("beyond the model's 128 positions",)),
    ({}, ("--backend", "nope"), ("--backend must be auto or one of",)),
]


@pytest.mark.parametrize(("where", "flags", "named"), APPLY_PROBES)
def test_apply_probes_fail_before_loading(files, out, capsys, never_loads, where, flags, named):
    refused(apply(files, *flags, **where), capsys, out, *named)


GENERATE_PROBES = [
    ({"plan": "deep"}, (), ("deep.json", "nests")),
    ({"plan": "other-shape"}, (), ("5 layers x 3 heads",)),
    ({}, ("--max-new-tokens", "128"), ("--max-new-tokens 128 leaves no room", "127 or less")),
    ({}, ("--temperature", "-1"), ("temperature must be >= 0",)),
]


@pytest.mark.parametrize(("where", "flags", "named"), GENERATE_PROBES)
def test_generate_probes_fail_before_loading(files, out, capsys, never_loads, where, flags, named):
    refused(generate(files, *flags, **where), capsys, out, *named)


def test_generate_a_model_without_a_plan_says_to_give_one(files, out, capsys, never_loads):
    argv = generate(files)
    del argv[argv.index("--plan") : argv.index("--plan") + 2]
    refused(argv, capsys, out, "not a run directory", "--plan FILE")


@pytest.fixture
def no_preview(monkeypatch):  # type: ignore[no-untyped-def]
    """As for a hub name: nothing local to read, every model check waits for the model."""
    monkeypatch.setattr("aah.cli.hf.plan_run.preview_limits", lambda name: None)
    monkeypatch.setattr("aah.cli.hf.session.preview_limits", lambda name: None)


@pytest.fixture
def no_forward(monkeypatch):  # type: ignore[no-untyped-def]
    def forbidden(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("a forward pass ran before the check")

    monkeypatch.setattr("aah.integrations.hf.search.plan_search.search_plan", forbidden)
    monkeypatch.setattr("aah.integrations.hf.search.measure.measure_signal", forbidden)
    monkeypatch.setattr("aah.integrations.hf.search.sweep.perplexity", forbidden)


LOADED_PROBES = [
    (("--seq-len", "32", "--budget-kv-mb", "0.0001"), "below the smallest plan's"),
    (("--seq-len", "32", "--budget-kv-mb", "1"), "at or above the full cache's"),
    (("--seq-len", "1000"), "beyond the model's 128 positions"),
]


@pytest.mark.parametrize(("flags", "named"), LOADED_PROBES)
def test_the_loaded_model_is_checked_before_any_forward(
    files, out, capsys, no_preview, no_forward, flags, named
):
    refused(search(files, out, *flags), capsys, out, named)


def test_a_text_with_fewer_tokens_than_bytes_is_checked_in_tokens(files, out, capsys, no_forward):
    # 66 bytes but far fewer BPE tokens: enough bytes to pass the first check, not enough tokens
    text = files["text"].parent / "phrase.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. the quick brown fox!!")
    argv = search(files, out, "--seq-len", "64")
    argv[argv.index("--text") + 1] = str(text)
    line = refused(argv, capsys, out, "phrase.txt", "tokens, too few for one block of T=64")
    assert "--seq-len" in line and "or less" in line


def test_apply_checks_the_loaded_shape_before_scoring(files, out, capsys, no_preview, no_forward):
    refused(apply(files, plan="other-shape"), capsys, out, "5 layers x 3 heads")


def test_generate_checks_the_prompt_in_tokens_after_loading(files, out, capsys, no_preview):
    argv = generate(files, "--max-new-tokens", "120")
    argv[argv.index("--prompt") + 1] = "the quick brown fox jumps over the lazy dog. " * 2
    refused(argv, capsys, out, "prompt's", "exceed the model's 128 positions", "or less")


def test_a_failing_heatmap_leaves_no_plan_file(files, out, capsys, monkeypatch):
    def broken(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise PermissionError(13, "Permission denied", str(out / "h.png"))

    monkeypatch.setattr("aah.report.plan_heatmap.save_heatmap", broken)
    argv = search(files, out, "--seq-len", "32", "--heatmap", str(out / "h.png"))
    refused(argv, capsys, out, "Permission denied")
