"""The report's figures name contexts one way (esnfed_stages.report.report_figures): numbered from 0 as
PROTOCOL §6 ("stream accuracy after context i ... contexts 0..i") in the stream and activation
figures alike, with the dataset's name of each context where its partition file lists them."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest

from esnfed_core.errors import DataError
from esnfed_stages.report import figures, report_figures
from esnfed_stages.report.report_figures import context_label, context_names
from esnfed_stages.report.ttest import Inputs

HHAR = ["nexus4", "s3", "s3mini", "lgwatch"]


def test_context_names_come_from_the_partition_file(tmp_path):
    assert context_names(tmp_path, "hhar") is None  # no partition: numbers only
    (tmp_path / "partitions").mkdir()
    (tmp_path / "partitions" / "hhar.json").write_text(json.dumps({"context_names": HHAR}))
    assert context_names(tmp_path, "hhar") == HHAR
    (tmp_path / "partitions" / "hhar.json").write_text(json.dumps({"context_names": "nexus4"}))
    with pytest.raises(DataError, match="hhar.json: context_names must be a list"):
        context_names(tmp_path, "hhar")
    assert [context_label(t, HHAR) for t in range(4)] == ["0: nexus4", "1: s3", "2: s3mini", "3: lgwatch"]
    assert [context_label(t, None) for t in range(2)] == ["0", "1"]


def _stream_inputs(contexts: int) -> Inputs:
    inputs = Inputs()
    for s in ("naive", "replay", "joint"):
        for pct in ("25", "50", "75", "100"):
            entry = {"stream_accuracy": [[0.9 - 0.1 * t for t in range(contexts)]] * 2}
            inputs.docs.setdefault(("hhar", f"fedclip-{s}"), {"pcts": {}})["pcts"][pct] = entry
    return inputs


def test_stream_figure_and_plot_number_contexts_from_0_and_name_them(monkeypatch):
    seen = {}

    def fake(title, panels, context_labels=None):
        seen["labels"] = context_labels
        seen["x"] = [a.shape[1] for _, lines in panels for a in lines.values()]
        return b"png"

    monkeypatch.setattr(figures, "stream_accuracy", fake)
    _, plots = report_figures.stream_figure_and_plots(_stream_inputs(4), "hhar", "federated", HHAR)
    assert seen["labels"] == ["0: nexus4", "1: s3", "2: s3mini", "3: lgwatch"]
    assert list(plots) == [f"stream-hhar-federated-{pct}.csv" for pct in ("25", "50", "75", "100")]
    for csv_text in plots.values():
        rows = [line.split(",")[:2] for line in csv_text.splitlines()[1:]]
        assert rows == [["0", "nexus4"], ["1", "s3"], ["2", "s3mini"], ["3", "lgwatch"]]


def test_the_stream_plots_are_the_figure_s_panels_a_line_per_strategy(monkeypatch):
    """DVC tells a plot's lines apart by 7 dash patterns: the 12 lines of one CSV (strategy × share)
    drew some alike. A CSV per share, as the figure's panels: a column per strategy, its mean over
    the retrains in percent, and after them each strategy's population std (the figure's band: the
    CSVs held the means only, so the bands could not be rebuilt from them); a strategy without a
    stream at a share empty columns there."""
    monkeypatch.setattr(figures, "_png", lambda fig: b"png")
    inputs = _stream_inputs(3)
    inputs.docs[("hhar", "fedclip-replay")]["pcts"]["50"]["stream_accuracy"] = [[0.5, 0.6, 0.7], [0.7, 0.6, 0.5]]
    inputs.docs[("hhar", "fedclip-joint")]["pcts"]["75"]["stream_accuracy"] = None
    _, plots = report_figures.stream_figure_and_plots(inputs, "hhar", "federated")
    assert plots["stream-hhar-federated-50.csv"] == (
        "context,context_name,naive,replay,joint,naive_std,replay_std,joint_std\n"
        "0,,90.0,60.0,90.0,0.0,10.0,0.0\n1,,80.0,60.0,80.0,0.0,0.0,0.0\n2,,70.0,60.0,70.0,0.0,10.0,0.0\n")
    assert plots["stream-hhar-federated-75.csv"].splitlines()[1] == "0,,90.0,90.0,,0.0,0.0,"


def test_stream_accuracy_draws_context_t_at_x_t(monkeypatch):
    drawn = []
    monkeypatch.setattr(figures, "_png", lambda fig: drawn.append(fig) or b"png")
    figures.stream_accuracy("t", [("25", {"naive": np.full((2, 4), 0.5)})], ["a", "b", "c", "d"])
    ax = drawn[0].axes[0]
    assert list(ax.lines[-1].get_xdata()) == [0, 1, 2, 3]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c", "d"]


def test_the_stream_figure_says_what_its_bands_are(monkeypatch):
    """Figure audit: every activation figure's title said "mean ± std over retrains", the stream
    figures drew the same bands around each line and said nothing about them."""
    drawn = []
    monkeypatch.setattr(figures, "_png", lambda fig: drawn.append(fig) or b"png")
    report_figures.stream_figure_and_plots(_stream_inputs(4), "hhar", "federated", HHAR)
    fig = drawn[0]
    assert fig.get_suptitle() == "HHAR federated: stream accuracy after each context (FedCLIP; mean ± std over retrains)"
    assert all(len(ax.collections) == 3 for ax in fig.axes)  # a band per strategy


def _activation_inputs(contexts: int) -> Inputs:
    edges = list(np.linspace(-1, 1, 5))
    dens = [[[[0.5] * 4 for _ in range(contexts)] for _ in range(contexts)] for _ in range(2)]
    users = [[[[[0.5] * 4 for _ in range(contexts)] for _ in range(2)] for _ in range(contexts)] for _ in range(2)]
    act = {"edges": edges, "users": ["S4", "S6"], "density": dens, "user_density": users}
    inputs = Inputs()
    for s in ("naive", "replay", "joint"):
        inputs.docs[("wesad", f"fedclip-{s}")] = {"pcts": {p: {"activation": act} for p in ("25", "50", "75", "100")}}
        inputs.paths[("wesad", f"fedclip-{s}")] = f"fedclip-{s}.json"
    return inputs


def test_activation_figures_use_the_same_numbering_and_names(monkeypatch):
    seen = {}

    def fake(title, edges, row_labels, col_labels, cells, targets=None):
        seen["cols"] = list(col_labels)
        first = next(cell for row in cells for cell in row if cell is not None)
        seen["lines"] = [line[0] for line in first]
        return b"png"

    monkeypatch.setattr(figures, "density_grid", fake)
    names = ["run0", "run1", "run2"]
    report_figures.activation_contexts_figure(_activation_inputs(3), "federated", "25", names)
    assert seen["cols"] == ["data of context 0: run0", "data of context 1: run1", "data of context 2: run2"]
    assert seen["lines"] == ["after context 0: run0", "after context 1: run1", "after context 2: run2"]
    _, plots = report_figures.activation_figure_and_plots(_activation_inputs(3), "federated", "25", names)
    assert seen["lines"] == ["context 0: run0", "context 1: run1", "context 2: run2"]
    assert plots["activation-wesad-fedclip-naive.csv"].splitlines()[0].startswith("value,context0,context1,context2")


def test_density_panels_share_one_scale(monkeypatch):
    """Figure audit: each panel of a density grid had its own y range (0-1.75 beside 0-3.5 in the
    users figure), so a row (a share) or column (a strategy) read larger or smaller than it is."""
    drawn = []
    monkeypatch.setattr(figures, "_png", lambda fig: drawn.append(fig) or b"png")
    edges = np.linspace(-1, 1, 5)
    low, high = [("context 0", [0.5] * 4, None)], [("context 0", [3.0] * 4, None)]
    figures.density_grid("t", edges, ["25%", "100%"], ["a", "b"], [[low, high], [low, None]])
    axes = drawn[0].axes
    assert len({ax.get_ylim() for ax in axes}) == 1 and axes[0].get_ylim()[1] >= 3.0


def test_activation_figures_name_methods_and_shares_as_their_titles_do(monkeypatch):
    """Figure audit: the pooled figure's panels read the file ids (fedip, fedclip-naive) under titles
    that say FedCLIP, the users figure's title "(fedip; rows: training users" and its rows "25%"; the
    shares figure said "the last context" without naming it, and a share missing for one strategy
    shifted the next share into its colour in that panel alone."""
    seen = []

    def fake(title, edges, row_labels, col_labels, cells, targets=None):
        seen.append({"title": title, "rows": list(row_labels), "cols": list(col_labels), "cells": cells})
        return b"png"

    monkeypatch.setattr(figures, "density_grid", fake)
    inputs = _activation_inputs(3)
    inputs.docs[("wesad", "fedip")] = inputs.docs[("wesad", "fedclip-naive")]
    inputs.paths[("wesad", "fedip")] = "fedip.json"
    names = ["run0", "run1", "run2"]
    report_figures.activation_figure_and_plots(inputs, "federated", "25", names)
    assert seen[-1]["cols"] == ["FedIP", "FedCLIP naive", "FedCLIP replay", "FedCLIP joint"]
    report_figures.activation_users_figure(inputs, "federated", names)
    assert "(FedIP; " in seen[-1]["title"]
    assert seen[-1]["rows"] == ["25% training users", "50% training users", "75% training users",
                                "100% training users"]
    report_figures.activation_contexts_figure(inputs, "federated", "25", names)
    assert seen[-1]["rows"] == ["FedCLIP naive", "FedCLIP replay", "FedCLIP joint"]
    inputs.docs[("wesad", "fedclip-replay")]["pcts"]["25"]["activation"] = None  # none at 25%
    report_figures.activation_shares_figure(inputs, "federated", names)
    title, cells = seen[-1]["title"], seen[-1]["cells"][0]
    assert "on the test data of the last context, 2: run2 (FedCLIP, final reservoir" in title
    assert seen[-1]["cols"] == ["FedCLIP naive", "FedCLIP replay", "FedCLIP joint"]
    labels = [[line[0] for line in cell] for cell in cells]
    assert labels[0] == labels[2] == [f"{p}% training users" for p in ("25", "50", "75", "100")]
    assert labels[1] == ["25% training users (n/a)", "50% training users", "75% training users",
                         "100% training users"]  # 50% keeps the second colour in every panel
    assert np.isnan(cells[1][0][1]).all()



def test_the_legend_is_not_taken_from_a_panel_missing_a_line(monkeypatch):
    """A line missing from the first panel only (its "(n/a)" entry) made the one legend of the
    figure read "n/a" for a line every other panel draws."""
    drawn = []
    monkeypatch.setattr(figures, "_png", lambda fig: drawn.append(fig) or b"png")
    acc = np.full((2, 3), 0.5)
    figures.stream_accuracy("t", [("25", {"naive": None, "replay": acc}), ("50", {"naive": acc, "replay": acc})])
    legend = drawn[0].legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ["naive", "replay"]


def test_a_long_title_wraps_inside_a_narrow_figure(monkeypatch):
    """Figure audit: the shares figure's title (three panels wide) ran off both edges of the PNG;
    titles wrap at the figure's width, and the PNG's Title text keeps the whole line."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    drawn = []
    monkeypatch.setattr(figures, "_png", lambda fig: drawn.append(fig) or b"png")
    title = "WESAD federated: activation density on the test data of the last context, 4: run4 " \
            "(FedCLIP, final reservoir; mean ± std over retrains)"
    line = [("25% training users", [0.5] * 4, None)]
    figures.density_grid(title, np.linspace(-1, 1, 5), [""], ["a", "b", "c"], [[line, line, line]])
    fig = drawn[0]
    FigureCanvasAgg(fig).draw()
    box = fig._suptitle.get_window_extent()
    assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and box.y1 <= fig.bbox.y1
    assert fig.get_suptitle() == title
    assert not any(box.overlaps(ax.get_window_extent()) for ax in fig.axes)


