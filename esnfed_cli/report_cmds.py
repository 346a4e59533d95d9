"""`esnfed ttest` and `esnfed report`: significance tests between the compared methods, and the
papers' tables, communication table, figures and metrics."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn
from rich.table import Table

from esnfed_cli._common import console, folder_if_named, handle_errors, in_range, progress_bar
from esnfed_cli.app import app
from esnfed_core.stats_names import VarianceTest
from esnfed_core.vocabulary import DATASETS, PCTS, Variant
from esnfed_stages import layout
from esnfed_stages.layout import FLOWER_DIR, PRIVACY_DIR, SELECT_DIR


ParamsOpt = Annotated[Path, typer.Option("--params", help="The params file to read: ttest.* (variant, alpha, "
                                         "variance_test); "
                                         "datasets, continual_datasets and study_datasets (the tables tested); "
                                         "heterogeneity.* (the heterogeneous table's methods and α; its assess "
                                         "files must be of these settings); budget, budgets.<budget> and seed "
                                         "(every assess file must be of this budget).")]
ReportParamsOpt = Annotated[Path, typer.Option("--params", help="The params file to read: report.* (the shares "
                                               "of the activation and per-context figures; esann_protocol, "
                                               "ijcnn_protocol: the opt-in esann-protocol and "
                                               "ijcnn-protocol-wesad/-hhar tables); ttest.* "
                                               "(reports/ttest.json must be of them); datasets, "
                                               "continual_datasets and study_datasets (the tables and datasets "
                                               "shown, the flower results read); heterogeneity.* (the "
                                               "heterogeneous table; its assess files must be of it); privacy.* "
                                               "(runs/privacy must be of it); budget, budgets.<budget> and seed "
                                               "(every input must be of this budget); imports.<name>.classes "
                                               "(the communication table's class count of your own dataset); "
                                               "preprocess.<name>.base and preprocess.<name>.* (a protocol "
                                               "variant's base and, in the protocol tables, its settings); "
                                               "plasticity.mu, plasticity.eta and retrain.lambda (the selected-"
                                               "hyperparameters table); readout.lambdas (the λ values a retrain "
                                               "scores on the validation users: the communication table's "
                                               "validation traffic).")]
AssessDirOpt = Annotated[Path, typer.Option(
    "--assess-dir", help="Directory of the assess stage's outputs, <dir>/<dataset>/<method>.json.")]
AllowMissingOpt = Annotated[bool, typer.Option(
    "--allow-missing", help="Tolerate assess files not written yet: their cells show n/a and the "
    "headers list them. Without it a missing file is an error naming it.")]


def _progress() -> Progress:
    return progress_bar(TextColumn("[bold]{task.description}"), BarColumn(),
                        TextColumn("{task.completed}/{task.total}"))


@app.command()
@handle_errors
def ttest(
    variant: Annotated[Optional[Variant], typer.Option(
        "--variant", help="t-test variant: welch (unequal variances), student (pooled "
        "variance) or paired (retrain k against retrain k). Default: params.yaml ttest.variant (the "
        "report refuses a ttest.json of another).", case_sensitive=False)] = None,
    alpha: Annotated[Optional[float], typer.Option(
        "--alpha", callback=in_range(0.0, 1.0, low_open=True, high_open=True), help="Significance level in (0, 1): p <= alpha is significant. "
        "Default: params.yaml ttest.alpha (the report refuses a ttest.json of another).")] = None,
    variance_test: Annotated[Optional[VarianceTest], typer.Option(
        "--variance-test", help="Test of equal variances of the papers' variance claims: brown-forsythe "
        "(median-centred) or levene (mean-centred). Default: params.yaml ttest.variance_test (the report "
        "refuses a ttest.json of another).", case_sensitive=False)] = None,
    params: ParamsOpt = Path("params.yaml"),
    assess_dir: AssessDirOpt = layout.ASSESS_DIR,
    out: Annotated[Path, typer.Option("--out", help="Where to write the tests (JSON).")] =
    layout.TTEST_PATH,
    allow_missing: AllowMissingOpt = False,
) -> None:
    """Two-sided t-tests between the methods each paper table compares -> reports/ttest.json.

    Per table, dataset, share and column, each pair the table's paper compares is tested (the
    proposed method against each baseline). The report marks bold (the best, significant in every
    test it is part of) and italic (otherwise the best and every method not significantly
    different from it). The papers' claims across tables are tested too: federated against
    centralised with the same t-test, the spread of the retrains with the variance test.
    """
    from esnfed_stages.report import ttest as ttest_stage
    from esnfed_stages.params.load import load_params

    options = ttest_stage.ttest_params(load_params(params), variant.value if variant else None, alpha,
                                       variance_test.value if variance_test else None)
    with _progress() as bar:
        task = bar.add_task("t-tests", total=len(options.tables))
        doc = ttest_stage.run(options, assess_dir=assess_dir, out=out, allow_missing=allow_missing,
                              progress=lambda _: bar.advance(task))
    summary = Table(title=f"t-tests ({doc['variant']}, alpha={doc['alpha']}) -> {escape(str(out))}")
    for col in ("table", "comparisons", "significant", "untestable"):
        summary.add_column(col, justify="left" if col == "table" else "right")
    for spec in options.tables:
        comps = [c for c in doc["comparisons"] if c["table"] == spec.id]
        summary.add_row(spec.id, str(len(comps)), str(sum(c["significant"] for c in comps)),
                        str(sum(c["p"] is None for c in comps)))
    console.print(summary)
    if doc["claims"]:
        console.print(f"claims across tables: {len(doc['claims'])} tests ({doc['variant']} t-test, "
                      f"{doc['variance_test']} variance test), {sum(c['significant'] for c in doc['claims'])} "
                      "significant", highlight=False)
    if doc["missing"]:
        console.print(f"[yellow]missing inputs ({len(doc['missing'])}):[/] "
                      + escape(", ".join(doc["missing"])), highlight=False)


@app.command()
@handle_errors
def report(
    params: ReportParamsOpt = Path("params.yaml"),
    assess_dir: AssessDirOpt = layout.ASSESS_DIR,
    ttest_file: Annotated[Path, typer.Option(
        "--ttest", help="The t-tests written by `esnfed ttest`.")] = layout.TTEST_PATH,
    out_dir: Annotated[Path, typer.Option(
        "--out-dir", help="Reports directory: tables/, figures/, plots/, metrics/ "
        "(<dataset>-<method>.json) and the index README.md are replaced atomically inside it.")] = layout.REPORTS_DIR,
    allow_missing: AllowMissingOpt = False,
    data_dir: Annotated[Path, typer.Option(
        "--data-dir", help="Data root holding partitions/<dataset>.json: the figures name each context "
        "after its context_names (without the file, by number only; a folder named here must exist).",
        callback=folder_if_named(layout.DATA_DIR))] = layout.DATA_DIR,
    privacy_dir: Annotated[Path, typer.Option(
        "--privacy-dir", help="The privacy stage's outputs, <dir>/<dataset>.json (the privacy table and "
        "figure; the default folder absent: not rendered; a folder named here must exist).",
        callback=folder_if_named(PRIVACY_DIR))] = PRIVACY_DIR,
    select_dir: Annotated[Path, typer.Option(
        "--select-dir", help="The select stage's outputs, <dir>/<dataset>/<method>/<share>/best.json (the "
        "selected-hyperparameters table; the default folder absent: not rendered; a folder named here must "
        "exist) and trial-*.json (the communication tables' selection bytes, summed over the trials).", callback=folder_if_named(SELECT_DIR))] = SELECT_DIR,
    flower_dir: Annotated[Path, typer.Option(
        "--flower-dir", help="The flower stage's outputs, <dir>/<dataset>/*.json (the SecAgg+ overhead "
        "section of communication.md; the default folder absent: \"not run\"; a folder named here must "
        "exist).", callback=folder_if_named(FLOWER_DIR))] = FLOWER_DIR,
    runs_dir: Annotated[Optional[Path], typer.Option(
        "--runs-dir", help="Root of the experiment outputs, as select, retrain and assess take it: the "
        "folders not named by their own option are read under it (<runs>/assess, select, privacy, flower) "
        "instead of under the current folder's runs/.", show_default=False)] = None,
) -> None:
    """The papers' tables (Markdown + CSV), communication table, figures and metrics/ -> reports/.

    README.md inside it is the index of them all (each table's and figure's title).

    Set SOURCE_DATE_EPOCH to fix the date printed in the table headers (reproducible builds).
    """
    from esnfed_stages.report.table_specs import table_specs
    from esnfed_stages.report import report as report_stage
    from esnfed_stages.report.report_params import report_params
    from esnfed_stages.params.load import load_params
    from esnfed_stages.report.tables import format_value

    if runs_dir is not None:  # the folders left at their defaults (runs/<name>) move under --runs-dir
        assess_dir, select_dir, privacy_dir, flower_dir = (
            Path(runs_dir) / default.name if folder == default else folder
            for folder, default in ((assess_dir, layout.ASSESS_DIR), (select_dir, SELECT_DIR),
                                    (privacy_dir, PRIVACY_DIR), (flower_dir, FLOWER_DIR)))
    options = report_params(load_params(params))
    steps = len(table_specs(options.datasets, options.continual, options.studies)) + 2 * len(options.continual) + 2
    with _progress() as bar:
        task = bar.add_task("report", total=steps)
        rep = report_stage.run(options, assess_dir=assess_dir,
                               ttest_path=ttest_file, out_dir=out_dir, allow_missing=allow_missing,
                               progress=lambda _: bar.advance(task), data_dir=data_dir,
                               privacy_dir=privacy_dir, flower_dir=flower_dir, select_dir=select_dir)
    cells = rep.cells.get("fedip", [])
    if cells:  # the papers' fedip table: rendered when both their datasets are declared
        summary = Table(title="fedip: test accuracy (%) without vs with FedIP (IncFed readout)")
        for col in ("dataset", "train users", "without", "paper", "with FedIP", "paper "):
            summary.add_column(col, justify="left" if col == "dataset" else "right")
        for ds in DATASETS:
            for pct in PCTS:
                row = {c.method: c for c in cells if c.dataset == ds and c.pct == pct}
                values = []
                for m in ("incfed", "fedip"):
                    c = row[m]
                    values += [format_value(c.mean, c.std, c.mark),
                               format_value(c.published_mean, c.published_std, c.published_mark)]
                summary.add_row(ds, f"{pct}%", *values)
        console.print(summary, highlight=False)
    console.print(f"wrote {len(rep.tables)} table files, {len(rep.figures)} figures, "
                  f"{len(rep.plots)} plot data files and {len(rep.metrics)} metrics files under {out_dir}/ "
                  f"(index: {out_dir / layout.REPORT_INDEX_NAME})",
                  highlight=False, markup=False, soft_wrap=True)
    if rep.missing:
        console.print(f"[yellow]missing inputs ({len(rep.missing)}), shown as n/a:[/] "
                      + escape(", ".join(map(str, rep.missing))), highlight=False)
