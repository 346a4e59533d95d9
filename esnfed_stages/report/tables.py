"""The papers' tables as text: Markdown in the papers' layout and CSV, from the cells and
communication rows that cells.py and esnfed_core.communication assemble (they compute; this room
presents)."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import asdict
from typing import Any, Callable, Iterable, Mapping, Sequence

from esnfed_core.communication import LAMBDA_SELECTION_COLUMNS, SELECTION_COLUMNS, VALIDATION_COLUMNS, splits_rounds
from esnfed_core.method import Method
from esnfed_core.sampling import FULL
from esnfed_core.vocabulary import PCTS
from esnfed_stages.report.cells import Cell, RowAgreement, paper_marks_table, significance_agreement
from esnfed_stages.report.table_specs import TableSpec, dataset_label

NA = "n/a"
NOT_APPLICABLE = "—"  # the communication table: a count that does not apply (its header says which)

CSV_COLUMNS = ("table", "dataset", "pct", "method", "column", "n", "mean", "std", "p_value",
               "mark", "published_mean", "published_std", "published_mark", "delta")


def format_value(mean: float | None, std: float | None, mark: str = "") -> str:
    """"72.09 ± 0.59" with Markdown bold/italic; no std -> the mean alone; no mean -> n/a."""
    if mean is None:
        return NA
    text = f"{mean:.2f}" if std is None else f"{mean:.2f} ± {std:.2f}"
    return {"bold": f"**{text}**", "italic": f"*{text}*"}.get(mark, text)


def _header_name(spec: TableSpec, ds: str, label: str, col: str) -> str:
    parts = [dataset_label(ds)] if len(spec.datasets) > 1 else []
    parts.append(label)
    if len(spec.columns) > 1:
        parts.append(col)
    return " ".join(parts)


def render_markdown(spec: TableSpec, cells: Sequence[Cell], header: Sequence[str]) -> str:
    """The table in the papers' layout: a row per share, ours and the paper's value side by side."""
    keys = [(ds, m, label, col) for ds in spec.datasets for m, label in spec.methods
            for col in spec.columns]
    lookup = {(c.pct, c.dataset, c.method, c.column): c for c in cells}
    lines = [f"# {spec.id}: {spec.title}", ""]
    lines += [f"- {h}" for h in header]
    if spec.note:
        lines.append(f"- Note: {spec.note}")
    lines.append("")
    head = ["train users"]
    for ds, _, label, col in keys:
        head += [_header_name(spec, ds, label, col)] + (["paper"] if spec.has_published else [])
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    for pct in PCTS:
        row = [f"{pct}%"]
        for ds, m, _, col in keys:
            c = lookup[(pct, ds, m, col)]
            row += [format_value(c.mean, c.std, c.mark)]
            if spec.has_published:
                row.append(format_value(c.published_mean, c.published_std, c.published_mark))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def _csv_value(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ""
    return str(v)


def to_csv(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """CSV text (header + rows, '\\n' line ends) with empty fields for missing values."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_csv_value(row.get(c)) for c in columns])
    return buf.getvalue()


def cells_csv(cells: Iterable[Cell]) -> str:
    """A row per cell; ``delta`` = our mean − the published mean (percentage points)."""
    return to_csv(({**asdict(c), "delta": c.delta} for c in cells), CSV_COLUMNS)


def signed(v: float | None) -> str:
    """"+1.23" / "-0.45" (two decimals; a difference that rounds to zero is "+0.00", never "-0.00")."""
    if v is None:
        return NA
    return f"{0.0 if round(v, 2) == 0 else v:+.2f}"


def _marked(label: str, mark: str) -> str:
    return {"bold": f"**{label}**", "italic": f"*{label}*"}.get(mark, label)


def _where(spec: TableSpec, r: RowAgreement) -> str:
    return " ".join([dataset_label(r.dataset), f"{r.pct}%"] + ([r.column] if len(spec.tested) > 1 else []))


