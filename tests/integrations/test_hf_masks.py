"""Every batch transformers hands the "aah" attention, on tiny models of every family, each
against running every row (or packed segment, or tree branch) alone with the same plan.

Windows shorter than the rows and sinks > 0 throughout, so a rule counted over pad slots, a
window crossing into another segment or a sink taken from the wrong token changes the logits.
Rows stay below the tiny Mistral's own sliding window (16), which would otherwise hide its
sinks on the general path (refused under holes, restored over left padding: the two
`test_sliding_layer_sinks_*` tests).
"""

from __future__ import annotations

import pytest
import torch
from hf_models import VOCAB, tiny_model

from aah.integrations import hf
from aah.integrations.hf.run import attention

PLAN = [[4, 6, 128, 3], [5, 2, 8, 8]]
SINKS = [[2, 2, 0, 1], [1, 0, 3, 3]]
WIDTH = 15
PAD = 1
TOL = {"atol": 2e-5, "rtol": 2e-5}


def planned(family: str, **overrides: object) -> torch.nn.Module:
    model = tiny_model(family, **overrides)
    hf.apply(model, PLAN, sinks=SINKS)
    return model


def token_rows(lengths: list[int], seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(2, VOCAB, (n,), generator=gen) for n in lengths]


def alone(model: torch.nn.Module, row: torch.Tensor) -> torch.Tensor:
    """(n, V) logits of one sequence run by itself: no mask, no padding."""
    with torch.no_grad():
        return model(row[None]).logits[0]


