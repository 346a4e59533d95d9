"""What the report reads besides the assess files and how its tables say what they were run on:
the published values, reports/ttest.json checked, each table's header lines (data source, budget,
seeds, test variant, date and versions) and the validation sizes the communication tables need."""

from __future__ import annotations

import datetime as _dt
import math
import os
import platform
from dataclasses import dataclass, field
from importlib import metadata, resources
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from esnfed_core import __version__
from esnfed_core.errors import ConfigError, DataError
from esnfed_core.quote import failure, quote
from esnfed_core.communication import COMMUNICATION_METHODS, Communication, SelectionTrial, opt_int, split_rounds
from esnfed_stages.report.table_specs import TABLES, Published, TableSpec, parse_published, required_inputs
from esnfed_core.vocabulary import DATASETS, PCTS, VARIANTS
from esnfed_stages.report import claims_report, comparability, selection_traffic
from esnfed_stages import provenance
from esnfed_stages.data._datasets import classes_of
from esnfed_stages._io import read_json
from esnfed_stages.report.report_params import ReportParams
from esnfed_stages.report.ttest import VARIANT_TEXT, Inputs


def load_published() -> Published:
    """The published values shipped with the package (never ../shared at run time)."""
    text = resources.files("esnfed_stages.report").joinpath("paper_results.yaml").read_text("utf-8")
    return parse_published(yaml.safe_load(text), "esnfed_stages/report/paper_results.yaml")