def test_the_alpha_figure_names_shares_and_methods_as_the_other_figures(monkeypatch):
    """Figure audit: the α figure's panels read "WESAD 25%" where every other figure writes
    "25% training users", its legend "incfed" where the privacy figure writes "IncFed", and a second
    row of panels (budget paper: every share) had no y label."""
    from esnfed_stages.report import hetero_report
    from esnfed_stages.report.hetero_report import HETERO_REFERENCE

    drawn = []
    monkeypatch.setattr(figures, "_png", lambda fig: drawn.append(fig) or b"png")
    inputs = Inputs()
    for ds in ("wesad", "hhar"):
        for pct in ("25", "50", "75", "100"):
            for m in ("align-0", "align-1", HETERO_REFERENCE, "local", "incfed"):
                inputs.scores[(ds, m, pct, "test")] = [0.5, 0.6]
    hetero_report.alpha_figure_and_plot(inputs, (0.0, 1.0), ("25", "50", "75", "100"))
    axes = [ax for ax in drawn[0].axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes[:2]] == ["WESAD, 25% training users", "WESAD, 50% training users"]
    assert axes[4].get_title() == "HHAR, 25% training users"
    assert [bool(ax.get_ylabel()) for ax in axes] == [True, False, False, False] * 2
    assert [bool(ax.get_xlabel()) for ax in axes] == [False] * 4 + [True] * 4  # not over the second row
    labels = axes[0].get_legend_handles_labels()[1]
    assert "IncFed" in labels and "incfed" not in labels and "align-α" in labels
    drawn.clear()
    hetero_report.alpha_figure_and_plot(inputs, (0.0, 1.0), ("25", "50", "75"))  # a row per dataset
    axes = [ax for ax in drawn[0].axes if ax.get_visible()]
    assert [ax.get_title().split(",")[0] for ax in axes] == ["WESAD"] * 3 + ["HHAR"] * 3
    assert [bool(ax.get_xlabel()) for ax in axes] == [False] * 3 + [True] * 3
    drawn.clear()
    line = [(0.0, np.array([50.0])), (1.0, np.array([60.0]))]
    figures.alpha_bands("t", [(f"p{i}", line, {}) for i in range(6)])  # 4 + 2: the α axis under row 1's last two
    axes = [ax for ax in drawn[0].axes if ax.get_visible()]
    assert [bool(ax.get_xlabel()) for ax in axes] == [False, False, True, True, True, True]
    assert all(t.get_visible() for ax in axes[2:] for t in ax.get_xticklabels())


