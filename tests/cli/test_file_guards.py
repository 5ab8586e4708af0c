"""The file guards the commands rely on: several outputs land together or not at all, and a
plan file nested absurdly deep or absurdly large is refused with one line naming it."""

from __future__ import annotations

import json

import pytest

from aah.atomic import StagedWrites
from aah.plan import MAX_DEPTH, WindowPlan
from aah.textfile import nesting_depth, read_json


def test_staged_files_appear_together_on_success(tmp_path):
    with StagedWrites() as staged:
        staged.write_text(tmp_path / "plan.json", "{}\n")
        picture = staged.path_for(tmp_path / "plan.png")
        assert picture.suffix == ".png"  # writers that go by the extension still work
        picture.write_bytes(b"png")
        assert not (tmp_path / "plan.json").exists()  # nothing lands before the end
    assert (tmp_path / "plan.json").read_text() == "{}\n"
    assert (tmp_path / "plan.png").read_bytes() == b"png"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json", "plan.png"]


def test_a_failure_leaves_no_file_and_keeps_the_old_ones(tmp_path):
    (tmp_path / "plan.json").write_text("old")
    with pytest.raises(RuntimeError), StagedWrites() as staged:
        staged.write_text(tmp_path / "plan.json", "new")
        staged.path_for(tmp_path / "plan.png").write_bytes(b"png")
        raise RuntimeError("the heatmap failed")
    assert (tmp_path / "plan.json").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]


def test_a_staged_file_never_written_fails_the_commit(tmp_path):
    with pytest.raises(FileNotFoundError, match="never written"), StagedWrites() as staged:
        staged.write_text(tmp_path / "a.json", "{}")
        staged.path_for(tmp_path / "b.png")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("text", "depth"),
    [("[]", 1), ('{"a": [[1, 2], [3]]}', 3), ('["[[[[", "\\"]]]"]', 1), ("1", 0)],
)
def test_nesting_depth_skips_strings(text, depth):
    assert nesting_depth(text) == depth
    json.loads(text)  # each case is valid JSON


def test_a_deeply_nested_plan_file_is_one_line_naming_it(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000)
    with pytest.raises(ValueError, match=r"deep\.json.*nests arrays/objects 100000 deep"):
        WindowPlan.load(path)
    path.write_text("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    with pytest.raises(ValueError, match="more than the 8"):
        WindowPlan.load(path)


def test_a_reader_without_a_depth_limit_still_gives_a_value_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="too deeply"):
        read_json(path, "record")


def test_an_oversized_file_is_refused_unread(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"windows": [[4]], "pad": "x" * 200}))
    with pytest.raises(ValueError, match=r"big\.json.*more than the 100"):
        read_json(path, "plan file", max_bytes=100)
    assert read_json(path, "plan file", max_bytes=1000)["windows"] == [[4]]
