"""The validation traffic of the communication table (esnfed_core/validation_traffic.py): what a
deployment would send to score on the validation users as clients, counted from messages and equal
to the hand-computed formula; the training columns stay as they were; "—" where none is sent."""

from __future__ import annotations

import csv
import io
import json

import pytest

from esnfed_core.errors import DataError
from esnfed_core.communication import Communication, communication_rows
from esnfed_stages.report.table_specs import required_inputs
from esnfed_core.validation import ParameterError
from esnfed_core.validation_traffic import (
    CountsMessage, ValidationPlan, analytic_validation, validation_formulas, validation_ledger,
)
from esnfed_stages.report.report_inputs import ValidationSizes, communication_items, validation_users
from esnfed_stages.report.report_params import report_params
from esnfed_stages.report.tables import communication_csv, render_communication_markdown
from esnfed_stages.report.ttest import load_inputs
from test_report import IP_ROUNDS, PARAMS, write_assess

N, C, K = 10, 4, 3  # units, classes, training clients


def test_a_counts_answer_is_integers_only():
    msg = CountsMessage((3, 4, 5), 12)
    assert (msg.floats, msg.nbytes) == (0, 8 * 4)
    with pytest.raises(ParameterError, match=r"CountsMessage.correct\[1\]"):
        CountsMessage((3, -1), 12)
    with pytest.raises(ParameterError, match="CountsMessage.total"):
        CountsMessage((3,), 2.5)


@pytest.mark.parametrize("plan, v, down_floats, down_bytes, up_bytes", [
    # IncFed's λ choice: 7 readouts of N·C float64 (+8 B for ReadoutMessage's count) to each of 3 clients
    (ValidationPlan(1, 7, False), 3, 3 * 7 * 40, 3 * 7 * (8 * 40 + 8), 3 * 8 * 8),
    # FedIP's: the trained (g, b) too, 2N float32 (+8 B)
    (ValidationPlan(1, 7, True), 3, 3 * (20 + 7 * 40), 3 * ((4 * 20 + 8) + 7 * (8 * 40 + 8)), 3 * 8 * 8),
    # FedCLIP joint: 5 evaluations of (g, b) and one readout, answered by (correct, total)
    (ValidationPlan(5, 1, True), 2, 2 * 5 * (20 + 40), 2 * 5 * ((4 * 20 + 8) + (8 * 40 + 8)), 2 * 5 * 16),
    (ValidationPlan(1, 7, False), 0, 0, 0, 0),  # no validation user: nothing sent
    # readout.bias: each readout (N+1)·C, the (g, b) still 2N
    (ValidationPlan(1, 7, True, True), 3, 3 * (20 + 7 * 44), 3 * ((4 * 20 + 8) + 7 * (8 * 44 + 8)), 3 * 8 * 8),
])
def test_counted_messages_equal_the_formula(plan, v, down_floats, down_bytes, up_bytes):
    totals = validation_ledger(plan, v, N, C).totals()
    assert (totals["down_floats"], totals["down_bytes"], totals["up_floats"], totals["up_bytes"]) == \
        (down_floats, down_bytes, 0, up_bytes)
    assert analytic_validation(plan, v, N, C) == (down_floats, up_bytes)


def test_the_formula_names_the_bias_column():
    assert validation_formulas(ValidationPlan(1, 7, True, True)) == ("2N + 7·(N+1)·C", "8 integers")
    assert validation_formulas(ValidationPlan(1, 1, False)) == ("N·C", "2 integers")


def _items(v: int | None, grid: int | None) -> list[Communication]:
    """test_tables.test_communication_formulas' rows, with the validation sizes ``v`` and ``grid``."""
    return [
        Communication("wesad", "100", "incfed", K * (N * N + N * C), K * N * C, 1, 1, 1, K, N, C,
                      validation_clients=v, lambda_grid=grid),
        Communication("wesad", "100", "fedavg", K * N * C, K * N * C + 1, 1, 1, 1, K, N, C,
                      validation_clients=v, lambda_grid=grid),
        Communication("wesad", "100", "fedip", K * (2 * N * 7 + N * N + N * C), K * (2 * N * 7 + N * C),
                      0, 0, 8, K, N, C, ip_rounds=7, readouts=1, validation_clients=v, lambda_grid=grid),
        Communication("wesad", "100", "fedclip-joint", 1, 1, 1, 1, 12, K, N, C, ip_rounds=6, readouts=6,
                      validation_clients=v, lambda_grid=grid),
        Communication("wesad", "100", "fedclip-naive", 1, 1, 1, 1, 8, K, N, C,
                      validation_clients=v, lambda_grid=grid),
        Communication("wesad", "100", "local", 0, 0, 0, 0, 0, K, N, C, validation_clients=v, lambda_grid=grid),
    ]


