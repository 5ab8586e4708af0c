"""`aah plan heal`: one-line errors before the model loads, then a heal that writes the plan
and its parameters, which `aah plan apply` and `WindowPlan.load` read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")

from hf_tokenized import TEXT, save_tokenized_llama
from test_hf_cli_fail_fast import refused

from aah.cli import main
from aah.plan import WindowPlan


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("heal-inputs")
    save_tokenized_llama(root / "llama")
    (root / "text.txt").write_text(TEXT)
    (root / "empty.txt").write_text("")
    WindowPlan.of([[8] * 4] * 2, 2, 32).save(root / "plan.json")
    WindowPlan.of([[8] * 3] * 5, 0, 32).save(root / "other-shape.json")
    searched = {"candidates": [4, 8, 16, 32], "signal": "output"}
    WindowPlan.of([[8, 16, 4, 8]] * 2, 2, 32, **searched).save(root / "searched.json")
    return {p.stem: p for p in root.iterdir()}


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


def heal(files, out, *flags: str, plan: str = "plan", model: str = "llama") -> list[str]:  # type: ignore[no-untyped-def]
    return ["plan", "heal", str(files[model]), "--plan", str(files[plan]),
            "--out", str(out / "healed.json"), *flags]  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--params", "sinks"], ["--params", "sinks"]),
        (["--minutes", "0"], ["--minutes"]),
        (["--steps", "0"], ["--steps"]),
        (["--rank", "0"], ["--rank"]),
        (["--seq-len", "1"], ["--seq-len"]),
        (["--redecide", "0"], ["--redecide"]),
    ],
)
def test_bad_flags_are_refused_before_the_model_loads(
    files, out, capsys, never_loads, flags, named
):
    refused(heal(files, out, *flags), capsys, out, *named)


def test_a_plan_of_another_shape_or_no_plan_is_refused_before_loading(
    files, out, capsys, never_loads
):
    refused(heal(files, out, plan="other-shape"), capsys, out, "other-shape.json")
    missing = heal(files, out)
    missing[missing.index("--plan") + 1] = str(out.parent / "nowhere.json")
    refused(missing, capsys, out, "nowhere.json")


def test_an_unwritable_out_and_an_empty_text_are_refused(files, out, capsys, never_loads):
    bad = heal(files, out)
    bad[bad.index("--out") + 1] = str(out / "no-folder" / "healed.json")
    refused(bad, capsys, out, "no-folder")
    refused(heal(files, out, "--text", str(files["empty"])), capsys, out, "empty.txt")


def test_heal_writes_the_plan_and_its_parameters(files, out: Path, capsys):
    text = files["text"]
    argv = heal(files, out, "--text", str(text), "--steps", "6", "--params", "temperature,lora",
                "--rank", "2", "--seq-len", "32")  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(printed[-1])
    plan = WindowPlan.load(out / "healed.json")
    if summary["healed"]:
        assert (out / "healed.heal.safetensors").exists() and plan.params
        assert summary["held_out_kl_after"] < summary["held_out_kl_before"]
        assert any("held-out KL" in line for line in printed)
    else:  # the plan came back unchanged, and the command said so
        assert not plan.params and any("unchanged" in line for line in printed)
    assert plan.windows == WindowPlan.load(files["plan"]).windows


def test_redecide_needs_a_searched_plan_and_says_so_before_loading(files, out, capsys, never_loads):
    refused(heal(files, out, "--redecide", "2"), capsys, out, "candidates")


def test_heal_with_redecide_writes_the_windows_it_kept_within_the_plans_bytes(files, out, capsys):
    argv = heal(files, out, "--text", str(files["text"]), "--steps", "6", "--params", "lora",
                "--rank", "2", "--seq-len", "32", "--redecide", "2", plan="searched")  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    plan = WindowPlan.load(out / "healed.json")
    assert json.loads(printed[-1])["healed"] and plan.params  # this tiny heal does help
    decisions = plan.info["heal"]["redecide"]["decisions"]
    assert [d["step"] for d in decisions] == [2, 4, 6]
    assert any(line.startswith("re-decided the windows 3 times") for line in printed)
    budget = plan.info["heal"]["redecide"]["kv_bytes_budget"]
    assert plan.info["kv_bytes"] <= budget
    assert {w for row in plan.windows for w in row} <= {4, 8, 16, 32}
