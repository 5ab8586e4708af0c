"""Reading a user's text file (config, plan, run record) with errors that name the file.

A missing file, a folder, unreadable bytes or a non-UTF-8 byte all become one ValueError
line naming `what` and the path, never a bare codec message.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_utf8(path: str | Path, what: str = "file") -> str:
    path = Path(path)
    try:
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


def read_json(path: str | Path, what: str = "JSON file") -> Any:
    try:
        return json.loads(read_utf8(path, what))
    except json.JSONDecodeError as err:
        raise ValueError(f"{what} {str(path)!r} is not valid JSON: {err}") from None
