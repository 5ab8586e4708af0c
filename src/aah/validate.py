"""Field checks shared by every config: ints, finite numbers, booleans and named choices.

Each check raises one ValueError that names the field and the bad value. `bool` is a
subclass of `int` in Python, so an int check refuses True/False explicitly. A choice list is
a `Literal` type and is read from the type itself (`typing.get_args`), never copied.
"""

from __future__ import annotations

import math
from typing import Any, get_args


def is_int(value: object) -> bool:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_real(value: object) -> bool:
    """A finite int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_int(
    name: str, value: object, minimum: int | None = None, maximum: int | None = None
) -> None:
    """`value` is an int in [minimum, maximum] (either bound may be None)."""
    ok = is_int(value)
    if ok and minimum is not None and value < minimum:  # type: ignore[operator]
        ok = False
    if ok and maximum is not None and value > maximum:  # type: ignore[operator]
        ok = False
    if not ok:
        raise ValueError(f"{name} must be an int{_range(minimum, maximum)}, got {value!r}")


def check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")


def check_real(name: str, value: object) -> None:
    """`value` is a finite number (range checks are left to the caller's own wording)."""
    if not is_real(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")


def choices(literal: Any) -> tuple[str, ...]:
    """The names a `Literal[...]` type allows, in declaration order (nested ones flattened)."""
    names = get_args(literal)
    if not names or not all(isinstance(n, str) for n in names):
        raise TypeError(f"{literal!r} is not a Literal of strings")
    return names


def check_choice(name: str, value: object, literal: Any) -> None:
    """`value` is one of the names of `literal`."""
    allowed = choices(literal)
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


def _range(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f" in [{minimum}, {maximum}]"
    if minimum is not None:
        return f" >= {minimum}"
    if maximum is not None:
        return f" <= {maximum}"
    return ""