def load_ttest(path: str | Path, expected: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """reports/ttest.json checked: its comparisons, and computed with ``expected`` (params.yaml's
    values, ``TTestParams.record``) where it records them (a file without ``params``: its top-level
    variant and alpha)."""
    path = Path(path)
    doc = read_json(path, "not found: run `esnfed ttest` first")
    if not isinstance(doc, dict) or doc.get("variant") not in VARIANTS \
            or not isinstance(doc.get("comparisons"), list):
        raise DataError(f"{path}: expected {{variant: welch|student, alpha, comparisons: [...]}}"
                        " (rerun `esnfed ttest`)")
    for i, comp in enumerate(doc["comparisons"]):
        missing = [k for k in ("table", "dataset", "pct", "a", "b", "mean_a", "mean_b", "p",
                               "significant") if not isinstance(comp, dict) or k not in comp]
        if missing:
            raise DataError(f"{path}: comparisons[{i}] lacks {', '.join(missing)}")
        problem = _comparison_problem(comp)
        if problem:
            raise DataError(f"{path}: comparisons[{i}].{problem} (rerun `esnfed ttest`)")
    claims = doc.get("claims", [])  # absent: written before the claims were tested
    if not isinstance(claims, list):
        raise DataError(f"{path}: claims: expected a list of tests, got {quote(claims)} (rerun `esnfed ttest`)")
    for i, record in enumerate(claims):
        problem = claims_report.problem(record)
        if problem:
            raise DataError(f"{path}: claims[{i}].{problem} (rerun `esnfed ttest`)")
    alpha = doc.get("alpha")
    if alpha is not None and not (_number(alpha) and 0 < alpha < 1):
        raise DataError(f"{path}: alpha: expected a number in (0, 1), got {quote(alpha)} (rerun `esnfed ttest`)")
    provenance.check(path, doc, expected or {}, "`esnfed ttest`",
                     top_level={"ttest.variant": "variant", "ttest.alpha": "alpha",
                                "ttest.variance_test": "variance_test"})
    return doc


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _comparison_problem(comp: Mapping[str, Any]) -> str | None:
    """What is wrong with one comparison of ttest.json (its key and value), or None."""
    for key in ("table", "dataset", "pct", "a", "b"):
        if not isinstance(comp[key], str):
            return f"{key}: expected a string, got {quote(comp[key])}"
    for key in ("mean_a", "mean_b", "p", "t"):
        v = comp.get(key)
        if v is not None and not _number(v):
            return f"{key}: expected a finite number or null, got {quote(v)}"
    if comp["p"] is not None and not 0 <= comp["p"] <= 1:
        return f"p: expected a probability in [0, 1], got {quote(comp['p'])}"
    for key in ("n_a", "n_b"):
        v = comp.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            return f"{key}: expected a count >= 0, got {quote(v)}"
    if not isinstance(comp["significant"], bool):
        return f"significant: expected true or false, got {quote(comp['significant'])}"
    return None


def report_date() -> str:
    """Today (UTC), or the date of $SOURCE_DATE_EPOCH for reproducible builds."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch is None:
        return _dt.datetime.now(_dt.timezone.utc).date().isoformat()
    try:
        return _dt.datetime.fromtimestamp(int(epoch), _dt.timezone.utc).date().isoformat()
    except (ValueError, OverflowError, OSError):
        raise ConfigError(f"SOURCE_DATE_EPOCH: expected seconds since 1970, got {quote(epoch)}") from None


def versions() -> str:
    names = ("numpy", "scipy", "matplotlib")
    libs = ", ".join(f"{n} {metadata.version(n)}" for n in names)
    return f"esnfed {__version__}, Python {platform.python_version()}, {libs}"


def _summary(values: Sequence[Any]) -> str:
    distinct = sorted({str(v) for v in values if v is not None})
    return ", ".join(distinct) if distinct else "unknown"


def run_line(sources: Sequence[Any], budgets: Sequence[Any], seeds: Sequence[tuple], counts: Sequence[int],
             files: str = "the assess files") -> str:
    """A header's first line: the data source and budget of the inputs shown, the retrains per
    cell (``counts``) and their seeds (each cell's tuple; ``files`` hold them where they differ)."""
    counts = sorted(set(counts))
    if len(set(seeds)) == 1:
        seed_text = f"seeds {list(seeds[0])}" if seeds[0] else "seeds unknown"
    else:
        seed_text = f"seeds differ per cell: see {files}"
    retrains = "-".join(str(c) for c in (counts[0], counts[-1])) if counts and counts[0] != \
        counts[-1] else (str(counts[0]) if counts else "0")
    return (f"Data source: {_summary(sources)}; budget: {_summary(budgets)}; retrains per cell: "
            f"{retrains} ({seed_text})")


def header_lines(spec: TableSpec | None, inputs: Inputs, ttest_doc: Mapping[str, Any],
                 date: str, scale: comparability.BudgetScale | None = None) -> list[str]:
    """Data source, budget, seeds, test variant, date and versions (and missing inputs); a table
    with a paper column adds, second, whether the run is its paper's protocol (comparability.py)."""
    keys = [(ds, m) for ds, m in required_inputs([spec] if spec else TABLES)]
    docs = spec_docs(spec, inputs)
    seeds = [tuple(d["pcts"][p].get("seeds") or ()) for d in docs for p in PCTS]
    counts = [len(d["pcts"][p]["test_accuracy"]) for d in docs for p in PCTS]
    variant = VARIANT_TEXT[ttest_doc["variant"]]
    pairs = spec.pairs_text() if spec is not None else "none"
    missing = [str(p) for p in inputs.missing if (p.parent.name, p.stem) in keys]
    paper = spec is None or spec.has_published  # a user dataset's generic table has no paper
    comparable = [comparability.notice([d.get("source") for d in docs], [d.get("budget") for d in docs],
                                       scale, spec.datasets, table=spec.id)] if spec is not None and spec.has_published else []
    return [
        run_line([d.get("source") for d in docs], [d.get("budget") for d in docs], seeds, counts),
        *comparable,
        "Cells: mean ± population std over the retrains, ×100, two decimals" + (
            "; 'paper' = the published value with its marks" if paper else ""),
        f"Significance: {variant}, two-sided, p <= {ttest_doc.get('alpha')}, on the pairs "
        f"{'the paper compares' if paper else 'tested'} (proposed vs baseline): {pairs}. **bold** = the best of the tested "
        f"methods, significantly different in every pair it is part of; *italic* = not "
        f"significantly different from the best (the best included); no mark = significantly "
        f"worse than the best, or not tested against it",
        f"Date: {date}; versions: {versions()}",
        "Missing inputs (n/a cells): " + (", ".join(missing) if missing else "none"),
    ]


def spec_docs(spec: TableSpec | None, inputs: Inputs) -> list[dict[str, Any]]:
    """The assess documents found of a table's inputs (every paper table's without one)."""
    return [inputs.docs[k] for k in required_inputs([spec] if spec else TABLES) if k in inputs.docs]


@dataclass(frozen=True)
class ValidationSizes:
    """What the communication table's validation traffic needs besides the assess files: each
    dataset's validation users (V, data/partitions/<dataset>.json) and the λ values a stationary
    retrain tries on them (``lambda_grid``: |readout.lambdas| with retrain.lambda select, 0 with
    frozen, None when params.yaml does not say); for the model selection's total, each share's
    trial records (``selection``, by (dataset, method, pct): selection_traffic.load; a share absent
    or None: unknown)."""

    users: Mapping[str, int] = field(default_factory=dict)
    lambda_grid: int | None = None
    selection: Mapping[tuple[str, str, str], tuple[SelectionTrial, ...] | None] = field(default_factory=dict)


def validation_users(data_dir: str | Path, dataset: str) -> int | None:
    """The number of validation users of data/partitions/<dataset>.json (None without the file or
    its ``validation`` key: the validation traffic is then unknown, n/a)."""
    path = Path(data_dir) / "partitions" / f"{dataset}.json"
    if not path.is_file():
        return None
    doc = read_json(path)
    if not isinstance(doc, dict) or "validation" not in doc:
        return None
    users = doc["validation"]
    if not isinstance(users, list):
        raise DataError(f"{path}: validation must be a list of users, got {quote(users)}; rerun "
                        f"`esnfed partition --dataset {dataset}`")
    return len(users)


def communication_items(inputs: Inputs, datasets: Sequence[str] = DATASETS,
                        user_classes: Mapping[str, int] | None = None,
                        validation: ValidationSizes | None = None) -> list[Communication]:
    """The measured messages of every federated method and share, with the sizes N and C (C of a
    user dataset: ``user_classes``, from params imports.<name>.classes; unknown without it) and
    what the validation traffic needs (``validation``; unknown without it)."""
    validation = validation or ValidationSizes()
    items = []
    for ds in datasets:
        for method in COMMUNICATION_METHODS:
            doc = inputs.docs.get((ds, method))
            if doc is None:
                continue
            for pct in PCTS:
                entry = doc["pcts"][pct]
                comm = entry["communication"]  # a federated method's counts (checked by ttest.load_assess)
                cfg = entry.get("config") or {}
                stream = entry.get("stream_accuracy")
                try:
                    rounds = int(comm["rounds"])
                    contexts = len(stream[0]) if stream else None
                    ip_rounds, readouts = split_rounds(method, rounds, contexts)
                    items.append(Communication(
                        ds, pct, method, int(comm["up_floats"]), int(comm["down_floats"]),
                        int(comm["up_bytes"]), int(comm["down_bytes"]), rounds,
                        int(comm["clients"]),
                        units=opt_int(comm.get("units", cfg.get("units"))),
                        classes=opt_int(comm["classes"] if "classes" in comm else classes_of(ds, user_classes)),
                        ip_rounds=opt_int(comm.get("ip_rounds", ip_rounds)),
                        readouts=opt_int(comm.get("readouts", readouts)),
                        participants=_opt_ints(comm.get("participants")),
                        context_rounds=_opt_ints(comm.get("context_rounds")),
                        readout_bias=comm.get("readout_bias") is True,
                        client_fraction=float(comm.get("client_fraction", 1.0)),
                        ip_senders=_opt_ints(comm.get("ip_senders")),
                        validation_clients=validation.users.get(ds), lambda_grid=validation.lambda_grid,
                        selection=validation.selection.get((ds, method, pct)),
                    ))
                except (KeyError, TypeError, ValueError) as exc:
                    raise DataError(f"{inputs.paths[(ds, method)]}: pcts.{pct}.communication "
                                    f"is malformed ({failure(exc)})") from None
    return items


def validation_sizes(options: ReportParams, inputs: Inputs, data_dir: str | Path,
                     select_dir: str | Path) -> ValidationSizes:
    """What the communication tables' validation traffic needs: each declared dataset's validation
    users (its partition), the retrains' λ grid and the trial records of every federated method's
    shares read (selection_traffic.load; none without ``select_dir``)."""
    users = {ds: n for ds in options.datasets if (n := validation_users(data_dir, ds)) is not None}
    federated = [k for k in inputs.docs if k[1] in COMMUNICATION_METHODS]
    return ValidationSizes(users, options.lambda_grid, selection_traffic.load(select_dir, federated))


def _opt_ints(v: Any) -> tuple[int, ...] | None:
    return None if v is None else tuple(int(i) for i in v)
