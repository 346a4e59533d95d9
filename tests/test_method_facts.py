"""What the stages ask a method instead of its name: whether its model file holds a shared reservoir,
whether its clients solve a readout per λ, which search-space entries it draws from and whether it
replays past contexts; the facts of every registered method id, written out by hand."""

from __future__ import annotations

import pytest

from esnfed_core.method import METHODS, Method
from esnfed_stages.params.experiment import space_names

# shared_model, readout_per_lambda, spaces, replays
FACTS = {
    "random": (False, False, (), False),
    "ridge": (True, False, (), False),
    "incfed": (True, False, (), False),
    "fedavg": (True, True, (), False),
    "ip": (True, False, ("ip",), False),
    "fedip": (True, False, ("fedip",), False),
    "clip-naive": (True, False, (), False),
    "clip-replay": (True, False, (), True),
    "clip-joint": (True, False, (), False),
    "fedclip-naive": (True, False, (), False),
    "fedclip-replay": (True, False, (), True),
    "fedclip-joint": (True, False, (), False),
    "deep-incfed": (True, False, ("deep",), False),
    "deep-fedip": (True, False, ("fedip", "deep"), False),
    "local": (False, False, (), False),
    "ensemble": (False, False, (), False),
    "align-0.5": (True, False, (), False),
}


def test_the_table_covers_every_method():
    assert set(METHODS) <= set(FACTS)


@pytest.mark.parametrize("method_id", sorted(FACTS))
def test_a_method_says_what_the_stages_ask(method_id):
    m = Method.parse(method_id)
    assert (m.shared_model, m.readout_per_lambda, m.spaces, m.replays) == FACTS[method_id]
    assert space_names("wesad", m) == ["wesad", *FACTS[method_id][2]]
    assert m.traffic.round_per_lambda == m.readout_per_lambda


# The Flower apps (named by method id): whether it runs IP rounds before one readout (run config
# ``rounds``, its (g, b) compared), whether DP trains it at best.json's λ (DP-FedAvg's clipped
# readouts), whether the validation users are evaluation nodes (joint), whether flower-export writes it.
FLOWER = {
    "incfed": (False, False, False, True),
    "fedip": (True, False, False, True),
    "fedavg": (False, True, False, True),
    "fedclip-naive": (False, False, False, True),
    "fedclip-replay": (False, False, False, True),
    "fedclip-joint": (False, False, True, False),
}


def test_the_flower_apps_ask_their_method():
    from esnfed_stages.layout import FEDCLIP_APPS, FLOWER_APPS
    from esnfed_stages.studies import flower_export
    from esnfed_stages.studies.flower import ip_then_readout

    assert set(FLOWER) == set(FLOWER_APPS + FEDCLIP_APPS)
    for app, facts in FLOWER.items():
        m = Method.parse(app)
        assert (ip_then_readout(app), m.readout_per_lambda, m.stops_early, app in flower_export.APPS) == facts, app
    assert flower_export.APPS == ("incfed", "fedip", "fedavg", "fedclip-naive", "fedclip-replay")
