"""Pure table assembly (esnfed_stages.report.table_specs, cells): cell values and format, marks, layout, CSV,
communication formulas and metrics, checked against independent computations."""

import csv
import io
import json
import statistics

import pytest

from esnfed_core.errors import DataError
from esnfed_core.stats import compare_to_best
from esnfed_core.communication import Communication, communication_rows, split_rounds
from esnfed_stages.report.cells import build_cells, mean_std_percent, metrics
from esnfed_stages.report.table_specs import (
    TABLES, TABLE_IDS, TableSpec, generic_tables, parse_published, required_inputs, table_spec,
)
from esnfed_core.vocabulary import PCTS
from esnfed_stages.report.tables import (
    CSV_COLUMNS, cells_csv, communication_csv, format_value, not_applicable_note, render_communication_markdown,
    render_markdown,
)

LOW = [0.70, 0.72, 0.71]
HIGH = [0.80, 0.79, 0.81]


def _expected(values):
    mean = statistics.fmean(values) * 100
    std = statistics.pstdev(values) * 100  # population std, independent of numpy
    return f"{mean:.2f} ± {std:.2f}"


def test_table_ids_are_protocol_section_7():
    assert set(TABLE_IDS) == {"ijcnn-wesad", "ijcnn-hhar", "esann", "fedip", "fedclip",
                              "ip-centralized", "clip-centralized", "deep"}  # deep: not in the papers


def test_required_inputs_cover_every_method_once():
    needed = required_inputs()
    assert len(needed) == len(set(needed)) == 28  # 24 of the papers + deep-{incfed,fedip}
    assert ("wesad", "fedclip-joint") in needed and ("hhar", "random") in needed


def test_cell_is_mean_and_population_std_times_100():
    mean, std = mean_std_percent(LOW)
    assert format_value(mean, std) == _expected(LOW) == "71.00 ± 0.82"
    assert format_value(mean, std, "bold") == "**71.00 ± 0.82**"
    assert format_value(mean, std, "italic") == "*71.00 ± 0.82*"
    assert format_value(24.59, None) == "24.59"
    assert format_value(None, None) == "n/a"


def _scores(spec, low_method, high_method, datasets=None):
    out = {}
    for ds in datasets or spec.datasets:
        for pct in PCTS:
            out[(ds, low_method, pct, "test")] = LOW
            out[(ds, high_method, pct, "test")] = HIGH
    return out


def _comparisons(spec, scores):
    recs = []
    for ds in spec.datasets:
        for pct in PCTS:
            group = {m: scores[(ds, m, pct, "test")] for m in spec.method_ids
                     if (ds, m, pct, "test") in scores}
            best, tests = compare_to_best(group)
            for other, r in tests.items():
                recs.append({"table": spec.id, "dataset": ds, "pct": pct, "column": "test",
                             "a": best, "b": other, "mean_a": r.mean_a, "mean_b": r.mean_b,
                             "t": r.t, "p": r.p, "significant": r.significant})
    return recs


PUBLISHED_DOC = {
    tid: {"columns": [], "rows": {}} for tid in TABLE_IDS
} | {"fedip": {"columns": ["wesad/without-fedip", "wesad/with-fedip", "hhar/without-fedip",
                           "hhar/with-fedip"],
               "rows": {25: [[72.09, 0.59, ""], [78.68, 0.12, "bold"], [57.08, 3.11, ""],
                             [69.83, 0.64, "bold"]]}}}


def test_build_cells_values_marks_and_published():
    spec = table_spec("fedip")
    scores = _scores(spec, "incfed", "fedip")
    published = parse_published(PUBLISHED_DOC)
    cells = build_cells(spec, scores, _comparisons(spec, scores), published)
    assert len(cells) == 4 * 2 * 2
    by = {(c.dataset, c.pct, c.method): c for c in cells}
    hi, lo = by[("wesad", "25", "fedip")], by[("wesad", "25", "incfed")]
    assert format_value(hi.mean, hi.std) == _expected(HIGH)
    assert (hi.mark, lo.mark) == ("bold", "")
    assert (hi.published_mean, hi.published_std, hi.published_mark) == (78.68, 0.12, "bold")
    assert (lo.published_mean, lo.published_std) == (72.09, 0.59)
    assert by[("hhar", "50", "fedip")].published_mean is None  # not in this test's document
    assert hi.n == 3 and hi.p_value == lo.p_value  # the best shows its (only) comparison's p


