"""Reading a user's text file (config, plan, run record) with errors that name the file.

A missing file, a folder, unreadable bytes or a non-UTF-8 byte all become one ValueError
line naming `what` and the path, never a bare codec message.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any


def read_utf8(path: str | Path, what: str = "file", *, max_bytes: int | None = None) -> str:
    """The file's text; with `max_bytes`, a larger file is refused before it is read."""
    path = Path(path)
    try:
        if max_bytes is not None and path.is_file() and path.stat().st_size > max_bytes:
            raise ValueError(
                f"{what} {str(path)!r} holds {path.stat().st_size} bytes, more than the "
                f"{max_bytes} such a file can need; is it the right file?"
            )
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{what} {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"{what} {str(path)!r} is a directory, not a file") from None
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{what} {str(path)!r} is not UTF-8 text (byte 0x{err.object[err.start]:02x} at "
            f"offset {err.start})"
        ) from None
    except OSError as err:
        raise ValueError(f"{what} {str(path)!r} cannot be read: {err.strerror or err}") from None


def read_json(
    path: str | Path,
    what: str = "JSON file",
    *,
    max_bytes: int | None = None,
    max_depth: int | None = None,
) -> Any:
    """The parsed file. `max_bytes` refuses a larger file unread; `max_depth` refuses arrays
    and objects nested deeper than that before parsing (a file of 100000 `[` would otherwise
    exhaust the parser's recursion)."""
    text = read_utf8(path, what, max_bytes=max_bytes)
    if max_depth is not None and (depth := nesting_depth(text)) > max_depth:
        raise ValueError(
            f"{what} {str(path)!r} nests arrays/objects {depth} deep, more than the "
            f"{max_depth} its format has"
        )
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{what} {str(path)!r} is not valid JSON: {err}") from None
    except RecursionError:
        raise ValueError(f"{what} {str(path)!r} nests arrays/objects too deeply to read") from None


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def nesting_depth(text: str) -> int:
    """The deepest nesting of [ and { in JSON text, strings skipped (valid or not)."""
    depth = deepest = 0
    for char in _STRING.sub("", text):
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest
