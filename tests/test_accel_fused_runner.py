"""runner.fused_ip_sums: the opt-in switch that runs the torch kernels' IP sums fused
(torch_plasticity.fused_chunk_sums) in the trials of the stationary and continual IP methods.

What must hold: off by default (no fused call, no key change); on, every IP step of a batched
trial takes the fused kernel, the trial still equals the numpy path within the tolerances of
tests/test_accel.py and tests/test_accel_continual.py (the fused sums reorder float32 additions
within a chunk only: tests/test_accel_fused.py bounds that), and the setting is part of the
trial's key exactly where it changes a result (a torch device and a method with IP)."""

from __future__ import annotations

import dataclasses

import pytest

from esnfed_core.accel.trials import fit_batch
from esnfed_core.errors import ConfigError
from esnfed_core.method import Method
from esnfed_stages.params.experiment import experiment_params
from experiment_data import small_params, trial_data
from test_accel import SETTINGS, check_fit_batch_equals_fit
from test_accel_fused import spy_fused_calls
from test_accel_continual import SEEDS, _assert_batch_equals_numpy
from test_accel_continual import SETTINGS as CONTINUAL
from test_accel_continual import _configs as _continual_configs

FUSED = dataclasses.replace(SETTINGS, fused_ip_sums=True)


@pytest.fixture(scope="module")
def data():
    return trial_data(seed=1, pct="75")[0]


@pytest.fixture
def fused_calls(monkeypatch):
    """One entry per fused chunk-sum call made while the test runs."""
    return spy_fused_calls(monkeypatch)


@pytest.mark.parametrize("algo", ["ip", "fedip"])
def test_stationary_ip_trials_take_the_fused_sums_and_equal_numpy(data, algo, fused_calls):
    check_fit_batch_equals_fit(algo, data, FUSED)
    assert len(fused_calls) > 0


def test_without_the_switch_no_trial_takes_the_fused_sums(data, fused_calls):
    fit_batch("fedip", [{"units": 16, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 0.8,
                         "sigma": 0.3, "rounds": 1, "local_epochs": 1}], [3], data,
              dataclasses.replace(SETTINGS, device="torch-cpu"))
    assert fused_calls == []


@pytest.mark.parametrize("method", ["clip-replay", "fedclip-naive"])
def test_continual_trials_take_the_fused_sums_and_equal_numpy(data, method, fused_calls):
    torch_fused = dataclasses.replace(CONTINUAL, device="torch-cpu", fused_ip_sums=True)
    models = fit_batch(method, _continual_configs(method), SEEDS, data, torch_fused)
    assert len(fused_calls) > 0
    _assert_batch_equals_numpy(data, method, models, CONTINUAL)


def test_the_switch_is_opt_in_and_in_the_key_where_it_changes_a_result():
    exp = experiment_params(small_params(device="torch-cpu", fused_ip_sums=True))
    assert exp.settings.fused_ip_sums
    assert exp.settings.used_by(Method("fedip"), True)["fused_ip_sums"] is True
    assert exp.settings.used_by(Method.parse("fedclip-replay"), False)["fused_ip_sums"] is True
    assert "fused_ip_sums" not in exp.settings.used_by(Method("incfed"), True)  # no IP
    assert "fused_ip_sums" not in exp.on_device("cpu").settings.used_by(Method("fedip"), True)  # numpy
    assert not experiment_params(small_params()).settings.fused_ip_sums  # default off
    with pytest.raises(ConfigError, match="runner.fused_ip_sums"):
        experiment_params(small_params(fused_ip_sums="yes"))