def render_agreement(spec: TableSpec, cells: Sequence[Cell], comparable: bool) -> str:
    """The paper table's comparison with the published values, appended below it: the difference
    of every cell to the published mean (a table in the same layout) and one line saying whether the
    significance pattern agrees with the paper's, naming the rows that do not (``comparable``:
    whether the run is this table's paper's protocol, comparability.papers_protocol; else the line
    says that agreement is not expected)."""
    keys = [(ds, m, label, col) for ds in spec.datasets for m, label in spec.methods for col in spec.columns]
    lookup = {(c.pct, c.dataset, c.method, c.column): c for c in cells}
    lines = ["", "## Difference to the paper", "",
             "Our mean − the published mean, percentage points (CSV: `delta`).", ""]
    head = ["train users"] + [_header_name(spec, ds, label, col) for ds, _, label, col in keys]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    for pct in PCTS:
        lines.append("| " + " | ".join([f"{pct}%"] + [signed(lookup[(pct, ds, m, col)].delta)
                                                     for ds, m, _, col in keys]) + " |")
    rows = significance_agreement(spec, cells)
    compared = [r for r in rows if r.agrees is not None]
    differ = [r for r in compared if not r.agrees]
    if paper_marks_table(spec, cells):
        what = ("Significance pattern (the marks of the methods the table's pairs test: **bold** = the best, "
                "significant; *italic* = not significantly different from the best)")
        show = lambda marks: ", ".join(_marked(label, mark) for label, mark in marks)  # noqa: E731
    else:
        what = ("The paper marks no significance in this table, so the pattern compared is which tested "
                "method has the highest mean")
        show = lambda marks: ", ".join(label for label, mark in marks if mark == "best")  # noqa: E731
    verdict = (f"agrees with the paper's in {len(compared) - len(differ)} of {len(compared)} rows"
               + ("; disagrees in: " + "; ".join(f"{_where(spec, r)} (ours: {show(r.ours)}; paper: {show(r.paper)})"
                                                 for r in differ) if differ else ""))
    skipped = [r for r in rows if r.agrees is None]
    if skipped:
        verdict += "; not compared (n/a cells): " + ", ".join(_where(spec, r) for r in skipped)
    caveat = ("" if comparable else
              " (not expected to agree: this run is not the papers' protocol, see the header, so a disagreement "
              "is not a failed reproduction)")
    lines += ["", f"**Agreement with the paper**{caveat}: {what}: {verdict}."]
    return "\n".join(lines) + "\n"


COMMUNICATION_COLUMNS = (
    "dataset", "pct", "method", "units", "classes", "clients", "rounds", "ip_rounds", "readouts",
    "up_floats_per_client_round", "down_floats_per_client_round",
    "up_bytes_per_client_round", "down_bytes_per_client_round",
    "up_floats", "down_floats", "up_bytes", "down_bytes",
    "formula_up", "formula_down", "analytic_up_floats", "analytic_down_floats", "match",
) + VALIDATION_COLUMNS + LAMBDA_SELECTION_COLUMNS + SELECTION_COLUMNS  # after (never in) the training totals


def _match(v: bool | None) -> str:
    return "" if v is None else ("yes" if v else "no")


def communication_csv(rows: Iterable[Mapping[str, Any]]) -> str:
    """The communication rows as CSV (``match`` as yes / no / empty)."""
    return to_csv(({**r, **{k: _match(r.get(k)) for k in _MATCHES}} for r in rows), COMMUNICATION_COLUMNS)


_MATCHES = ("match", "validation_match", "validation_lambda_match")


def _num(v: Any) -> str:
    if v is None or v == "":
        return NA
    if isinstance(v, float):
        return f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


PER_CLIENT_ROUND = ("up_floats_per_client_round", "down_floats_per_client_round",
                    "up_bytes_per_client_round", "down_bytes_per_client_round")
SPLIT = ("ip_rounds", "readouts")


def _not_applicable(row: Mapping[str, Any], key: str) -> bool:
    """A communication cell that does not apply: IP rounds and readouts of a method whose rounds
    are not split (esnfed_core.communication.splits_rounds), per client per round where no round ran (local)."""
    return (key in SPLIT and not splits_rounds(row["method"])) or (key in PER_CLIENT_ROUND and row.get(key) is None)