def _share_inputs() -> Inputs:
    inputs = Inputs()
    for i, m in enumerate(("random", "fedavg", "incfed", "fedip", "ridge", "ip")):
        for j, pct in enumerate(("25", "50", "75", "100")):
            inputs.scores[("wesad", m, pct, "test")] = [0.5 + 0.05 * i + 0.01 * j, 0.52 + 0.05 * i + 0.01 * j]
    return inputs


def test_the_shares_figure_draws_the_tables_test_accuracy_per_share(monkeypatch):
    """Visual audit: the stationary tables' test accuracy per share had no figure; a panel per
    setting, a line per method at its tables' mean (× 100) with a ± std band, random dashed, a
    method without scores "(n/a)" and a share without scores left out of its line."""
    drawn = []
    monkeypatch.setattr(figures, "_png", lambda fig: drawn.append(fig) or b"png")
    inputs = _share_inputs()
    del inputs.scores[("wesad", "ip", "50", "test")]
    for pct in ("25", "50", "75", "100"):
        del inputs.scores[("wesad", "fedavg", pct, "test")]
    report_figures.shares_figure_and_plot(inputs, "wesad")
    fig = drawn[0]
    assert fig.get_suptitle() == ("WESAD: test accuracy against the share of training users (stationary methods; "
                                  "mean ± std over retrains)")
    fed, cen = fig.axes
    assert (fed.get_title(), cen.get_title()) == ("federated", "centralised")
    assert [line.get_label() for line in fed.lines] == ["random", "FedAvg (n/a)", "IncFed", "FedIP"]
    assert [line.get_label() for line in cen.lines] == ["random", "ridge", "IP"]
    incfed = fed.lines[2]
    assert list(incfed.get_xdata()) == [25, 50, 75, 100]
    assert list(incfed.get_ydata()) == pytest.approx([61.0, 62.0, 63.0, 64.0])  # mean of the two retrains
    assert list(cen.lines[2].get_xdata()) == [25, 75, 100]  # IP without its 50% scores
    assert fed.lines[0].get_linestyle() == "--" and incfed.get_linestyle() == "-"
    assert len(fed.collections) == 3 and len(cen.collections) == 3  # a ± std band per line drawn
    assert [t.get_text() for t in fed.get_xticklabels()] == ["25%", "50%", "75%", "100%"]
    assert fed.get_ylabel() == "test accuracy (%)"
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == ["random", "FedAvg (n/a)", "IncFed", "FedIP", "ridge", "IP"]  # both panels' methods


