"""esnfed_stages.studies.flower_export's checks and the run-config TOML it writes (the export itself and
`flwr run` on it: tests_flower/test_flwr_run.py)."""

from __future__ import annotations

import tomllib

import pytest

from esnfed_core.errors import ConfigError
from esnfed_stages.studies.flower_export import check_export, export, node_config_line, toml_value


def test_the_run_config_values_read_back_as_written():
    rc = {"app": 'fed"ip', "secagg": False, "units": 12, "lambda": 0.1, "max-weight": 144.0,
          "data-dir": "/a b/clients", "ip-normalize-step": True}
    text = "\n".join(f"{k} = {toml_value(k, v)}" for k, v in rc.items())
    back = tomllib.loads(text)
    assert back == rc and all(type(back[k]) is type(v) for k, v in rc.items())


@pytest.mark.parametrize("value", [float("nan"), float("inf"), [0.1, 1.0], None])
def test_a_value_flower_cannot_carry_is_named(value):
    with pytest.raises(ConfigError, match="run config lambdas"):
        toml_value("lambdas", value)


def test_a_node_config_line_names_its_own_file(tmp_path):
    line = node_config_line(2, 4, tmp_path / "clients" / "client-2.npz")
    assert tomllib.loads(line.replace(" ", "\n")) == {"partition-id": 2, "num-partitions": 4,
                                                      "data-file": str(tmp_path / "clients" / "client-2.npz")}


@pytest.mark.parametrize("app, secagg, pct, named", [("fedcip", False, "100", "--app"),
                                                     ("fedavg", True, "100", "--secagg"),
                                                     ("incfed", False, "30", "--pct")])
def test_bad_options_are_refused_before_anything_is_written(tmp_path, app, secagg, pct, named):
    with pytest.raises(ConfigError, match=named):
        export("wesad", app, secagg, pct, {}, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    check_export("incfed", True, "100")  # a good pair passes
