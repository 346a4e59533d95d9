"""FedCLIP's analytic message counts count the clients that took part at each context: a client
without windows at a context sits it out and sends nothing there, so the analytic totals equal the
measured ones (match yes) and per client per round divides by the client-rounds that sent. Where
every client takes part (the papers' datasets) the rows and the table are as before."""

from __future__ import annotations

import numpy as np
import pytest

from esnfed_core.settings import Settings
from esnfed_core.communication import Communication, check_communication, communication_rows
from esnfed_stages.report.tables import participation_notes
from esnfed_core.trial import TrialData, fit
from esnfed_core.validation import ParameterError
from experiment_data import trial_data

CFG = {"units": 12, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 0.8, "sigma": 0.3, "budget": 2,
       "local_epochs": 1}
SETTINGS = Settings(ip={"mu": 0.0, "eta": 0.01, "batch_size": 4, "normalize_step": True})


def _without(data: TrialData, user: str, contexts: set[int]) -> TrialData:
    """``data`` with ``user``'s windows of ``contexts`` removed (a short recording)."""
    u = data.train[user]
    train = {**data.train, user: u.select(~np.isin(u.context, list(contexts)))}
    return TrialData(train, data.validation, data.n_classes, data.n_contexts)


@pytest.fixture(scope="module")
def short() -> TrialData:
    """Four training clients over three contexts; u3 only recorded context 0 (the walkthrough's P08)."""
    return _without(trial_data(seed=2, pct="100")[0], "u3", {1, 2})


def _item(method: str, comm: dict, n: int, c: int) -> Communication:
    return Communication("mine", "100", method, comm["up_floats"], comm["down_floats"], comm["up_bytes"],
                         comm["down_bytes"], comm["rounds"], comm["clients"], units=n, classes=c,
                         participants=tuple(comm["participants"]), context_rounds=tuple(comm["context_rounds"]))


@pytest.mark.parametrize("method", ["fedclip-naive", "fedclip-replay", "fedclip-joint"])
def test_a_client_sitting_contexts_out_is_counted_as_it_sent(short, method):
    model = fit(method, CFG, 5, short, SETTINGS)
    comm = model.communication
    n, c = CFG["units"], short.n_classes
    # naive sits u3 out of contexts 1 and 2; replay's buffer and joint's contexts 0..t keep it in
    assert comm["participants"] == ([4, 3, 3] if method == "fedclip-naive" else [4, 4, 4])
    if method != "fedclip-joint":
        assert comm["context_rounds"] == [CFG["budget"]] * 3
    row = communication_rows([_item(method, comm, n, c)])[0]
    assert (row["analytic_up_floats"], row["analytic_down_floats"]) == (comm["up_floats"], comm["down_floats"])
    assert row["match"] is True
    sent = sum(p * (r + (r if method == "fedclip-joint" else 1))
               for p, r in zip(comm["participants"], comm["context_rounds"]))
    assert row["participations"] == sent
    assert row["up_floats_per_client_round"] == pytest.approx(comm["up_floats"] / sent)
    if method == "fedclip-naive":  # what the walkthrough's table showed: 3 contexts, budget 2, 4 clients
        assert sent == 4 * 3 + 3 * 3 + 3 * 3 < comm["clients"] * comm["rounds"] == 4 * 9
        # per IP round a client sends 2N, per readout N²+N·C: the per-client-round figure is the mean
        assert row["up_floats_per_client_round"] == pytest.approx((2 * (2 * n) + (n * n + n * c)) / 3)


def test_the_walkthrough_row_now_matches():
    """reports/tables/communication-mystudy.md, fedclip-naive at 100 %: N 20, C 3, budget 1, four
    clients of which P08 has only context 0: measured 5,000 / 1,000 floats, analytic was 6,000 / 1,200."""
    item = Communication("mystudy", "100", "fedclip-naive", 5000, 1000, 38640, 6560, 6, 4, units=20, classes=3,
                         participants=(4, 3, 3), context_rounds=(1, 1, 1))
    row = communication_rows([item])[0]
    assert (row["analytic_up_floats"], row["analytic_down_floats"], row["match"]) == (5000, 1000, True)
    assert (row["up_floats_per_client_round"], row["down_floats_per_client_round"]) == (250.0, 50.0)
    assert participation_notes([row]) == [
        "A client without windows at a context sits it out and sends nothing there, so per client per round "
        "divides by the client-rounds that sent and the analytic totals count, at each context, the clients "
        "that took part (the assess file's communication.participants): mystudy fedclip-naive 100%: clients "
        "per context 4, 3, 3, 20 client-rounds of 24"]


def test_full_participation_and_unrecorded_counts_are_as_before():
    """Every client at every context gives the old formula's totals and no note; an assess file
    written before the counts were recorded is read with every client in every round."""
    base = dict(units=20, classes=3)
    full = Communication("wesad", "100", "fedclip-joint", 4 * (2 * 20 * 5 + 5 * 460), 4 * (2 * 20 * 5 + 5 * 60),
                         0, 0, 10, 4, **base, participants=(4, 4), context_rounds=(3, 2))
    old = Communication("wesad", "100", "fedclip-joint", full.up_floats, full.down_floats, 0, 0, 10, 4, **base,
                        ip_rounds=5, readouts=5)
    rows = communication_rows([full, old])
    for key in ("analytic_up_floats", "analytic_down_floats", "match", "up_floats_per_client_round", "participations"):
        assert rows[0][key] == rows[1][key], key
    assert rows[0]["match"] is True and participation_notes(rows) == []


@pytest.mark.parametrize("value, message", [
    ({"participants": [4, -1]}, "participants: expected a list of integers >= 0, one per context"),
    ({"context_rounds": "3"}, "context_rounds: expected a list of integers >= 0, one per context"),
    ({"participants": [4, 3], "context_rounds": [1]}, "participants and context_rounds must have one entry "
                                                      "per context each, got 2 and 1"),
])
def test_the_recorded_counts_are_checked(value, message):
    comm = {"up_floats": 1, "down_floats": 1, "up_bytes": 1, "down_bytes": 1, "rounds": 1, "clients": 1, **value}
    with pytest.raises(ParameterError, match=message):
        check_communication("communication", comm, True)
    check_communication("communication", {**comm, "participants": None, "context_rounds": None}, True)
