"""Run-directory JSON is strict: a non-finite number is written as null and named in a flag."""

import json
import math

from aah import records


def refuse(name):
    raise AssertionError(f"non-standard JSON constant {name}")


def test_write_json_replaces_non_finite_numbers(tmp_path):
    path = tmp_path / "summary.json"
    records.write_json(path, {"val_loss": math.nan, "acr": 0.5, "nested": {"x": [math.inf]}})
    data = json.loads(path.read_text(), parse_constant=refuse)
    assert data["val_loss"] is None and data["acr"] == 0.5 and data["nested"] == {"x": [None]}
    assert data["nonfinite"] == ["val_loss", "nested.x[0]"]


def test_jsonl_lines_stay_strict_also_when_truncated(tmp_path):
    path = tmp_path / "metrics.jsonl"
    records.append_jsonl(path, {"step": 1, "train_loss": 2.0})
    records.append_jsonl(path, {"step": 2, "train_loss": -math.inf})
    path.write_text(path.read_text() + '{"step": 3, "train_loss": NaN}\n')  # an older file
    records.truncate_after(path, 3)
    rows = [json.loads(x, parse_constant=refuse) for x in path.read_text().splitlines()]
    assert [r["train_loss"] for r in rows] == [2.0, None, None]
    assert rows[1]["nonfinite"] == ["train_loss"]
