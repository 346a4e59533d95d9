"""Stage `synthesize`: writes the embedded synthetic raw files of one dataset in its original layout;
the dataset folder is replaced only once complete, so a failure leaves the earlier one untouched."""

from __future__ import annotations

import inspect
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from esnfed_core.errors import ConfigError, DataError
from esnfed_stages._datasets import DIRNAMES, SYNTHESIZED, bind_kwargs, dataset_function
from esnfed_stages._io import atomic_path, output_lock
from esnfed_stages.sections import section


@dataclass(frozen=True)
class SynthesizeResult:
    folder: Path  # <out_root>/<DIRNAME>
    files: list[Path]  # every file written, under ``folder``
    steps: int | None  # progress steps the generator reported (None: unknown in advance)


def plan(dataset: str, params: dict[str, Any], seed: int | None = None) -> tuple[Callable, int, dict, int | None]:
    """The generator, seed, size arguments (params.yaml ``synthetic.<dataset>``) and expected
    number of progress steps (one per subject for WESAD; unknown for HHAR)."""
    if dataset not in SYNTHESIZED:
        raise ConfigError(f"--dataset: expected one of {', '.join(SYNTHESIZED)}, got {dataset!r}")
    key = f"synthetic.{dataset}"
    conf = section(params, key)
    if not isinstance(conf, dict) or "seed" not in conf:
        raise ConfigError(f"params.yaml: {key} must be a mapping with a 'seed'")
    kwargs = {k: v for k, v in conf.items() if k != "seed"}
    fn = dataset_function(dataset, "synthesize")
    bind_kwargs(fn, kwargs, key)
    seed = conf["seed"] if seed is None else seed
    steps = None
    if dataset == "wesad":
        from esnfed_core.data.wesad import SUBJECTS
        steps = len(kwargs.get("subjects") or SUBJECTS)
    elif dataset == "example":
        steps = int(kwargs.get("subjects", 10))
    return fn, seed, kwargs, steps


def run(dataset: str, params: dict[str, Any], out_root: str | Path | None = None,
        seed: int | None = None, progress: Callable[..., None] | None = None) -> SynthesizeResult:
    """Generate ``<out_root>/<WESAD|HHAR>`` (default root: params ``data.synthetic_dir``)."""
    fn, seed, kwargs, steps = plan(dataset, params, seed)
    out_root = Path(out_root if out_root is not None else section(params, "data.synthetic_dir"))
    dirname = DIRNAMES[dataset]
    if progress is not None and "progress" in inspect.signature(fn).parameters:
        kwargs["progress"] = progress
    try:
        out_root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataError(f"{out_root}: cannot create output folder ({exc.strerror})") from None
    target = out_root / dirname
    with output_lock(target), atomic_path(target) as tmp:
        # The generator writes <scratch>/<DIRNAME>/...; the finished folder is renamed into place.
        with tempfile.TemporaryDirectory(dir=out_root, prefix=f".{dirname}.synth.") as scratch:
            written = fn(Path(scratch), seed, **kwargs)
            made = Path(scratch) / dirname
            if not made.is_dir():
                raise DataError(f"{made}: the {dataset} generator wrote no {dirname} folder")
            os.replace(made, tmp)
            files = sorted(target / Path(p).relative_to(made) for p in written)
    return SynthesizeResult(target, files, steps)
