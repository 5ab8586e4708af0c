"""BatchLoader and eval_batches, checked against an independent replay of the documented rule."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from aah.data import BatchLoader, eval_batches
from aah.data.loader import eval_starts, spread_windows

TOKENS = np.random.default_rng(0).integers(0, 256, size=5000, dtype=np.uint8)


def expected_starts(seed: int, rank: int, index: int, batch_size: int, high: int) -> np.ndarray:
    child = np.random.SeedSequence([seed, rank]).spawn(index + 1)[index]
    return np.random.Generator(np.random.PCG64(child)).integers(0, high, size=batch_size)


def test_batches_follow_documented_stream() -> None:
    loader = BatchLoader(TOKENS, 4, 32, seed=7, rank=1, world_size=2)
    for i in range(3):
        x, y = loader.next_batch()
        starts = expected_starts(7, 1, i, 4, TOKENS.size - 32)
        assert np.array_equal(x.numpy(), np.stack([TOKENS[s : s + 32] for s in starts]))
        assert np.array_equal(y.numpy(), np.stack([TOKENS[s + 1 : s + 33] for s in starts]))


def test_shapes_dtype_and_shift() -> None:
    x, y = BatchLoader(TOKENS, 8, 64, seed=0).next_batch()
    assert x.shape == y.shape == (8, 64)
    assert x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_offsets_cover_whole_range_including_last_window() -> None:
    tokens = np.arange(12, dtype=np.uint8)  # seq_len 10 -> starts 0 or 1 only
    loader = BatchLoader(tokens, 64, 10, seed=3)
    seen = {int(x[0]) for _ in range(4) for x in loader.next_batch()[0]}
    assert seen == {0, 1}


def test_determinism_and_ranks_differ() -> None:
    a = [BatchLoader(TOKENS, 4, 16, seed=1).next_batch()[0] for _ in range(2)]
    assert torch.equal(a[0], a[1])
    r0 = BatchLoader(TOKENS, 4, 16, seed=1, rank=0, world_size=2).next_batch()[0]
    r1 = BatchLoader(TOKENS, 4, 16, seed=1, rank=1, world_size=2).next_batch()[0]
    other_seed = BatchLoader(TOKENS, 4, 16, seed=2).next_batch()[0]
    assert not torch.equal(r0, r1) and not torch.equal(r0, other_seed)


def test_resume_is_exact_through_json() -> None:
    ref = BatchLoader(TOKENS, 4, 16, seed=5, rank=1, world_size=3)
    stream = [ref.next_batch() for _ in range(8)]
    first = BatchLoader(TOKENS, 4, 16, seed=5, rank=1, world_size=3)
    for _ in range(5):
        first.next_batch()
    state = json.loads(json.dumps(first.state_dict()))
    assert all(type(v) is int for v in state.values())
    resumed = BatchLoader(TOKENS, 4, 16, seed=5, rank=1, world_size=3)
    resumed.load_state_dict(state)
    for x_ref, y_ref in stream[5:]:
        x, y = resumed.next_batch()
        assert torch.equal(x, x_ref) and torch.equal(y, y_ref)


def test_load_state_from_other_setup_rejected() -> None:
    state = BatchLoader(TOKENS, 4, 16, seed=5, rank=0, world_size=2).state_dict()
    with pytest.raises(ValueError, match="rank"):
        BatchLoader(TOKENS, 4, 16, seed=5, rank=1, world_size=2).load_state_dict(state)
    with pytest.raises(ValueError, match="seq_len"):
        BatchLoader(TOKENS, 4, 32, seed=5, rank=0, world_size=2).load_state_dict(state)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"seq_len": 0}, "seq_len"),
        ({"seed": -1}, "seed"),
        ({"rank": 2, "world_size": 2}, "rank"),
        ({"world_size": 0}, "world_size"),
    ],
)
def test_bad_loader_arguments(kwargs: dict, match: str) -> None:
    args = {"batch_size": 2, "seq_len": 8, "seed": 0, **kwargs}
    with pytest.raises(ValueError, match=match):
        BatchLoader(TOKENS, **args)


def test_split_shorter_than_window_rejected() -> None:
    with pytest.raises(ValueError, match="seq_len"):
        BatchLoader(np.zeros(16, np.uint8), 2, 16, seed=0)
    with pytest.raises(ValueError, match="seq_len"):
        eval_batches(np.zeros(16, np.uint8), 2, 16)
    assert len(list(eval_batches(np.zeros(17, np.uint8), 2, 16))) == 1


def test_eval_batches_contiguous_non_overlapping_deterministic() -> None:
    tokens = np.arange(1000, dtype=np.int64).astype(np.uint8)
    batches = list(eval_batches(tokens, 3, 50))
    again = list(eval_batches(tokens, 3, 50))
    assert all(
        torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        for a, b in zip(batches, again, strict=True)
    )
    xs = torch.cat([x for x, _ in batches])
    ys = torch.cat([y for _, y in batches])
    n_windows = (1000 - 1) // 50  # 19 windows, the last batch holds 1
    assert [x.shape[0] for x, _ in batches] == [3] * 6 + [1]
    assert torch.equal(xs.reshape(-1), torch.from_numpy(tokens[: n_windows * 50].astype(np.int64)))
    assert torch.equal(
        ys.reshape(-1), torch.from_numpy(tokens[1 : n_windows * 50 + 1].astype(np.int64))
    )


def test_eval_batches_max_batches() -> None:
    batches = list(eval_batches(TOKENS, 2, 100, max_batches=3))
    assert len(batches) == 3
    assert torch.equal(batches[2][0][1], torch.from_numpy(TOKENS[500:600].astype(np.int64)))


def test_spread_windows_cover_the_whole_split():
    tokens = np.arange(1000, dtype=np.uint8)
    w = spread_windows(tokens, 10, 5)
    assert w.shape == (5, 11)
    assert int(w[0, 0]) == 0 and int(w[-1, -1]) == 999 % 256
    with pytest.raises(ValueError, match="fewer than T"):
        spread_windows(np.arange(5, dtype=np.uint8), 10, 2)


def test_spread_eval_windows_reach_the_end_and_never_overlap():
    tokens = np.arange(10_001, dtype=np.int64) % 251
    first = list(eval_batches(tokens, 4, 50, 2))
    spread = list(eval_batches(tokens, 4, 50, 2, layout="spread"))
    assert [x.shape for x, _ in spread] == [x.shape for x, _ in first] == [(4, 50), (4, 50)]
    starts = eval_starts(tokens.size, 50, 4, 2, "spread")
    assert starts[0] == 0 and starts[-1] == tokens.size - 51  # the whole split
    assert (np.diff(starts) >= 51).all()  # no target scored twice
    for (x, y), chunk in zip(spread, (starts[:4], starts[4:]), strict=True):
        for row, s in zip(range(4), chunk, strict=True):
            assert x[row].tolist() == (tokens[s : s + 50]).tolist()
            assert y[row].tolist() == (tokens[s + 1 : s + 51]).tolist()
    # asking for every window (or more than there are) is the same in both layouts
    assert eval_starts(tokens.size, 50, 4, None, "spread").tolist() == list(range(0, 9951, 50))
    assert eval_starts(201, 50, 4, 9, "spread").tolist() == [0, 50, 100, 150]
    with pytest.raises(ValueError, match="eval layout must be one of"):
        eval_starts(tokens.size, 50, 4, 2, "random")