def test_the_shares_plot_holds_each_method_s_mean_and_std_per_share(monkeypatch):
    """The shares figure's DVC plots CSV: a row per share, each stationary method's mean and
    population std over the retrains in percent (the figure's line and band), empty where a share or
    a method has no scores."""
    monkeypatch.setattr(figures, "_png", lambda fig: b"png")
    inputs = _share_inputs()
    del inputs.scores[("wesad", "ip", "50", "test")]
    for pct in ("25", "50", "75", "100"):
        del inputs.scores[("wesad", "fedavg", pct, "test")]
    _, plot = report_figures.shares_figure_and_plot(inputs, "wesad")
    rows = list(csv.DictReader(io.StringIO(plot)))
    methods = ("random", "fedavg", "incfed", "fedip", "ridge", "ip")
    assert list(rows[0]) == ["share"] + [f"{m}_{stat}" for m in methods for stat in ("mean", "std")]
    assert [r["share"] for r in rows] == ["25", "50", "75", "100"]
    for j, row in enumerate(rows):
        for i, m in enumerate(methods):
            if m == "fedavg" or (m == "ip" and j == 1):
                assert row[f"{m}_mean"] == row[f"{m}_std"] == "", (m, j)
            else:  # the retrains 50 + 5 i + j and 52 + 5 i + j
                assert float(row[f"{m}_mean"]) == pytest.approx(51.0 + 5 * i + j)
                assert float(row[f"{m}_std"]) == pytest.approx(1.0)


