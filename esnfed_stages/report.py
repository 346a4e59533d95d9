"""The `report` stage: the papers' tables (Markdown + CSV), the communication table, the figures
(PNG + DVC plots data) and reports/metrics/<dataset>-<method>.json (the mean test accuracy per
share: a few keys per file, so `dvc metrics show` fits a terminal), from the assess files and
reports/ttest.json.

Everything is built in memory first and then written atomically, so a failure leaves no partial report.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
from dataclasses import dataclass, field
from importlib import metadata, resources
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import yaml

from esnfed_core import __version__
from esnfed_core.errors import ConfigError, DataError
from esnfed_core.tables import (
    COMMUNICATION_METHODS, TABLES, Cell, Communication, Published, TableSpec, build_cells,
    communication_rows, metrics, parse_published, required_inputs, split_rounds, table_specs,
)
from esnfed_core.vocabulary import DATASETS, PCTS, STRATEGIES, VARIANTS
from esnfed_stages import figures, privacy_report
from esnfed_stages._datasets import continual_declared, declared, n_classes
from esnfed_stages._io import atomic_path, dumps_json, output_lock, read_json, write_bytes
from esnfed_stages.sections import section
from esnfed_stages.tables import (
    cells_csv, communication_csv, render_communication_markdown, render_markdown, to_csv,
)
from esnfed_stages.ttest import ASSESS_DIR, TTEST_PATH, Inputs, load_inputs

REPORTS_DIR = Path("reports")
# Continual method prefix and the stationary IP method of each setting (figures).
SETTINGS = {"federated": ("fedclip", "fedip"), "centralized": ("clip", "ip")}
_PRETTY = {"fedclip": "FedCLIP", "clip": "CLIP"}
VARIANT_TEXT = {"welch": "Welch t-test (scipy.stats.ttest_ind, equal_var=False)",
                "student": "Student t-test (scipy.stats.ttest_ind, pooled variance)",
                "paired": "paired t-test (scipy.stats.ttest_rel; retrain k of both methods shares "
                          "its seed)"}
ACTIVATION_DATASET = "wesad"
ACTIVATION_CONTEXTS = 5  # WESAD contexts (PROTOCOL §5): fixed columns for the DVC plots


def load_published() -> Published:
    """The published values shipped with the package (never ../shared at run time)."""
    text = resources.files("esnfed_stages").joinpath("paper_results.yaml").read_text("utf-8")
    return parse_published(yaml.safe_load(text), "esnfed_stages/paper_results.yaml")


def load_ttest(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    doc = read_json(path)
    if not isinstance(doc, dict) or doc.get("variant") not in VARIANTS \
            or not isinstance(doc.get("comparisons"), list):
        raise DataError(f"{path}: expected {{variant: welch|student, alpha, comparisons: [...]}}"
                        " (rerun `esnfed ttest`)")
    for i, comp in enumerate(doc["comparisons"]):
        missing = [k for k in ("table", "dataset", "pct", "a", "b", "mean_a", "mean_b", "p",
                               "significant") if not isinstance(comp, dict) or k not in comp]
        if missing:
            raise DataError(f"{path}: comparisons[{i}] lacks {', '.join(missing)}")
    return doc


def report_date() -> str:
    """Today (UTC), or the date of $SOURCE_DATE_EPOCH for reproducible builds."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch is None:
        return _dt.datetime.now(_dt.timezone.utc).date().isoformat()
    try:
        return _dt.datetime.fromtimestamp(int(epoch), _dt.timezone.utc).date().isoformat()
    except (ValueError, OverflowError, OSError):
        raise ConfigError(f"SOURCE_DATE_EPOCH: expected seconds since 1970, got {epoch!r}") from None


def versions() -> str:
    names = ("numpy", "scipy", "matplotlib")
    libs = ", ".join(f"{n} {metadata.version(n)}" for n in names)
    return f"esnfed {__version__}, Python {platform.python_version()}, {libs}"


