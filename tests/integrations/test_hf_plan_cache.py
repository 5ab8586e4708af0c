"""The plan cache and the default plan: the same search twice is one search; a changed option,
model or entry is never served from it; shipped plans are found by the model's fingerprint."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import torch
from hf_models import VOCAB, tiny_model

from aah.integrations.hf.search import default_plan as default_module
from aah.integrations.hf.search import plan_search
from aah.integrations.hf.search.default_plan import default_plan, shipped_plans
from aah.integrations.hf.search.plan_cache import (
    cache_dir,
    entry_path,
    load_cached,
    model_fingerprint,
    store,
)
from aah.plan import WindowPlan

T = 32
OPTIONS = {"kv_fraction": 0.5, "seq_len": T, "signal": "mass", "choose": False, "sinks": 0}


def text() -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, T), generator=torch.Generator().manual_seed(0))


@pytest.fixture
def counted(monkeypatch):  # type: ignore[no-untyped-def]
    """The number of real searches run (a cache hit runs none)."""
    calls = []
    real = plan_search.search_plan

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        if not kwargs.get("cache"):
            calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(plan_search, "search_plan", counting)
    return calls


def test_the_same_search_twice_is_one_search(counted, capsys):
    model = tiny_model("llama")
    first = plan_search.search_plan(model, text(), cache=True, **OPTIONS)
    again = plan_search.search_plan(model, text(), cache=True, **OPTIONS)
    assert len(counted) == 1
    assert again.to_dict() == first.to_dict()
    assert "plan from the cache" in capsys.readouterr().err
    plan_search.search_plan(model, text(), cache=False, **OPTIONS)
    assert len(counted) == 2  # cache=False searches anew


@pytest.mark.parametrize(
    "change",
    [{"kv_fraction": 0.4}, {"seq_len": 16}, {"signal": "output"}, {"sinks": 2}, {"seed": 1},
     {"candidates": [4, 8, 32]}, {"floor": 0.5}, {"whole_layers": [0]}, {"max_batches": 1}],
)  # fmt: skip
def test_the_key_changes_with_each_option(change):
    model = tiny_model("llama")
    base = plan_search.cache_key(model, text(), None, dict(OPTIONS))
    assert plan_search.cache_key(model, text(), None, {**OPTIONS, **change}) != base


def test_the_key_changes_with_the_model_bytes_and_the_text():
    model = tiny_model("llama")
    base = plan_search.cache_key(model, text(), None, dict(OPTIONS))
    assert plan_search.cache_key(model, text()[:1], None, dict(OPTIONS)) != base
    assert plan_search.cache_key(model, None, None, dict(OPTIONS)) != base
    with torch.no_grad():
        weight = next(model.parameters())
        weight.view(-1)[0] = torch.nextafter(weight.view(-1)[0], torch.tensor(1.0))  # one ulp
    assert plan_search.cache_key(model, text(), None, dict(OPTIONS)) != base


@pytest.mark.parametrize("damage", ["truncate", "edit-plan", "edit-key", "garbage"])
def test_a_damaged_entry_is_refused_and_searched_again(damage, counted):
    model = tiny_model("llama")
    plan_search.search_plan(model, text(), cache=True, **OPTIONS)
    (path,) = cache_dir().glob("*.json")
    entry = json.loads(path.read_text())
    if damage == "truncate":
        path.write_text(path.read_text()[: len(path.read_text()) // 2])
    elif damage == "edit-plan":
        entry["plan"]["windows"][0][0] = 1
        path.write_text(json.dumps(entry))
    elif damage == "edit-key":
        entry["key"]["version"] = "0.0.0"
        path.write_text(json.dumps(entry))
    else:
        path.write_bytes(b"\xff\xfe not json")
    with pytest.warns(UserWarning, match="ignoring the cached plan"):
        plan = plan_search.search_plan(model, text(), cache=True, **OPTIONS)
    assert len(counted) == 2
    assert WindowPlan.from_data(json.loads(path.read_text())["plan"]).windows == plan.windows


def test_concurrent_writers_leave_one_valid_entry():
    key = {"model": "m", "n": 1}
    plans = [WindowPlan.of([[w] * 4] * 2, seq_len=T) for w in range(1, 9)]
    threads = [threading.Thread(target=store, args=(key, p)) for p in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [p.name for p in cache_dir().iterdir()] == [entry_path(key).name]
    assert load_cached(key).windows in [p.windows for p in plans]


def test_default_plan_takes_a_shipped_plan_by_fingerprint(monkeypatch, tmp_path, capsys):
    model = tiny_model("llama")
    shipped = WindowPlan.of([[5, 6, 7, 8], [8, 7, 6, 5]], sinks=1, seq_len=T)
    folder = tmp_path / "shipped"
    folder.mkdir()
    entry = {"model": "tiny", "fingerprint": model_fingerprint(model), "seq_len": T,
             "kv_fraction": 0.3, "searched_in": "here", "plan": shipped.to_dict()}  # fmt: skip
    (folder / "tiny.json").write_text(json.dumps(entry))
    monkeypatch.setattr(default_module, "SHIPPED", folder)
    monkeypatch.setattr(plan_search, "search_plan", lambda *a, **k: pytest.fail("searched"))
    assert default_plan(model, 0.3, T).to_dict() == shipped.to_dict()
    assert "shipped default plan" in capsys.readouterr().err


def test_the_shipped_plans_are_whole_and_name_their_models():
    entries = shipped_plans()
    assert {(e.model.split()[0], e.seq_len, e.kv_fraction) for e in entries} >= {
        ("SmolLM2-135M-Instruct", 2048, 0.3), ("Gemma", 2048, 0.3),
    }  # fmt: skip
    for e in entries:
        plan = e.plan()
        assert plan.seq_len == e.seq_len and len(e.fingerprint) == 64
        assert plan.info["budget_unit"] == "kv_bytes" and "choice" in plan.info
        # the search's own record in the repository holds the very same plan
        searched = WindowPlan.load(Path(__file__).parents[2] / e.searched_in)
        assert (searched.windows, searched.sinks) == (plan.windows, plan.sinks), e.path.name


def test_generate_and_chat_without_a_plan_search_once_then_read_the_cache(tmp_path, capsys):
    from hf_tokenized import save_chat_llama

    from aah.cli import main

    folder = tmp_path / "chat"
    save_chat_llama(folder)
    argv = ["generate", str(folder), "--prompt", "def f(x):", "--kv-fraction", "0.5",
            "--plan-length", str(T), "--max-new-tokens", "3", "--temperature", "0",
            "--raw"]  # fmt: skip
    assert main(argv) == 0
    first = capsys.readouterr()
    assert "plan from the cache" not in first.err
    (entry,) = cache_dir().glob("*.json")
    assert "heal" not in json.loads(entry.read_text())["key"]["options"]  # older keys stay valid
    assert main(argv) == 0
    second = capsys.readouterr()
    assert "plan from the cache" in second.err and second.out == first.out


@pytest.mark.parametrize(
    ("flags", "named"),
    [([], "--kv-fraction"), (["--plan", "p.json", "--kv-fraction", "0.3"], "not both"),
     (["--kv-fraction", "1.5"], "--kv-fraction"), (["--kv-fraction", "0.3", "--plan-length", "1"],
      "--plan-length")],
)  # fmt: skip
def test_the_default_plan_flags_are_checked_first(tmp_path, capsys, flags, named):
    from aah.cli import main

    for command in (["generate", str(tmp_path), "--prompt", "x"], ["chat", str(tmp_path)]):
        assert main([*command, *flags]) == 2
        assert named in capsys.readouterr().err


def test_plan_search_twice_writes_the_same_plan_from_the_cache(tmp_path, capsys):
    from hf_models import run_cli_search

    _, _, out = run_cli_search(tmp_path, "--kv-fraction", "0.5")
    first = out.read_text()
    capsys.readouterr()
    run_cli_search(tmp_path, "--kv-fraction", "0.5")
    assert "plan from the cache" in capsys.readouterr().err and out.read_text() == first
    run_cli_search(tmp_path, "--kv-fraction", "0.5", "--no-cache")
    assert "plan from the cache" not in capsys.readouterr().err and out.read_text() == first


def test_a_search_then_heal_reuses_the_cached_search(counted, capsys):
    """`heal` is not part of the key: the same search, healed or not, is one search (the heal
    runs after it, every time)."""
    import warnings

    from aah.integrations.hf.search.heal import HealOptions

    model = tiny_model("llama")
    searched = plan_search.search_plan(model, text(), cache=True, **OPTIONS)
    quick = HealOptions(kinds=("temperature",), steps=2, train_blocks=1, held_out=1, eval_every=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a 2-step heal may or may not help: not the point
        healed = plan_search.search_plan(model, text(), cache=True, heal=quick, **OPTIONS)
    assert len(counted) == 1 and "plan from the cache" in capsys.readouterr().err
    assert healed.windows == searched.windows
    (entry,) = cache_dir().glob("*.json")
    assert "heal" not in json.loads(entry.read_text())["key"]["options"]  # older keys stay valid


def test_the_same_command_again_is_answered_before_the_model_loads(tmp_path, capsys, monkeypatch):
    """`aah plan search` files its plan under the model files' bytes and its flags too: run
    again, it writes the same plan and the same summary without loading the model; another
    flag, other text or other model bytes load it and search."""
    from hf_tokenized import TEXT, save_tokenized_llama

    from aah.cli import main

    save_tokenized_llama(tmp_path / "llama", seed=1)
    (tmp_path / "text.txt").write_text(TEXT)

    def search(out: str, *flags: str) -> dict:  # type: ignore[type-arg]
        capsys.readouterr()
        argv = ["plan", "search", str(tmp_path / "llama"), "--text", str(tmp_path / "text.txt"),
                "--out", str(tmp_path / out), "--seq-len", "32", "--max-batches", "2",
                "--candidates", "4,8,16,32", "--sinks", "1", "--threads", "1", "--no-choose",
                "--kv-fraction", "0.5", *flags]  # fmt: skip
        assert main(argv) == 0
        captured = capsys.readouterr()
        return {**json.loads(captured.out.strip().splitlines()[-1]), "stderr": captured.err}

    first = search("a.json")
    assert "before loading the model" not in first["stderr"]

    def no_load(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("the model was loaded")

    monkeypatch.setattr("aah.integrations.hf.run.load.load_model", no_load)
    again = search("b.json")
    assert "plan from the cache, before loading the model" in again["stderr"]
    assert (tmp_path / "b.json").read_text() == (tmp_path / "a.json").read_text()
    assert {**again, "out": None, "stderr": None} == {**first, "out": None, "stderr": None}
    with pytest.raises(AssertionError, match="the model was loaded"):
        search("c.json", "--seed", "1")
    (tmp_path / "text.txt").write_text(TEXT + " more")
    with pytest.raises(AssertionError, match="the model was loaded"):
        search("d.json")
    (tmp_path / "text.txt").write_text(TEXT)
    config = tmp_path / "llama" / "config.json"
    config.write_text(config.read_text() + "\n")
    with pytest.raises(AssertionError, match="the model was loaded"):
        search("e.json")
