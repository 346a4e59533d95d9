"""What the accelerated path cannot run is refused with one line before any work: an algorithm
the torch kernels do not implement, a config key they do not know (e.g. a new reservoir kind's),
cuda without a GPU (tests/test_accel.py), never silently run as something else."""

from __future__ import annotations

import dataclasses

import pytest

import torch  # noqa: E402, F401  (in the [test] extra: a missing torch is an error, not a skip)

from esnfed_core.accel import ALGOS, CONFIG_KEYS, check_supported  # noqa: E402
from esnfed_core.accel.trials import fit_batch  # noqa: E402
from esnfed_core.errors import ConfigError  # noqa: E402
from esnfed_core.method import METHODS, Method  # noqa: E402
from esnfed_core.settings import Settings  # noqa: E402
from esnfed_stages.experiment.runner import Outcome, TrialTask, run_tasks  # noqa: E402
from esnfed_stages.params.experiment import RunnerConfig  # noqa: E402
from experiment_data import trial_data  # noqa: E402

TORCH = Settings(device="torch-cpu")
CFG = {"units": 8, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 1.0, "sigma": 0.5, "budget": 1}


def test_every_shared_shallow_reservoir_method_but_the_random_baseline_is_supported_with_its_own_keys():
    for mid in METHODS:
        m = Method.parse(mid)
        if m.algo == "random" or m.deep or m.heterogeneous:  # numpy path on every device
            assert m.algo not in ALGOS and not TORCH.accelerated(m)
            continue
        assert TORCH.accelerated(m)
        assert set(m.config_keys) <= CONFIG_KEYS
        check_supported(m, {k: CFG.get(k, 1) for k in m.config_keys} | {"lambda": 1e-3}, "torch-cpu")


def test_an_unknown_config_key_is_one_line_naming_it():
    with pytest.raises(ConfigError) as err:
        fit_batch("fedip", [{**CFG, "rounds": 1, "local_epochs": 1, "layers": 2}], [1],
                  trial_data(pct="25")[0], TORCH)
    msg = str(err.value)
    assert "\n" not in msg and "layers" in msg and "fedip" in msg and msg.startswith("runner.device: torch-cpu")


def test_an_unknown_algorithm_is_refused():
    fake = dataclasses.make_dataclass("M", [("algo", str), ("id", str)])("deepesn", "deepesn")
    with pytest.raises(ConfigError, match=r"^runner.device: cuda does not run deepesn "):
        check_supported(fake, {}, "cuda")


def test_the_runner_refuses_before_running_any_task():
    done: list[Outcome] = []
    tasks = [TrialTask("ok", object(), "ridge", {k: CFG[k] for k in Method("ridge").config_keys}, 1, TORCH),
             TrialTask("bad", object(), "ridge", {**CFG, "depth": 3}, 2, TORCH)]
    with pytest.raises(ConfigError, match="depth"):
        run_tasks(tasks, RunnerConfig("sequential", 1, 1, "torch-cpu"), lambda t, o: done.append(o))
    assert done == []  # not even the valid task ran
