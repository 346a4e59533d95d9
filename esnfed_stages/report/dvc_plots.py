"""The plot declarations of one dataset (`esnfed dvc-plots`), which DVC cannot expand per params.yaml
`datasets`: the declarations of the plot CSVs the report writes for it (as dvc-plots/dvc.yaml
ships them for wesad, hhar and example; a study dataset's columns of the alignment CSV too), as
dvc.yaml text, and their atomic insertion into dvc-plots/dvc.yaml, a dvc.yaml of plots alone that
DVC collects beside the pipeline's. A plot names its CSV relative to the file that declares it.

DVC tells the lines of a plot apart by 7 dash patterns, so an accuracy matrix of more than 7
contexts is declared as several plots of the same CSV, each drawing at most 7 of its columns."""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from esnfed_core.data.processed import MANIFEST, load_manifest
from esnfed_core.errors import ConfigError, DataError
from esnfed_core.quote import quote
from esnfed_stages.report.table_specs import dataset_label
from esnfed_core.vocabulary import PCTS, STRATEGIES
from esnfed_stages.data._datasets import (
    check_declared, continual_declared, dataset_function, reader_of, reader_settings, study_declared,
)
from esnfed_stages._io import write_text
from esnfed_stages.layout import ALPHA_CSV, alpha_column
from esnfed_stages.params.hetero import hetero_params
from esnfed_stages.params.imports import import_params
from esnfed_stages.report.report_figures import SETTINGS, SHARES_METHODS, matrix_column, method_label
from esnfed_stages.layout import matrix_csv, shares_csv, stream_csv
from esnfed_stages.params.sections import section

PLOTS_DIR = "reports/plots"  # the report stage's plots output, relative to the project folder
DVC_LINES = 7  # dash patterns of dvc_render's vega templates: an 8th line repeats the 1st
_SETTING_TITLE = {"federated": "federated", "centralized": "centralised"}
_LINEAR = {"template": "linear"}
_STREAM = {**_LINEAR, "x": "context", "x_label": "after context", "y_label": "stream accuracy (%)"}
_SHARES = {**_LINEAR, "x": "share", "x_label": "share of training users (%)", "y_label": "test accuracy (%)"}
_MATRIX = {**_LINEAR, "x": "context", "x_label": "after context",
           "y_label": "accuracy on the context's test data (%)"}
_ALPHA = {**_LINEAR, "x": "alpha", "x_label": "α (alignment toward the target)", "y_label": "test accuracy (%)"}
_WIDTH = 110  # dvc.yaml's line width


@dataclass(frozen=True)
class Plot:
    """One entry of dvc.yaml's `plots`: its id and definition (template, axes, title, y: CSV -> columns)."""

    id: str
    spec: Mapping[str, Any]


def located(plots: Sequence[Plot], project: str | Path, dvc_file: str | Path) -> list[Plot]:
    """``plots`` (their CSVs relative to the ``project`` folder) as ``dvc_file`` declares them: DVC reads
    a dvc.yaml's paths relative to its own folder (dvc-plots/dvc.yaml: ../reports/plots/...)."""
    folder = os.path.relpath(Path(project).resolve() / PLOTS_DIR, Path(dvc_file).resolve().parent)
    prefix = Path(folder).as_posix() + "/"
    return [Plot(p.id, {**p.spec, "y": {prefix + k.removeprefix(PLOTS_DIR + "/"): v for k, v in p.spec["y"].items()}})
            for p in plots]


