"""dvc.yaml's top-level `plots` against the CSVs the report writes: DVC tells the lines of a plot
apart by dash pattern only and has 7 of them (dvc_render's stroke_dash range; an 8th line repeats
the 1st), so no plot may draw more than 7 lines, and each line must be a column of the CSV that the
report writes for the repository's params.yaml (its datasets, their numbers of contexts, the shares,
the study datasets and α of the alignment plot)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
import yaml

from esnfed_core.method import Method
from esnfed_core.vocabulary import PCTS, STRATEGIES
from esnfed_stages import figures, hetero_report, report
from esnfed_stages.report_figures import ACTIVATION_DATASET, SETTINGS, STATIONARY
from esnfed_stages.ttest import Inputs

ROOT = Path(__file__).resolve().parents[1]
PARAMS = yaml.safe_load((ROOT / "params.yaml").read_text())
DVC_LINES = 7  # dvc_render.vega.OPTIONAL_ANCHOR_RANGES["stroke_dash"]


def _contexts(ds: str) -> int:
    """The number of contexts params.yaml gives ``ds``: WESAD's label runs, HHAR's devices, a user
    dataset's context values."""
    if ds == "wesad":
        return PARAMS["preprocess"]["wesad"]["contexts"]
    if ds == "hhar":
        return len(PARAMS["preprocess"]["hhar"]["devices"])
    return len(PARAMS["imports"][ds]["contexts"])


def _activation(contexts: int) -> dict:
    edges = [-1.0, -0.5, 0.0, 0.5, 1.0]
    return {"edges": edges, "users": ["S4"],
            "density": [[[[0.5] * 4 for _ in range(contexts)] for _ in range(contexts)]] * 2,
            "user_density": [[[[[0.5] * 4 for _ in range(contexts)]] for _ in range(contexts)]] * 2}


def _inputs() -> Inputs:
    """Assess documents of every method, share and context of params.yaml's datasets (two retrains)."""
    inputs = Inputs()
    for ds in PARAMS["datasets"]:
        n = _contexts(ds)
        continual = [f"{prefix}-{s}" for prefix, _ in SETTINGS.values() for s in STRATEGIES] \
            if ds in PARAMS["continual_datasets"] else []
        for m in continual + [stationary for _, stationary in SETTINGS.values()]:
            entry = {"stream_accuracy": [[0.8] * n] * 2, "accuracy_matrix": [[[0.7] * n] * n] * 2} \
                if m in continual else {}
            if ds == ACTIVATION_DATASET:
                entry["activation"] = _activation(n)
            inputs.docs[(ds, m)] = {"pcts": {pct: entry for pct in PCTS}}
            inputs.paths[(ds, m)] = Path(f"{ds}-{m}.json")
        for m in {"random", *(m for methods in STATIONARY.values() for m in methods)}:
            for pct in PCTS:
                inputs.scores[(ds, m, pct, "test")] = [0.6, 0.62]
    return inputs


@pytest.fixture(scope="module")
def written() -> dict[str, list[str]]:
    """The header of every plots CSV the report writes, by file name."""
    rep = report.Report()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(figures, "_png", lambda fig: b"png")  # the CSVs, not the drawing, are under test
        inputs = _inputs()
        report.add_figures(rep, inputs, PARAMS["datasets"], PARAMS["continual_datasets"], {},
                           str(PARAMS["report"]["activation_pct"]), str(PARAMS["report"]["contexts_pct"]))
        het = PARAMS["heterogeneity"]
        alphas, shares = het["alphas"], het["pcts"]["default"]
        for ds in PARAMS["study_datasets"]:
            for a in alphas:
                for pct in shares:
                    inputs.scores[(ds, Method("align", alpha=a).id, pct, "test")] = [0.6, 0.62]
        _, alpha_csv = hetero_report.alpha_figure_and_plot(inputs, alphas, shares, PARAMS["study_datasets"])
        rep.plots["heterogeneous-alpha.csv"] = alpha_csv.encode()
    return {name: next(csv.reader(io.StringIO(data.decode()))) for name, data in rep.plots.items()}


def _plots() -> list[tuple[str, dict]]:
    plots = yaml.safe_load((ROOT / "dvc.yaml").read_text())["plots"]
    return [next(iter(p.items())) for p in plots if isinstance(p, dict)]


@pytest.mark.parametrize("plot_id, spec", _plots(), ids=[plot_id for plot_id, _ in _plots()])
def test_each_plot_draws_at_most_7_lines_each_a_column_the_report_writes(written, plot_id, spec):
    lines = [(path, column) for path, columns in spec["y"].items() for column in columns]
    assert 0 < len(lines) <= DVC_LINES, (plot_id, lines)
    for path, column in lines:
        name = Path(path).name
        assert Path(path).parent == Path("reports/plots") and name in written, (plot_id, path)
        assert column in written[name] and spec["x"] in written[name], (plot_id, column, written[name])


def test_the_plots_cover_every_csv_the_report_writes_for_the_repository_params(written):
    drawn = {Path(path).name for _, spec in _plots() for path in spec["y"]}
    assert drawn == set(written)