def not_applicable_note(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The header line saying what a communication table's "—" cells mean (none without one)."""
    parts = []
    if any(_not_applicable(r, "ip_rounds") for r in rows):
        parts.append("IP rounds and readouts of every method but FedIP and FedCLIP (the others run no IP round: "
                     "their rounds are not split)")
    if any(_not_applicable(r, PER_CLIENT_ROUND[0]) for r in rows):
        parts.append("per client per round where no round ran (local sends nothing: rounds 0, totals 0)")
    return [f"{NOT_APPLICABLE}: does not apply: " + "; ".join(parts)] if parts else []


def render_communication_markdown(rows: Sequence[Mapping[str, Any]], header: Sequence[str],
                                  dataset: str | None = None) -> str:
    """Measured floats/bytes per client per round and in total beside the analytic formulas:
    communication.md, or communication-<dataset>.md for a user's dataset (``dataset``)."""
    cols = [("dataset", "dataset"), ("pct", "train users"), ("method", "method"), ("units", "N"),
            ("classes", "C"), ("clients", "clients"), ("rounds", "rounds"),
            ("ip_rounds", "IP rounds"), ("readouts", "readouts"),
            ("up_floats_per_client_round", "up floats/client/round"),
            ("down_floats_per_client_round", "down floats/client/round"),
            ("up_bytes_per_client_round", "up bytes/client/round"),
            ("down_bytes_per_client_round", "down bytes/client/round"),
            ("up_floats", "up floats total"), ("down_floats", "down floats total"),
            ("up_bytes", "up bytes total"), ("down_bytes", "down bytes total"),
            ("formula_up", "formula up (per client)"), ("formula_down", "formula down"),
            ("analytic_up_floats", "analytic up total"),
            ("analytic_down_floats", "analytic down total"), ("match", "match")]
    name, label = ("communication", "") if dataset is None else \
        (f"communication-{dataset}", f"{dataset_label(dataset)}: ")
    lines = [f"# {name}: {label}floats and bytes sent per client per round and in total", ""]
    lines += [f"- {h}" for h in header]
    lines.append("")
    lines += _table_lines(cols, rows, _training_cell)
    return "\n".join(lines) + "\n" + _validation_markdown(rows)


def _table_lines(cols: Sequence[tuple[str, str]], rows: Sequence[Mapping[str, Any]],
                 cell: Callable[[Mapping[str, Any], str], str]) -> list[str]:
    """A Markdown table: the labels of ``cols``, then a line per row of ``cell(row, key)``."""
    return (["| " + " | ".join(h for _, h in cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
            + ["| " + " | ".join(cell(r, key) for key, _ in cols) + " |" for r in rows])


def _training_cell(r: Mapping[str, Any], key: str) -> str:
    v = r.get(key)
    return (f"{v}%" if key == "pct" else dataset_label(v) if key == "dataset"
            else NOT_APPLICABLE if _not_applicable(r, key) else _num(_match(v) if key == "match" else v))


def _validation_cell(r: Mapping[str, Any], key: str) -> str:
    """A validation-traffic cell: "—" past V where the retrain sends nothing to validation users."""
    if key in ("pct", "dataset"):
        return _training_cell(r, key)
    if key not in ("method", "validation_clients") and r.get("validation_traffic") is False:
        return NOT_APPLICABLE
    v = r.get(key)
    return _num(_match(v) if key == "validation_match" else v)


VALIDATION_NOTE = (
    "What a federated deployment would add to score on the validation users as clients (PROTOCOL §6; "
    "the simulation scores them centrally), not in the totals above: per evaluation each of the V "
    "validation clients receives the candidate readouts (N·C floats each; |λ grid| of them where a "
    "retrain chooses λ there, 1 for FedCLIP joint) and, for IP methods, the trained (g, b) (2N), and "
    "answers a correct count per readout and its total steps (integers, 8 bytes each, no float); the "
    "server sums the counts. IncFed, FedAvg and FedIP evaluate once (λ, retrain.lambda: select), FedCLIP "
    "joint after every IP round (early stopping); the reservoir broadcast is setup, excluded. Counted: "
    "the messages of esnfed_core.validation_traffic in a ledger; 'match' = the formula gives the counted "
    "totals. A selection trial of IncFed, FedAvg or FedIP sends these messages at its own N, once per trial")

_VALIDATION_CELLS = [
    ("pct", "train users"), ("dataset", "dataset"), ("method", "method"), ("validation_clients", "V"),
    ("validation_evaluations", "evaluations"), ("validation_readouts", "readouts per evaluation"),
    ("validation_down_floats", "down floats total"), ("validation_down_bytes", "down bytes total"),
    ("validation_up_floats", "up floats total"), ("validation_up_bytes", "up bytes total"),
    ("validation_formula_down", "formula down (per client, evaluation)"),
    ("validation_formula_up", "formula up"), ("validation_analytic_down_floats", "analytic down total"),
    ("validation_analytic_up_bytes", "analytic up bytes"), ("validation_match", "match")]


def _validation_markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    """The validation-traffic section of a communication table: a row per training row; "—" where the
    retrain sends nothing to validation users, n/a where unknown (esnfed_core.communication.validation_columns)."""
    if not rows:
        return ""
    lines = ["", "## Validation traffic (not in the totals above)", "", f"- {VALIDATION_NOTE}",
             f"- {NOT_APPLICABLE}: the retrain sends nothing to the validation users (FedCLIP naive and replay; "
             "IncFed, FedAvg and FedIP with retrain.lambda: frozen); n/a: not known or not modelled "
             "(the heterogeneous methods' validation clients would need each client's own reservoir)", ""]
    lines += _table_lines(_VALIDATION_CELLS, rows, _validation_cell)
    lines += ["", "## λ selection and model selection (not in the totals above)", "", f"- {SELECTION_NOTE}",
              f"- {NOT_APPLICABLE}: nothing sent (λ selection: every method but FedAvg, whose training clients "
              "send nothing per λ, and FedAvg with retrain.lambda: frozen); n/a: not known (selection: no "
              "finished selection, best.json or its trial records absent) or not modelled (the heterogeneous "
              "methods, as above)", *_fedclip_selection(rows), ""]
    lines += _table_lines(_SELECTION_CELLS, rows, _selection_cell)
    return "\n".join(lines) + "\n"


def _fedclip_selection(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The selection section's FedCLIP line, where the table has a FedCLIP row."""
    return [f"- {SELECTION_FEDCLIP_NOTE}"] if any(Method.parse(r["method"]).continual for r in rows) else []


SELECTION_NOTE = " ".join((
    "λ selection: FedAvg runs a round per λ of readout.lambdas (esnfed_core.federated.fedavg), each training client",
    "uploading a local readout and downloading the average (N·C float64 each way, and a count); the totals above keep",
    "the chosen λ's round, these are the other L − 1 (retrain.lambda: select), counted from the messages of",
    "esnfed_core.validation_traffic.lambda_selection_ledger; 'match' = K·(L − 1)·N·C gives the counted floats",
    "each way. Selection trials: the trial records of the share's finished selection",
    "(runs/select/<dataset>/<method>/<pct>/trial-*.json). Selection bytes: the model selection of IncFed, FedAvg and",
    "FedIP in total, up and down, summed over those trials, each at its own N and K: its training messages as",
    "recorded, the validation clients' scoring of every λ it scored and FedAvg's rounds for its other λ values (a",
    "selection trial chooses λ on the validation users whatever retrain.lambda says), counted with the ledgers above"))

SELECTION_FEDCLIP_NOTE = (
    "FedCLIP: its selection starts from the best FedIP trial (the FedIP row's selection) and runs its budget grid "
    "on that trial's seed; the grid's trials are counted, their bytes are not totalled (n/a): scoring a continual "
    "candidate on the validation users is not modelled (esnfed_core.validation_traffic)")

_SELECTION_CELLS = [
    ("pct", "train users"), ("dataset", "dataset"), ("method", "method"), ("clients", "K"),
    ("validation_lambda_rounds", "λ rounds (L − 1)"),
    ("validation_lambda_up_floats", "up floats total"), ("validation_lambda_down_floats", "down floats total"),
    ("validation_lambda_up_bytes", "up bytes total"), ("validation_lambda_down_bytes", "down bytes total"),
    ("validation_lambda_formula", "formula (per client)"),
    ("validation_lambda_analytic_floats", "analytic floats each way"), ("validation_lambda_match", "match"),
    ("selection_trials", "selection trials"), ("selection_bytes", "selection bytes")]


def _selection_cell(r: Mapping[str, Any], key: str) -> str:
    """A λ-selection or selection cell: "—" where nothing is sent (validation_lambda_traffic False),
    n/a where unknown or not modelled."""
    if key in ("pct", "dataset", "method", "clients"):
        return _training_cell(r, key)
    if key.startswith("validation_lambda") and r.get("validation_lambda_traffic") is False:
        return NOT_APPLICABLE
    v = r.get(key)
    return _num(_match(v) if key == "validation_lambda_match" else v)


def participation_notes(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Header lines for a communication table where some client sat a context out (FedCLIP, a
    client without windows there) or each IP round sampled its clients (federated.client_fraction):
    none where every client sent in every round (the papers')."""
    rows = list(rows)
    sampled = [r for r in rows if r.get("client_fraction", FULL) != FULL]
    partial = [r for r in rows if r.get("participations") != r["clients"] * r["rounds"] and r not in sampled]
    notes = [(partial, lambda r: f"clients per context {', '.join(map(str, r['participants']))}",
              "A client without windows at a context sits it out and sends nothing there, so per client per "
              "round divides by the client-rounds that sent and the analytic totals count, at each context, "
              "the clients that took part (the assess file's communication.participants)"),
             (sampled, lambda r: f"fraction {r['client_fraction']:g}",
              "federated.client_fraction < 1: each IP round went to max(1, ⌊fraction·clients⌋) clients sampled "
              "uniformly (readouts to every client), so per client per round divides by the client-rounds that "
              "sent and the analytic totals count the sampled clients")]
    return [f"{lead}: " + "; ".join(f"{dataset_label(r['dataset'])} {r['method']} {r['pct']}%: {what(r)}, "
                                    f"{r['participations']} client-rounds of {r['clients'] * r['rounds']}"
                                    for r in cases)
            for cases, what, lead in notes if cases]