def parts(n: int, most: int = DVC_LINES) -> list[range]:
    """``range(n)`` cut into the fewest runs of at most ``most``, of sizes differing by one at most."""
    k = max(1, math.ceil(n / most))
    sizes = [n // k + (i < n % k) for i in range(k)]
    starts = [sum(sizes[:i]) for i in range(k)]
    return [range(s, s + size) for s, size in zip(starts, sizes)]


def _plot(csv_name: str, template: Mapping[str, Any], title: str, columns: Sequence[str], suffix: str = "") -> Plot:
    """The plot ``<csv_name without .csv><suffix>`` of ``columns`` of reports/plots/``csv_name``."""
    return Plot(csv_name.removesuffix(".csv") + suffix,
                {**template, "title": title, "y": {f"{PLOTS_DIR}/{csv_name}": list(columns)}})


def dataset_plots(dataset: str, continual: bool, n_contexts: int | None = None,
                  alpha_pcts: Sequence[str] = ()) -> list[Plot]:
    """The plots of ``dataset``'s CSVs, in dvc-plots/dvc.yaml's order: stream accuracy per setting and share
    (a line per strategy) when ``continual``; the stationary methods' test accuracy against the
    share (a line per method's mean); the accuracy matrix per continual method when ``continual``
    (a line per context's test data, in plots of at most DVC_LINES: ``parts``); align's test
    accuracy against α (its columns of ALPHA_CSV, a line per share of ``alpha_pcts``) when given
    (a study dataset: the heterogeneous methods run on it)."""
    label = dataset_label(dataset)
    plots = [_plot(stream_csv(dataset, setting, pct), _STREAM,
                   f"{label} {_SETTING_TITLE[setting]} ({method_label(prefix)}): stream accuracy after each "
                   f"context, {pct}% training users", STRATEGIES)
             for setting, (prefix, _) in (SETTINGS.items() if continual else ()) for pct in PCTS]
    plots.append(_plot(shares_csv(dataset), _SHARES,
                       f"{label}: test accuracy against the share of training users (stationary methods; mean "
                       "over retrains)", [f"{m}_mean" for m in SHARES_METHODS]))
    if continual:
        plots += _matrix_plots(dataset, n_contexts)
    if alpha_pcts:  # at most the 4 shares: fewer lines than DVC_LINES
        plots.append(_plot(ALPHA_CSV, _ALPHA, f"{label}: align's test accuracy against α, a line per share of "
                           "training users (mean over retrains)", [alpha_column(dataset, p) for p in alpha_pcts],
                           f"-{dataset}"))
    return plots


def _matrix_plots(dataset: str, n_contexts: int | None) -> list[Plot]:
    """The accuracy-matrix plots of a continual ``dataset`` of ``n_contexts`` contexts."""
    label = dataset_label(dataset)
    plots: list[Plot] = []
    if not n_contexts or n_contexts < 1:
        raise ValueError(f"{dataset}: a continual dataset's plots need its number of contexts, got {n_contexts}")
    runs = parts(n_contexts)
    whole = len(runs) == 1  # one plot per method, named as the repository's
    for method in (f"{SETTINGS[setting][0]}-{s}" for setting in SETTINGS for s in STRATEGIES):
        for run in runs:
            on = "each context's test data" if whole else f"the test data of contexts {run[0]} to {run[-1]}"
            plots.append(_plot(matrix_csv(dataset, method), _MATRIX,
                               f"{label} {method_label(method)}: accuracy on {on} after each context, "
                               "${report.matrix_pct}% training users", [matrix_column(j) for j in run],
                               "" if whole else f"-contexts-{run[0]}-{run[-1]}"))
    return plots


# ---------------------------------------------------------------- from params.yaml
def contexts_of(params: Mapping[str, Any], dataset: str, data_dir: str | Path = "data") -> int:
    """How many contexts ``dataset`` has: the papers' from their params (WESAD's label runs, HHAR's
    devices), yours from imports.<name>.contexts, else from the processed manifest's context names."""
    if (reader := reader_of(params, dataset)) is not None:  # the reader's own description, as preprocess writes it
        settings = reader_settings(section(params, f"preprocess.{dataset}"))  # a variant's: without base
        return len(dataset_function(reader, "describe")(settings)["context_names"])
    options = import_params(params["imports"][dataset], f"imports.{dataset}")
    if options.contexts is not None:
        return len(options.contexts)
    folder = Path(data_dir) / "processed" / dataset
    if not (folder / MANIFEST).is_file():
        raise ConfigError(f"imports.{dataset}.contexts: not set and {folder / MANIFEST} not found: import the "
                          f"dataset first (`dvc repro import@{dataset}`), or list its contexts there (the "
                          "accuracy-matrix plots draw a line per context)")
    names = load_manifest(folder).get("context_names")
    if not isinstance(names, list) or not names:
        raise DataError(f"{folder / MANIFEST}: context_names must be a non-empty list, got {quote(names)}; rerun "
                        f"`esnfed import --dataset {dataset}`")
    return len(names)


def declared_plots(params: Mapping[str, Any], dataset: str, data_dir: str | Path = "data") -> list[Plot]:
    """The plots of a dataset params.yaml declares (``datasets``; ``continual_datasets``: its stream
    and accuracy-matrix plots; ``study_datasets``: its alignment plot, at the shares the budget runs
    the heterogeneous methods on, heterogeneity.pcts), as the report writes its CSVs."""
    check_declared(params, dataset)
    continual = dataset in continual_declared(params)
    pcts = hetero_params(params).shares(str(params["budget"])) if dataset in study_declared(params) else ()
    return dataset_plots(dataset, continual, contexts_of(params, dataset, data_dir) if continual else None, pcts)


# ---------------------------------------------------------------- as dvc.yaml text
def _scalar(value: Any) -> str:
    """A flow-style YAML scalar: plain where it reads back the same, else double-quoted (JSON)."""
    if isinstance(value, str) and re.fullmatch(r"[A-Za-z_][\w./ ()%'-]*", value) and yaml.safe_load(value) == value:
        return value
    return json.dumps(value, ensure_ascii=False)


def _flow(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_scalar(k)}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    return _scalar(value)


def _entry(plot: Plot, indent: str) -> list[str]:
    """``- <id>:`` and its definition as one flow mapping, wrapped between its fields."""
    lines = [f"{indent}- {plot.id}:"]
    pad = indent + "    "
    line = pad + "{"
    fields = [f"{k}: {_flow(v)}" for k, v in plot.spec.items()]
    for i, field in enumerate(fields):
        piece = field + ("}" if i == len(fields) - 1 else ",")
        if line.endswith(("{", ",")) and line != pad + "{" and len(line) + 1 + len(piece) > _WIDTH:
            lines.append(line)
            line = pad + " " + piece
        else:
            line += ("" if line.endswith("{") else " ") + piece
    return lines + [line]


def markers(dataset: str, indent: str = "  ") -> tuple[str, str]:
    """The comment lines around the block of ``dataset``'s plots (--write replaces what lies between)."""
    return (f"{indent}# >>> esnfed dvc-plots --dataset {dataset} (written by it: rerun it to update, do not edit)",
            f"{indent}# <<< esnfed dvc-plots --dataset {dataset}")


def render(dataset: str, plots: Sequence[Plot], indent: str = "  ") -> str:
    """``plots`` as entries of dvc.yaml's `plots` list, between ``dataset``'s markers."""
    begin, end = markers(dataset, indent)
    return "\n".join([begin, *(line for p in plots for line in _entry(p, indent)), end]) + "\n"


# ---------------------------------------------------------------- into dvc.yaml
def _plot_entries(doc: Any, where: Path) -> dict[str, Any]:
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{where}: expected a mapping of stages and plots, got {quote(doc)}")
    plots = doc.get("plots") or []
    if not isinstance(plots, list):
        raise ConfigError(f"{where}: plots: expected a list, got {quote(plots)}")
    return {k: v for p in plots if isinstance(p, Mapping) for k, v in p.items()}


def _rest(doc: Mapping[str, Any]) -> tuple:
    """What --write must leave as it is: every key but `plots`, and the entries of `plots` that are no
    plot definition (a folder of images: reports/figures)."""
    return ({k: v for k, v in doc.items() if k != "plots"},
            [p for p in doc.get("plots") or [] if not isinstance(p, Mapping)])


def _load(text: str, where: Path) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML ({' '.join(str(exc).split())})") from None


def _section(lines: list[str]) -> tuple[int, str] | None:
    """Where a new entry of the block list `plots` goes (after its last entry) and its entries'
    indent; None without a ``plots:`` line."""
    heads = [i for i, line in enumerate(lines) if re.fullmatch(r"plots:\s*(#.*)?", line)]
    if not heads:
        return None
    end = heads[0] + 1
    for i in range(heads[0] + 1, len(lines)):
        if lines[i][:1] not in ("", " ", "\t", "#"):
            break  # the next top-level key
        if lines[i][:1] in (" ", "\t") and lines[i].strip():
            end = i + 1
    items = (re.match(r"(\s*)- ", line) for line in lines[heads[0] + 1:end])
    return end, next((m.group(1) for m in items if m), "  ")


def _block(lines: list[str], dataset: str, where: Path) -> tuple[int, int] | None:
    """The lines of ``dataset``'s block (begin marker to end marker inclusive); None without one."""
    begin, end = (m.strip() for m in markers(dataset, ""))
    starts = [i for i, line in enumerate(lines) if line.strip() == begin]
    ends = [i for i, line in enumerate(lines) if line.strip() == end]
    if not starts and not ends:
        return None
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise ConfigError(f"{where}: the lines {quote(begin)} and {quote(end)} must each stand once, in this "
                          f"order, around the plots `esnfed dvc-plots --dataset {dataset}` wrote")
    return starts[0], ends[0] + 1


def write_plots(dvc_file: str | Path, declared: Mapping[str, Sequence[Plot]]) -> dict[str, str]:
    """Declare each dataset's plots in ``dvc_file``: a block written before by this function is
    replaced, else a new one goes at the end of `plots`; plots declared otherwise already (the
    repository's, or added by hand) are left as they are where they equal these, and refused where
    they differ. The file is written atomically, once, after the result reads back as YAML with
    these plots, every other plot and the stages as they were. Returns what became of each dataset."""
    where = Path(dvc_file)
    if not where.is_file():
        raise ConfigError(f"{where}: file not found (--dvc-file: the pipeline whose plots to declare)")
    text = where.read_text(encoding="utf-8")
    before = _load(text, where)
    existing = _plot_entries(before, where)
    lines = text.splitlines()
    done: dict[str, str] = {}
    replaced: set[str] = set()  # ids of the blocks rewritten (a matrix split otherwise drops some)
    for dataset, plots in declared.items():
        block = _block(lines, dataset, where)
        ours = [] if block is None else list(_plot_entries(_load("plots:\n" + "\n".join(lines[slice(*block)]),
                                                                 where), where))
        clash = [p for p in plots if p.id in existing and p.id not in ours]
        if clash and block is None and len(clash) == len(plots) and all(existing[p.id] == p.spec for p in plots):
            done[dataset] = f"declared already ({len(plots)} plots)"
            continue
        if clash:
            raise ConfigError(f"{where}: plots: {clash[0].id} is declared already, not by `esnfed dvc-plots "
                              f"--dataset {dataset}`, and differs; remove {dataset}'s plots there and run it again")
        replaced.update(ours)
        section_at = _section(lines)
        if section_at is None and "plots" in before:
            raise ConfigError(f"{where}: plots: not a block list (`plots:` on a line of its own, then an entry a "
                              "line) that --write can add to; print the plots (without --write) and paste them")
        if section_at is None:
            lines.append("plots:")
            section_at = (len(lines), "  ")
        new = render(dataset, plots, section_at[1]).splitlines()
        if block is None:
            lines[section_at[0]:section_at[0]] = new
            done[dataset] = f"{len(plots)} plots added"
        elif lines[slice(*block)] == new:
            done[dataset] = f"unchanged ({len(plots)} plots)"
        else:
            lines[slice(*block)] = new
            done[dataset] = f"{len(plots)} plots written anew (were {len(ours)})"
    result = "\n".join(lines) + "\n"
    after = _load(result, where)
    wanted = {p.id: p.spec for plots in declared.values() for p in plots}
    expected = {**{k: v for k, v in existing.items() if k not in replaced}, **wanted}
    if _plot_entries(after, where) != expected or _rest(after) != _rest(before):
        raise ConfigError(f"{where}: the plots could not be declared there as text without changing the rest "
                          "(its `plots:` is not a block list?); print them (without --write) and paste them")
    if result != text:
        write_text(where, result)
    return done