def test_markdown_layout():
    spec = table_spec("fedip")
    scores = _scores(spec, "incfed", "fedip")
    cells = build_cells(spec, scores, _comparisons(spec, scores), parse_published(PUBLISHED_DOC))
    md = render_markdown(spec, cells, ["Data source: synthetic"])
    lines = md.splitlines()
    assert lines[0].startswith("# fedip")
    assert "- Data source: synthetic" in lines
    header = next(line for line in lines if line.startswith("| train users"))
    assert header.split(" | ")[1:3] == ["WESAD without-fedip", "paper"]
    row25 = next(line for line in lines if line.startswith("| 25% "))
    assert row25.split(" | ")[1:5] == [_expected(LOW), "72.09 ± 0.59",
                                       f"**{_expected(HIGH)}**", "**78.68 ± 0.12**"]
    assert [line.split(" | ")[0] for line in lines if line.startswith("| ") and "%" in
            line.split(" | ")[0]] == ["| 25%", "| 50%", "| 75%", "| 100%"]


def test_missing_method_gives_na_and_no_marks():
    spec = table_spec("fedclip")
    scores = {(ds, "fedclip-replay", pct, "test"): HIGH for ds in spec.datasets for pct in PCTS}
    cells = build_cells(spec, scores, [], parse_published(PUBLISHED_DOC))
    naive = [c for c in cells if c.method == "fedclip-naive"]
    assert all(c.mean is None and c.n == 0 and c.mark == "" for c in naive)
    md = render_markdown(spec, cells, [])
    assert "n/a" in md and _expected(HIGH) in md


def test_ijcnn_has_train_and_test_columns_and_marks_only_test():
    spec = table_spec("ijcnn-wesad")
    assert spec.columns == ("train", "test")
    scores = _scores(spec, "fedavg", "incfed")
    scores.update({("wesad", m, p, "train"): HIGH for m in ("fedavg", "incfed") for p in PCTS})
    cells = build_cells(spec, scores, _comparisons(spec, scores), parse_published(PUBLISHED_DOC))
    assert {c.mark for c in cells if c.column == "train"} == {""}
    assert {c.mark for c in cells if c.column == "test" and c.method == "incfed"} == {"bold"}
    assert spec.published_column("wesad", "centralized", "test") == "centralized/test"


def test_csv_has_one_row_per_cell():
    spec = table_spec("fedip")
    scores = _scores(spec, "incfed", "fedip")
    cells = build_cells(spec, scores, _comparisons(spec, scores), parse_published(PUBLISHED_DOC))
    rows = list(csv.DictReader(io.StringIO(cells_csv(cells))))
    assert tuple(rows[0].keys()) == CSV_COLUMNS
    assert len(rows) == len(cells)
    r = next(r for r in rows if r["dataset"] == "wesad" and r["pct"] == "25"
             and r["method"] == "fedip")
    assert float(r["mean"]) == pytest.approx(statistics.fmean(HIGH) * 100)
    assert float(r["std"]) == pytest.approx(statistics.pstdev(HIGH) * 100)
    assert (r["mark"], r["published_mean"], r["published_std"], r["n"]) == ("bold", "78.68", "0.12", "3")
    assert r["p_value"] != ""
    empty = next(r for r in rows if r["dataset"] == "hhar" and r["pct"] == "50")
    assert empty["published_mean"] == ""


def test_parse_published_rejects_ragged_rows():
    doc = dict(PUBLISHED_DOC)
    doc["fedip"] = {"columns": ["a", "b"], "rows": {25: [[1.0, 0.1, ""]]}}
    with pytest.raises(DataError, match="fedip row 25"):
        parse_published(doc)


def test_communication_formulas():
    n, c, k = 10, 4, 3
    items = [
        Communication("wesad", "100", "incfed", k * (n * n + n * c), k * n * c, 1, 1, 1, k, n, c),
        Communication("wesad", "100", "fedavg", k * n * c, k * n * c + 1, 1, 1, 1, k, n, c),
        Communication("wesad", "100", "fedip", k * (2 * n * 7 + n * n + n * c), k * (2 * n * 7 + n * c),
                      0, 0, 8, k, n, c, ip_rounds=7, readouts=1),
        Communication("hhar", "100", "fedclip-joint", 1, 1, 1, 1, 1, k, None, c),
    ]
    rows = communication_rows(items)
    inc, avg, fip, clip = rows
    assert (inc["analytic_up_floats"], inc["analytic_down_floats"]) == (420, 120)
    assert inc["up_floats_per_client_round"] == 140 and inc["match"] is True
    assert avg["match"] is False  # one float too many downstream is caught
    assert fip["analytic_up_floats"] == k * (140 + 140) and fip["match"] is True
    assert fip["up_floats_per_client_round"] == pytest.approx(fip["up_floats"] / (k * 8))
    assert clip["analytic_up_floats"] is None and clip["match"] is None
    shown = [r["match"] for r in csv.DictReader(io.StringIO(communication_csv(rows)))]
    assert shown == ["yes", "no", "yes", ""]  # the stage renders the core's booleans


