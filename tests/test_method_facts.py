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