def _matrix_inputs(contexts: int) -> Inputs:
    inputs = Inputs()
    for a in ("clip", "fedclip"):
        for k, s in enumerate(("naive", "replay", "joint")):
            mats = [[[0.1 * k + 0.01 * (i * contexts + j) + 0.02 * r for j in range(contexts)] for i in range(contexts)]
                    for r in range(2)]
            inputs.docs[("hhar", f"{a}-{s}")] = {"pcts": {"100": {"accuracy_matrix": mats}}}
            inputs.paths[("hhar", f"{a}-{s}")] = f"{a}-{s}.json"
    return inputs


def test_the_matrix_figure_draws_each_continual_method_s_accuracy_matrix(monkeypatch):
    """Visual audit: the assess files' accuracy matrices (forgetting per context) had no figure; a
    heatmap per method and strategy, the mean over retrains in percent written in each cell, the
    contexts named as in every figure, a method without its matrices "n/a"."""
    drawn = []
    monkeypatch.setattr(figures, "_png", lambda fig: drawn.append(fig) or b"png")
    inputs = _matrix_inputs(4)
    del inputs.docs[("hhar", "clip-joint")]
    inputs.docs[("hhar", "fedclip-naive")]["pcts"]["100"]["accuracy_matrix"][0][1][0] = None  # no data: NaN
    inputs.docs[("hhar", "fedclip-naive")]["pcts"]["100"]["accuracy_matrix"][1][1][0] = None
    _, plots = report_figures.matrix_figure_and_plots(inputs, "hhar", "100", HHAR)
    fig = drawn[0]
    assert fig.get_suptitle().startswith("HHAR: accuracy of the model after each context (rows) on the test data of "
                                         "each context (columns), 100% training users (continual methods; mean over "
                                         "retrains")
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["FedCLIP naive", "FedCLIP replay", "FedCLIP joint",
                                                 "CLIP naive", "CLIP replay", "CLIP joint"]
    replay = panels[1].images[0].get_array()
    expected = [[10 + (i * 4 + j) + 1 for j in range(4)] for i in range(4)]  # 0.1 + 0.01 (i·4 + j) + mean 0.01
    assert np.asarray(replay) == pytest.approx(np.asarray(expected, dtype=float))
    assert panels[1].images[0].get_clim() == (0.0, 100.0)  # one scale for every panel
    texts = [t.get_text() for t in panels[1].texts]
    assert texts[:2] == ["11.0", "12.0"] and len(texts) == 16
    assert [t.get_text() for t in panels[0].texts][4] == "n/a"  # after context 1, on context 0: no data
    assert [t.get_text() for t in panels[1].get_yticklabels()] == ["0: nexus4", "1: s3", "2: s3mini", "3: lgwatch"]
    assert [t.get_text() for t in panels[1].get_xticklabels()] == ["0: nexus4", "1: s3", "2: s3mini", "3: lgwatch"]
    assert panels[0].get_ylabel() == "after context" and panels[3].get_xlabel() == "test data of context"
    assert panels[0].get_xlabel() == "" and panels[2].get_xlabel() == "test data of context"  # over CLIP joint's n/a
    assert not panels[5].images and [t.get_text() for t in panels[5].texts] == ["n/a"]
    # the DVC plots: a CSV per method, a row per context trained, a column per context's test data,
    # the figure's means in percent, then each one's population std over the retrains; empty where
    # there is no data or no matrix
    assert list(plots) == [f"accuracy-matrix-hhar-{a}-{s}.csv" for a in ("fedclip", "clip")
                           for s in ("naive", "replay", "joint")]
    replay = list(csv.DictReader(io.StringIO(plots["accuracy-matrix-hhar-fedclip-replay.csv"])))
    assert list(replay[0]) == ["context", "context_name", "on_context0", "on_context1", "on_context2", "on_context3",
                               "on_context0_std", "on_context1_std", "on_context2_std", "on_context3_std"]
    assert [(r["context"], r["context_name"]) for r in replay] == [(str(t), n) for t, n in enumerate(HHAR)]
    values = [[float(r[f"on_context{j}"]) for j in range(4)] for r in replay]
    assert np.asarray(values) == pytest.approx(np.asarray(expected, dtype=float))
    stds = [[float(r[f"on_context{j}_std"]) for j in range(4)] for r in replay]
    assert np.asarray(stds) == pytest.approx(np.ones((4, 4)))  # retrains 0.02 apart: std 0.01, 1 point
    naive = list(csv.DictReader(io.StringIO(plots["accuracy-matrix-hhar-fedclip-naive.csv"])))
    assert naive[1]["on_context0"] == naive[1]["on_context0_std"] == ""
    assert float(naive[1]["on_context1"]) == pytest.approx(6.0) and float(naive[1]["on_context1_std"]) == pytest.approx(1.0)
    joint = list(csv.DictReader(io.StringIO(plots["accuracy-matrix-hhar-clip-joint.csv"])))
    assert len(joint) == 4 and all(r[f"on_context{j}"] == r[f"on_context{j}_std"] == "" for r in joint
                                   for j in range(4))


