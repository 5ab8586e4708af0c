"""`aah.plan.WindowPlan`: the one plan type and file format, old files included."""

from __future__ import annotations

import json

import pytest

from aah.plan import WindowPlan, check_plan, full_plan

WINDOWS = [[8, 8, 32, 32], [16, 16, 4, 4]]


def test_round_trip_keeps_windows_sinks_length_and_every_other_key(tmp_path) -> None:
    plan = WindowPlan.of(WINDOWS, [[4, 4, 0, 0], [2, 2, 2, 2]], 32, budget=0.3, signal="output")
    path = tmp_path / "plan.json"
    plan.save(path)
    back = WindowPlan.load(path)
    assert back == plan
    assert back.info == {"budget": 0.3, "signal": "output"} and back.seq_len == 32
    assert json.loads(path.read_text())["sinks"] == [[4, 4, 0, 0], [2, 2, 2, 2]]


@pytest.mark.parametrize(
    ("data", "sinks", "seq_len"),
    [
        (WINDOWS, [[0] * 4] * 2, None),  # a bare list: the oldest files
        ({"windows": WINDOWS, "step": 10}, [[0] * 4] * 2, None),  # `aah plan export`
        ({"windows": WINDOWS, "sinks": 4, "seq_len": 32}, [[4] * 4] * 2, 32),  # one int
        ({"windows": WINDOWS, "sinks": None, "seq_len": 32}, [[0] * 4] * 2, 32),  # null: none
    ],
)
def test_every_earlier_format_loads(tmp_path, data, sinks, seq_len) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    plan = WindowPlan.load(path)
    assert (plan.windows, plan.sinks, plan.seq_len) == (WINDOWS, sinks, seq_len)
    assert plan.has_sinks == any(any(r) for r in sinks)


def test_at_length_scales_windows_and_keeps_whole_context_heads_whole() -> None:
    plan = WindowPlan.of(WINDOWS, 2, 32)
    longer = plan.at_length(64, full=70)
    assert longer.windows == [[16, 16, 70, 70], [32, 32, 8, 8]]
    assert longer.sinks == plan.sinks and longer.seq_len == 64
    assert plan.at_length(32, full=40).windows == [[8, 8, 40, 40], [16, 16, 4, 4]]
    assert WindowPlan.of(WINDOWS).at_length(64).windows == WINDOWS  # no length on file


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"sinks": 4}, "needs a 'windows' key"),
        ({"windows": [[8, 0]]}, "every window must be an int >= 1, got 0"),
        ({"windows": [[8, 2.5]]}, "got 2.5"),
        ({"windows": [[8, 8]], "sinks": -1}, "sinks must be >= 0, got -1"),
        ({"windows": [[8, 8]], "sinks": [[1]]}, r"shaped like the windows \[2\]"),
        ({"windows": [[8, 8]], "sinks": [[1, True]]}, "every sink must be an int >= 0, got True"),
        ({"windows": [[8, 8]], "seq_len": 0}, "seq_len must be an int >= 1 or None, got 0"),
        ({"windows": "8,8"}, "plan must be a list of per-layer lists"),
    ],
)
def test_bad_files_are_refused_naming_the_file_and_value(tmp_path, data, message) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message) as err:
        WindowPlan.load(path)
    assert str(path) in str(err.value)


def test_info_may_not_shadow_the_plans_own_keys() -> None:
    with pytest.raises(ValueError, match="info may not hold the plan's own keys windows"):
        WindowPlan(WINDOWS, [[0] * 4] * 2, None, {"windows": [[1]]})


def test_check_plan_names_the_shape_against_the_model() -> None:
    assert check_plan(full_plan(2, 4, 32), 2, 4) == [[32] * 4] * 2
    with pytest.raises(ValueError, match="plan has 2 layers, the model has 3"):
        check_plan(WINDOWS, 3, 4)
    with pytest.raises(ValueError, match="plan layer 0 has 4 heads, the model has 5"):
        check_plan(WINDOWS, 2, 5)