def _summary(values: Sequence[Any]) -> str:
    distinct = sorted({str(v) for v in values if v is not None})
    return ", ".join(distinct) if distinct else "unknown"


def header_lines(spec: TableSpec | None, inputs: Inputs, ttest_doc: Mapping[str, Any],
                 date: str) -> list[str]:
    """Data source, budget, seeds, test variant, date and versions (and missing inputs)."""
    keys = [(ds, m) for ds, m in required_inputs([spec] if spec else TABLES)]
    docs = [inputs.docs[k] for k in keys if k in inputs.docs]
    seeds = [tuple(d["pcts"][p].get("seeds") or ()) for d in docs for p in PCTS]
    counts = sorted({len(d["pcts"][p]["test_accuracy"]) for d in docs for p in PCTS})
    if len(set(seeds)) == 1:
        seed_text = f"seeds {list(seeds[0])}" if seeds[0] else "seeds unknown"
    else:
        seed_text = "seeds differ per cell: see the assess files"
    retrains = "-".join(str(c) for c in (counts[0], counts[-1])) if counts and counts[0] != \
        counts[-1] else (str(counts[0]) if counts else "0")
    variant = VARIANT_TEXT[ttest_doc["variant"]]
    pairs = spec.pairs_text() if spec is not None else "none"
    missing = [str(p) for p in inputs.missing if (p.parent.name, p.stem) in keys]
    paper = spec is None or spec.has_published  # a user dataset's generic table has no paper
    return [
        f"Data source: {_summary([d.get('source') for d in docs])}; budget: "
        f"{_summary([d.get('budget') for d in docs])}; retrains per cell: {retrains} ({seed_text})",
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


def communication_items(inputs: Inputs, datasets: Sequence[str] = DATASETS,
                        user_classes: Mapping[str, int] | None = None) -> list[Communication]:
    """The measured messages of every federated method and share, with the sizes N and C (C of a
    user dataset: ``user_classes``, from params imports.<name>.classes; unknown without it)."""
    items = []
    for ds in datasets:
        for method in COMMUNICATION_METHODS:
            doc = inputs.docs.get((ds, method))
            if doc is None:
                continue
            for pct in PCTS:
                entry = doc["pcts"][pct]
                comm = entry.get("communication")
                if not isinstance(comm, dict):
                    continue
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
                        units=_opt_int(comm.get("units", cfg.get("units"))),
                        classes=_opt_int(comm["classes"] if "classes" in comm else
                                         n_classes(ds) if ds in DATASETS else (user_classes or {}).get(ds)),
                        ip_rounds=_opt_int(comm.get("ip_rounds", ip_rounds)),
                        readouts=_opt_int(comm.get("readouts", readouts)),
                    ))
                except (KeyError, TypeError, ValueError) as exc:
                    raise DataError(f"{inputs.paths[(ds, method)]}: pcts.{pct}.communication "
                                    f"is malformed ({exc!r})") from None
    return items


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


def _stream(inputs: Inputs, ds: str, method: str, pct: str) -> np.ndarray | None:
    doc = inputs.docs.get((ds, method))
    if doc is None or not doc["pcts"][pct].get("stream_accuracy"):
        return None
    try:
        return np.asarray(doc["pcts"][pct]["stream_accuracy"], dtype=np.float64)
    except ValueError:
        raise DataError(f"{inputs.paths[(ds, method)]}: pcts.{pct}.stream_accuracy must be "
                        "retrains × contexts") from None


