"""One flag vocabulary across subcommands, generated config help, help for every flag,
and `aah bench training` rows streamed as they finish."""

import argparse

import pytest

from aah.cli import build_parser, main
from aah.training.fields import field_types
from aah.training.run_config import SECTIONS, controller_types


def subparser(*path):
    parser = build_parser()
    for name in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


def bench_parser(name):
    from aah.bench import attention, decode, training, variants

    return {"training": training.build_parser, "attention": attention._parser,
            "decode": decode.build_parser, "variants": variants._parser}[name]()  # fmt: skip


def parsers():
    yield "eval", subparser("eval")
    yield "generate", subparser("generate")
    yield "chat", subparser("chat")
    yield "lab", subparser("lab")
    yield "posthoc", subparser("posthoc")
    yield "plan search", subparser("plan", "search")
    yield "plan apply", subparser("plan", "apply")
    for name in ("training", "attention", "decode", "variants"):
        yield f"bench {name}", bench_parser(name)


# every command that computes takes --threads (docs/cli.md); train reads train.threads
COMPUTING = ["eval", "generate", "chat", "lab", "posthoc", "plan search", "plan apply",
             "bench training", "bench attention", "bench decode", "bench variants"]  # fmt: skip


@pytest.mark.parametrize("name", COMPUTING)
def test_every_computing_command_takes_threads(name):
    parser = dict(parsers())[name]
    threads = option(parser, "--threads")
    assert threads is not None and threads.default == 0 and threads.type is int, name


def option(parser, flag):
    return next((a for a in parser._actions if flag in a.option_strings), None)


@pytest.mark.parametrize(("name", "parser"), list(parsers()))
def test_every_flag_has_help(name, parser):
    bare = [a.option_strings for a in parser._actions
            if a.option_strings and a.help is None]  # fmt: skip
    assert not bare, f"{name}: {bare}"


@pytest.mark.parametrize(("name", "parser"), list(parsers()))
def test_shared_flags_mean_the_same_everywhere(name, parser):
    if (threads := option(parser, "--threads")) is not None:
        assert threads.default == 0, name
    if (device := option(parser, "--device")) is not None:
        assert device.default == "auto", name
    for old in ("--batch", "--contexts"):  # old spellings parse, hidden from --help
        assert option(parser, old) is None or option(parser, old).help is argparse.SUPPRESS


def test_seq_lens_is_a_comma_list_and_old_spellings_still_parse():
    from aah.cli.flags import int_list

    decode = bench_parser("decode")
    assert int_list(decode.parse_args(["--seq-lens", "64,128"]).seq_lens) == [64, 128]
    assert int_list(decode.parse_args(["--contexts", "64", "128"]).seq_lens) == [64, 128]
    attention = bench_parser("attention")
    assert attention.parse_args(["--batch", "3"]).batch_size == 3
    with pytest.raises(ValueError, match="--seq-lens"):
        int_list("64,x")


def test_train_help_lists_every_config_field(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for section, cls in SECTIONS.items():
        names = controller_types() if section == "controller" else field_types(cls)
        for name in names:
            assert f"--{section}.{name} " in out
    line = next(x for x in out.splitlines() if "--controller.group_threshold" in x)
    assert line.split()[1:] == ["float", "0.72", "[aah-v3-full-adaptive*,", "shuffle]"]  # readers
    line = next(x for x in out.splitlines() if "--controller.budget " in x)
    assert line.split()[1:] == ["float", "0.3", "[budget*,", "loss-ablation*]"]


def test_bench_training_streams_its_rows(monkeypatch, capsys):
    from aah.bench import training

    seen = []
    real = training.bench_training

    def spy(*args, on_row=None, **kwargs):
        def check(row):  # the table's header and earlier rows are already printed
            seen.append(capsys.readouterr().out)
            on_row(row)

        return real(*args, on_row=check, **kwargs)

    monkeypatch.setattr(training, "bench_training", spy)
    assert main(["bench", "training", "--seq-lens", "16", "--steps", "1", "--warmup", "0",
                 "--batch-size", "1", "--threads", "1"]) == 0  # fmt: skip
    assert "training throughput" in seen[0] and len(seen) >= 2
    assert "16" in seen[1]  # the first row was printed before the second finished