def test_communication_cells_that_do_not_apply_read_a_dash_the_header_says_why():
    """The audit: local read 0.0 per client per round over 0 rounds; IP rounds / readouts
    read n/a / n/a for IncFed but n/a / 0 or n/a / 1 for the heterogeneous methods, unexplained.
    Where the count does not apply the cell reads "—", an unknown one n/a, and one header line says
    which is which; the CSV leaves a per-round figure of no round empty."""
    n, c, k = 10, 4, 3
    items = [
        Communication("wesad", "100", "incfed", k * (n * n + n * c), k * n * c, 1, 1, 1, k, n, c),
        Communication("wesad", "100", "fedip", k * (2 * n * 7 + n * n + n * c), k * (2 * n * 7 + n * c),
                      0, 0, 8, k, n, c, ip_rounds=7, readouts=1),
        Communication("wesad", "100", "fedclip-naive", 1, 1, 1, 1, 8, k, n, c),  # contexts unknown: n/a
        Communication("wesad", "100", "local", 0, 0, 0, 0, 0, k, n, c),
        Communication("wesad", "100", "align-0.5", k * (n * n + n * c), k * n * c, 1, 1, 1, k, n, c),
    ]
    rows = communication_rows(items)
    assert rows[3]["up_floats_per_client_round"] is None and rows[0]["up_floats_per_client_round"] == 140
    note = not_applicable_note(rows)
    md = render_communication_markdown(rows, ["Date: today", *note]).splitlines()
    body = {line.split(" | ")[2]: line.split(" | ") for line in md if line.startswith("| WESAD")}
    assert body["incfed"][7:9] == body["align-0.5"][7:9] == ["—", "—"]  # IP rounds, readouts
    assert body["fedip"][7:9] == ["7", "1"] and body["fedclip-naive"][7:9] == ["n/a", "n/a"]
    assert body["local"][6:13] == ["0", "—", "—", "—", "—", "—", "—"] and body["local"][13:17] == ["0"] * 4
    assert note == ["—: does not apply: IP rounds and readouts of every method but FedIP and FedCLIP (the others "
                    "run no IP round: their rounds are not split); per client per round where no round ran (local "
                    "sends nothing: rounds 0, totals 0)"]
    assert not_applicable_note(rows[1:2]) == []
    local = list(csv.DictReader(io.StringIO(communication_csv(rows))))[3]
    assert local["up_floats_per_client_round"] == "" and local["up_floats"] == "0"
    # docs/reports.md: the CSV leaves "—" and n/a alike empty, so its count columns stay numbers (NaN to pandas)
    table = {r["method"]: r for r in csv.DictReader(io.StringIO(communication_csv(rows)))}
    assert [table[m]["ip_rounds"] for m in ("incfed", "fedip", "fedclip-naive", "align-0.5")] == ["", "7", "", ""]
    assert all(v == "" or float(v) >= 0 for r in table.values() for k, v in r.items()
               if k not in ("dataset", "method", "formula_up", "formula_down", "match"))


def test_split_rounds_follows_the_ledger_count():
    assert split_rounds("fedip", 11, None) == (10, 1)
    assert split_rounds("fedclip-naive", 25, 5) == (20, 5)
    assert split_rounds("fedclip-joint", 40, 5) == (20, 20)
    assert split_rounds("fedclip-replay", 25, None) == (None, None)
    assert split_rounds("incfed", 1, None) == (None, None)


def test_metrics_are_test_means_and_stable():
    scores = {("wesad", "ridge", "25", "test"): LOW, ("wesad", "ridge", "25", "train"): HIGH,
              ("hhar", "ip", "100", "test"): HIGH}
    m = metrics(scores)
    assert m == {"wesad": {"ridge": {"25": round(statistics.fmean(LOW), 6)}},
                 "hhar": {"ip": {"100": round(statistics.fmean(HIGH), 6)}}}
    reordered = dict(reversed(list(scores.items())))
    assert json.dumps(metrics(reordered)) == json.dumps(m)


# ---------------------------------------------------------------------------------------------
# A user dataset's generic tables: each family (a proposed method and its baselines) marked on
# its own, as the papers' tables are

def _generic_cells(spec, scores):
    from esnfed_stages.report.ttest import comparisons

    comps = comparisons([spec], scores, "welch", 0.05)
    return {(c.pct, c.method): c for c in build_cells(spec, scores, comps, {})}


