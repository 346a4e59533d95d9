"""Reader audit: a paper table put our numbers beside the published ones with only "Data source:
synthetic; budget: default", inviting a "failed reproduction" reading. Every table with a paper
column, and the report's index, now say what was run (source, budget's trials, retrains and units)
and, unless it is the real data under budget `paper` (or under the budget of the paper the table is
taken from: `esann` for the ESANN 2022 tables, `ijcnn` for the IJCNN 2021 ones), that the paper
columns are not a target."""

from __future__ import annotations

from pathlib import Path

import pytest

from esnfed_stages.report.table_specs import TABLES, table_specs
from esnfed_core.vocabulary import PCTS
from esnfed_stages.report import protocol_tables, report, report_index
from esnfed_stages.report.report_params import report_params
from esnfed_stages.report.comparability import BudgetScale, budget_scale, notice, papers_protocol, table_budgets
from esnfed_stages.params.experiment import budget_spec
from esnfed_stages.report.ttest import Inputs
from esnfed_stages.params.load import load_params

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = BudgetScale("default", 3, 2, (("wesad", "20–40"), ("hhar", "20–40")))
PAPER = BudgetScale("paper", 100, 5, (("wesad", "200–400"), ("hhar", "100–500")))
TTEST = {"variant": "welch", "alpha": 0.05, "comparisons": []}


def _params() -> dict:
    return load_params(ROOT / "params.yaml")


def test_budget_scale_reads_trials_retrains_and_units_of_params_budget():
    params = _params()
    assert params["budget"] == "default"
    assert budget_scale(budget_spec(params)) == DEFAULT
    assert budget_scale(budget_spec({**params, "budget": "paper"})) == PAPER
    assert budget_scale(budget_spec({})) is None
    assert budget_scale(budget_spec({"budget": "mine"})) == BudgetScale("mine")
    assert budget_scale(report_params(params).budget) == DEFAULT
    assert DEFAULT.text() == "3 trials, 2 retrains, units 20–40"
    assert PAPER.text() == "100 trials, 5 retrains, units 200–400 (WESAD), 100–500 (HHAR)"
    assert PAPER.text(("hhar",)) == "100 trials, 5 retrains, units 100–500"


def test_synthetic_default_run_is_flagged_as_not_comparable():
    line = notice(["synthetic"] * 3, ["default"] * 3, DEFAULT)
    assert line.startswith("**Not comparable with the published values:** this run used the embedded "
                           "synthetic data (data.source: synthetic), not the real recordings, and budget "
                           "`default` (3 trials, 2 retrains, units 20–40), not the papers' protocol")
    assert "The 'paper' columns are the published values, shown for reference, not a target for this run" in line
    assert line.endswith("compare the methods within this run.")  # its last sentence ends


def test_each_departure_from_the_papers_protocol_is_named():
    raw_small = notice(["raw"], ["reduced"], BudgetScale("reduced", 20, 3))
    assert "Not comparable" in raw_small and "the real recordings (data.source: raw)" in raw_small
    assert "budget `reduced` (20 trials, 3 retrains), not the papers' protocol" in raw_small
    assert "not the real recordings" not in raw_small
    synth_paper = notice(["synthetic"], ["paper"], PAPER)
    assert "Not comparable" in synth_paper and "not the real recordings" in synth_paper
    assert "the papers' budget `paper` (100 trials, 5 retrains" in synth_paper
    mixed = notice(["raw", "synthetic"], ["paper"], PAPER)
    assert "Not comparable" in mixed and "data source raw, synthetic, not the real recordings" in mixed
    # a scale of another budget than the files' is not printed as theirs
    assert "trials" not in notice(["synthetic"], ["default"], PAPER)


def test_real_data_under_the_paper_budget_states_the_protocol_without_a_warning():
    line = notice(["raw"] * 4, ["paper"] * 4, PAPER)
    assert line == ("Protocol: the papers' (PROTOCOL §6): the real recordings (data.source: raw) under "
                    "budget `paper` (100 trials, 5 retrains, units 200–400 (WESAD), 100–500 (HHAR)). "
                    "The 'paper' columns are the published values beside ours.")
    assert "comparable" not in line.lower()


def _inputs(source: str, budget: str, extra=()) -> Inputs:
    specs = table_specs(("wesad", "hhar", "mine"), ("wesad", "hhar", "mine")) + tuple(extra)
    keys = {(ds, m) for s in specs for ds in s.datasets for m in s.method_ids}
    entry = {"seeds": [0, 1], "test_accuracy": [0.5, 0.6]}
    return Inputs(docs={k: {"source": source, "budget": budget, "pcts": {p: entry for p in PCTS}} for k in keys})


