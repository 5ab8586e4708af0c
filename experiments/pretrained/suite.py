"""`python -m experiments.pretrained --kinds`: held-out loss on several kinds of text,
calibrated on the shipped mix.

The plans are searched on `hf.search.calibration_mix` (prose and Python source that no kind reads);
each kind's blocks (`kinds.kind_blocks`) are scored under every plan, and each kind gets its
own table, plus one pooled over the kinds. Intervals and tests are over files: a block's
difference from `uniform` is averaged within its document first (`clusters`), and one Holm
family covers every comparison with `uniform` in every table of the folder.

The blocks a folder measured are on file (`text/KIND`: each block's source, files, start and
a digest of its token ids); a later run that draws other tokens for a block on file (another
machine, Python version or tokenizer) is refused instead of mixing two texts. Asking for more
blocks per kind later keeps the first ones (the draw is prefix-stable) and scores only the
new ones.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from aah.integrations.hf.search.text_blocks import Block
from experiments.pretrained import kinds, table
from experiments.pretrained.cells import CellStore

POOLED = "pooled"


def fingerprint(block: Block) -> str:
    """A short digest of the block's token ids."""
    return hashlib.sha256(repr(tuple(block.ids)).encode()).hexdigest()[:16]


def held_out_blocks(
    tokenizer: Any | None,
    names: Sequence[str],
    seq_len: int,
    per_kind: int,
    seed: int,
    vocab_size: int | None,
    store: CellStore,
    *,
    skip: int = 0,
) -> dict[str, list[Block]]:
    """Each kind's blocks `skip .. skip + per_kind - 1` of its seeded order (the first `skip`
    are what a run with the same seed and no skip reads), checked against (and added to) the
    blocks on file."""
    out: dict[str, list[Block]] = {}
    for name in names:
        blocks = kinds.kind_blocks(tokenizer, [name], seq_len, per_kind + skip, seed=seed,
                                   vocab_size=vocab_size)[skip:]  # fmt: skip
        if vocab_size is not None:
            top = max(max(b.ids) for b in blocks)
            if top >= vocab_size:
                raise ValueError(f"token id {top} of the {name} text is outside the "
                                 f"vocabulary [0, {vocab_size})")  # fmt: skip
        records = [{**b.record(), "sha": fingerprint(b)} for b in blocks]
        key = f"text/{name}"
        known = (store.get(key) or {}).get("blocks", [])
        shared = min(len(known), len(records))
        if known[:shared] != records[:shared]:
            bad = next(i for i in range(shared) if known[i] != records[i])
            raise ValueError(
                f"block {bad} of the {name} text differs from the one on file in "
                f"{store.path} ({records[bad]['document']} against {known[bad]['document']}): "
                "this machine's text is not the text that folder measured; use another --out"
            )
        if len(records) > len(known):
            store.put(key, {"blocks": records})
        out[name] = blocks
    return out


def tables(
    losses: Mapping[Any, Mapping[str, Sequence[float]]],
    blocks: Mapping[str, Sequence[Block]],
    plans: Mapping[tuple[str, float], Any],
    full_key: Any,
    kv_held: Mapping[tuple[str, float], float],
    needles: Mapping[tuple[str, float], Sequence[bool]] | None,
    family: Sequence[table.Comparison] | None = None,
) -> dict[str, list[table.Row]]:
    """One table per kind and one pooled (needles on the pooled one), Holm over all, or over
    the declared `family`. `losses[plan key][kind]` are per-block losses, `plans` maps
    (method, fraction) to its plan key, `full_key` is full attention's."""
    out = {}
    pooled_clusters = [b.document for name in blocks for b in blocks[name]]
    for name in [*blocks, POOLED]:
        names = list(blocks) if name == POOLED else [name]

        def scores(key: Any, names: list[str] = names) -> list[float]:
            return [v for n in names for v in losses[key][n]]

        clusters = pooled_clusters if name == POOLED else [b.document for b in blocks[name]]
        out[name] = table.rows(
            {k: scores(p) for k, p in plans.items()}, scores(full_key), kv_held,
            needles if name == POOLED else None, clusters=clusters,
        )  # fmt: skip
    return table.holm_across(out, family)


def markdown(
    tables_: Mapping[str, Sequence[table.Row]],
    full: Mapping[str, float],
    blocks: Mapping[str, Sequence[Block]],
    full_needle: float | None,
    family: str | None = None,
) -> str:
    """Every table under a heading that says what text it measured and which Holm family its
    p-values belong to (`family`: the `--holm-family` declared)."""
    holm_note = (
        "Holm over every comparison with uniform in this folder."
        if family is None
        else f"Holm over the declared family `{family}` only; rows outside it have no Holm p."
    )
    parts = []
    for name, rows in tables_.items():
        chosen = [b for n in (blocks if name == POOLED else [name]) for b in blocks[n]]
        files = len({b.document for b in chosen})
        sources = len({(b.kind, b.source) for b in chosen})
        head = (
            f"## {name}: {len(chosen)} blocks from {files} documents of {sources} sources\n\n"
            f"Intervals and p over the {files} documents' mean differences; {holm_note}\n\n"
        )
        parts.append(head + table.markdown(rows, full[name],
                                           full_needle if name == POOLED else None))  # fmt: skip
    return "\n".join(parts)


def as_tensors(blocks: Sequence[Block]) -> list[torch.Tensor]:
    """Each block as a (1, T) LongTensor."""
    return [torch.tensor(list(b.ids), dtype=torch.long).view(1, -1) for b in blocks]