def scatter(rows: list[torch.Tensor], slots: list[list[int]], seed: int = 9):
    """A batch holding each row's tokens at its slots; the other slots hold random tokens
    (not PAD, so nothing relies on what a pad slot holds). Returns ids, the 2-D mask and the
    position ids (each real token numbered from 0 in its row; 0 at pad slots)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, VOCAB, (len(rows), WIDTH), generator=gen)
    mask = torch.zeros(len(rows), WIDTH, dtype=torch.long)
    positions = torch.zeros(len(rows), WIDTH, dtype=torch.long)
    for i, (row, where) in enumerate(zip(rows, slots, strict=True)):
        ids[i, where], mask[i, where] = row, 1
        positions[i, where] = torch.arange(len(row))
    return ids, mask, positions


LAYOUTS = {
    "right": [list(range(15)), list(range(9)), list(range(4))],
    "left": [list(range(15)), list(range(6, 15)), list(range(11, 15))],
    "both sides": [list(range(2, 13)), list(range(5, 9)), list(range(0, 14))],
    "holes": [[0, 1, 2, 5, 6, 7, 8, 9, 12, 13], [3, 4, 6, 8, 10, 11, 12, 13, 14], [0, 14]],
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_padded_rows_equal_each_row_alone(family: str, layout: str) -> None:
    model = planned(family)
    slots = LAYOUTS[layout]
    rows = token_rows([len(s) for s in slots])
    ids, mask, positions = scatter(rows, slots)
    with torch.no_grad():
        logits = model(ids, attention_mask=mask, position_ids=positions).logits
    for i, (row, where) in enumerate(zip(rows, slots, strict=True)):
        torch.testing.assert_close(logits[i, where], alone(model, row), **TOL, msg=f"row {i}")


class DenseMaskCalled(Exception):
    pass


def test_simple_padding_takes_no_dense_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    # Left, right and both-sides padding run on the windowed backends: the dense rule
    # (`masked_attention`) is never called for them, and is for rows with holes.
    def dense(*args: object) -> None:
        raise DenseMaskCalled

    monkeypatch.setattr(attention, "masked_attention", dense)
    model = planned("llama")
    for layout in ("right", "left", "both sides", "holes"):
        slots = LAYOUTS[layout]
        ids, mask, positions = scatter(token_rows([len(s) for s in slots]), slots)
        with torch.no_grad():
            if layout == "holes":
                with pytest.raises(DenseMaskCalled):
                    model(ids, attention_mask=mask, position_ids=positions)
            else:
                model(ids, attention_mask=mask, position_ids=positions)


def test_packed_segments_equal_each_segment_alone(family: str) -> None:
    # No 2-D mask, positions restarting inside a row and no cache (use_cache=False, as in
    # training): transformers masks each segment off (position ids that do not rise by one
    # start a new one); windows and sinks are per segment.
    model = planned(family)
    segments = [[5, 6, 4], [9, 6], [15]]
    rows = [token_rows(lengths, seed=i) for i, lengths in enumerate(segments)]
    ids = torch.stack([torch.cat(parts) for parts in rows])
    positions = torch.stack([torch.cat([torch.arange(len(p)) for p in parts]) for parts in rows])
    with torch.no_grad():
        logits = model(ids, position_ids=positions, use_cache=False).logits
    for i, parts in enumerate(rows):
        start = 0
        for part in parts:
            got = logits[i, start : start + len(part)]
            torch.testing.assert_close(got, alone(model, part), **TOL, msg=f"row {i} at {start}")
            start += len(part)


def tree_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[list[int]]]:
    """One row holding a shared prefix and three branches after it, each branch seeing the
    prefix and itself (transformers' custom 4-D mask test, with longer branches). Returns ids,
    the (1, 1, T, T) boolean mask, position ids and the slots of each prefix + branch."""
    prefix, branches = list(range(5)), [list(range(5, 9)), list(range(9, 12)), list(range(12, 15))]
    allowed = torch.zeros(WIDTH, WIDTH, dtype=torch.bool)
    positions = torch.zeros(WIDTH, dtype=torch.long)
    paths = [prefix + branch for branch in branches]
    for path in paths:
        for a, i in enumerate(path):
            allowed[i, path[: a + 1]] = True
            positions[i] = a
    ids = torch.randint(2, VOCAB, (1, WIDTH), generator=torch.Generator().manual_seed(4))
    return ids, allowed[None, None], positions[None], paths


@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_custom_4d_mask_equals_each_branch_alone(family: str, kind: str) -> None:
    model = planned(family)
    ids, allowed, positions, paths = tree_batch()
    mask = allowed
    if kind == "additive":
        mask = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)
    with torch.no_grad():
        logits = model(ids, attention_mask=mask, position_ids=positions).logits
    for path in paths:
        torch.testing.assert_close(logits[0, path], alone(model, ids[0, path]), **TOL)


def test_custom_4d_mask_at_full_windows_equals_eager(family: str) -> None:
    # Both must allow a pair: with full windows and no sinks the rule adds nothing to the mask.
    model = tiny_model(family)
    eager = tiny_model(family, implementation="eager")
    hf.apply(model, [[WIDTH] * 4] * 2)
    ids, allowed, positions, _ = tree_batch()
    with torch.no_grad():
        got = model(ids, attention_mask=allowed, position_ids=positions).logits
        additive = torch.zeros(allowed.shape).masked_fill(~allowed, -torch.inf)  # eager's kind
        expected = eager(ids, attention_mask=additive, position_ids=positions).logits
    torch.testing.assert_close(got, expected, **TOL)


def left_padded(rows: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), PAD)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :], mask[i, width - len(r) :] = r, 1
    return ids, mask


def greedy(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, **kw: object):
    return model.generate(
        ids, attention_mask=mask, max_new_tokens=5, do_sample=False, pad_token_id=PAD, **kw
    )


@pytest.mark.parametrize("padding", ["left", "right"])
def test_static_cache_generate_equals_the_dynamic_cache(family: str, padding: str) -> None:
    # The static cache hands over all max_cache_len slots, the empty ones masked; eagerly they
    # are cut off, so each step computes what the dynamic cache's does: equal scores, not just
    # equal tokens (a near tie would otherwise flip a greedy token). Right padding makes holes
    # once generated tokens follow the pads. 9 + 5 tokens stay below Mistral's own window.
    model = planned(family)
    ids, mask = left_padded(token_rows([9, 6], seed=5))
    if padding == "right":
        ids, mask = ids.flip(-1), mask.flip(-1)
    kw = {"output_scores": True, "return_dict_in_generate": True}
    dynamic = greedy(model, ids, mask, **kw)
    static = greedy(model, ids, mask, cache_implementation="static", **kw)
    assert torch.equal(static.sequences, dynamic.sequences)
    assert torch.equal(torch.stack(static.scores), torch.stack(dynamic.scores))


def test_keys_no_query_sees_are_cut_only_where_the_queries_stay_last() -> None:
    from aah.integrations.hf.run.masks import causal, keys_in_use

    static_prefill = torch.zeros(1, 1, 3, 8, dtype=torch.bool)
    static_prefill[..., :3] = torch.ones(3, 3, dtype=torch.bool).tril()
    assert keys_in_use(static_prefill) == 3
    decode = torch.zeros(1, 1, 1, 8, dtype=torch.bool)
    decode[..., :5] = True
    assert keys_in_use(decode) == 5
    assert keys_in_use(causal(4, 8, torch.device("cpu"))[None, None]) == 8  # nothing to cut
    # A chunk whose last two queries are pads in every row (they see only older keys): cutting
    # after the last seen key would move the real queries' own slots out of their reach.
    chunk = causal(4, 8, torch.device("cpu"))[None, None].clone()
    chunk[..., 2:, 6:] = False
    assert keys_in_use(chunk) == 8


def test_sliding_layer_at_full_windows_equals_sdpa_under_any_mask() -> None:
    # Mistral's own window (16) < 30 slots: the layer's sliding mask is transformers' (slots),
    # and with full windows and no sinks "aah" gives sdpa's numbers on holes and packed rows.
    model = tiny_model("mistral")
    sdpa = tiny_model("mistral")
    hf.apply(model, [[64] * 4] * 2)
    ids = torch.randint(2, VOCAB, (2, 30), generator=torch.Generator().manual_seed(6))
    mask = torch.ones_like(ids)
    mask[0, 3:7], mask[1, 20:22] = 0, 0
    positions = torch.cat([torch.arange(12), torch.arange(18)])[None].expand(2, -1)
    with torch.no_grad():
        for kw in ({"attention_mask": mask}, {"position_ids": positions, "use_cache": False}):
            got, expected = model(ids, **kw).logits, sdpa(ids, **kw).logits
            real = kw.get("attention_mask", torch.ones_like(ids)).bool()
            torch.testing.assert_close(got[real], expected[real], **TOL)


def test_sliding_layer_sinks_hidden_by_its_mask_are_refused() -> None:
    model = planned("mistral")
    ids = torch.randint(2, VOCAB, (1, 20), generator=torch.Generator().manual_seed(7))
    mask = torch.ones_like(ids)
    mask[0, 4] = 0
    with torch.no_grad():
        model(ids)  # no mask: the sinks stay in view beyond the layer's window
        with pytest.raises(ValueError, match="sliding window \\(16\\) hides its attention sinks"):
            model(ids, attention_mask=mask)


def test_gradients_through_holes_equal_each_row_alone() -> None:
    # Training on a batch with holes and left padding takes the dense rule; rows the mask
    # allows no key (left pads) must not bring NaN into the gradients.
    model = planned("llama").train()
    slots = [LAYOUTS["holes"][0], LAYOUTS["left"][2]]
    rows = token_rows([len(s) for s in slots], seed=8)
    ids, mask, positions = scatter(rows, slots)
    logits = model(ids, attention_mask=mask, position_ids=positions).logits
    torch.stack([logits[i, where].sum() for i, where in enumerate(slots)]).sum().backward()
    batched = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    for row in rows:
        model(row[None]).logits.sum().backward()  # gradients add up over the rows
    for got, want in zip(batched, (p.grad for p in model.parameters()), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_sliding_layer_sinks_beyond_its_window_decode_as_each_row_alone() -> None:
    # Rows longer than the tiny Mistral's own window (16), left padded, decoded over a full
    # DynamicCache: transformers' sliding mask hides the sinks, the function restores them
    # from each row's first real token, so every step equals the row alone.
    from transformers import DynamicCache

    model = planned("mistral")
    lengths, width = [22, 18], 22
    rows = token_rows(lengths, seed=10)
    ids = torch.full((2, width), PAD)
    mask = torch.zeros(2, width, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row) :], mask[i, width - len(row) :] = row, 1
    cache = DynamicCache()
    with torch.no_grad():
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = model(ids, attention_mask=mask, position_ids=positions, past_key_values=cache)
        for _ in range(3):
            nxt = out.logits[:, -1].argmax(-1)
            rows = [torch.cat([row, nxt[i : i + 1]]) for i, row in enumerate(rows)]
            mask = torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], -1)
            positions = positions[:, -1:] + 1
            out = model(
                nxt[:, None], attention_mask=mask, position_ids=positions, past_key_values=cache
            )
            for i, row in enumerate(rows):
                torch.testing.assert_close(out.logits[i, -1], alone(model, row)[-1], **TOL)
