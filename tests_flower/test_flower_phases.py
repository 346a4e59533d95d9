"""The phase each round of a Flower app is measured under (esnfed_flower.run.phase, read from its
method's Traffic), written out by hand for every app."""

from __future__ import annotations

import pytest

from esnfed_flower.run import APPS, phase

# rounds 0..7 of each app with 2 IP rounds (FedCLIP: per context)
PHASES = {
    "incfed": ["role", "stats", "stats", "stats", "stats", "stats", "stats", "stats"],
    "fedavg": ["role", "readout", "readout", "readout", "readout", "readout", "readout", "readout"],
    "fedip": ["role", "ip", "ip", "stats", "stats", "stats", "stats", "stats"],
    "fedclip-naive": ["role", "ip", "ip", "stats", "ip", "ip", "stats", "ip"],
    "fedclip-replay": ["role", "ip", "ip", "stats", "ip", "ip", "stats", "ip"],
    "fedclip-joint": ["role", "ip", "stats", "eval", "ip", "stats", "eval", "ip"],
}


def test_the_table_covers_every_app():
    assert {app for app, _ in APPS} == set(PHASES)


@pytest.mark.parametrize("app", sorted(PHASES))
def test_a_round_is_measured_by_its_methods_phase(app):
    assert [phase(app, rnd, 2) for rnd in range(8)] == PHASES[app]
