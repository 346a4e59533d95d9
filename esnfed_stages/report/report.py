"""The `report` stage: the papers' tables (Markdown + CSV), the communication table, the figures
(PNG + DVC plots data) and reports/metrics/<dataset>-<method>.json (the mean test accuracy per
share, keyed "025" … "100": a few keys per file, so `dvc metrics show` fits a terminal), from the
assess files and reports/ttest.json. The figures are read from the assess documents in report_figures.py,
the published values, the t-tests and each table's header lines in report_inputs.py, and the
``report`` section of params.yaml in report_params.py.

Everything is built in memory first and then written atomically, so a failure leaves no partial report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence


from esnfed_core.communication import Communication, communication_rows
from esnfed_stages.report.cells import Cell, build_cells, hetero_cells, metrics
from esnfed_stages.report.claims import claim_specs
from esnfed_stages.report.table_specs import Published, TableSpec, borrowed_comparisons, required_inputs, table_specs
from esnfed_stages.report.tables import participation_notes
from esnfed_core.vocabulary import DATASETS, PCTS
from esnfed_stages.report import (claims_report, comparability, continual_report, hetero_report, ipfit_report,
                                  privacy_report, privacy_sampling_report, report_index, secagg_report,
                                  selected_report)
from esnfed_stages.data._datasets import classes_of
from esnfed_stages._io import atomic_path, dumps_json, output_lock
from esnfed_stages.report.tables import (
    cells_csv, communication_csv, not_applicable_note, render_agreement, render_communication_markdown,
    render_markdown,
)
from esnfed_stages.report.report_figures import (ACTIVATION_DATASET, SETTINGS, ContextNames,
                                                 activation_contexts_figure, activation_figure_and_plots,
                                                 activation_shares_figure, activation_users_figure,
                                                 context_names, matrix_figure_and_plots,
                                                 shares_figure_and_plot, stream_figure_and_plots)
from esnfed_stages.layout import shares_csv
from esnfed_stages.report.ttest import (ASSESS_DIR, TTEST_PATH, VARIANCE_TEXT, VARIANT_TEXT, Inputs,
                                        check_computed_from, load_inputs)
from esnfed_stages.layout import ALPHA_CSV, DATA_DIR, REPORTS_DIR, SECAGG_CSV
from esnfed_stages.report.report_inputs import (ValidationSizes, communication_items, header_lines, load_published, load_ttest,
                                                report_date, run_line, spec_docs, validation_sizes, versions)
from esnfed_stages.report.report_params import ReportParams


@dataclass
class Report:
    """Every output file as bytes, keyed by its path relative to the reports directory."""

    tables: dict[str, bytes] = field(default_factory=dict)
    figures: dict[str, bytes] = field(default_factory=dict)
    plots: dict[str, bytes] = field(default_factory=dict)
    metrics: dict[str, bytes] = field(default_factory=dict)
    index: bytes = b""  # reports/README.md (report_index.py), made once every other output is
    cells: dict[str, list[Cell]] = field(default_factory=dict)
    missing: list[Path] = field(default_factory=list)


def build(inputs: Inputs, ttest_doc: Mapping[str, Any], published: Published, date: str,
          activation_pct: str = "100", progress: Callable[[str], None] | None = None,
          contexts_pct: str = "25", hetero: "HeteroReport | None" = None, datasets: Sequence[str] = DATASETS,
          continual: Sequence[str] = DATASETS, user_classes: Mapping[str, int] | None = None,
          contexts: Mapping[str, ContextNames] | None = None,
          scale: comparability.BudgetScale | None = None, studies: Sequence[str] | None = None,
          matrix_pct: str = "100", validation: ValidationSizes | None = None,
          protocols: Sequence[TableSpec] = ()) -> Report:
    """Every output in memory; ``contexts``: each dataset's context names (figures and plots);
    ``scale``: the budget's, for the paper tables' headers (comparability.py); ``studies``: params.yaml
    study_datasets (the deep table's; see table_specs). Only what the declared datasets ask for:
    the papers' communication table with one of theirs declared, the heterogeneous table with
    ``hetero``; ``validation``: the communication tables' validation traffic (unknown without it);
    ``protocols``: paper tables under their paper's protocol (protocol_tables.py; their t-tests
    are those the ttest stage ran on the same pairs and scores)."""
    rep = Report(missing=list(inputs.missing))
    contexts = contexts or {}
    specs = [(spec, ttest_doc["comparisons"]) for spec in table_specs(datasets, continual, studies)]
    specs += [(spec, borrowed_comparisons(spec, ttest_doc["comparisons"])) for spec in protocols]
    for spec, comparisons in specs:
        cells = build_cells(spec, inputs.scores, comparisons, published)
        header = header_lines(spec, inputs, ttest_doc, date, scale)
        rep.cells[spec.id] = cells
        md = render_markdown(spec, cells, header)
        if spec.has_published:  # the difference to the published values and the significance pattern
            docs = spec_docs(spec, inputs)
            md += render_agreement(spec, cells, comparability.papers_protocol(
                [d.get("source") for d in docs], [d.get("budget") for d in docs], spec.id))
        rep.tables[f"{spec.id}.md"] = md.encode()
        rep.tables[f"{spec.id}.csv"] = cells_csv(cells).encode()
        if progress:
            progress(f"table {spec.id}")
    if any(ds in DATASETS for ds in datasets):  # the papers' communication table: not for yours alone
        add_communication(rep, inputs, ttest_doc, date, hetero, validation)
    add_user_communication(rep, inputs, ttest_doc, date, datasets, continual, user_classes, hetero, validation)
    add_figures(rep, inputs, datasets, continual, contexts, activation_pct, contexts_pct, matrix_pct, progress)
    add_summaries(rep, inputs, date, datasets, continual, user_classes)
    if hetero is not None:
        add_heterogeneous(rep, hetero, inputs, ttest_doc, date)
        if progress:
            progress("table heterogeneous")
    scores = {**inputs.scores, **(hetero.inputs.scores if hetero is not None else {})}
    rep.metrics = metric_files(metrics(scores))  # heterogeneous methods: their budget's shares
    return rep


def summary_header(inputs: Inputs, keys: Sequence[tuple[str, str]], date: str) -> list[str]:
    """The header of a table summarising the assess files ``keys`` (dataset, method): what was run
    (run_line), the date and versions, and those of them missing."""
    keys = list(dict.fromkeys(keys))  # a row per share: each file once
    docs = [inputs.docs[k] for k in keys if k in inputs.docs]
    entries = [d["pcts"][p] for d in docs for p in PCTS if p in d["pcts"]]
    missing = [str(p) for p in inputs.missing if (p.parent.name, p.stem) in keys]
    return [run_line([d.get("source") for d in docs], [d.get("budget") for d in docs],
                     [tuple(e.get("seeds") or ()) for e in entries], [len(e["test_accuracy"]) for e in entries]),
            f"Date: {date}; versions: {versions()}",
            "Missing inputs (n/a cells): " + (", ".join(missing) if missing else "none")]


def add_summaries(rep: Report, inputs: Inputs, date: str, datasets: Sequence[str], continual: Sequence[str],
                  user_classes: Mapping[str, int] | None = None) -> None:
    """What the papers claim beside their tables (the gap audit): the continual methods' forgetting
    and transfer (continual-metrics of the papers' datasets with contexts, <name>-continual-metrics of
    each of yours) and the IP methods' fit to their target (ip-fit, datasets with activation
    densities: assess.activation_datasets)."""
    shown = [ds for ds in continual if ds in datasets]
    papers = [ds for ds in shown if ds in DATASETS]
    for own, group in ([(None, papers)] if papers else []) + [(ds, [ds]) for ds in shown if ds not in DATASETS]:
        classes = {ds: classes_of(ds, user_classes) for ds in group}
        table = continual_report.rows(inputs, group, classes)
        header = summary_header(inputs, [(r["dataset"], r["method"]) for r in table], date)
        name = continual_report.table_name(own)
        rep.tables[f"{name}.md"] = continual_report.markdown(table, header, classes, own).encode()
        rep.tables[f"{name}.csv"] = continual_report.csv(table).encode()
    table = ipfit_report.rows(inputs, datasets)
    if table:
        header = summary_header(inputs, [(r["dataset"], r["method"]) for r in table], date)
        rep.tables[f"{ipfit_report.TABLE}.md"] = ipfit_report.markdown(table, header).encode()
        rep.tables[f"{ipfit_report.TABLE}.csv"] = ipfit_report.csv(table).encode()


def add_figures(rep: Report, inputs: Inputs, datasets: Sequence[str], continual: Sequence[str],
                contexts: Mapping[str, ContextNames], activation_pct: str = "100", contexts_pct: str = "25",
                matrix_pct: str = "100", progress: Callable[[str], None] | None = None) -> None:
    """The figures of the declared ``datasets`` (those of ``continual`` with the continual methods'
    too) and their DVC plots data (report_figures.py): what dvc-plots/dvc.yaml's plots read; the shares of
    params.yaml ``report`` (ReportParams)."""
    for ds in datasets:  # every declared dataset has the stationary tables
        rep.figures[f"test-accuracy-{ds}.png"], plot = shares_figure_and_plot(inputs, ds)
        rep.plots[shares_csv(ds)] = plot.encode()
        if progress:
            progress(f"figure test-accuracy-{ds}")
    for ds in [d for d in continual if d in datasets]:
        for setting in SETTINGS:
            png, plots = stream_figure_and_plots(inputs, ds, setting, contexts.get(ds))
            rep.figures[f"stream-{ds}-{setting}.png"] = png
            rep.plots.update({k: v.encode() for k, v in plots.items()})
            if progress:
                progress(f"figure stream-{ds}-{setting}")
        png, plots = matrix_figure_and_plots(inputs, ds, matrix_pct, contexts.get(ds))
        rep.figures[f"accuracy-matrix-{ds}.png"] = png
        rep.plots.update({k: v.encode() for k, v in plots.items()})
        if progress:
            progress(f"figure accuracy-matrix-{ds}")
    for setting in SETTINGS if ACTIVATION_DATASET in datasets else ():
        prefix, stationary = SETTINGS[setting]
        names = contexts.get(ACTIVATION_DATASET)
        png, plots = activation_figure_and_plots(inputs, setting, activation_pct, names)
        rep.figures[f"activation-{ACTIVATION_DATASET}-{setting}.png"] = png
        rep.plots.update({k: v.encode() for k, v in plots.items()})
        rep.figures[f"activation-{ACTIVATION_DATASET}-{stationary}-users.png"] = \
            activation_users_figure(inputs, setting, names)
        rep.figures[f"activation-{ACTIVATION_DATASET}-{prefix}-contexts.png"] = \
            activation_contexts_figure(inputs, setting, contexts_pct, names)
        rep.figures[f"activation-{ACTIVATION_DATASET}-{prefix}-shares.png"] = \
            activation_shares_figure(inputs, setting, names)
        if progress:
            progress(f"figures activation-{ACTIVATION_DATASET}-*: {setting}")


@dataclass(frozen=True)
class HeteroReport:
    """The heterogeneous table's inputs: its methods, the α of the align methods, the
    heterogeneity settings as one header line, and the assess files found."""

    methods: tuple[str, ...]
    alphas: tuple[float, ...]
    settings: str
    inputs: Inputs
    datasets: tuple[str, ...] = DATASETS  # params.yaml study_datasets: the table's rows, the figure's panels


def communication_table(dataset: str) -> str:
    """The communication table holding ``dataset``'s rows: the papers' datasets share
    communication.md, a dataset of your own has communication-<name>.md."""
    return "communication.md" if dataset in DATASETS else f"communication-{dataset}.md"


def hetero_communication(hetero: HeteroReport | None, datasets: Sequence[str],
                         user_classes: Mapping[str, int] | None = None) -> tuple[list[Communication], list[str]]:
    """The heterogeneous methods' communication items on those of ``datasets`` they ran on
    (params.yaml study_datasets) and the note on their messages (none where they did not run)."""
    shown = [d for d in datasets if hetero is not None and d in hetero.datasets]
    if not shown:
        return [], []
    return (hetero_report.communication_items(hetero.inputs, hetero.methods, shown, user_classes),
            [hetero_report.COMMUNICATION_NOTE])


def add_communication(rep: Report, inputs: Inputs, ttest_doc: Mapping[str, Any], date: str,
                      hetero: HeteroReport | None, validation: ValidationSizes | None = None) -> None:
    """reports/tables/communication.md/.csv: the measured and analytic messages of the papers'
    datasets' federated methods (and of the heterogeneous ones, with ``hetero``), then the
    validation traffic a deployment would add (``validation``)."""
    hetero_items, hetero_note = hetero_communication(hetero, DATASETS)
    comm = communication_rows(communication_items(inputs, validation=validation) + hetero_items)
    comm_header = header_lines(None, inputs, ttest_doc, date)[:1] + [
        "Measured: the floats and bytes of every message of one retrain (setup broadcast of the "
        "reservoir excluded); per client per round = total / (clients × rounds)",
        "Analytic (PROTOCOL §3, §5; N units, C classes): IncFed up N²+N·C, down N·C; FedAvg N·C "
        "each way; FedIP 2N each way per round, then one IncFed readout; FedCLIP 2N each way per "
        "IP round and an IncFed readout per context (naive, replay) or per IP round (joint re-solves "
        "the readout every round). IP rounds and readouts are split from the ledger's summed round "
        "count; 'match' = analytic totals equal the measured ones",
        *hetero_note,
        *participation_notes(comm),
        *not_applicable_note(comm),
        f"Date: {date}; versions: {versions()}",
    ]
    rep.tables["communication.md"] = render_communication_markdown(comm, comm_header).encode()
    rep.tables["communication.csv"] = communication_csv(comm).encode()


def add_heterogeneous(rep: Report, het: HeteroReport, inputs: Inputs, ttest_doc: Mapping[str, Any],
                      date: str) -> None:
    """reports/tables/heterogeneous.md/.csv, figures/heterogeneous-alpha.png, plots/heterogeneous-alpha.csv."""
    pcts = hetero_report.shares(het.inputs, het.methods)
    cells = hetero_cells(het.inputs.scores, ttest_doc["comparisons"], het.datasets, pcts, het.methods)
    rep.cells["heterogeneous"] = cells
    base = header_lines(hetero_report.run_spec(het.datasets), het.inputs, ttest_doc, date)
    missing = [str(p) for p in het.inputs.missing]
    base[-1] = "Missing inputs (n/a cells): " + (", ".join(missing) if missing else "none")
    md, csv_text = hetero_report.render(cells, het.inputs, het.methods, pcts,
                                        hetero_report.header(base, ttest_doc, het.settings), het.datasets)
    rep.tables["heterogeneous.md"] = md.encode()
    rep.tables["heterogeneous.csv"] = csv_text.encode()
    png, plot = hetero_report.alpha_figure_and_plot(het.inputs, het.alphas, pcts, het.datasets)
    rep.figures["heterogeneous-alpha.png"] = png
    rep.plots[ALPHA_CSV] = plot.encode()


def add_user_communication(rep: Report, inputs: Inputs, ttest_doc: Mapping[str, Any], date: str,
                           datasets: Sequence[str], continual: Sequence[str],
                           user_classes: Mapping[str, int] | None = None,
                           hetero: HeteroReport | None = None,
                           validation: ValidationSizes | None = None) -> None:
    """communication-<name>.md/.csv of each user dataset (with its deep and, in
    ``hetero``, heterogeneous methods where study_datasets lists it): the papers' communication
    table stays as it is whatever else is declared."""
    for ds in datasets:
        if ds in DATASETS:
            continue
        spec = table_specs((ds,), continual)[0]
        hetero_items, hetero_note = hetero_communication(hetero, (ds,), user_classes)
        rows = communication_rows(communication_items(inputs, (ds,), user_classes, validation) + hetero_items)
        header = header_lines(spec, inputs, ttest_doc, date)[:1] + [
            "Measured and analytic floats per message as in communication.md (N units, C classes)",
            *hetero_note,
            *participation_notes(rows),
            *not_applicable_note(rows),
            f"Date: {date}; versions: {versions()}"]
        name = communication_table(ds)
        rep.tables[name] = render_communication_markdown(rows, header, ds).encode()
        rep.tables[name[:-3] + ".csv"] = communication_csv(rows).encode()


def metric_files(means: Mapping[str, Mapping[str, Mapping[str, float]]]) -> dict[str, bytes]:
    """{dataset: {method: {pct: mean}}} -> one file per dataset and method, {"test": {"025": mean, ...}}:
    `dvc metrics show` prints a row per file and a column per key, four shares wide. It sorts the
    columns as strings (dvc.compare.metrics_table), so the shares are zero-padded to three digits:
    test.025 … test.100, not test.100 before test.25."""
    files = {}
    for ds, methods in means.items():
        for method, by_pct in methods.items():
            padded = {pct.zfill(3): mean for pct, mean in by_pct.items()}
            files[f"{ds}-{method}.json"] = dumps_json({"test": padded}).encode()
    return files


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
        if rep.index:
            with atomic_path(out_dir / report_index.INDEX_NAME) as tmp:
                tmp.write_bytes(rep.index)


def add_privacy(rep: Report, privacy_dir: str | Path, date: str, options: ReportParams,
                allow_missing: bool = False) -> None:
    """The privacy table and figure (esnfed_stages/report/privacy_report.py), when the stage ran: a row per
    declared dataset (the papers' first), its document computed with ``options.privacy_record``
    (see privacy_report.load); one missing is an error unless ``allow_missing`` (its rows n/a,
    listed in ``rep.missing`` and the header), as an assess file. The header says what was run as
    every table's does (run_line) and, for the papers' datasets, whether that is the papers'
    protocol (comparability.notice)."""
    docs = privacy_report.load(privacy_dir, options.privacy_record, options.datasets)
    absent = privacy_report.missing(privacy_dir, options.datasets, docs, allow_missing)
    docs, absent_extra = privacy_report.add_extras(privacy_dir, docs, options.privacy_extra,
                                                   options.privacy_record, allow_missing)
    rep.missing += absent_extra
    rep.missing += absent.values()
    facts = privacy_report.run_facts(docs)
    paper = [ds for ds in DATASETS if ds in docs]
    notice = [comparability.notice([docs[ds].get("source") for ds in paper],
                                   [privacy_report.recorded_budget(docs[ds]) for ds in paper],
                                   comparability.budget_scale(options.budget), paper,
                                   elsewhere=privacy_report.published([docs[ds] for ds in paper]))] if paper else []
    run = [run_line(facts["sources"], facts["budgets"], facts["seeds"], facts["counts"],
                    files=f"{privacy_report.PRIVACY_DIR}/<dataset>.json"), *notice]
    rep.tables.update(privacy_report.render(docs, run, f"Date: {date}; versions: {versions()}", absent, absent_extra))
    png = privacy_report.figure(docs)
    if png is not None:
        rep.figures["privacy.png"] = png
    if docs and options.privacy_fractions:  # opt-in privacy.sampling_study: its own table, beside
        study, gone = privacy_sampling_report.load(privacy_dir, list(docs), options.privacy_fractions,
                                                   options.privacy_record, allow_missing)
        rep.missing += gone
        facts = privacy_sampling_report.run_facts(study)
        run = [run_line(facts["sources"], facts["budgets"], facts["seeds"], facts["counts"],
                        files=f"{privacy_report.PRIVACY_DIR}/sampling/<dataset>/<f>.json")]
        rep.tables.update(privacy_sampling_report.render(docs, study, run, f"Date: {date}; versions: {versions()}",
                                                         gone))


def add_secagg(rep: Report, flower_dir: str | Path, budget: str | None = None,
               datasets: Sequence[str] = secagg_report.PIPELINE_DATASETS, allow_missing: bool = False) -> None:
    """The SecAgg+ overhead section of each communication table holding one of
    ``datasets`` (params.yaml study_datasets: the papers' in communication.md, one of your own in
    communication-<name>.md; see communication_table), with that table's datasets' results, and
    secagg-overhead.csv with all of them (esnfed_stages/report/secagg_report.py; "not run" without the
    flower stage's outputs; results of another ``budget`` refused; once the stage ran, a result of
    it missing is an error unless ``allow_missing``: secagg_report.missing)."""
    absent = secagg_report.missing(flower_dir, datasets, allow_missing)
    rep.missing += absent
    by_table: dict[str, list[str]] = {}
    for ds in datasets:
        by_table.setdefault(communication_table(ds), []).append(ds)
    table = secagg_report.rows(secagg_report.load(flower_dir, datasets, budget=budget))
    for name, shown in by_table.items():
        if name in rep.tables:
            mine = [r for r in table if r["dataset"] in shown]
            gone = [p for p in absent if p.parent.name in shown]
            rep.tables[name] += secagg_report.markdown(mine, flower_dir, gone).encode()
    rep.tables[SECAGG_CSV] = secagg_report.csv(table).encode()


def load_selected(select_dir: str | Path, inputs: Inputs, options: ReportParams,
                  allow_missing: bool = False) -> tuple[list[selected_report.Selected], list[Path]]:
    """Every best.json of the tables' methods under ``select_dir`` (selected_report.load), read
    before anything is built: a missing one is an error unless ``allow_missing``."""
    specs = table_specs(options.datasets, options.continual, options.studies)
    return selected_report.load(select_dir, required_inputs(specs), inputs, options.budget, allow_missing)


def add_selected(rep: Report, select_dir: str | Path, loaded: tuple[list[selected_report.Selected], list[Path]],
                 date: str, options: ReportParams) -> None:
    """reports/tables/selected.md/.csv: the selected configuration of every method of the tables
    and share (esnfed_stages/report/selected_report.py; ``loaded``: load_selected's), a missing best.json
    listed in ``rep.missing`` and the header (its row n/a). The papers' datasets in selected, each
    dataset of your own in <name>-selected (so the papers' table stays as it is whatever else is
    declared)."""
    selected, absent = loaded
    rep.missing += absent
    budget = options.budget.name if options.budget is not None else "unknown"
    header = [f"Model selection (PROTOCOL §6) under budget `{budget}`, from "
              f"{Path(select_dir).as_posix()}/<dataset>/<method>/<share>/best.json (random: no hyperparameters); "
              "continual methods: the best IP (CLIP) or FedIP (FedCLIP) configuration of the share with the "
              "budget per context searched; deep methods: their shallow counterpart's units"]
    shown = list(dict.fromkeys(s.dataset for s in selected))
    papers = [ds for ds in shown if ds in DATASETS]
    for own, group in ([(None, papers)] if papers else []) + [(ds, [ds]) for ds in shown if ds not in DATASETS]:
        gone = [p for p in absent if any(p.parts[-4:-3] == (ds,) for ds in group)]
        footer = ["Missing inputs (n/a rows): " + (", ".join(map(str, gone)) if gone else "none"),
                  f"Date: {date}; versions: {versions()}"]
        md, csv_text = selected_report.render([s for s in selected if s.dataset in group], header, options.mu,
                                              options.eta, options.retrain_lambda, footer, own)
        name = selected_report.table_name(own)
        rep.tables[f"{name}.md"] = md.encode()
        rep.tables[f"{name}.csv"] = csv_text.encode()


def add_claims(rep: Report, inputs: Inputs, ttest_doc: Mapping[str, Any], date: str, options: ReportParams) -> None:
    """reports/tables/claims.md/.csv: the papers' claims across their tables as reports/ttest.json
    tested them (claims_report.py), when the tables they compare are rendered; a ttest.json
    without claims (written before they were tested) says to rerun `esnfed ttest`."""
    specs = table_specs(options.datasets, options.continual, options.studies)
    claims = claim_specs(specs)
    if not claims:
        return
    keys = set(required_inputs([s for s in specs if s.id in {t for c in claims for t in c.tables}]))
    docs = [d for k, d in inputs.docs.items() if k in keys]
    shown = [ds for ds in DATASETS if any(ds in c.datasets for c in claims)]
    recorded = ttest_doc.get("variance_test")
    header = [
        run_line([d.get("source") for d in docs], [d.get("budget") for d in docs],
                 [tuple(d["pcts"][p].get("seeds") or ()) for d in docs for p in PCTS],
                 [len(d["pcts"][p]["test_accuracy"]) for d in docs for p in PCTS]),
        comparability.notice([d.get("source") for d in docs], [d.get("budget") for d in docs],
                             comparability.budget_scale(options.budget), shown,
                             elsewhere="The claims are the papers' statements about their own runs, tested here on "
                             "this run's retrains"),
        f"Mean claims: {VARIANT_TEXT[ttest_doc['variant']]}, two-sided, p <= {ttest_doc.get('alpha')} (as the "
        "tables); variance claims: " + (f"{VARIANCE_TEXT.get(recorded, recorded)}, two-sided, p <= "
                                        f"{ttest_doc.get('alpha')}" if recorded else "not tested")
        + ", on the retrains' test scores (population std shown); fewer than 3 retrains: untested",
        "Means and stds: ×100, as the tables; a = the method the claim is about, b = the one it is set against",
        f"Date: {date}; versions: {versions()}",
    ]
    if "claims" not in ttest_doc:
        header.append("reports/ttest.json holds no claims (written before they were tested): rerun `esnfed ttest`")
    md, csv_text = claims_report.render(ttest_doc.get("claims", []), claims, header)
    rep.tables[f"{claims_report.NAME}.md"] = md.encode()
    rep.tables[f"{claims_report.NAME}.csv"] = csv_text.encode()


def index_notice(inputs: Inputs, options: ReportParams) -> str:
    """The index's line on comparability (comparability.index_notice) over the assess files of the
    paper tables (the protocol tables included); empty when no table has a paper column."""
    specs = [s for s in table_specs(options.datasets, options.continual) if s.has_published]
    specs += list(options.protocols)
    if not specs:
        return ""
    keys = set(required_inputs(specs))
    docs = [d for k, d in inputs.docs.items() if k in keys]
    shown = [ds for ds in DATASETS if any(ds in s.datasets for s in specs)]
    return comparability.index_notice([d.get("source") for d in docs], [d.get("budget") for d in docs],
                                      comparability.budget_scale(options.budget), [s.id for s in specs], shown)


def run(options: ReportParams, *, assess_dir: str | Path = ASSESS_DIR,
        ttest_path: str | Path = TTEST_PATH, out_dir: str | Path = REPORTS_DIR,
        allow_missing: bool = False, progress: Callable[[str], None] | None = None,
        data_dir: str | Path = DATA_DIR,
        privacy_dir: str | Path = privacy_report.PRIVACY_DIR,
        select_dir: str | Path = selected_report.SELECT_DIR,
        flower_dir: str | Path = secagg_report.FLOWER_DIR) -> Report:
    """Build every report output in memory, then write them; returns what was written."""
    date = report_date()
    specs = table_specs(options.datasets, options.continual, options.studies)
    inputs = load_inputs(assess_dir, required_inputs(specs + options.protocols), allow_missing, budget=options.budget)
    ttest_doc = load_ttest(ttest_path, options.ttest_record)
    hetero = None
    if options.hetero_methods and options.studies:
        hetero = HeteroReport(options.hetero_methods, options.alphas, options.hetero_settings,
                              hetero_report.load(assess_dir, options.hetero_methods, options.budget,
                                                 options.hetero_record, options.studies), options.studies)
    check_computed_from(ttest_path, ttest_doc, inputs, *([hetero.inputs] if hetero else []))
    # the default folder absent: no selection to show (the CLI refuses a folder named but absent)
    selected = load_selected(select_dir, inputs, options, allow_missing) if Path(select_dir).is_dir() else None
    rep = build(inputs, ttest_doc, load_published(), date, options.activation_pct, progress,
                options.contexts_pct, hetero, options.datasets, options.continual, options.user_classes,
                {ds: context_names(data_dir, ds) for ds in options.datasets},
                comparability.budget_scale(options.budget), options.studies, options.matrix_pct,
                validation_sizes(options, inputs, data_dir, select_dir),
                options.protocols)
    add_claims(rep, inputs, ttest_doc, date, options)
    if selected is not None:
        add_selected(rep, select_dir, selected, date, options)
    add_privacy(rep, privacy_dir, date, options, allow_missing)
    if options.studies:  # the flower stages run on study_datasets
        add_secagg(rep, flower_dir, None if options.budget is None else options.budget.name, options.studies,
                   allow_missing)
    rep.index = report_index.render(rep.tables, rep.figures, rep.plots, rep.metrics, date, versions(),
                                    notice=index_notice(inputs, options),
                                    activation_pct=options.activation_pct, matrix_pct=options.matrix_pct).encode()
    write(rep, out_dir)
    return rep
