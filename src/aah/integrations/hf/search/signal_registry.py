"""The names of the plan search's signals: the built-in ones and any a user registers.

    from aah.hf import register_signal, search_plan

    register_signal("my-signal", MySignal)          # a class or function returning a Signal
    plan = search_plan(model, kv_fraction=0.3, signal="my-signal")

Torch-free, so the command line can list the names without loading torch: the built-in
signals (`hf.search.signals`) are imported only when one is made. A signal registered in a process
is known to every search and to `aah plan search --signal` run by that process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, get_args

from aah.choices import SearchSignal

#: the built-in signals, in the order the command line lists them (the first is the default)
BUILTIN_SIGNALS: tuple[str, ...] = get_args(SearchSignal)

_registered: dict[str, Callable[..., Any]] = {}


def register_signal(name: str, factory: Callable[..., Any]) -> None:
    """Make `factory(**options)` (a `hf.search.signals.Signal`) searchable as `name`. ValueError for
    an empty name, a built-in's name, or a name already registered."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a signal's name must be a non-empty string, got {name!r}")
    if name in BUILTIN_SIGNALS or name in _registered:
        raise ValueError(f"signal {name!r} is already registered")
    if not callable(factory):
        raise ValueError(f"signal {name!r}: the factory must be callable, got {factory!r}")
    _registered[name] = factory


def unregister_signal(name: str) -> None:
    """Forget a signal `register_signal` made known (built-ins stay); KeyError if unknown."""
    del _registered[name]


def signal_names() -> tuple[str, ...]:
    """Every name `make_signal` knows: the built-ins, then the registered ones."""
    return (*BUILTIN_SIGNALS, *_registered)


def signal_factory(name: str) -> Callable[..., Any]:
    """The factory `make_signal(name, ...)` calls; ValueError naming the known signals for an
    unknown name."""
    if name in _registered:
        return _registered[name]
    if name not in BUILTIN_SIGNALS:
        raise ValueError(f"signal must be one of {', '.join(signal_names())}, got {name!r}")
    from aah.integrations.hf.search.signals import BUILTIN_FACTORIES

    return BUILTIN_FACTORIES[name]


def make_signal(name: str, **options: Any) -> Any:
    """The signal called `name`, built with `options` (that signal's own settings, e.g.
    `suffix=` for "suffix-loss"); ValueError naming the known signals for an unknown name."""
    return signal_factory(name)(**options)
