"""pytest plugin: attributes that newer generation tests read and the installed transformers
(5.25) names differently; applied to the sdpa and the aah runs alike, so it moves both."""

from __future__ import annotations


def pytest_configure(config) -> None:  # type: ignore[no-untyped-def]
    from transformers import PreTrainedModel, StaticCache

    if not hasattr(PreTrainedModel, "_is_stateful"):
        PreTrainedModel._is_stateful = False
    if not hasattr(StaticCache, "get_max_cache_shape"):
        StaticCache.get_max_cache_shape = lambda self, layer_idx=0: self.get_max_length()
