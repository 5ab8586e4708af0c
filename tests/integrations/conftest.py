"""Integration fixtures: one test per supported model family."""

from __future__ import annotations

import pytest
from hf_models import FAMILIES


@pytest.fixture(params=FAMILIES)
def family(request: pytest.FixtureRequest) -> str:
    return request.param
