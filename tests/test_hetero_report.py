"""The heterogeneous table's text (esnfed_stages.report.hetero_report) on a hand-made assess document:
what its caption says IncFed is, and what the spread-over-clients part shows for each method."""

from __future__ import annotations

import csv
import io
import statistics

import pytest

from esnfed_stages.report.cells import hetero_cells
from esnfed_core.vocabulary import DATASETS
from esnfed_stages.report import hetero_report
from esnfed_stages.report.ttest import Inputs

METHODS = ("local", "ensemble", "align-1", "incfed")
CLIENTS = {"local": [[0.5, 0.7, 0.3], [0.55, 0.75, 0.35]], "ensemble": [[0.45, 0.73, 0.32], [0.52, 0.73, 0.29]],
           "align-1": [[0.6, 0.6, 0.6], [0.59, 0.59, 0.59]]}


def _inputs() -> Inputs:
    inputs = Inputs()
    for m in METHODS:
        entry = {"test_accuracy": [0.5, 0.6]}
        if m in CLIENTS:
            entry["client_test_accuracy"] = CLIENTS[m]
        inputs.docs[("wesad", m)] = {"pcts": {"100": entry}}
        inputs.scores[("wesad", m, "100", "test")] = entry["test_accuracy"]
    return inputs


@pytest.fixture(scope="module")
def rendered():
    inputs = _inputs()
    cells = hetero_cells(inputs.scores, [], DATASETS, ("100",), METHODS)  # hhar: n/a cells
    header = hetero_report.header(["Data source: synthetic", "", "", "Date: today"],
                                  {"variant": "welch", "alpha": 0.05}, "Heterogeneity: mode space")
    return hetero_report.render(cells, inputs, METHODS, ("100",), header)


def test_incfed_is_the_homogeneous_reference_not_a_bound(rendered):
    md, _ = rendered
    assert "upper bound" not in md  # the ensemble beats it at WESAD 100 % in the default run
    assert "incfed = homogeneous IncFed, the reference where every client shares one broadcast reservoir" in md


def test_the_significance_line_names_the_test_as_every_table_does(rendered):
    """The audit: "welch t-test" here, "Welch t-test (scipy.stats.ttest_ind, equal_var=False)"
    in every other table's header: one wording, ttest.VARIANT_TEXT."""
    from esnfed_stages.report.ttest import VARIANT_TEXT

    md, _ = rendered
    assert f"\n- Significance: every method against the ensemble, {VARIANT_TEXT['welch']}, two-sided, p <= 0.05:" in md


def test_spread_over_clients_is_for_local_and_align_only(rendered):
    md, csv_text = rendered
    # The ensemble is one model: its file's client accuracies are its members' own, not its spread.
    lines = md.splitlines()
    spread_part = lines[next(i for i, line in enumerate(lines) if line.startswith("Spread over clients")):]
    row = next(line for line in spread_part if line.startswith("| WESAD"))
    local = statistics.fmean(statistics.pstdev(r) for r in CLIENTS["local"]) * 100
    assert row == f"| WESAD | 100% | {local:.2f} | n/a | 0.00 | n/a |"
    assert "ensemble and incfed: one model serves every client, no spread over clients, n/a" in md
    spread = {r["method"]: r["client_std"] for r in csv.DictReader(io.StringIO(csv_text)) if r["dataset"] == "wesad"}
    assert spread["ensemble"] == spread["incfed"] == "" and float(spread["local"]) == pytest.approx(local)


def test_a_study_dataset_of_your_own_is_a_row_panel_and_communication_items():
    """study_datasets [mine]: the table's rows, the α figure's panels and plot columns, and the
    communication items are mine's (before: the communication items looked at wesad and hhar only,
    and C came from the papers' modules, a one-line error for any other dataset)."""
    inputs = Inputs()
    for m in METHODS:
        entry = {"test_accuracy": [0.5, 0.6], "config": {"units": 4},
                 "communication": {"up_floats": 0, "down_floats": 0, "up_bytes": 0, "down_bytes": 0, "rounds": 1,
                                   "clients": 3}}
        if m in CLIENTS:
            entry["client_test_accuracy"] = CLIENTS[m]
        inputs.docs[("mine", m)] = {"pcts": {"100": entry}}
        inputs.scores[("mine", m, "100", "test")] = entry["test_accuracy"]
    cells = hetero_cells(inputs.scores, [], ("mine",), ("100",), METHODS)
    md, _ = hetero_report.render(cells, inputs, METHODS, ("100",), ["Data source: synthetic"], ("mine",))
    rows = [line for line in md.splitlines() if line.startswith("| ") and "%" in line]
    assert rows and all(line.startswith("| mine | 100% |") for line in rows)
    assert "WESAD" not in md and "HHAR" not in md and "paper" not in md
    _, plot = hetero_report.alpha_figure_and_plot(inputs, (1.0,), ("100",), ("mine",))
    assert plot.splitlines()[0] == "alpha,mine_100"
    items = hetero_report.communication_items(inputs, METHODS, ("mine",), {"mine": 3})
    assert {(c.dataset, c.method, c.classes) for c in items} == {("mine", m, 3) for m in ("local", "ensemble", "align-1")}
    assert {c.classes for c in hetero_report.communication_items(inputs, METHODS, ("mine",))} == {None}
