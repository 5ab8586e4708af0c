"""The front door holds: every link of the README and docs/ resolves (file and heading), the
README's attention example runs (smaller), its `aah` commands parse, and it stays short."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# the README, docs/, and the pages of the studies' log they send readers to
PAGES = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "results" / "pretrained" / "LOG.md",
         ROOT / "experiments" / "README.md"]  # fmt: skip
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, in_code = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def test_the_slug_rule_matches_github():
    assert slug("The default search on both models (T = 2048 and 4096, KV 0.3)") == (
        "the-default-search-on-both-models-t--2048-and-4096-kv-03"
    )
    assert slug("Long inputs and conversations: `aah generate --question`, `aah chat`") == (
        "long-inputs-and-conversations-aah-generate---question-aah-chat"
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_resolves(page: Path):
    broken = []
    for target in links(page):
        file, _, anchor = target.partition("#")
        where = (page.parent / file).resolve() if file else page
        if not where.exists():
            broken.append(
                f"{target}: no {where.relative_to(ROOT) if ROOT in where.parents else where}"
            )
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            broken.append(f"{target}: no heading #{anchor}")
    assert not broken, broken


def test_the_link_check_can_fail(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("# Here\n[ok](#here) [gone](missing.md) [no anchor](#nowhere)\n")
    assert links(page) == ["#here", "missing.md", "#nowhere"]
    assert "nowhere" not in anchors(page) and "here" in anchors(page)


def test_the_readme_is_short():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 180


def test_the_readme_attention_example_runs():
    section = README.read_text(encoding="utf-8").split("## The attention API", 1)[1]
    code = section.split("```python", 1)[1].split("```", 1)[0]
    assert "4096" in code
    scope: dict = {}
    exec(compile(code.replace("4096", "256"), str(README), "exec"), scope)
    assert tuple(scope["out"].shape) == (1, 8, 256, 64)
    cov = scope["cov"]
    assert 0 < cov.causal < 1 and 0 < cov.acr < 1


def commands() -> list[list[str]]:
    """Every `aah ...` line of the README's shell blocks, as words ($M and files as given)."""
    text = README.read_text(encoding="utf-8")
    found = []
    for lang, block in re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S):
        if lang not in ("", "bash", "sh"):
            continue
        for line in block.replace("\\\n", " ").splitlines():
            for part in re.split(r"&&|\|", line):
                if part.strip().startswith("aah "):
                    found.append(shlex.split(part.split(" #")[0])[1:])
    return found


def test_the_readme_commands_parse():
    from aah.cli.entry import build_parser

    parser = build_parser()
    seen = commands()
    assert {c[0] for c in seen} >= {"train", "chat", "generate", "plan"}
    for argv in seen:  # argparse exits on a bad value; a flag no command knows is left over
        _, extra = parser.parse_known_args(argv)
        assert extra == [], (argv, extra)
