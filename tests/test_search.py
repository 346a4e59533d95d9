"""Search spaces, seeded sampling, seed derivation and the continual budget grids (PROTOCOL §6)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import yaml

from esnfed_core.errors import ConfigError
from esnfed_core.search import (
    MAX_GRID_POINTS,
    clip_budgets,
    continual_budgets,
    derive_seed,
    fedclip_budgets,
    parse_dimension,
    parse_space,
    sample_config,
    space_size,
)

PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"


def test_derive_seed_is_deterministic_and_label_sensitive():
    a = derive_seed(0, "trial", "wesad", "25", 3)
    assert a == derive_seed(0, "trial", "wesad", "25", 3)
    others = {derive_seed(0, "trial", "wesad", "25", i) for i in range(50)}
    others |= {derive_seed(1, "trial", "wesad", "25", 3), derive_seed(0, "trial", "hhar", "25", 3),
               derive_seed(0, "retrain", "wesad", "25", 3)}
    assert len(others) == 53  # no collisions among unrelated labels
    assert all(0 <= s < 2**32 for s in others)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "0"])
def test_derive_seed_rejects_bad_global_seed(bad):
    with pytest.raises(ConfigError, match="seed"):
        derive_seed(bad, "x")


def test_grid_is_inclusive_and_exact():
    d = parse_dimension("spectral_radius", {"low": 0.3, "high": 0.95, "step": 0.05})
    assert len(d.values) == 14
    assert d.values[0] == 0.3 and d.values[-1] == 0.95 and d.values[1] == 0.35
    r = parse_dimension("rounds", {"low": 10, "high": 20, "step": 2})
    assert r.values == (10, 12, 14, 16, 18, 20)
    assert all(isinstance(v, int) for v in r.values)


def test_choice_and_uniform_sampling():
    rng = np.random.default_rng(0)
    choice = parse_dimension("units", [100, 200])
    assert {choice.sample(rng) for _ in range(50)} == {100, 200}
    uni = parse_dimension("input_scaling", {"low": 0.5, "high": 1.0})
    draws = [uni.sample(rng) for _ in range(200)]
    assert min(draws) >= 0.5 and max(draws) < 1.0
    assert len(set(draws)) == 200


@pytest.mark.parametrize("spec, fragment", [
    ([], "empty list"),
    ({"low": 1.0}, "needs both"),
    ({"low": 1.0, "high": 0.5}, "must exceed"),
    ({"low": 1.0, "high": 0.5, "step": 0.1}, "below low"),
    ({"low": 0.0, "high": 1.0, "step": 0}, "step: must be > 0"),
    ({"low": 0.0, "high": 1.0, "stride": 1}, "unknown field"),
    ({"low": "a", "high": 1.0}, "expected a finite number"),
    ("0.5", "expected a list"),
])
def test_bad_specs_name_the_key(spec, fragment):
    with pytest.raises(ConfigError) as exc:
        parse_dimension("leak", spec, "budgets.default.space.wesad")
    assert "budgets.default.space.wesad.leak" in str(exc.value) and fragment in str(exc.value)


@pytest.mark.parametrize("spec, count", [
    ({"low": 1, "high": 10**9, "step": 1}, "1000000000"),
    ({"low": 0.0, "high": 1.0, "step": 1e-12}, "1000000000001"),
    ({"low": -1e308, "high": 1e308, "step": 1.0}, "too many"),  # high - low overflows
    ({"low": 0, "high": 10**300, "step": 1}, "about 1e+300"),
])
def test_a_grid_too_fine_is_refused_before_it_is_built(spec, count):
    # tracemalloc: refused without building the points (1e9 of them would take tens of GB)
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError) as exc:
            parse_dimension("leak", spec, "budgets.default.space.wesad")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(exc.value).startswith(f"budgets.default.space.wesad.leak: the grid has {count} points, "
                                     f"more than {MAX_GRID_POINTS} ")
    assert peak < 1_000_000


def test_grid_at_the_cap_is_built_and_domain_sees_its_ends_only_when_over_it():
    seen = []
    d = parse_dimension("units", {"low": 1, "high": MAX_GRID_POINTS, "step": 1}, domain=seen.append)
    assert len(d.values) == MAX_GRID_POINTS and d.values[-1] == MAX_GRID_POINTS and seen == []
    with pytest.raises(ConfigError, match=f"{MAX_GRID_POINTS + 1} points"):
        parse_dimension("units", {"low": 1, "high": MAX_GRID_POINTS + 1, "step": 1}, domain=seen.append)
    assert seen == [1, MAX_GRID_POINTS + 1]


def test_a_huge_integer_is_named_not_converted():
    with pytest.raises(ConfigError, match=r"space\.leak\.high: expected a finite number, got <int of \d+ bits>"):
        parse_dimension("leak", {"low": 0, "high": 10**400, "step": 1})


def test_sample_config_is_deterministic_and_in_space():
    dims = parse_space({"units": [8, 16], "leak": {"low": 0.1, "high": 0.8, "step": 0.05},
                        "input_scaling": {"low": 0.5, "high": 1.0}})
    configs = [sample_config(dims, 0, "wesad", "25", i) for i in range(30)]
    assert configs == [sample_config(dims, 0, "wesad", "25", i) for i in range(30)]
    assert len({tuple(sorted(c.items())) for c in configs}) == 30
    for c in configs:
        assert c["units"] in (8, 16) and 0.1 <= c["leak"] <= 0.8 and 0.5 <= c["input_scaling"] < 1.0
    assert sample_config(dims, 1, "wesad", "25", 0) != configs[0]


def test_shared_names_draw_the_same_values_whatever_the_other_keys():
    """Common random numbers: ridge trial i and IP trial i share their reservoir hyperparameters."""
    base = {"units": [8, 16, 32], "leak": {"low": 0.1, "high": 0.8, "step": 0.05}}
    ip = {**base, "sigma": {"low": 0.05, "high": 1.05, "step": 0.05}, "rounds": [1, 2]}
    for i in range(10):
        a = sample_config(parse_space(base), 0, "hhar", "50", i)
        b = sample_config(parse_space(dict(reversed(list(ip.items())))), 0, "hhar", "50", i)
        assert {k: b[k] for k in a} == a


def test_paper_space_is_protocol_section_6():
    space = yaml.safe_load(PARAMS.read_text())["budgets"]["paper"]
    assert space["trials"] == 100 and space["retrains"] == 5
    w = {d.name: d for d in parse_space(space["space"]["wesad"])}
    h = {d.name: d for d in parse_space(space["space"]["hhar"])}
    assert w["units"].values == (200, 300, 400)
    assert h["units"].values == (100, 200, 300, 400, 500)
    for dims in (w, h):
        assert dims["spectral_radius"].values == tuple(round(0.3 + 0.05 * k, 10) for k in range(14))
        assert dims["leak"].values == tuple(round(0.1 + 0.05 * k, 10) for k in range(15))
    assert w["input_scaling"].values == tuple(round(0.5 + 0.05 * k, 10) for k in range(11))
    assert (h["input_scaling"].low, h["input_scaling"].high, h["input_scaling"].values) == (0.5, 1.0, None)
    for name in ("ip", "fedip"):
        d = {x.name: x for x in parse_space(space["space"][name])}
        assert d["sigma"].values == tuple(round(0.05 + 0.05 * k, 10) for k in range(21))
        assert d["rounds"].values == (10, 12, 14, 16, 18, 20)
    assert {x.name: x for x in parse_space(space["space"]["fedip"])}["local_epochs"].values == (3, 5, 10)
    assert space_size(list(w.values())) == 3 * 14 * 15 * 11


def test_clip_budget_grid():
    assert clip_budgets(20) == [8, 9, 10, 11, 12]
    assert clip_budgets(10) == [3, 4, 5, 6, 7]
    assert clip_budgets(2) == [1, 2, 3]  # non-positive epochs dropped


def test_fedclip_budget_grid():
    assert fedclip_budgets(20, 5) == list(range(4, 16))
    assert fedclip_budgets(20, 4) == list(range(5, 15))
    assert fedclip_budgets(10, 5) == list(range(2, 8))
    assert fedclip_budgets(3, 5) == [1]  # R//T = 0: one round per context
    assert fedclip_budgets(12, 2) == [6]  # T = 2: empty range -> R//T
    assert continual_budgets(20, 5, federated=True) == fedclip_budgets(20, 5)
    assert continual_budgets(20, 5, federated=False) == clip_budgets(20)


@pytest.mark.parametrize("rounds", [0, -3, 2.5, None])
def test_budget_grid_rejects_bad_rounds(rounds):
    with pytest.raises(ConfigError, match="rounds"):
        continual_budgets(rounds, 5, federated=True)
