"""The README's "Train a model with per-head windows" example runs as written, but for its size:
the same calls, on the tests' tiny corpus, a few steps, into a temporary folder."""

from __future__ import annotations

import math
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def example() -> str:
    section = README.read_text(encoding="utf-8").split("## Train a model with per-head windows", 1)[
        1
    ]
    return section.split("```python", 1)[1].split("```", 1)[0]


def test_the_readme_training_example_runs(tmp_path, tiny_corpus) -> None:
    code = example()
    stdlib = 'DataConfig(corpus="python-stdlib", max_bytes=2_000_000)'
    shrink = {  # what the example says -> what this test runs (everything else as written)
        stdlib: f"DataConfig(path={tiny_corpus!r})",
        "max_steps=300, eval_interval=100": "max_steps=8, eval_interval=4, threads=1",
        "warmup_steps=50": "warmup_steps=2",
        '"runs/budget-demo"': repr(str(tmp_path / "run")),
    }  # fmt: skip
    for said, runs in shrink.items():
        assert said in code, f"the README example no longer says {said}"
        code = code.replace(said, runs)
    scope: dict = {}
    exec(compile(code, str(README), "exec"), scope)
    run = scope["run"]
    assert math.isfinite(run.summary["val_bpb"]) and run.summary["policy"] == "budget"
    assert run.summary["causal_coverage"] <= 0.3 + 1e-9
    assert (tmp_path / "run" / "summary.json").is_file() and len(run.plan) == 2


def test_aah_train_exports_each_public_name() -> None:
    import aah.training

    assert sorted(aah.training.__all__) == sorted(aah.training._EXPORTS)
    for name in aah.training.__all__:
        assert getattr(aah.training, name).__name__ == name
