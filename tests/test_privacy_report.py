"""The privacy table and figure (esnfed_stages/privacy_report.py) on made-up privacy documents:
the cells' spread, the header, the figure's legend and lines, and user datasets beside the papers'."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest

from esnfed_stages import privacy_report
from esnfed_stages.privacy import eps_key, privacy_params

PRIVACY = {"epsilons": [1, 8, float("inf")], "delta": "auto", "relation": "user", "clip": 0.003,
           "ip_clip": 0.1, "pct": "100", "methods": ["incfed", "fedip"]}
# The shape of the default run's WESAD numbers (reports of /tmp/ci): the two ε = ∞ means 0.16 apart.
ACCURACY = {"incfed": {"1": [0.38, 0.26], "8": [0.47, 0.377], "inf": [0.7155, 0.7073]},
            "fedip": {"1": [0.30, 0.255], "8": [0.467, 0.362], "inf": [0.7149, 0.7048]}}


def privacy_doc(dataset: str = "wesad", n_users: int = 9, params: dict | None = None,
                accuracy: dict | None = None, source: str | None = "synthetic", budget: str = "default") -> dict:
    """runs/privacy/<dataset>.json as `esnfed privacy` writes it (made-up accuracies)."""
    pp = privacy_params({"privacy": params or PRIVACY})
    accuracy = accuracy or ACCURACY
    methods = {m: {"config": {}, "releases": 1, "epsilons": {
        eps_key(e): {"noise_multiplier": 0.0 if e == float("inf") else 8 / e,
                     "test_accuracy": accuracy[m][eps_key(e)]} for e in pp.epsilons}} for m in pp.methods}
    doc = {"dataset": dataset, "pct": pp.pct, "n_users": n_users, "n_units": n_users,
           "delta": pp.delta_for(n_users), "relation": pp.relation, "clip": pp.clip, "ip_clip": pp.ip_clip,
           "mechanism": "Gaussian mechanism (esnfed_core/privacy.py)", "accountant": "dp-accounting PLD",
           "seeds": [11, 12], "version": "0", "params": pp.record(budget), "methods": methods}
    if source is not None:
        doc["source"] = source
    return doc


def _csv(files: dict) -> list[dict]:
    return list(csv.DictReader(io.StringIO(files["privacy.csv"].decode())))


def test_cells_are_mean_and_population_std_as_every_other_table():
    """The audit: WESAD incfed at ε = inf read 71.14 ± 0.58 (sample std) in privacy.md but
    71.14 ± 0.41 in ijcnn-wesad.md for the same scores (population std, PROTOCOL §6)."""
    files = privacy_report.render({"wesad": privacy_doc()}, "2026-01-01")
    row = next(r for r in _csv(files) if r["method"] == "incfed" and r["epsilon"] == "inf")
    assert float(row["std"]) == pytest.approx(100 * np.std([0.7155, 0.7073]))  # 0.41, not 0.58
    assert f"71.14 ± {100 * np.std([0.7155, 0.7073]):.2f} (z=0.00)" in files["privacy.md"].decode()
    assert "mean ± population std over the 2 retrains" in files["privacy.md"].decode()