def test_rows_add_validation_columns_and_leave_the_training_ones():
    rows = communication_rows(_items(2, 7))
    inc, avg, fip, joint, naive, local = rows
    training = [{k: v for k, v in r.items() if not k.startswith("validation")}
                for r in communication_rows(_items(None, None))]
    assert [{k: v for k, v in r.items() if not k.startswith("validation")} for r in rows] == training
    # test_tables.test_communication_formulas' expected values, unchanged
    assert (inc["analytic_up_floats"], inc["analytic_down_floats"], inc["match"]) == (420, 120, True)
    assert avg["match"] is False and fip["analytic_up_floats"] == K * (140 + 140) and fip["match"] is True
    # V = 2 validation clients, 7 λ, N = 10, C = 4
    assert (inc["validation_down_floats"], inc["validation_up_bytes"]) == (2 * 7 * 40, 2 * 8 * 8)
    assert avg["validation_down_floats"] == 2 * 7 * 40 and avg["validation_formula_down"] == "7·N·C"
    assert (fip["validation_down_floats"], fip["validation_formula_down"]) == (2 * (20 + 7 * 40), "2N + 7·N·C")
    assert (joint["validation_evaluations"], joint["validation_down_floats"], joint["validation_up_bytes"]) == \
        (6, 2 * 6 * (20 + 40), 2 * 6 * 16)
    assert all(r["validation_match"] is True and r["validation_traffic"] is True for r in (inc, avg, fip, joint))
    assert naive["validation_traffic"] is False and naive["validation_down_floats"] is None  # sends nothing
    assert local["validation_traffic"] is None  # heterogeneous: not modelled, unknown
    frozen = communication_rows(_items(2, 0))
    assert [r["validation_traffic"] for r in frozen] == [False, False, False, True, False, None]


def test_the_tables_show_a_dash_where_nothing_is_sent_and_na_where_unknown():
    rows = communication_rows(_items(2, 0))
    md = render_communication_markdown(rows, ["Date: today"])
    head, section = md.split("## Validation traffic (not in the totals above)")
    section = section.split("## λ selection and model selection")[0]  # the next section (test_lambda_selection)
    assert "validation" not in head.lower()  # the training table as it was
    body = {line.split(" | ")[2]: line.split(" | ") for line in section.splitlines() if line.startswith("| 100%")}
    assert body["incfed"][3:] == ["2"] + ["—"] * 10 + ["— |"]  # λ frozen: no validation traffic
    assert body["fedclip-naive"][4] == "—" and body["local"][4] == "n/a"
    assert body["fedclip-joint"][4:7] == ["6", "1", "720"]  # V·E·(2N + N·C) = 2·6·60 and body["fedclip-joint"][-1] == "yes |"
    table = {r["method"]: r for r in csv.DictReader(io.StringIO(communication_csv(rows)))}
    assert table["incfed"]["validation_down_floats"] == "" and table["incfed"]["match"] == "yes"
    assert (table["fedclip-joint"]["validation_down_floats"], table["fedclip-joint"]["validation_match"]) == \
        (str(2 * 6 * (20 + 40)), "yes")


def test_the_report_reads_v_from_the_partition_and_the_grid_from_params(tmp_path):
    write_assess(tmp_path)
    parts = tmp_path / "data" / "partitions"
    parts.mkdir(parents=True)
    (parts / "hhar.json").write_text(json.dumps({"validation": ["a", "b", "c"], "context_names": []}))
    (parts / "wesad.json").write_text(json.dumps({"context_names": []}))  # no validation key: unknown
    assert (validation_users(tmp_path / "data", "hhar"), validation_users(tmp_path / "data", "wesad"),
            validation_users(tmp_path / "data", "absent")) == (3, None, None)
    inputs = load_inputs(tmp_path / "runs" / "assess", required_inputs())
    sizes = ValidationSizes({"hhar": 3}, 7)
    rows = {(r["dataset"], r["pct"], r["method"]): r
            for r in communication_rows(communication_items(inputs, validation=sizes))}
    plain = communication_rows(communication_items(inputs))
    assert [{k: v for k, v in r.items() if not k.startswith("validation")} for r in rows.values()] == \
        [{k: v for k, v in r.items() if not k.startswith("validation")} for r in plain]
    n, c = 30, 6  # test_report's HHAR sizes
    inc = rows[("hhar", "50", "incfed")]
    assert (inc["up_floats"], inc["down_floats"], inc["match"]) == (3 * (n * n + n * c), 3 * n * c, True)
    assert inc["validation_down_floats"] == 3 * 7 * n * c and inc["validation_match"] is True
    fip = rows[("hhar", "25", "deep-fedip")]
    assert fip["validation_down_floats"] == 3 * (2 * n + 7 * n * c)
    joint = rows[("hhar", "25", "fedclip-joint")]
    assert joint["validation_evaluations"] == IP_ROUNDS
    assert joint["validation_down_floats"] == 3 * IP_ROUNDS * (2 * n + n * c)
    assert rows[("hhar", "25", "fedclip-replay")]["validation_traffic"] is False
    assert rows[("wesad", "25", "incfed")]["validation_traffic"] is None  # V unknown: n/a

    (parts / "hhar.json").write_text(json.dumps({"validation": "a,b"}))
    with pytest.raises(DataError, match=r"hhar.json: validation must be a list of users"):
        validation_users(tmp_path / "data", "hhar")


@pytest.mark.parametrize("extra, grid", [
    ("readout:\n  lambdas: [1.0e-5, 0.1, 1.0]\nretrain:\n  lambda: select\n", 3),
    ("readout:\n  lambdas: [1.0e-5, 0.1, 1.0]\nretrain:\n  lambda: frozen\n", 0),
    ("", None),
])
def test_the_grid_is_the_lambdas_a_retrain_scores_on_validation(extra, grid):
    import yaml

    assert report_params(yaml.safe_load(PARAMS + extra)).lambda_grid == grid
