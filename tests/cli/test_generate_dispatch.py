"""`aah generate` still generates from a run directory (its own model and tokens), now also with
a plan file's windows and sinks, and reports the KV bytes its cache held against a full one."""

from __future__ import annotations

import json
import re

from cli_helpers import tiny_args

from aah.cli import main
from aah.cli.generate_cmd import is_run_dir
from aah.plan import WindowPlan


def kv_numbers(err: str) -> tuple[int, int, int]:
    found = re.search(r"held after (\d+) positions.*\); (\d+) of (\d+) bytes", err)
    assert found, err
    return int(found[1]), int(found[2]), int(found[3])


def test_a_run_directory_generates_with_its_plan_or_a_given_one(tmp_path, tiny_corpus, capsys):
    run = tmp_path / "run"
    assert main(["train", *tiny_args(tiny_corpus, run, steps=2)]) == 0
    assert is_run_dir(str(run)) and not is_run_dir(str(tmp_path))
    capsys.readouterr()
    argv = ["generate", str(run), "--prompt", "def ", "--max-new-tokens", "10", "--seed", "0"]
    assert main(argv) == 0
    own = capsys.readouterr()
    assert own.out.startswith("def ")
    positions, held, full = kv_numbers(own.err)
    # 2 layers x 2 KV heads x 13 positions x head_dim 8 x (k, v) x fp32: full windows
    assert positions == 4 + 10 - 1 and held == full == 2 * 2 * 13 * 8 * 2 * 4
    assert main(["plan", "export", str(run)]) == 0
    exported = json.loads(capsys.readouterr().out)
    plan = tmp_path / "plan.json"
    WindowPlan.of([[2] * 4] * 2, 1, exported.get("seq_len")).save(plan)
    assert main([*argv, "--plan", str(plan)]) == 0
    narrow = capsys.readouterr()
    positions, held, full = kv_numbers(narrow.err)
    assert held == 2 * 2 * (2 + 1) * 8 * 2 * 4 and full == 2 * 2 * 13 * 8 * 2 * 4  # window + sink


def test_a_plan_of_another_shape_is_one_line(tmp_path, tiny_corpus, capsys):
    run = tmp_path / "run"
    assert main(["train", *tiny_args(tiny_corpus, run, steps=2)]) == 0
    plan = tmp_path / "plan.json"
    WindowPlan.of([[4] * 3] * 5).save(plan)
    capsys.readouterr()
    assert main(["generate", str(run), "--prompt", "x", "--plan", str(plan)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "plan.json" in err[0] and "5 layers" in err[0], err
