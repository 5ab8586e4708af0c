"""`aah eval --data` scores the whole given text; the run's data fingerprint; eval flags."""

import json
from pathlib import Path

import pytest
import torch
from cli_helpers import tiny_args

from aah.cli import main


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_corpus):
    """A 3-step run with max_seq_len 32 on a copy of the tiny corpus (the tests edit it)."""
    root = tmp_path_factory.mktemp("evaldata")
    corpus = root / "corpus.txt"
    corpus.write_bytes(Path(tiny_corpus).read_bytes())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AAH_CACHE_DIR", str(root / "cache"))
        assert main(["train", *tiny_args(str(corpus), root / "run", steps=3)]) == 0
    return root / "run", corpus


def eval_json(capsys, *args):
    assert main(["eval", *map(str, args), "--json"]) == 0
    out = capsys.readouterr().out
    return json.loads(out.strip().splitlines()[-1]), out


def test_a_short_held_out_file_is_scored_whole(run, tmp_path, capsys):
    text = tmp_path / "held.txt"
    text.write_bytes(b"def f(x):\n    return x + 1\n" * 100)  # 2,700 bytes: once too short
    result, out = eval_json(capsys, run[0], "--data", text)
    assert result["tokens"] == 2700 - 1 and result["split"] is None and "val_loss" not in result
    assert "stride 16" in out and result["stride"] == 16


@pytest.mark.parametrize("size", [2, 20, 33])
def test_texts_up_to_the_context_score_every_target(run, tmp_path, capsys, size):
    text = tmp_path / "tiny.txt"
    text.write_bytes(b"abcdefghij" * 4)
    text.write_bytes(text.read_bytes()[:size])
    result, _ = eval_json(capsys, run[0], "--data", text)
    assert result["tokens"] == size - 1


def test_a_folder_scores_every_file(run, tmp_path, capsys):
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(10):
        (folder / f"{i}.txt").write_bytes(bytes([97 + i]) * 300)
    result, out = eval_json(capsys, run[0], "--data", folder)
    joined = 10 * 300 + 9 * 2  # files joined by a blank line, as in training
    assert result["tokens"] == joined - 1 and result["data_files"] == 10
    assert "10 files" in out


@pytest.mark.parametrize("flag", [["--split", "train"], ["--layout", "spread"]])
def test_split_or_layout_with_data_is_an_error(run, tmp_path, capsys, flag):
    text = tmp_path / "t.txt"
    text.write_text("some text to score")
    assert main(["eval", str(run[0]), "--data", str(text), *flag]) == 2
    assert flag[0] in capsys.readouterr().err


def test_the_train_split_is_not_labelled_val(run, capsys):
    result, out = eval_json(capsys, run[0], "--split", "train")
    assert result["split"] == "train" and "val_loss" not in result and "loss" in result
    assert "(train split)" in out


def test_layout_spread_scores_windows_from_the_whole_split(run, capsys):
    from aah.data import load_tokens
    from aah.eval.evaluate import evaluate_loss
    from aah.training.load import load_run

    first, _ = eval_json(capsys, run[0], "--batches", "1")
    spread, _ = eval_json(capsys, run[0], "--batches", "1", "--layout", "spread")
    assert (first["layout"], spread["layout"]) == ("first", "spread")
    assert first["tokens"] == spread["tokens"] and first["bpb"] != spread["bpb"]
    model, config, _ = load_run(run[0])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AAH_CACHE_DIR", str(run[0].parent / "cache"))
        val = load_tokens(config.data, seq_len=config.seq_len).val
    ev = evaluate_loss(model, val, batch_size=config.train.batch_size, seq_len=config.seq_len,
                       max_batches=1, layout="spread")  # fmt: skip
    assert spread["bpb"] == pytest.approx(ev["val_bpb"], rel=1e-6)


@pytest.mark.parametrize(
    ("args", "named"),
    [(["--batch-size", "0"], "--batch-size"), (["--device", "tpu"], "tpu"),
     (["--batch", "0"], "--batch-size"), (["--stride", "4"], "--stride"),
     (["--layout", "random"], "random")],
)  # fmt: skip
def test_bad_eval_flags_exit_2_with_one_line(run, capsys, args, named):
    assert main(["eval", str(run[0]), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert named in err and len(err.splitlines()) == 1


def test_changed_data_is_named_by_eval_and_refused_by_resume(tmp_path, tiny_corpus, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(Path(tiny_corpus).read_bytes())
    out = tmp_path / "run"
    args = [*tiny_args(str(corpus), out, steps=3), "--train.checkpoint_interval", "3"]
    assert main(["train", *args]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["data_fingerprint"]) == 32
    plain = torch.load(out / "checkpoints" / "last.pt", weights_only=True)  # no custom header
    assert plain["data_fingerprint"] == summary["data_fingerprint"]
    result, _ = eval_json(capsys, out)
    assert result["data_changed"] is False
    corpus.write_bytes(corpus.read_bytes()[:-1000])  # the data changes under the run
    assert main(["eval", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out.splitlines()[-1])["data_changed"] is True
    assert "data changed" in captured.err
    assert main(["train", "--resume", str(out), "--train.max_steps", "6", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "data changed" in err and "data.path" in err and len(err.splitlines()) == 1
    assert "Traceback" not in err
