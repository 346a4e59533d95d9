"""Whether a processed folder is what params.yaml asks for now. manifest.json records the settings
its folder was written with (``params``: the checked ``imports.<name>`` of `esnfed import`, the
``preprocess.<name>`` section of `esnfed preprocess`); DVC reruns the import or preprocess stage when
they change, but a stage run by hand would read the old windows. The stages that read a processed
folder (partition, select, retrain, assess, privacy, flower) compare the two and refuse a stale
folder with one line naming the manifest, the key, both values and the command to rerun."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from esnfed_core.data.processed import MANIFEST
from esnfed_core.errors import DataError
from esnfed_core.quote import quote
from esnfed_stages.data._datasets import reader_of
from esnfed_stages.params.imports import import_params
from esnfed_stages.provenance import plain

# import settings that change how the files are read (memory), never what is written
READ_ONLY = ("chunk_rows",)
_UNSET = object()  # a key one side does not have


@dataclass(frozen=True)
class DataParams:
    """What manifest.json's ``params`` of a dataset must hold: ``values`` are params.yaml's ``key``
    (``imports.<name>`` checked with the import's defaults, as the import records it, or the
    ``preprocess.<name>`` section as it stands). ``whole``: the manifest records the whole section,
    so a key set on one side only differs too (preprocess); otherwise a key the manifest does not
    record is trusted (a manifest written before the import recorded it)."""

    dataset: str
    key: str
    values: Mapping[str, Any]
    whole: bool
    rerun: str

    def check(self, folder: str | Path, manifest: Mapping[str, Any]) -> None:
        """DataError naming ``<folder>/manifest.json`` at the first setting that differs. A manifest
        without ``params``, or with an empty one (a folder written by hand), is trusted."""
        path = Path(folder) / MANIFEST
        rec = manifest.get("params")
        if rec is None:
            return
        if not isinstance(rec, Mapping):
            raise DataError(f"{path}: params: expected an object of the settings it was written with, got {quote(rec)}")
        if not rec:
            return
        keys = list(self.values) + ([k for k in rec if k not in self.values] if self.whole else [])
        diffs = [(k, rec.get(k, _UNSET), self.values.get(k, _UNSET)) for k in keys
                 if k not in READ_ONLY and (k in rec or self.whole)
                 and not _same(k, rec.get(k, _UNSET), self.values.get(k, _UNSET))]
        if not diffs:
            return
        k, was, now = diffs[0]
        more = f" (also {', '.join(d[0] for d in diffs[1:])})" if len(diffs) > 1 else ""
        raise DataError(f"{path}: written with {k} {_show(was)} but params.yaml's {self.key}.{k} is {_show(now)}"
                        f"{more}: the processed data is stale; rerun {self.rerun}")


def same_source(a: str, b: str) -> bool:
    """Whether two import sources name one file, written two ways (``./x.csv``, an absolute path)."""
    return os.path.normpath(a) == os.path.normpath(b) or os.path.abspath(a) == os.path.abspath(b)


def _same(key: str, a: Any, b: Any) -> bool:
    if a is _UNSET or b is _UNSET:
        return a is b
    if key == "source" and isinstance(a, str) and isinstance(b, str):
        return same_source(a, b)
    return plain(a) == plain(b)


def _show(value: Any) -> str:
    return "unset" if value is _UNSET else quote(plain(value))


def data_params(params: Mapping[str, Any], dataset: str) -> DataParams | None:
    """What ``dataset``'s manifest must record under ``params`` (params.yaml's now): a dataset with
    an ``imports.<name>`` entry, one of the papers' (or a variant of one) with a ``preprocess.<name>`` section; None for
    any other (nothing to compare)."""
    imports = params.get("imports") if isinstance(params, Mapping) else None
    if isinstance(imports, Mapping) and dataset in imports:
        p = import_params(imports[dataset], f"imports.{dataset}")
        values = p.recorded()  # as `esnfed import` records them (esnfed_stages/data/import_data.py run)
        return DataParams(dataset, f"imports.{dataset}", plain(values), False,
                          f"`esnfed import --dataset {dataset}` (or `dvc repro import@{dataset}`)")
    preprocess = params.get("preprocess") if isinstance(params, Mapping) else None
    if reader_of(params, dataset) and isinstance(preprocess, Mapping) and isinstance(preprocess.get(dataset), Mapping):
        return DataParams(dataset, f"preprocess.{dataset}", plain(dict(preprocess[dataset])), True,
                          f"`esnfed preprocess --dataset {dataset}` (or `dvc repro preprocess@{dataset}`)")
    return None


def check_processed(folder: str | Path, manifest: Mapping[str, Any], expected: DataParams | None) -> None:
    """``expected.check`` when there is something to compare."""
    if expected is not None:
        expected.check(folder, manifest)
