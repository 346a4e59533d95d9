"""Reader audit: a paper table put our numbers beside the published ones with only "Data source:
synthetic; budget: default", inviting a "failed reproduction" reading. Every table with a paper
column, and the report's index, now say what was run (source, budget's trials, retrains and units)
and, unless it is the real data under budget `paper`, that the paper columns are not a target."""

from __future__ import annotations

from pathlib import Path

import yaml

from esnfed_core.tables import TABLES, table_specs
from esnfed_core.vocabulary import PCTS
from esnfed_stages import report, report_index
from esnfed_stages.comparability import BudgetScale, budget_scale, notice
from esnfed_stages.experiment_params import budget_spec
from esnfed_stages.ttest import Inputs

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = BudgetScale("default", 3, 2, (("wesad", "20–40"), ("hhar", "20–40")))
PAPER = BudgetScale("paper", 100, 5, (("wesad", "200–400"), ("hhar", "100–500")))
TTEST = {"variant": "welch", "alpha": 0.05, "comparisons": []}


def _params() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())


def test_budget_scale_reads_trials_retrains_and_units_of_params_budget():
    params = _params()
    assert params["budget"] == "default"
    assert budget_scale(budget_spec(params)) == DEFAULT
    assert budget_scale(budget_spec({**params, "budget": "paper"})) == PAPER
    assert budget_scale(budget_spec({})) is None
    assert budget_scale(budget_spec({"budget": "mine"})) == BudgetScale("mine")
    assert budget_scale(report.report_params(params).budget) == DEFAULT
    assert DEFAULT.text() == "3 trials, 2 retrains, units 20–40"
    assert PAPER.text() == "100 trials, 5 retrains, units 200–400 (WESAD), 100–500 (HHAR)"
    assert PAPER.text(("hhar",)) == "100 trials, 5 retrains, units 100–500"


def test_synthetic_default_run_is_flagged_as_not_comparable():
    line = notice(["synthetic"] * 3, ["default"] * 3, DEFAULT)
    assert line.startswith("**Not comparable with the published values:** this run used the embedded "
                           "synthetic data (data.source: synthetic), not the real recordings, and budget "
                           "`default` (3 trials, 2 retrains, units 20–40), not the papers' protocol")
    assert "The 'paper' columns are the published values, shown for reference, not a target for this run" in line
    assert line.endswith("compare the methods within this run.")  # audit item 23: its last sentence ends


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


def _inputs(source: str, budget: str) -> Inputs:
    specs = table_specs(("wesad", "hhar", "mine"), ("wesad", "hhar", "mine"))
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