def test_the_matrix_figure_draws_the_share_it_is_given(monkeypatch):
    """params.yaml report.matrix_pct: the matrices of that share, and the title names it; a share
    without matrices draws every panel n/a."""
    drawn = []
    monkeypatch.setattr(figures, "_png", lambda fig: drawn.append(fig) or b"png")
    inputs = _matrix_inputs(3)
    for doc in inputs.docs.values():
        doc["pcts"]["50"] = {"accuracy_matrix": [[[0.4 + 0.1 * i] * 3 for i in range(3)]] * 2}
    _, plots = report_figures.matrix_figure_and_plots(inputs, "hhar", "50")
    fig = drawn[-1]
    assert "each context (columns), 50% training users (continual methods" in fig.get_suptitle()
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert np.asarray(panels[0].images[0].get_array()) == pytest.approx(np.array([[40.0] * 3, [50.0] * 3, [60.0] * 3]))
    assert plots["accuracy-matrix-hhar-clip-naive.csv"].splitlines()[3] == "2,,60.0,60.0,60.0,0.0,0.0,0.0"  # 50%
    report_figures.matrix_figure_and_plots(inputs, "hhar", "75")
    assert all(not ax.images and [t.get_text() for t in ax.texts] == ["n/a"]
               for ax in drawn[-1].axes if ax.get_title())


