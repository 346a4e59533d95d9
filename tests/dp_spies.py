"""Spies on the private trial's mechanisms (esnfed_core.private_trial), shared by the DP sampling
tests: what each FedIP-round aggregate is built with and receives, and the z each mechanism uses."""

from __future__ import annotations

from typing import Any

from esnfed_core import private_trial


def spy_aggregate(monkeypatch) -> dict[str, Any]:
    """Record the ``clients`` (denominator) and ``releases`` the rounds' aggregate is built with and
    the number of uploads each round hands it (``uploads``); the aggregate itself is unchanged."""
    seen: dict[str, Any] = {}
    original = private_trial.fedip_aggregate

    def spy(spec, rng, releases, norms=None, clients=None):
        seen["clients"], seen["releases"] = clients, releases
        inner = original(spec, rng, releases, norms, clients=clients)

        def aggregate(start, gains, biases, weights):
            seen.setdefault("uploads", []).append(len(gains))
            return inner(start, gains, biases, weights)
        return aggregate

    monkeypatch.setattr(private_trial, "fedip_aggregate", spy)
    return seen


def spy_multipliers(monkeypatch) -> list[tuple[str, float]]:
    """Record ("rounds", z) when the rounds' aggregate is built and ("readout", z) for each private
    readout release, z = the spec's multiplier for the trial's releases."""
    zs: list[tuple[str, float]] = []
    agg, stats = private_trial.fedip_aggregate, private_trial.private_stats

    def spy_agg(spec, rng, releases, *args, **kw):
        zs.append(("rounds", spec.multiplier(releases)))
        return agg(spec, rng, releases, *args, **kw)

    def spy_stats(units, spec, rng, releases=1):
        zs.append(("readout", spec.multiplier(releases)))
        return stats(units, spec, rng, releases)

    monkeypatch.setattr(private_trial, "fedip_aggregate", spy_agg)
    monkeypatch.setattr(private_trial, "private_stats", spy_stats)
    return zs
