"""What each method sends (esnfed_core.methods.Traffic), as the communication table counts it: the
facts of every registered method id, written out by hand."""

from __future__ import annotations

import pytest

from esnfed_core.method import METHODS, Method
from esnfed_core.methods import CENTRAL, Sends, Traffic

# sends, per_context, readout_every_round, validation_modelled, lambda_on_validation, round_per_lambda
TRAFFIC = {
    "random": (None, False, False, False, False, False),
    "ridge": (None, False, False, False, False, False),
    "incfed": ("statistics", False, False, True, True, False),
    "fedavg": ("readout", False, False, True, True, True),
    "ip": (None, False, False, False, False, False),
    "fedip": ("ip", False, False, True, True, False),
    "clip-naive": (None, False, False, False, False, False),
    "clip-replay": (None, False, False, False, False, False),
    "clip-joint": (None, False, False, False, False, False),
    "fedclip-naive": ("ip", True, False, True, False, False),
    "fedclip-replay": ("ip", True, False, True, False, False),
    "fedclip-joint": ("ip", True, True, True, False, False),
    "deep-incfed": ("statistics", False, False, True, True, False),
    "deep-fedip": ("ip", False, False, True, True, False),
    "local": ("nothing", False, False, False, False, False),
    "ensemble": ("model", False, False, False, False, False),
    "align-0.5": ("statistics", False, False, False, False, False),
}
# Whether its rounds split into IP rounds and readouts; whether it trains each context to early stopping
IP_ROUNDS = {"fedip", "fedclip-naive", "fedclip-replay", "fedclip-joint", "deep-fedip"}
STOPS_EARLY = {"clip-joint", "fedclip-joint"}


def test_the_table_covers_every_method():
    assert set(METHODS) <= set(TRAFFIC)


@pytest.mark.parametrize("method_id", sorted(TRAFFIC))
def test_a_method_says_what_it_sends(method_id):
    m = Method.parse(method_id)
    t = m.traffic
    assert isinstance(t, Traffic)
    assert (t.sends, t.per_context, t.readout_every_round, t.validation_modelled, t.lambda_on_validation,
            t.round_per_lambda) == TRAFFIC[method_id]
    assert t.ip_rounds == (method_id in IP_ROUNDS)
    assert m.stops_early == (method_id in STOPS_EARLY)
    assert (t == CENTRAL) == (not m.federated)


def test_sends_are_plain_strings():
    assert Sends.values() == ("nothing", "model", "statistics", "readout", "ip")
    assert Sends.ip == "ip" and f"{Sends.model}" == "model"