def test_user_continual_table_marks_clip_and_fedclip_each_within_itself():
    spec = next(s for s in generic_tables("example", True) if s.id == "example-continual")
    # /tmp/ci's 25 % row in kind: a CLIP method is the row's best; FedCLIP joint and replay are not
    # significantly different (two retrains), naive significantly below replay.
    scores = {("example", m, pct, "test"): v for pct in PCTS for m, v in {
        "clip-naive": [0.731, 0.732], "clip-replay": [0.60, 0.601], "clip-joint": [0.855, 0.856],
        "fedclip-naive": [0.70, 0.701], "fedclip-replay": [0.737, 0.738], "fedclip-joint": [0.84, 0.86]}.items()}
    cells = _generic_cells(spec, scores)
    marks = {m: cells[("25", m)].mark for m in spec.method_ids}
    assert marks == {"clip-naive": "", "clip-replay": "", "clip-joint": "bold",
                     "fedclip-naive": "", "fedclip-replay": "italic", "fedclip-joint": "italic"}
    assert [sorted({m for p in f for m in p}) for f in spec.families] == [
        ["clip-joint", "clip-naive", "clip-replay"], ["fedclip-joint", "fedclip-naive", "fedclip-replay"]]
    assert "separately" in spec.note


def test_user_stationary_tables_mark_each_paper_comparison_and_equal_scores_alike():
    specs = {s.id: s for s in generic_tables("example", False)}
    assert list(specs) == ["example-stationary-incfed", "example-stationary-fedip", "example-stationary-ip"]
    assert [s.pairs for s in specs.values()] == [(("incfed", "fedavg"),), (("fedip", "incfed"),), (("ip", "ridge"),)]
    # ridge and incfed have the same scores (IncFed's readout is ridge's), so do ip and fedip
    # (/tmp/ci's 50 % row): the same comparisons, the same marks, whatever the table order.
    same = [0.80396, 0.80395]
    scores = {("example", m, pct, "test"): v for pct in PCTS for m, v in {
        "random": [0.33, 0.34], "ridge": [0.7879, 0.7983], "incfed": [0.7879, 0.7983], "fedavg": [0.70, 0.701],
        "ip": same, "fedip": same}.items()}
    marks = {sid: {m: c.mark for (pct, m), c in _generic_cells(spec, scores).items() if pct == "50"}
             for sid, spec in specs.items()}
    assert marks["example-stationary-incfed"] == {"random": "", "fedavg": "", "incfed": "bold"}
    assert marks["example-stationary-fedip"] == {"incfed": "italic", "fedip": "italic"}
    assert marks["example-stationary-ip"] == {"ridge": "italic", "ip": "italic"}


def test_a_method_in_two_families_is_refused():
    methods = (("fedavg", "fedavg"), ("incfed", "incfed"), ("fedip", "fedip"))
    spec = TableSpec("x", "x", ("example",), methods, pairs=(("incfed", "fedavg"), ("fedip", "incfed")))
    with pytest.raises(ValueError, match="incfed is in the pairs of two proposed methods"):
        build_cells(spec, {}, [], {})
    for spec in TABLES + generic_tables("example", True):  # every bold/italic table
        assert spec.families and {m for f in spec.families for p in f for m in p} == \
            {m for p in spec.pairs for m in p}


def test_deep_table_takes_the_study_datasets_yours_included_without_a_paper_column():
    """study_datasets may list a dataset of your own (before: the deep table's datasets were the
    papers' of study_datasets only, so a study of `example` had no deep table): its rows are the
    study datasets, the papers' first; no paper column, whatever the datasets."""
    from esnfed_stages.report.table_specs import table_specs

    specs = {s.id: s for s in table_specs(("wesad", "hhar", "example"), ("wesad",), ("example", "wesad"))}
    assert specs["deep"].datasets == ("wesad", "example") and not specs["deep"].has_published
    alone = {s.id: s for s in table_specs(("example",), ("example",), ("example",))}
    deep = alone["deep"]
    assert deep.datasets == ("example",) and deep.title.endswith("(example)")
    assert list(alone) == ["deep", "example-stationary-incfed", "example-stationary-fedip", "example-stationary-ip",
                           "example-continual"]
    scores = {("example", m, pct, "test"): v for pct in PCTS for m, v in {
        "incfed": LOW, "deep-incfed": HIGH, "fedip": LOW, "deep-fedip": HIGH}.items()}
    cells = build_cells(deep, scores, [], {})
    md = render_markdown(deep, cells, ["header"])
    head = next(line for line in md.splitlines() if line.startswith("| train users"))
    assert "paper" not in head and "WESAD" not in md
    assert len([line for line in md.splitlines() if line.startswith(("| 25%", "| 100%"))]) == 2
    assert {c.published_mean for c in cells} == {None} and {c.dataset for c in cells} == {"example"}
    both = build_cells(specs["deep"], {**scores, **{("wesad",) + k[1:]: v for k, v in scores.items()}}, [], {})
    md = render_markdown(specs["deep"], both, ["header"])
    head = next(line for line in md.splitlines() if line.startswith("| train users"))
    assert "WESAD deep-incfed" in head and "example deep-incfed" in head and "paper" not in head
    assert table_specs(("example",), ("example",), ())[0].id != "deep"  # no study: no deep table