def test_every_paper_table_header_carries_the_line_second_and_no_other_table_does():
    inputs = _inputs("synthetic", "default")
    for spec in table_specs(("wesad", "hhar", "mine"), ("wesad", "hhar", "mine")):
        lines = report.header_lines(spec, inputs, TTEST, "2023-11-14", DEFAULT)
        assert lines[0].startswith("Data source: synthetic; budget: default")
        flagged = [line for line in lines if "Not comparable" in line]
        if spec.has_published:
            assert flagged == [lines[1]], spec.id
            assert "(3 trials, 2 retrains, units 20–40)" in lines[1]
        else:  # deep and a user dataset's generic tables: no paper column
            assert flagged == [], spec.id
    # communication.md and the heterogeneous table (spec None): no paper column, no line
    assert not any("Not comparable" in line for line in report.header_lines(None, inputs, TTEST, "d", DEFAULT))
    real = report.header_lines(TABLES[0], _inputs("raw", "paper"), TTEST, "d", PAPER)
    assert real[1].startswith("Protocol: the papers' (PROTOCOL §6)") and "Not comparable" not in "".join(real)


def test_the_index_leads_with_the_line_over_the_paper_tables_inputs():
    options = report.ReportParams("100", datasets=("wesad", "hhar", "mine"), continual=("wesad", "hhar"),
                                  budget=budget_spec(_params()))
    line = report.index_notice(_inputs("synthetic", "default"), options)
    assert line.startswith("**Not comparable") and "The tables' 'paper' columns are the published values" in line
    assert report.index_notice(_inputs("raw", "paper"), options).startswith("Protocol: the papers'")
    only_mine = report.ReportParams("100", datasets=("mine",), continual=())
    assert report.index_notice(_inputs("import", "default"), only_mine) == ""  # no paper table
    index = report_index.render({}, {}, {}, {}, "2023-11-14", "v", notice=line)
    assert index.split("\n\n")[2] == line
    assert "Not comparable" not in report_index.render({}, {}, {}, {}, "2023-11-14", "v")


# ---------------------------------------------------------------- a paper's own budget (esann, ijcnn)
ESANN = BudgetScale("esann", 30, 3, (("wesad", "200–400"), ("hhar", "100–500")))
IJCNN = BudgetScale("ijcnn", 100, 3, (("wesad", "100–250"), ("hhar", "100–500")))
ESANN_TABLES = {"esann", "esann-protocol"}
TABLE_DATASETS = {"esann": ("wesad", "hhar"), "ijcnn-hhar": ("hhar",)}
IJCNN_TABLES = {"ijcnn-wesad", "ijcnn-hhar", "ijcnn-protocol-wesad", "ijcnn-protocol-hhar"}
# both opt-in protocol tables (docs/protocol-variants.md "ESANN 2022 protocol variant", "IJCNN 2021 protocol variant")
PROTOCOL_PARAMS = {"report": {"esann_protocol": {"hhar": "hhar_esann"},
                              "ijcnn_protocol": {"wesad": "wesad_ijcnn", "hhar": "hhar_ijcnn"}},
                   "preprocess": {"hhar_esann": {"base": "hhar", "window": 400},
                                  "wesad_ijcnn": {"base": "wesad", "window": 350},
                                  "hhar_ijcnn": {"base": "hhar", "features": "ijcnn32"}}}


def test_each_table_knows_its_papers_budgets_from_the_protocol_registry():
    # protocol_tables.PROTOCOLS is the one place a table maps to its paper's own budget
    assert {p.budget: set(p.all_table_ids) for p in protocol_tables.PROTOCOLS.values()} == {
        "esann": ESANN_TABLES, "ijcnn": IJCNN_TABLES}
    for t in ESANN_TABLES:
        assert table_budgets(t) == ("paper", "esann")
    for t in IJCNN_TABLES:
        assert table_budgets(t) == ("paper", "ijcnn")
    for t in ("fedip", "fedclip", "ip-centralized", "clip-centralized", None):
        assert table_budgets(t) == ("paper",)
    assert papers_protocol(["raw"], ["esann"], "esann") and not papers_protocol(["raw"], ["esann"], "fedclip")
    assert papers_protocol(["raw"], ["ijcnn"], "ijcnn-hhar") and not papers_protocol(["raw"], ["ijcnn"], "esann")
    assert not papers_protocol(["raw"], ["esann", "paper"], "esann")  # two budgets: neither protocol
    assert not papers_protocol(["synthetic"], ["esann"], "esann")
    assert not papers_protocol(["raw"], ["esann"])  # a line over several papers' tables: `paper` alone


def _headers(source: str, budget: str, scale: BudgetScale) -> dict[str, str]:
    """Each paper table's comparability line (its header's second line), the protocol tables included."""
    protocols = protocol_tables.specs({**PROTOCOL_PARAMS, "budget": budget})
    inputs = _inputs(source, budget, protocols)
    specs = [s for s in table_specs(("wesad", "hhar", "mine"), ("wesad", "hhar", "mine")) if s.has_published]
    lines = {s.id: report.header_lines(s, inputs, TTEST, "d", scale)[1] for s in specs + list(protocols)}
    assert set(lines) == {t.id for t in TABLES if t.has_published} | {"esann-protocol", "ijcnn-protocol-wesad",
                                                                      "ijcnn-protocol-hhar"}
    return lines


