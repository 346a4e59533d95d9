"""What an output was computed with: the params.yaml values a stage records in its JSON (``params``:
{params.yaml key: value}) and the one check its readers make against params.yaml's values now, so
a file computed under other settings is refused instead of rendered under the new ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from esnfed_core.errors import DataError
from esnfed_core.quote import quote

KEY = "params"


def plain(value: Any) -> Any:
    """``value`` as it reads back from JSON: tuples as lists, all the way down."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    return value


def record(values: Mapping[str, Any]) -> dict[str, Any]:
    """The ``params`` object an output records: {params.yaml key: value}, a None value (a key
    params.yaml does not have) left out."""
    return {key: plain(v) for key, v in values.items() if v is not None}


def check(path: str | Path, doc: Mapping[str, Any], expected: Mapping[str, Any], rerun: str,
          top_level: Mapping[str, str] | None = None, verb: str = "computed") -> None:
    """Refuse ``doc`` (read from ``path``) when it was ``verb`` (computed, selected, retrained) with
    another value of a key of ``expected`` (params.yaml's now): one DataError naming the file, the
    key, both values and ``rerun`` (what to run again). The values are read from the document's ``params`` object, and
    from its top-level fields that ``top_level`` maps ({params.yaml key: field}, those a document
    held before it recorded ``params``). A key the document does not record is trusted (a file
    written before it was recorded), as is a key whose expected value is None."""
    rec = doc.get(KEY, {})
    if not isinstance(rec, Mapping):
        raise DataError(f"{path}: {KEY}: expected an object of params.yaml keys, got {quote(rec)}")
    rec = {**{key: doc[field] for key, field in (top_level or {}).items() if field in doc}, **rec}
    for key, want in expected.items():
        if want is None or key not in rec or plain(rec[key]) == plain(want):
            continue
        raise DataError(f"{path}: {verb} with {key.rsplit('.', 1)[-1]} {quote(plain(rec[key]))} but "
                        f"params.yaml's {key} is {quote(plain(want))}: rerun {rerun}")
