"""The report's gap-audit tables from assess documents with known numbers: continual-metrics (ACC,
forgetting, BWT, FWT of the accuracy matrices, esnfed_stages/report/continual_report.py) and ip-fit (the
activations' KL divergence to the IP target with and without IP, esnfed_stages/report/ipfit_report.py)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pytest

from esnfed_core.errors import DataError
from esnfed_core.method import CONTINUAL_METHODS
from esnfed_core.vocabulary import PCTS
from esnfed_stages.report import continual_report, ipfit_report, report
from esnfed_stages.report.ttest import Inputs

# Two retrains' accuracy matrices (3 contexts) of fedclip-replay at every share; C = 4 (chance 0.25).
R0 = [[0.5, 0.2, 0.1], [0.8, 0.8, 0.4], [0.6, 0.5, 0.9]]  # ACC 2/3, forgetting 0.25, BWT −0.1, FWT 0.05
R1 = [[0.7, 0.4, 0.1], [0.8, 0.8, 0.2], [0.7, 0.7, 0.9]]  # ACC 0.7667, forgetting 0.1, BWT −0.05, FWT 0.05


def _continual_inputs() -> Inputs:
    inputs = Inputs()
    for m in ("fedclip-replay", "clip-naive"):
        inputs.docs[("wesad", m)] = {"pcts": {p: {"accuracy_matrix": [R0, R1], "seeds": [0, 1],
                                                  "test_accuracy": [0.6, 0.7]} for p in PCTS}}
        inputs.paths[("wesad", m)] = Path(f"runs/assess/wesad/{m}.json")
    inputs.docs[("wesad", "clip-naive")]["pcts"]["50"]["accuracy_matrix"] = None  # no matrices there
    return inputs


def test_continual_metrics_are_the_retrains_mean_and_population_std_in_points():
    table = continual_report.rows(_continual_inputs(), ["wesad"], {"wesad": 4})
    assert [(r["method"], r["pct"]) for r in table] == [(m, p) for m in CONTINUAL_METHODS for p in PCTS]
    row = next(r for r in table if r["method"] == "fedclip-replay" and r["pct"] == "25")
    expected = {"acc": [200 / 3, 230 / 3], "forgetting": [25.0, 10.0], "bwt": [-10.0, -5.0], "fwt": [5.0, 5.0]}
    assert row["n"] == 2
    for metric, values in expected.items():
        assert row[metric] == pytest.approx((np.mean(values), np.std(values)), abs=1e-9), metric
    naive50 = next(r for r in table if r["method"] == "clip-naive" and r["pct"] == "50")
    assert naive50["n"] == 0 and all(naive50[m] is None for m in ("acc", "forgetting", "bwt", "fwt"))
    # C unknown (a dataset of your own without imports.<name>.classes): FWT n/a, the rest stand
    unknown = continual_report.rows(_continual_inputs(), ["wesad"], {"wesad": None})
    row = next(r for r in unknown if r["method"] == "fedclip-replay" and r["pct"] == "25")
    assert row["fwt"] is None and row["acc"] is not None


def test_continual_metrics_table_markdown_and_csv():
    classes = {"wesad": 4}
    table = continual_report.rows(_continual_inputs(), ["wesad"], classes)
    md = continual_report.markdown(table, ["Data source: synthetic", "Date: d", "Missing inputs (n/a cells): none"],
                                   classes)
    lines = md.splitlines()
    assert lines[0] == "# continual-metrics: forgetting and transfer of the continual methods over the contexts"
    assert lines[2] == "- Data source: synthetic" and "- FWT's chance level: WESAD C = 4, chance 25.00%" in lines
    assert "| dataset | method | train users | ACC | forgetting | BWT | FWT |" in lines
    assert "| WESAD | FedCLIP replay | 25% | 71.67 ± 5.00 | 17.50 ± 7.50 | -7.50 ± 2.50 | 5.00 ± 0.00 |" in lines
    assert "| WESAD | CLIP naive | 50% | n/a | n/a | n/a | n/a |" in lines
    rows = list(csv.DictReader(io.StringIO(continual_report.csv(table))))
    assert list(rows[0]) == list(continual_report.CSV_COLUMNS)
    bwt = next(r for r in rows if (r["method"], r["pct"], r["metric"]) == ("fedclip-replay", "25", "bwt"))
    assert (bwt["n"], float(bwt["mean"]), float(bwt["std"])) == ("2", pytest.approx(-7.5), pytest.approx(2.5))
    empty = next(r for r in rows if (r["method"], r["pct"], r["metric"]) == ("clip-naive", "50", "acc"))
    assert (empty["n"], empty["mean"], empty["std"]) == ("0", "", "")


def test_a_malformed_accuracy_matrix_names_the_file_and_key():
    inputs = _continual_inputs()
    inputs.docs[("wesad", "fedclip-replay")]["pcts"]["75"]["accuracy_matrix"] = [[0.5, 0.2]]
    with pytest.raises(DataError, match=r"fedclip-replay\.json: pcts\.75\.accuracy_matrix must be retrains × "
                                        r"contexts × contexts; rerun `esnfed assess`$"):
        continual_report.rows(inputs, ["wesad"], {"wesad": 4})


def _activation(sigma: float, kl: list, no_ip: list) -> dict:
    return {"edges": [-1.0, 0.0, 1.0], "users": ["S4"], "target": {"mu": 0.0, "sigma": sigma},
            "kl": kl, "unit_kl": [[v + 0.5 for v in r] for r in kl], "no_ip_kl": no_ip,
            "no_ip_unit_kl": [v + 1.0 for v in no_ip]}


def _fit_inputs() -> Inputs:
    inputs = Inputs()
    sigma = {"25": 0.05, "50": 0.1, "75": 0.35, "100": 0.4}
    # fedip: the final reservoir; fedclip-naive: a model after each of 2 contexts, the last one reported
    inputs.docs[("wesad", "fedip")] = {"pcts": {p: {"activation": _activation(sigma[p], [[0.2], [0.4]], [1.0, 2.0])}
                                                for p in PCTS}}
    inputs.docs[("wesad", "fedclip-naive")] = {"pcts": {p: {"activation": _activation(
        sigma[p], [[9.0, 0.3], [9.0, 0.3]], [1.5, 1.5])} for p in PCTS}}
    inputs.docs[("hhar", "fedip")] = {"pcts": {p: {"activation": None} for p in PCTS}}  # no densities on hhar
    for key in inputs.docs:
        inputs.paths[key] = Path(f"runs/assess/{key[0]}/{key[1]}.json")
    return inputs


def test_ip_fit_rows_report_the_final_reservoir_against_the_plain_one():
    table = ipfit_report.rows(_fit_inputs(), ["wesad", "hhar"])
    assert {r["dataset"] for r in table} == {"wesad"}  # hhar has no activation entries
    assert [(r["method"], r["pct"]) for r in table] == [(m, p) for m in ("fedip", "fedclip-naive") for p in PCTS]
    fedip = table[3]
    assert (fedip["mu"], fedip["sigma"], fedip["n"]) == (0.0, 0.4, 2)
    assert fedip["kl"] == pytest.approx((0.3, 0.1)) and fedip["no_ip_kl"] == pytest.approx((1.5, 0.5))
    assert fedip["unit_kl"] == pytest.approx((0.8, 0.1)) and fedip["no_ip_unit_kl"] == pytest.approx((2.5, 0.5))
    naive = table[4]
    assert naive["kl"] == pytest.approx((0.3, 0.0))  # after the last context, not the first (9.0)
    md = ipfit_report.markdown(table, ["Data source: synthetic", "Date: d"])
    assert ("| WESAD | FedIP | 100% | 0 | 0.4 | 0.300 ± 0.100 | 1.500 ± 0.500 | 0.800 ± 0.100 | 2.500 ± 0.500 |"
            in md.splitlines())
    rows = list(csv.DictReader(io.StringIO(ipfit_report.csv(table))))
    assert list(rows[0]) == list(ipfit_report.CSV_COLUMNS) and len(rows) == 8 * 4
    no_ip = next(r for r in rows if (r["method"], r["pct"], r["column"]) == ("fedip", "25", "no_ip_kl"))
    assert (no_ip["sigma"], float(no_ip["mean"]), float(no_ip["std"])) == ("0.05", 1.5, 0.5)


def test_ip_fit_of_a_file_without_it_is_na_and_a_malformed_one_is_refused():
    inputs = _fit_inputs()
    act = inputs.docs[("wesad", "fedip")]["pcts"]["50"]["activation"]
    for key in ("target", *ipfit_report.COLUMNS):
        del act[key]  # assessed before the fit was recorded
    table = ipfit_report.rows(inputs, ["wesad"])
    row = next(r for r in table if (r["method"], r["pct"]) == ("fedip", "50"))
    assert row["sigma"] is None and all(row[k] is None for k in ipfit_report.COLUMNS)
    assert "| WESAD | FedIP | 50% | n/a | n/a | n/a | n/a | n/a | n/a |" in ipfit_report.markdown(table, ["a"])
    inputs.docs[("wesad", "fedclip-naive")]["pcts"]["75"]["activation"]["no_ip_kl"] = [[1.0], [2.0]]
    with pytest.raises(DataError, match=r"^runs/assess/wesad/fedclip-naive\.json: pcts\.75\.activation\.no_ip_kl: "
                                        r"expected a number per retrain; rerun `esnfed assess`$"):
        ipfit_report.rows(inputs, ["wesad"])
    inputs.docs[("wesad", "fedclip-naive")]["pcts"]["75"]["activation"]["no_ip_kl"] = [1.0, 2.0]
    inputs.docs[("wesad", "fedclip-naive")]["pcts"]["75"]["activation"]["kl"] = [[0.1], "x"]
    with pytest.raises(DataError, match=r"pcts\.75\.activation\.kl: expected a number per retrain and model"):
        ipfit_report.rows(inputs, ["wesad"])


def test_the_report_writes_both_tables_with_a_run_header():
    rep = report.Report()
    inputs = _continual_inputs()
    inputs.docs.update(_fit_inputs().docs)
    inputs.paths.update(_fit_inputs().paths)
    for doc in inputs.docs.values():
        for entry in doc["pcts"].values():
            entry.setdefault("seeds", [0, 1])
            entry.setdefault("test_accuracy", [0.6, 0.7])
        doc.update(source="synthetic", budget="default")
    inputs.missing.append(Path("runs/assess/wesad/clip-joint.json"))
    report.add_summaries(rep, inputs, "2023-11-14", ["wesad", "hhar"], ["wesad"])
    assert list(rep.tables) == ["continual-metrics.md", "continual-metrics.csv", "ip-fit.md", "ip-fit.csv"]
    md = rep.tables["continual-metrics.md"].decode()
    assert "- Data source: synthetic; budget: default; retrains per cell: 2 (seeds [0, 1])" in md
    assert "- Missing inputs (n/a cells): runs/assess/wesad/clip-joint.json" in md
    assert "- Date: 2023-11-14; versions: esnfed " in md
    assert "| WESAD | CLIP joint | 25% | n/a | n/a | n/a | n/a |" in md
    fit = rep.tables["ip-fit.md"].decode()  # the missing CLIP joint is an IP method too: its rows n/a
    assert "- Missing inputs (n/a cells): runs/assess/wesad/clip-joint.json" in fit
    assert "| WESAD | CLIP joint | 25% | n/a | n/a | n/a | n/a | n/a | n/a |" in fit
    assert "| WESAD | FedIP | 25% | 0 | 0.05 | 0.300 ± 0.100 |" in fit
    # a dataset of your own: its own table, so the papers' stays as it is whatever else is declared
    mine = Inputs(docs={("mine", m): d for (_, m), d in _continual_inputs().docs.items()},
                  paths={("mine", m): p for (_, m), p in _continual_inputs().paths.items()})
    both = report.Report()
    report.add_summaries(both, Inputs(docs={**inputs.docs, **mine.docs}, paths={**inputs.paths, **mine.paths},
                                      missing=list(inputs.missing)),
                         "2023-11-14", ["wesad", "hhar", "mine"], ["wesad", "mine"], {"mine": 3})
    assert {k: v for k, v in both.tables.items() if not k.startswith("mine-")} == rep.tables
    head = both.tables["mine-continual-metrics.md"].decode().splitlines()
    assert head[0] == "# mine-continual-metrics: mine: forgetting and transfer of the continual methods over the contexts"
    assert "- FWT's chance level: mine C = 3, chance 33.33%" in head
    # without datasets with contexts or densities: neither table
    rep = report.Report()
    report.add_summaries(rep, Inputs(), "2023-11-14", ["hhar"], [])
    assert rep.tables == {}


def test_ip_fit_names_the_deep_method_as_the_deep_table_does():
    inputs = _fit_inputs()
    inputs.docs[("wesad", "deep-fedip")] = inputs.docs[("wesad", "fedip")]
    inputs.paths[("wesad", "deep-fedip")] = Path("runs/assess/wesad/deep-fedip.json")
    md = ipfit_report.markdown(ipfit_report.rows(inputs, ["wesad"]), ["a"])
    assert "| WESAD | deep-fedip | 25% | 0 | 0.05 | 0.300 ± 0.100 |" in md.splitlines()[-4]
