"""The communication table's λ selection and model selection (esnfed_core.communication.lambda_selection_columns,
selection_columns): FedAvg's rounds for the λ values the training totals leave out, counted from the
messages fedavg itself records and equal to K·(L − 1)·N·C; the selection's total bytes, summed over
the trials at each one's own sizes (tests/test_selection_traffic.py reads them from runs/select);
"—" / empty where nothing is sent, n/a / empty where unknown."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from esnfed_core.federated import Client, fedavg
from esnfed_core.messages import CommLedger
from esnfed_core.reservoir import ReservoirConfig, build_reservoir
from esnfed_core.communication import Communication, SelectionTrial, communication_rows
from esnfed_core.validation_traffic import (
    analytic_lambda_selection, lambda_selection_formula, lambda_selection_ledger,
)
from esnfed_stages.report.tables import COMMUNICATION_COLUMNS, communication_csv, render_communication_markdown

K, N, C, L, V, TRIALS = 3, 10, 3, 7, 2, 4  # training clients, units, classes, |λ grid|, validation users, trials
READOUT_BYTES = 8 * N * C + 8  # a float64 readout and its count (ReadoutMessage)


@pytest.mark.parametrize("bias", [False, True])
def test_the_counted_rounds_are_fedavgs_own_messages_for_the_other_lambdas(make_windows, bias):
    """Run FedAvg once per λ as esnfed_core.trial._fit_stationary does; the ledgers of the λ values
    not kept add up to the λ-selection ledger and to the formula."""
    res = build_reservoir(ReservoirConfig(2, N, 0.9, 0.4, 0.9), 5)
    x, y = make_windows(9, 6, 2, C, seed=1)
    clients = [Client(f"c{i}", x[3 * i:3 * i + 3], y[3 * i:3 * i + 3], C, batch_size=2, bias=bias) for i in range(K)]
    lambdas = np.logspace(-5, 1, L).tolist()
    ledgers = [CommLedger() for _ in lambdas]
    for lam, lg in zip(lambdas, ledgers):
        fedavg(res, clients, lam, ledger=lg)
    kept = 2  # whichever λ is kept, the other L − 1 rounds are the same size
    real = {k: sum(lg.totals()[k] for i, lg in enumerate(ledgers) if i != kept)
            for k in ("up_floats", "down_floats", "up_bytes", "down_bytes")}
    counted = lambda_selection_ledger(L - 1, K, N, C, bias).totals()
    cols = N + int(bias)
    assert {k: counted[k] for k in real} == real == {
        "up_floats": K * (L - 1) * cols * C, "down_floats": K * (L - 1) * cols * C,
        "up_bytes": K * (L - 1) * (8 * cols * C + 8), "down_bytes": K * (L - 1) * (8 * cols * C + 8)}
    assert analytic_lambda_selection(L - 1, K, N, C, bias) == K * (L - 1) * cols * C == 540 + 54 * int(bias)
    assert lambda_selection_formula(L - 1, bias) == ("6·(N+1)·C each way" if bias else "6·N·C each way")


def _trial(up: int, down: int, lambdas: int | None = L) -> SelectionTrial:
    return SelectionTrial(up, down, N, K, lambdas)


def _items(grid: int | None, trials: int | None = TRIALS, v: int | None = V):
    """FedAvg's training traffic as one recorded round (K·N·C each way), and the other methods';
    ``trials`` selection trials each at the row's sizes (None: no records)."""
    def sel(up: int, down: int, lambdas: int | None = L):
        return None if trials is None else (_trial(up, down, lambdas),) * trials

    sizes = dict(validation_clients=v, lambda_grid=grid)
    return [
        Communication("wesad", "100", "fedavg", K * N * C, K * N * C, K * READOUT_BYTES, K * READOUT_BYTES, 1, K, N, C,
                      selection=sel(K * READOUT_BYTES, K * READOUT_BYTES), **sizes),
        Communication("wesad", "100", "incfed", K * (N * N + N * C), K * N * C, 1000, 100, 1, K, N, C,
                      selection=sel(1000, 100), **sizes),
        Communication("wesad", "100", "fedip", 1, 1, 2000, 200, 8, K, N, C, ip_rounds=7, readouts=1,
                      selection=sel(2000, 200), **sizes),
        Communication("wesad", "100", "fedclip-joint", 1, 1, 1, 1, 12, K, N, C, ip_rounds=6, readouts=6,
                      selection=sel(1, 1, None), **sizes),
        Communication("wesad", "100", "local", 0, 0, 0, 0, 0, K, N, C, **sizes),
    ]


def test_fedavg_counts_the_other_lambdas_beside_the_formula_and_leaves_the_training_totals():
    avg, inc, fip, joint, local = communication_rows(_items(L))
    assert avg["validation_lambda_traffic"] is True
    assert (avg["validation_lambda_rounds"], avg["validation_lambda_up_floats"], avg["validation_lambda_down_floats"],
            avg["validation_lambda_up_bytes"], avg["validation_lambda_down_bytes"]) == \
        (6, 540, 540, K * 6 * READOUT_BYTES, K * 6 * READOUT_BYTES)
    assert (avg["validation_lambda_analytic_floats"], avg["validation_lambda_match"]) == (540, True)
    assert avg["validation_lambda_formula"] == "6·N·C each way"
    # the training totals as recorded (the chosen λ's round), the formula's match unchanged
    assert (avg["up_floats"], avg["down_floats"], avg["match"]) == (K * N * C, K * N * C, True)
    # IncFed and FedIP send statistics / (g, b) once whatever the λ: nothing per λ
    assert inc["validation_lambda_traffic"] is False and fip["validation_lambda_traffic"] is False
    assert joint["validation_lambda_traffic"] is False and inc["validation_lambda_up_floats"] is None
    assert local["validation_lambda_traffic"] is None  # not modelled