def stream_figure_and_plot(inputs: Inputs, ds: str, setting: str) -> tuple[bytes, str]:
    """PNG of stream accuracy for one dataset × setting, and its DVC plots CSV (means, percent)."""
    prefix = SETTINGS[setting][0]
    panels = [(pct, {s: _stream(inputs, ds, f"{prefix}-{s}", pct) for s in STRATEGIES})
              for pct in PCTS]
    n_ctx = max((a.shape[1] for _, lines in panels for a in lines.values() if a is not None),
                default=0)
    png = figures.stream_accuracy(
        f"{ds.upper()} {setting}: stream accuracy after each context ({_PRETTY[prefix]})", panels)
    columns = ["context"] + [f"{s}_{pct}" for pct in PCTS for s in STRATEGIES]
    rows = []
    for t in range(n_ctx):
        row: dict[str, Any] = {"context": t + 1}
        for pct, lines in panels:
            for s, acc in lines.items():
                if acc is not None and t < acc.shape[1]:
                    row[f"{s}_{pct}"] = round(float(acc[:, t].mean() * 100.0), 6)
        rows.append(row)
    return png, to_csv(rows, columns)


@dataclass(frozen=True)
class _Activation:
    """The activation densities of one assess file and share (see assess.py), as arrays."""

    edges: np.ndarray
    users: list[str]
    pooled: np.ndarray  # (retrains, models, contexts, bins)
    per_user: np.ndarray  # (retrains, models, users, contexts, bins)


