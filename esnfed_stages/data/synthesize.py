"""Stage `synthesize`: writes the embedded synthetic raw files of one dataset in its original layout
(WESAD, HHAR, and the plain-CSV example of a user dataset); the dataset folder is replaced only
once complete, so a failure leaves the earlier one untouched. run() takes a frozen, checked
SynthesizeParams (synthesize_params)."""

from __future__ import annotations

import inspect
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

from esnfed_core.data.paths import output_folder_problem
from esnfed_core.errors import ConfigError, DataError
from esnfed_core.validation import Bound, ParameterError
from esnfed_stages.data._datasets import DIRNAMES, bind_kwargs, check_synthesized, dataset_function
from esnfed_stages._io import atomic_path, output_lock
from esnfed_stages.params.sections import section


SEED = Bound(integer=True, low=0)


@dataclass(frozen=True)
class SynthesizeResult:
    folder: Path  # <out_root>/<DIRNAME>
    files: list[Path]  # every file written, under ``folder``
    steps: int | None  # progress steps the generator reported (None: unknown in advance)


@dataclass(frozen=True)
class SynthesizeParams:
    """``synthetic.<dataset>`` and ``data.synthetic_dir``, checked: what `synthesize` runs."""

    dataset: str
    seed: int
    kwargs: Mapping[str, Any]  # the generator's size arguments (read-only)
    out_root: Path
    steps: int | None  # progress steps (one per subject for WESAD and the example; unknown for HHAR)

    @property
    def function(self) -> Callable:
        return dataset_function(self.dataset, "synthesize")


def synthesize_params(params: Mapping[str, Any], dataset: str, seed: int | None = None,
                      out_root: str | Path | None = None) -> SynthesizeParams:
    """The generator's arguments from params.yaml ``synthetic.<dataset>`` (names: its signature);
    ``seed`` and ``out_root`` (command line) win over the params' seed and data.synthetic_dir."""
    check_synthesized(dataset)
    key = f"synthetic.{dataset}"
    conf = section(params, key)
    if not isinstance(conf, Mapping) or "seed" not in conf:
        raise ConfigError(f"params.yaml: {key} must be a mapping with a 'seed'")
    kwargs = {k: v for k, v in conf.items() if k != "seed"}
    bind_kwargs(dataset_function(dataset, "synthesize"), kwargs, key)
    seed = conf["seed"] if seed is None else seed
    try:
        SEED.check(f"{key}.seed", seed)
    except ParameterError as exc:
        raise ConfigError(f"params.yaml: {exc}") from None
    steps = None
    if dataset == "wesad":
        from esnfed_core.data.wesad import SUBJECTS
        steps = len(kwargs.get("subjects") or SUBJECTS)
    elif dataset == "example":
        steps = int(kwargs.get("subjects", 10))
    root = Path(out_root if out_root is not None else section(params, "data.synthetic_dir"))
    return SynthesizeParams(dataset, int(seed), MappingProxyType(kwargs), root, steps)


def run(options: SynthesizeParams, progress: Callable[..., None] | None = None) -> SynthesizeResult:
    """Generate ``<options.out_root>/<WESAD|HHAR|EXAMPLE>``."""
    fn, dataset, out_root = options.function, options.dataset, options.out_root
    kwargs = dict(options.kwargs)
    dirname = DIRNAMES[dataset]
    if progress is not None and "progress" in inspect.signature(fn).parameters:
        kwargs["progress"] = progress
    try:
        out_root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(output_folder_problem(out_root) or f"{out_root}: cannot create output folder "
                        f"({exc.strerror})") from None
    target = out_root / dirname
    with output_lock(target), atomic_path(target) as tmp:
        # The generator writes <scratch>/<DIRNAME>/...; the finished folder is renamed into place.
        with tempfile.TemporaryDirectory(dir=out_root, prefix=f".{dirname}.synth.") as scratch:
            written = fn(Path(scratch), options.seed, **kwargs)
            made = Path(scratch) / dirname
            if not made.is_dir():
                raise DataError(f"{made}: the {dataset} generator wrote no {dirname} folder")
            os.replace(made, tmp)
            files = sorted(target / Path(p).relative_to(made) for p in written)
    return SynthesizeResult(target, files, options.steps)