@pytest.mark.parametrize("budget, scale, own, paper, section, listed", [
    ("esann", ESANN, ESANN_TABLES, "ESANN 2022", "ESANN 2022 protocol variant", "esann, esann-protocol"),
    ("ijcnn", IJCNN, IJCNN_TABLES, "IncFed (IJCNN 2021)", "IJCNN 2021 protocol variant",
     "ijcnn-wesad, ijcnn-protocol-wesad, ijcnn-hhar, ijcnn-protocol-hhar"),
])
def test_a_papers_own_budget_on_the_real_data_is_the_protocol_of_its_tables_alone(budget, scale, own, paper,
                                                                                  section, listed):
    lines = _headers("raw", budget, scale)
    for table, line in lines.items():
        if table in own:  # the scale's units: those of the table's paper datasets (a variant's: none)
            assert line.startswith(f"Protocol: the {paper} paper's (docs/protocol.md, \"{section}\"): the real "
                                   f"recordings (data.source: raw) under budget `{budget}` ({scale.trials} trials, "
                                   "3 retrains"), table
            assert line.endswith("). The 'paper' columns are the published values beside ours."), table
            assert "Not comparable" not in line
        else:  # another paper's table: not comparable, and why
            assert line.startswith("**Not comparable with the published values:** this run used the real "
                                   f"recordings (data.source: raw) and budget `{budget}` ("), table
            assert (f"), the {paper} paper's protocol for tables {listed} alone, not this table's paper's (budget "
                    "`paper`, PROTOCOL §6") in line, table
            assert "not a target for this run" in line, table
    # the other paper's tables name their own budget among the alternatives
    other = "ijcnn-hhar" if budget == "esann" else "esann"
    alternative = ("`ijcnn`, the IncFed (IJCNN 2021) paper's" if budget == "esann"
                   else "`esann`, the ESANN 2022 paper's")
    assert lines[other].count("(budget `paper`, PROTOCOL §6, or " + alternative + ")") == 1
    full = "esann" if budget == "esann" else "ijcnn-hhar"
    assert lines[full] == (f"Protocol: the {paper} paper's (docs/protocol.md, \"{section}\"): the real recordings "
                           f"(data.source: raw) under budget `{budget}` ({scale.text(TABLE_DATASETS[full])}). "
                           "The 'paper' columns are the published values beside ours.")
    assert lines["fedclip"].endswith("alone, not this table's paper's (budget `paper`, PROTOCOL §6). The 'paper' "
                                     "columns are the published values, shown for reference, not a target for "
                                     "this run: absolute accuracies differ with the data and the budget; compare "
                                     "the methods within this run.")


def test_budget_paper_on_the_real_data_stays_every_tables_protocol_and_synthetic_data_none():
    for line in _headers("raw", "paper", PAPER).values():
        assert line.startswith("Protocol: the papers' (PROTOCOL §6): the real recordings (data.source: raw) under "
                               "budget `paper` (100 trials, 5 retrains")
    for budget, scale in (("esann", ESANN), ("ijcnn", IJCNN), ("paper", PAPER)):
        for table, line in _headers("synthetic", budget, scale).items():
            assert line.startswith("**Not comparable with the published values:** this run used the embedded "
                                   "synthetic data (data.source: synthetic), not the real recordings,"), table
    # the synthetic data under the table's own budget: only the data departs from the protocol
    esann = _headers("synthetic", "esann", ESANN)["esann"]
    assert f"and budget `esann` ({ESANN.text()}), the ESANN 2022 paper's protocol. The 'paper' columns" in esann


def test_the_index_lists_the_comparable_tables_when_they_differ():
    protocols = protocol_tables.specs({**PROTOCOL_PARAMS, "budget": "esann"})
    options = report.ReportParams("100", datasets=("wesad", "hhar", "mine"), continual=("wesad", "hhar"),
                                  budget=budget_spec({"budget": "esann", "budgets": {"esann": {
                                      "trials": 30, "retrains": 3,
                                      "space": {"wesad": {"units": [200, 300, 400]},
                                                "hhar": {"units": [100, 200, 300, 400, 500]}}}}}),
                                  protocols=protocols)
    line = report.index_notice(_inputs("raw", "esann", protocols), options)
    assert line == ("Protocol: the ESANN 2022 paper's (docs/protocol.md, \"ESANN 2022 protocol variant\") in tables "
                    "esann, esann-protocol alone: the real recordings (data.source: raw) under budget `esann` "
                    "(30 trials, 3 retrains, units 200–400 (WESAD), 100–500 (HHAR)). **Not comparable** with the "
                    "published values in tables ijcnn-wesad, ijcnn-hhar, fedip, fedclip, ip-centralized, "
                    "clip-centralized, ijcnn-protocol-wesad, ijcnn-protocol-hhar: not their paper's protocol "
                    "(each header says why). The tables' 'paper' columns are the published values, beside ours "
                    "in the comparable tables.")
    # one verdict for every table: the single line as before
    assert report.index_notice(_inputs("raw", "paper", protocols), options).startswith("Protocol: the papers'")
    synthetic = report.index_notice(_inputs("synthetic", "esann", protocols), options)
    assert synthetic.startswith("**Not comparable with the published values:** this run used the embedded synthetic")
    assert "tables esann, esann-protocol alone, not the papers' protocol (budget `paper`, PROTOCOL §6)" in synthetic
