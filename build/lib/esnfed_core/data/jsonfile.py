"""Reading a JSON file as untrusted text: every way the bytes can fail to be a JSON document
(not UTF-8, malformed, nested past the parser's recursion limit, an integer of more digits than
Python converts) is one DataError naming the file; memory is bounded by the file's size."""

from __future__ import annotations

import json
import os
from typing import Any

from esnfed_core.data.paths import check_input
from esnfed_core.errors import DataError
from esnfed_core.quote import brief


def read_json(path: str | os.PathLike, missing: str = "file not found") -> Any:
    """The document in ``path``; ``missing`` is the message when nothing is there (a folder or a
    FIFO there is named as such: esnfed_core.data.paths)."""
    path = check_input(path, missing)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise DataError(f"{path}: not valid JSON (nested too deeply)") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError; an int of over 4300 digits
        raise DataError(f"{path}: not valid JSON ({brief(exc)})") from None