def test_density_panels_overlay_the_ip_target_dashed_in_the_legend(monkeypatch):
    """Gap audit: the density figures drew the reservoir's density but not the N(μ, σ²) IP trained it
    toward. A target is the Gaussian's density over the panel's value range, dashed, black (or its
    line's colour), one legend entry, the panel's σ written in it; a panel without a target none."""
    from scipy.stats import norm

    drawn = []
    monkeypatch.setattr(figures, "_png", lambda fig: drawn.append(fig) or b"png")
    edges = np.linspace(-1, 1, 5)
    line = [("context 0", [0.5] * 4, None)]
    figures.density_grid("t", edges, [""], ["a", "b", "c"], [[line, line, line]],
                         [[[(0.0, 0.3, None)], [(0.1, 0.2, 0), (0.0, 0.5, 1)], []]])
    fig = drawn[0]
    a, b, c = fig.axes
    dashed = [ln for ln in a.lines if ln.get_linestyle() == "--"]
    assert len(dashed) == 1 and dashed[0].get_color() == "black"
    x = dashed[0].get_xdata()
    assert x[0] == -1.0 and x[-1] == 1.0
    np.testing.assert_allclose(dashed[0].get_ydata(), norm.pdf(x, 0.0, 0.3), rtol=1e-12)
    assert [t.get_text() for t in a.texts] == ["target σ 0.3"]
    dashed = [ln for ln in b.lines if ln.get_linestyle() == "--"]
    assert [ln.get_color() for ln in dashed] == ["tab:blue", "tab:orange"]  # lines 0 and 1's colours
    np.testing.assert_allclose(dashed[1].get_ydata(), norm.pdf(x, 0.0, 0.5), rtol=1e-12)
    assert [t.get_text() for t in b.texts] == ["target σ 0.2, 0.5"]
    assert not [ln for ln in c.lines if ln.get_linestyle() == "--"] and not c.texts
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["context 0", figures.TARGET_LABEL]
    assert b.get_legend_handles_labels()[1] == ["context 0", figures.LINE_TARGET_LABEL]  # coloured per line


def _with_targets(inputs: Inputs, sigma_of: dict[str, float]) -> Inputs:
    """Each share's activation entry with the IP target of its selected σ (``sigma_of``, by share)."""
    for doc in inputs.docs.values():
        doc["pcts"] = {pct: {**e, "activation": {**e["activation"], "target": {"mu": 0.0, "sigma": sigma_of[pct]}}}
                       for pct, e in doc["pcts"].items()}
    return inputs


