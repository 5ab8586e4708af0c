"""Integration tests run tiny tensors: one intra-op thread avoids thread hand-off stalls."""

from __future__ import annotations

import pytest
import torch
from hf_models import FAMILIES


@pytest.fixture(autouse=True)
def _one_thread():
    # Tiny tensors on shared cores: one intra-op thread avoids hand-off stalls.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(params=FAMILIES)
def family(request: pytest.FixtureRequest) -> str:
    return request.param
