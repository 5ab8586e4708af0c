"""Packaging: a distribution name of our own in every install hint, plots after the
Quickstart install, and a README Quickstart of exactly two set-up commands."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).parents[2]
DIST = "aah-attention"
#: hints here are rewritten together with the Hugging Face integration's own changes.


def test_the_distribution_name_is_not_the_taken_one():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DIST
    assert project["scripts"]["aah"] == "aah.cli:main"  # the command and import name stay


def test_aah_report_needs_nothing_beyond_the_quickstart_install():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert any(dep.startswith("matplotlib") for dep in project["dependencies"])
    readme = (ROOT / "README.md").read_text()
    quickstart = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)\n```", quickstart, re.S)
    assert len(commands) == 2 and all("torch==2.13.0" in c for c in commands)


def test_every_install_hint_names_our_distribution():
    files = [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "src").rglob("*.py")]
    stale = []
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        for line in path.read_text(encoding="utf-8").splitlines():
            if re.search(r"(?<![\w-])aah\[\w+\]", line):
                stale.append(f"{rel}: {line.strip()}")
    assert not stale, stale