def test_frozen_lambda_sends_no_lambda_selection_traffic_and_unknown_is_unknown():
    avg = communication_rows(_items(0))[0]
    assert avg["validation_lambda_traffic"] is False
    assert all(avg[k] is None for k in ("validation_lambda_rounds", "validation_lambda_up_floats",
                                        "validation_lambda_match"))
    unknown = communication_rows(_items(None))[0]
    assert unknown["validation_lambda_traffic"] is None and unknown["validation_lambda_up_floats"] is None
    one = communication_rows(_items(1))[0]  # a grid of one λ: no other round
    assert (one["validation_lambda_rounds"], one["validation_lambda_up_bytes"], one["validation_lambda_match"]) == \
        (0, 0, True)


def test_the_selection_total_sums_what_each_trial_sends():
    avg, inc, fip, joint, local = communication_rows(_items(L))
    validation = V * L * READOUT_BYTES + V * 8 * (L + 1)  # L readouts down to each of V, L + 1 counts up
    lam = 2 * K * (L - 1) * READOUT_BYTES  # FedAvg's other λ rounds, both ways
    assert (avg["selection_trials"], avg["selection_bytes"]) == (TRIALS, TRIALS * (2 * K * READOUT_BYTES
                                                                                   + validation + lam))
    assert avg["selection_bytes"] == 56064  # 4 × (1488 + 3600 + 8928), by hand
    assert inc["selection_bytes"] == TRIALS * (1000 + 100 + validation)
    ip = V * (4 * 2 * N + 8)  # FedIP's validation clients also receive (g, b): 2N float32 and a count
    assert fip["selection_bytes"] == TRIALS * (2000 + 200 + validation + ip)
    # FedCLIP's grid trials are counted, their bytes not totalled; the heterogeneous methods' unknown
    assert (joint["selection_trials"], joint["selection_bytes"]) == (TRIALS, None)
    assert (local["selection_trials"], local["selection_bytes"]) == (None, None)
    # λ frozen in the retrains: a selection trial still scores every λ, so the total is the same
    assert [r["selection_bytes"] for r in communication_rows(_items(0))] == \
        [r["selection_bytes"] for r in communication_rows(_items(L))]
    for missing in (dict(trials=None), dict(v=None)):
        assert communication_rows(_items(L, **missing))[0]["selection_bytes"] is None


NUMERIC = ("validation_lambda_rounds", "validation_lambda_up_floats", "validation_lambda_down_floats",
           "validation_lambda_up_bytes", "validation_lambda_down_bytes", "validation_lambda_analytic_floats",
           "selection_trials", "selection_bytes")


def test_the_csv_columns_are_numeric_with_empty_fields_where_not_applicable():
    rows = list(csv.DictReader(io.StringIO(communication_csv(communication_rows(_items(L))))))
    assert list(rows[0])[-10:] == list(COMMUNICATION_COLUMNS[-10:]) and set(NUMERIC) < set(rows[0])
    by = {r["method"]: r for r in rows}
    for r in rows:
        for k in NUMERIC:
            assert r[k] == "" or float(r[k]) >= 0, (r["method"], k, r[k])
    assert (by["fedavg"]["validation_lambda_up_floats"], by["fedavg"]["validation_lambda_match"],
            by["fedavg"]["selection_bytes"]) == ("540", "yes", "56064")
    assert by["incfed"]["validation_lambda_up_floats"] == "" and by["incfed"]["validation_lambda_match"] == ""
    assert by["fedclip-joint"]["selection_bytes"] == "" and by["local"]["selection_trials"] == ""


def test_the_markdown_section_shows_a_dash_where_nothing_is_sent():
    md = render_communication_markdown(communication_rows(_items(0)), ["Date: today"])
    before, section = md.split("## λ selection and model selection (not in the totals above)")
    assert "## Validation traffic" in before and "λ rounds" not in before
    body = {line.split(" | ")[2]: line.split(" | ") for line in section.splitlines() if line.startswith("| 100%")}
    assert body["fedavg"][3:12] == ["3"] + ["—"] * 8 and body["fedavg"][12:] == ["4", "56,064 |"]  # frozen
    assert body["fedclip-joint"][12:] == ["4", "n/a |"] and body["local"][4] == "n/a"
    assert "FedCLIP: its selection starts from the best FedIP trial" in section
    selected = render_communication_markdown(communication_rows(_items(L)), ["Date: today"])
    avg = next(line for line in selected.split("## λ selection")[1].splitlines() if "| fedavg |" in line)
    assert "| 6 | 540 | 540 |" in avg and "| 6·N·C each way | 540 | yes |" in avg