def test_activation_figures_pass_each_panel_the_sigma_its_method_selected(monkeypatch):
    seen = []

    def fake(title, edges, row_labels, col_labels, cells, targets=None):
        seen.append(targets)
        return b"png"

    monkeypatch.setattr(figures, "density_grid", fake)
    sigma = {"25": 0.05, "50": 0.1, "75": 0.35, "100": 0.4}
    inputs = _with_targets(_activation_inputs(3), sigma)
    inputs.docs[("wesad", "fedip")] = inputs.docs[("wesad", "fedclip-naive")]
    inputs.paths[("wesad", "fedip")] = "fedip.json"
    report_figures.activation_figure_and_plots(inputs, "federated", "75")
    assert seen[-1] == [[[(0.0, 0.35, None)]] * 4]  # a panel per method, the 75% share's σ
    report_figures.activation_users_figure(inputs, "federated")
    assert seen[-1] == [[[(0.0, sigma[p], None)]] * 2 for p in ("25", "50", "75", "100")]  # a row per share
    report_figures.activation_contexts_figure(inputs, "federated", "25")
    assert seen[-1] == [[[(0.0, 0.05, None)]] * 3] * 3  # a row per strategy, a column per context
    inputs.docs[("wesad", "fedclip-replay")]["pcts"]["50"]["activation"] = None
    report_figures.activation_shares_figure(inputs, "federated")
    # a line per share: each share's σ in its line's colour; a share without densities none
    assert seen[-1][0][0] == [(0.0, sigma[p], i) for i, p in enumerate(("25", "50", "75", "100"))]
    assert seen[-1][0][1] == [(0.0, 0.05, 0), (0.0, 0.35, 2), (0.0, 0.4, 3)]
    del inputs.docs[("wesad", "fedip")]["pcts"]["100"]["activation"]["target"]  # written before it was recorded
    report_figures.activation_figure_and_plots(inputs, "federated", "100")
    assert seen[-1][0][0] == []


@pytest.mark.parametrize("target", [{"mu": 0.0}, {"mu": 0.0, "sigma": 0.0}, {"mu": "a", "sigma": 0.3}, [0.0, 0.3]])
def test_a_malformed_ip_target_names_the_file_and_key(target):
    inputs = _with_targets(_activation_inputs(3), {p: 0.3 for p in ("25", "50", "75", "100")})
    inputs.docs[("wesad", "fedclip-joint")]["pcts"]["25"]["activation"]["target"] = target
    with pytest.raises(DataError, match=r"^fedclip-joint\.json: pcts\.25\.activation\.target: expected "
                                        r"\{mu: a number, sigma: a number > 0\}, got .*; rerun `esnfed assess`$"):
        report_figures.activation_contexts_figure(inputs, "federated", "25")


def test_the_activation_plots_hold_each_density_s_std_over_the_retrains(monkeypatch):
    """The activation CSVs held the mean densities only while the figures draw their ± std bands:
    context<t>_std after the means, the population std over the retrains of each bin."""
    monkeypatch.setattr(figures, "_png", lambda fig: b"png")
    inputs = _activation_inputs(3)
    act = inputs.docs[("wesad", "fedclip-naive")]["pcts"]["25"]["activation"]
    inputs.docs[("wesad", "fedclip-naive")]["pcts"]["25"] = {"activation": {
        **act, "density": [[[[0.5] * 4] * 3] * 3, [[[0.3, 0.7, 0.5, 0.5]] * 3] * 3]}}
    _, plots = report_figures.activation_figure_and_plots(inputs, "federated", "25")
    rows = list(csv.DictReader(io.StringIO(plots["activation-wesad-fedclip-naive.csv"])))
    assert list(rows[0]) == ["value", "context0", "context1", "context2", "context3", "context4",
                             "context0_std", "context1_std", "context2_std", "context3_std", "context4_std"]
    assert [float(r["context0"]) for r in rows] == pytest.approx([0.4, 0.6, 0.5, 0.5])
    assert [float(r["context2_std"]) for r in rows] == pytest.approx([0.1, 0.1, 0.0, 0.0])
    assert rows[0]["context3"] == rows[0]["context3_std"] == ""  # 3 contexts of the plots' 5