def _activation(inputs: Inputs, method: str, pct: str) -> _Activation | None:
    doc = inputs.docs.get((ACTIVATION_DATASET, method))
    act = doc["pcts"][pct].get("activation") if doc else None
    if not act:
        return None
    where = f"{inputs.paths[(ACTIVATION_DATASET, method)]}: pcts.{pct}.activation"
    try:
        edges = np.asarray(act["edges"], dtype=np.float64)
        pooled = np.asarray(act["density"], dtype=np.float64)  # null (no window) -> NaN
        per_user = np.asarray(act["user_density"], dtype=np.float64)
        users = [str(u) for u in act["users"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{where}: expected edges, users, density [retrain][model][context][bin] "
                        f"and user_density [retrain][model][user][context][bin] ({exc!r}); rerun "
                        "`esnfed assess`") from None
    bins = edges.size - 1
    if pooled.ndim != 4 or pooled.shape[-1] != bins or per_user.ndim != 5 \
            or per_user.shape[-1] != bins or per_user.shape[2] != len(users) \
            or per_user.shape[:2] != pooled.shape[:2] or per_user.shape[3] != pooled.shape[2]:
        raise DataError(f"{where}: density {pooled.shape} / user_density {per_user.shape} do not fit "
                        f"{edges.size} edges and {len(users)} users")
    return _Activation(edges, users, pooled, per_user)


def _spread(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and population std over the first axis (retrains)."""
    return values.mean(axis=0), values.std(axis=0)


def _context_lines(dens: np.ndarray) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """A line per context from (retrains, contexts, bins)."""
    return [(f"context {t}", *_spread(dens[:, t])) for t in range(dens.shape[1])]


def activation_figure_and_plots(inputs: Inputs, setting: str, pct: str
                                ) -> tuple[bytes, dict[str, str]]:
    """The pooled figure: one panel per method, the final reservoir's density per context on the
    test users together (mean ± std over retrains), and one DVC plots CSV of the means per method."""
    prefix, stationary = SETTINGS[setting]
    methods = [stationary] + [f"{prefix}-{s}" for s in STRATEGIES]
    cells, plots, edges = [], {}, None
    columns = ["value"] + [f"context{t}" for t in range(ACTIVATION_CONTEXTS)]
    for m in methods:
        act = _activation(inputs, m, pct)
        if act is None:
            cells.append(None)
            continue
        edges = act.edges
        lines = _context_lines(act.pooled[:, -1])
        cells.append(lines)
        centres = (edges[:-1] + edges[1:]) / 2
        rows = [{"value": round(float(c), 6),
                 **{f"context{t}": round(float(mean[i]), 6) for t, (_, mean, _) in enumerate(lines)}}
                for i, c in enumerate(centres)]
        plots[f"activation-{ACTIVATION_DATASET}-{m}.csv"] = to_csv(rows, columns)
    png = figures.density_grid(
        f"{ACTIVATION_DATASET.upper()} {setting}: activation density per context of the trained "
        f"reservoir (test users pooled, {pct}% training users; mean ± std over retrains)",
        edges, [""], methods, [cells])
    return png, plots


def activation_users_figure(inputs: Inputs, setting: str) -> bytes:
    """The papers' Fig. 3: one panel per test user (columns) and training share (rows), the
    trained stationary IP reservoir's density per context, mean ± std over retrains."""
    stationary = SETTINGS[setting][1]
    acts = {pct: _activation(inputs, stationary, pct) for pct in PCTS}
    users = next((a.users for a in acts.values() if a is not None), [])
    edges = next((a.edges for a in acts.values() if a is not None), None)
    cells = []
    for pct in PCTS:
        a = acts[pct]
        cells.append([None if a is None or u not in a.users else
                      _context_lines(a.per_user[:, -1, a.users.index(u)]) for u in users] or [None])
    return figures.density_grid(
        f"{ACTIVATION_DATASET.upper()} {setting}: activation density on each test user "
        f"({stationary}; rows: training users; mean ± std over retrains)", edges,
        [f"{pct}%" for pct in PCTS], [f"test user {u}" for u in users] or ["test users"], cells)


def activation_contexts_figure(inputs: Inputs, setting: str, pct: str) -> bytes:
    """The papers' Fig. 5 (right): the continual reservoir after each context (lines), on the test
    data of each context (columns), one row per strategy; test users pooled, mean ± std."""
    prefix = SETTINGS[setting][0]
    acts = {s: _activation(inputs, f"{prefix}-{s}", pct) for s in STRATEGIES}
    n_ctx = max((a.pooled.shape[2] for a in acts.values() if a is not None), default=1)
    edges = next((a.edges for a in acts.values() if a is not None), None)
    cells = []
    for s in STRATEGIES:
        a = acts[s]
        if a is None:
            cells.append([None] * n_ctx)
            continue
        cells.append([[(f"after context {i}", *_spread(a.pooled[:, i, j]))
                       for i in range(a.pooled.shape[1])] for j in range(a.pooled.shape[2])])
    return figures.density_grid(
        f"{ACTIVATION_DATASET.upper()} {setting}: activation density after each context "
        f"({_PRETTY[prefix]}, {pct}% training users; columns: test data of each context)", edges,
        list(STRATEGIES), [f"data of context {j}" for j in range(n_ctx)], cells)


def activation_shares_figure(inputs: Inputs, setting: str) -> bytes:
    """The papers' Fig. 5 (left): the final continual reservoir on the last context's test data,
    a line per training share, one panel per strategy; mean ± std over retrains."""
    prefix = SETTINGS[setting][0]
    cells, edges = [], None
    for s in STRATEGIES:
        lines = []
        for pct in PCTS:
            a = _activation(inputs, f"{prefix}-{s}", pct)
            if a is not None:
                edges = a.edges
                lines.append((f"{pct}% training users", *_spread(a.pooled[:, -1, -1])))
        cells.append(lines or None)
    return figures.density_grid(
        f"{ACTIVATION_DATASET.upper()} {setting}: activation density on the last context "
        f"({_PRETTY[prefix]}, final reservoir; mean ± std over retrains)", edges, [""],
        list(STRATEGIES), [cells])


@dataclass
class Report:
    """Every output file as bytes, keyed by its path relative to the reports directory."""

    tables: dict[str, bytes] = field(default_factory=dict)
    figures: dict[str, bytes] = field(default_factory=dict)
    plots: dict[str, bytes] = field(default_factory=dict)
    metrics: dict[str, bytes] = field(default_factory=dict)
    cells: dict[str, list[Cell]] = field(default_factory=dict)
    missing: list[Path] = field(default_factory=list)


def build(inputs: Inputs, ttest_doc: Mapping[str, Any], published: Published, date: str,
          activation_pct: str = "100", progress: Callable[[str], None] | None = None,
          contexts_pct: str = "25", datasets: Sequence[str] = DATASETS,
          continual: Sequence[str] = DATASETS, user_classes: Mapping[str, int] | None = None) -> Report:
    rep = Report(missing=list(inputs.missing))
    for spec in table_specs(datasets, continual):
        cells = build_cells(spec, inputs.scores, ttest_doc["comparisons"], published)
        header = header_lines(spec, inputs, ttest_doc, date)
        rep.cells[spec.id] = cells
        rep.tables[f"{spec.id}.md"] = render_markdown(spec, cells, header).encode()
        rep.tables[f"{spec.id}.csv"] = cells_csv(cells).encode()
        if progress:
            progress(f"table {spec.id}")
    comm = communication_rows(communication_items(inputs))
    comm_header = header_lines(None, inputs, ttest_doc, date)[:1] + [
        "Measured: the floats and bytes of every message of one retrain (setup broadcast of the "
        "reservoir excluded); per client per round = total / (clients × rounds)",
        "Analytic (PROTOCOL §3, §5; N units, C classes): IncFed up N²+N·C, down N·C; FedAvg N·C "
        "each way; FedIP 2N each way per round, then one IncFed readout; FedCLIP 2N each way per "
        "IP round and an IncFed readout per context (naive, replay) or per IP round (joint re-solves "
        "the readout every round). IP rounds and readouts are split from the ledger's summed round "
        "count; 'match' = analytic totals equal the measured ones",
        f"Date: {date}; versions: {versions()}",
    ]
    rep.tables["communication.md"] = render_communication_markdown(comm, comm_header).encode()
    rep.tables["communication.csv"] = communication_csv(comm).encode()
    add_user_communication(rep, inputs, ttest_doc, date, datasets, continual, user_classes)
    for ds in [d for d in continual if d in datasets]:
        for setting in SETTINGS:
            png, csv_text = stream_figure_and_plot(inputs, ds, setting)
            rep.figures[f"stream-{ds}-{setting}.png"] = png
            rep.plots[f"stream-{ds}-{setting}.csv"] = csv_text.encode()
            if progress:
                progress(f"figure stream-{ds}-{setting}")
    for setting in SETTINGS if ACTIVATION_DATASET in datasets else ():
        prefix, stationary = SETTINGS[setting]
        png, plots = activation_figure_and_plots(inputs, setting, activation_pct)
        rep.figures[f"activation-{ACTIVATION_DATASET}-{setting}.png"] = png
        rep.plots.update({k: v.encode() for k, v in plots.items()})
        rep.figures[f"activation-{ACTIVATION_DATASET}-{stationary}-users.png"] = \
            activation_users_figure(inputs, setting)
        rep.figures[f"activation-{ACTIVATION_DATASET}-{prefix}-contexts.png"] = \
            activation_contexts_figure(inputs, setting, contexts_pct)
        rep.figures[f"activation-{ACTIVATION_DATASET}-{prefix}-shares.png"] = \
            activation_shares_figure(inputs, setting)
        if progress:
            progress(f"figures activation-{ACTIVATION_DATASET}-*: {setting}")
    rep.metrics = metric_files(metrics(inputs.scores))
    return rep


def add_user_communication(rep: Report, inputs: Inputs, ttest_doc: Mapping[str, Any], date: str,
                           datasets: Sequence[str], continual: Sequence[str],
                           user_classes: Mapping[str, int] | None = None) -> None:
    """communication-<name>.md/.csv of each user dataset (issue 16): the papers' communication
    table stays as it is whatever else is declared."""
    for ds in datasets:
        if ds in DATASETS:
            continue
        spec = table_specs((ds,), continual)[0]
        rows = communication_rows(communication_items(inputs, (ds,), user_classes))
        header = header_lines(spec, inputs, ttest_doc, date)[:1] + [
            "Measured and analytic floats per message as in communication.md (N units, C classes)",
            f"Date: {date}; versions: {versions()}"]
        rep.tables[f"communication-{ds}.md"] = render_communication_markdown(rows, header).encode()
        rep.tables[f"communication-{ds}.csv"] = communication_csv(rows).encode()


def metric_files(means: Mapping[str, Mapping[str, Mapping[str, float]]]) -> dict[str, bytes]:
    """{dataset: {method: {pct: mean}}} -> one file per dataset and method, {"test": {pct: mean}}:
    `dvc metrics show` prints a row per file and a column per key, four shares wide."""
    return {f"{ds}-{method}.json": dumps_json({"test": by_pct}).encode()
            for ds, methods in means.items() for method, by_pct in methods.items()}


def _write_dir(path: Path, files: Mapping[str, bytes]) -> None:
    with atomic_path(path) as tmp:
        tmp.mkdir()
        for name, data in sorted(files.items()):
            (tmp / name).write_bytes(data)


def write(rep: Report, out_dir: str | Path = REPORTS_DIR) -> None:
    out_dir = Path(out_dir)
    with output_lock(out_dir):  # two reports at once would mix their tables, figures and metrics
        _write_dir(out_dir / "tables", rep.tables)
        _write_dir(out_dir / "figures", rep.figures)
        _write_dir(out_dir / "plots", rep.plots)
        _write_dir(out_dir / "metrics", rep.metrics)


def add_privacy(rep: Report, privacy_dir: str | Path, date: str) -> None:
    """The privacy table and figure (esnfed_stages/privacy_report.py), when the stage ran."""
    docs = privacy_report.load(privacy_dir)
    rep.tables.update(privacy_report.render(docs, date))
    png = privacy_report.figure(docs)
    if png is not None:
        rep.figures["privacy.png"] = png


def _share(params: Mapping[str, Any], key: str, default: str | None = None) -> str:
    report = params.get("report") if isinstance(params, Mapping) else None
    if default is not None and isinstance(report, Mapping) and key.split(".")[1] not in report:
        return default
    value = str(section(params, key))
    if value not in PCTS:
        raise ConfigError(f"params.yaml: {key} must be one of {', '.join(PCTS)}, got {value!r}")
    return value


@dataclass(frozen=True)
class ReportParams:
    """params.yaml ``report``, checked: the shares the activation and per-context figures show."""

    activation_pct: str
    contexts_pct: str = "25"
    datasets: tuple[str, ...] = DATASETS  # params.yaml datasets / continual_datasets (issue 16)
    continual: tuple[str, ...] = DATASETS
    user_classes: Mapping[str, int] = field(default_factory=dict)  # imports.<name>.classes counts


def report_params(params: Mapping[str, Any]) -> ReportParams:
    """The ``report`` section of the loaded params."""
    return ReportParams(_share(params, "report.activation_pct"),
                        _share(params, "report.contexts_pct", default="25"),
                        declared(params), continual_declared(params),
                        {name: len(v["classes"]) for name, v in (params.get("imports") or {}).items()
                         if isinstance(v, Mapping) and v.get("classes")})


def run(options: ReportParams, *, assess_dir: str | Path = ASSESS_DIR,
        ttest_path: str | Path = TTEST_PATH, out_dir: str | Path = REPORTS_DIR,
        allow_missing: bool = False, progress: Callable[[str], None] | None = None,
        privacy_dir: str | Path = privacy_report.PRIVACY_DIR) -> Report:
    """Build every report output in memory, then write them; returns what was written."""
    date = report_date()
    inputs = load_inputs(assess_dir, required_inputs(table_specs(options.datasets, options.continual)),
                         allow_missing)
    ttest_doc = load_ttest(ttest_path)
    rep = build(inputs, ttest_doc, load_published(), date, options.activation_pct, progress,
                options.contexts_pct, options.datasets, options.continual, options.user_classes)
    add_privacy(rep, privacy_dir, date)
    write(rep, out_dir)
    return rep
