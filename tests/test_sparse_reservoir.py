"""Sparse reservoirs (the IncFed paper's input and recurrent connectivity, docs/protocol.md §2): the
dense draw is unchanged, the sparse one keeps exactly the requested share of entries at seeded
positions, Ŵ is rescaled to ρ after masking (a nilpotent pattern drawn again), bad values are one
line naming the key, and the keys reach every path that draws a reservoir."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from esnfed_core import reservoir as res_mod
from esnfed_core.deep import DeepConfig, build_deep_reservoir
from esnfed_core.errors import ConfigError, DataError
from esnfed_core.heterogeneity import Heterogeneity, draw_clients
from esnfed_core.method import CONNECTIVITY_KEYS, METHODS, Method
from esnfed_core.reservoir import (
    MAX_MASK_DRAWS, ParameterError, ReservoirConfig, build_reservoir, has_cycle, nonzero_count, spectral_radius,
)
from esnfed_core.search import parse_space, sample_config
from esnfed_core.trial import make_reservoir
from esnfed_stages.experiment.models import check_best_config
from esnfed_stages.params.schema import validate
from esnfed_stages.params.load import load_params

REPO_PARAMS = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
# ρ of the float32 Ŵ against the float64 target: each entry is rounded to float32 (relative error
# <= 2^-24 ≈ 6e-8), which moves a simple eigenvalue by at most its condition number times that;
# measured below 1e-7 relative on these draws (1 % connectivity included), so 1e-5 leaves 100x margin.
RHO_RTOL = 1e-5


def _sparse(u=8, n=100, rho=0.9, inp=None, rec=None, seed=0):
    return build_reservoir(ReservoirConfig(u, n, rho, 0.3, 1.0, inp, rec), seed)


# ---------------------------------------------------------------- the dense draw is unchanged
def test_the_dense_draw_is_byte_identical_to_protocol_section_2():
    """No connectivity key: W_in ~ U(-1, 1)·scaling and Ŵ ~ N(0, 1)·ρ/ρ(Ŵ), from the same stream as
    before sparse reservoirs existed (recomputed here step by step: the same operations, so equal
    bits), with nothing more drawn from the generator; W_in's bytes are pinned to those the code
    before this change gave (sha256 taken on main at ea9cfea; numpy's uniform stream is the same on
    every platform)."""
    rng = np.random.default_rng(0)
    got = build_reservoir(ReservoirConfig(8, 50, 0.9, 0.3, 1.0), rng)
    ref = np.random.default_rng(0)
    w_in = ref.uniform(-1.0, 1.0, size=(50, 8)) * 1.0
    w = ref.standard_normal(size=(50, 50))
    w *= 0.9 / spectral_radius(w)
    np.testing.assert_array_equal(got.w_in, w_in.astype(np.float32))
    np.testing.assert_array_equal(got.w, w.astype(np.float32))
    assert rng.bit_generator.state == ref.bit_generator.state  # no extra draw
    assert hashlib.sha256(got.w_in.tobytes()).hexdigest() == \
        "a3c0f5c6b064bfc994fb61b5f82445aa6cf785afc6a488e894549805db554437"


@pytest.mark.parametrize("inp, rec", [(100, None), (None, 100), (100, 100), (99.99, 99.999)])
def test_full_connectivity_is_the_dense_reservoir_and_draws_nothing_more(inp, rec):
    """100 % (or a share that rounds to every entry) keeps every entry: the dense bytes, and the
    generator is left where the dense draw leaves it (a deep reservoir's next layer is unchanged)."""
    a, b = np.random.default_rng(3), np.random.default_rng(3)
    dense = build_reservoir(ReservoirConfig(8, 40, 0.9, 0.3, 1.0), a)
    full = build_reservoir(ReservoirConfig(8, 40, 0.9, 0.3, 1.0, inp, rec), b)
    assert full.w_in.tobytes() == dense.w_in.tobytes() and full.w.tobytes() == dense.w.tobytes()
    assert a.bit_generator.state == b.bit_generator.state


def test_the_repository_configs_are_unchanged_by_the_optional_keys():
    """Absent keys change nothing: no budget of params.yaml searches connectivity (so `dvc repro`
    samples, keys and runs what it did), and adding connectivity to a space leaves every other
    hyperparameter's draw at each trial index as it was (each has its own seeded stream)."""
    for budget, spec in REPO_PARAMS["budgets"].items():
        for name, space in spec["space"].items():
            assert not set(CONNECTIVITY_KEYS) & set(space), (budget, name)
    space = REPO_PARAMS["budgets"]["paper"]["space"]["wesad"]
    plain = parse_space(space)
    sparse = parse_space({**space, "input_connectivity": {"low": 1, "high": 60, "step": 1},
                          "recurrent_connectivity": [1, 5, 50]})
    for i in range(20):
        a = sample_config(plain, 7, "wesad", "25", i)
        b = sample_config(sparse, 7, "wesad", "25", i)
        assert {k: v for k, v in b.items() if k not in CONNECTIVITY_KEYS} == a
        assert 1 <= b["input_connectivity"] <= 60 and b["recurrent_connectivity"] in (1, 5, 50)


# ---------------------------------------------------------------- the sparse draw
@pytest.mark.parametrize("n, u, pct", [(100, 8, 5), (100, 8, 50), (250, 8, 1), (100, 6, 60), (37, 3, 33.3),
                                       (500, 32, 20), (10, 8, 1)])
def test_nonzero_count_is_exactly_the_rounded_share(n, u, pct):
    """W_in keeps exactly round(pct·N·U/100) entries (at least 1) and Ŵ round(pct·N²/100): the
    share of nonzeros is the requested one to within half an entry."""
    r = _sparse(u, n, inp=pct, rec=pct, seed=1)
    for arr, size in ((r.w_in, n * u), (r.w, n * n)):
        k = nonzero_count(pct, size)
        assert np.count_nonzero(arr) == k
        assert k == 1 or abs(k / size - pct / 100) <= 0.5 / size
    assert nonzero_count(5, 800) == 40 and nonzero_count(50, 800) == 400  # the paper's WESAD W_in (U = 8)
    assert nonzero_count(1, 10) == 1 and nonzero_count(0.01, 8) == 1     # never all zero
    assert nonzero_count(50, 1) == 1 and nonzero_count(100, 12) == 12


@pytest.mark.parametrize("rec", [1, 5, 20, 50, 60])
@pytest.mark.parametrize("rho", [0.1, 0.4, 0.99])
def test_the_masked_recurrent_matrix_is_rescaled_to_rho(rec, rho):
    for seed in range(3):
        r = _sparse(n=100, rho=rho, rec=rec, seed=seed)
        assert math.isclose(spectral_radius(r.w), rho, rel_tol=RHO_RTOL)


def test_same_seed_same_bytes_and_another_seed_another_pattern():
    a, b, c = (_sparse(inp=5, rec=50, seed=s) for s in (4, 4, 5))
    assert a.w_in.tobytes() == b.w_in.tobytes() and a.w.tobytes() == b.w.tobytes()
    assert not np.array_equal(a.w_in != 0, c.w_in != 0) and not np.array_equal(a.w != 0, c.w != 0)


def test_kept_entries_are_the_dense_draws_values():
    """The masks come after both dense draws: kept W_in entries are the dense W_in's, kept Ŵ entries
    the dense Ŵ's up to the one rescaling factor; input connectivity alone leaves Ŵ as dense."""
    dense = _sparse(seed=2)
    only_in = _sparse(inp=20, seed=2)
    assert only_in.w.tobytes() == dense.w.tobytes()
    kept = only_in.w_in != 0
    np.testing.assert_array_equal(only_in.w_in[kept], dense.w_in[kept])
    both = _sparse(inp=20, rec=10, seed=2)
    np.testing.assert_array_equal(both.w_in, only_in.w_in)
    kept = both.w != 0
    ratio = both.w[kept].astype(np.float64) / dense.w[kept]
    np.testing.assert_allclose(ratio, ratio[0], rtol=2e-7)  # two float32 roundings of one factor


# ---------------------------------------------------------------- nilpotent patterns
def test_has_cycle_reads_the_pattern_graph():
    n = 6
    lower = np.tril(np.ones((n, n), bool), -1)
    assert not has_cycle(lower)                                 # strictly triangular: nilpotent
    perm = np.random.default_rng(0).permutation(n)
    assert not has_cycle(lower[np.ix_(perm, perm)])             # so is any relabelling of it
    loop = np.zeros((n, n), bool)
    loop[2, 2] = True
    assert has_cycle(loop)                                      # a self-loop
    two = np.zeros((n, n), bool)
    two[0, 3] = two[3, 0] = True
    assert has_cycle(two)                                       # a 2-cycle
    w = np.where(lower[np.ix_(perm, perm)], 1.5, 0.0)
    assert not np.any(np.linalg.matrix_power(w, n))             # acyclic really is nilpotent


def _first_mask_acyclic_seed(n, pct):
    for seed in range(100):
        rng = np.random.default_rng(seed)
        rng.uniform(-1.0, 1.0, size=(n, 8))
        rng.standard_normal(size=(n, n))
        if not has_cycle(res_mod._draw_mask(rng, (n, n), pct)):
            return seed
    raise AssertionError("no seed found")


def test_an_acyclic_recurrent_mask_is_drawn_again(monkeypatch):
    """1 % of a 10x10 Ŵ is one connection, acyclic 9 times in 10: the mask is redrawn until it has
    a cycle (here a self-loop), then Ŵ has spectral radius ρ; the same seed gives the same redraws."""
    seed = _first_mask_acyclic_seed(10, 1)
    r = _sparse(n=10, rec=1, seed=seed)
    assert np.count_nonzero(r.w) == 1 and has_cycle(r.w != 0)
    assert math.isclose(spectral_radius(r.w), 0.9, rel_tol=RHO_RTOL)
    assert r.w.tobytes() == _sparse(n=10, rec=1, seed=seed).w.tobytes()
    monkeypatch.setattr(res_mod, "MAX_MASK_DRAWS", 1)
    with pytest.raises(ParameterError) as err:
        _sparse(n=10, rec=1, seed=seed)
    msg = str(err.value)
    assert msg.startswith("recurrent_connectivity: 1 % of a 10x10") and "nilpotent" in msg and "\n" not in msg
    assert MAX_MASK_DRAWS == 100


# ---------------------------------------------------------------- bad values
BAD = [(0, "must be > 0.0"), (-5, "must be > 0.0"), (100.5, "must be <= 100.0"), (float("nan"), "must be finite"),
       ("50", "expected a number"), (True, "expected a number"), (None, None)]


@pytest.mark.parametrize("key", CONNECTIVITY_KEYS)
@pytest.mark.parametrize("value, fragment", BAD)
def test_bad_connectivity_is_one_line_naming_the_key(key, value, fragment):
    cfg = {"units": 20, "spectral_radius": 0.9, "leak": 0.3, "input_scaling": 1.0, key: value}
    if fragment is None:  # a key present with null is refused, not read as dense
        fragment = "expected a number"
    with pytest.raises(ParameterError) as err:
        make_reservoir(cfg, 8, 0)
    assert str(err.value).startswith(f"{key}: {fragment}") and "\n" not in str(err.value)


@pytest.mark.parametrize("spec, fragment", [
    ([0, 5], "space.wesad.input_connectivity: must be > 0.0, got 0"),
    ({"low": 1, "high": 101}, "space.wesad.input_connectivity.high: must be <= 100.0, got 101"),
    ({"low": 1, "high": 60, "step": 0}, "space.wesad.input_connectivity.step: must be > 0"),
    (["5"], "space.wesad.input_connectivity: expected a number"),
])
def test_a_bad_search_space_is_one_line_naming_the_key(spec, fragment):
    params = json.loads(json.dumps(REPO_PARAMS))
    params["budgets"]["default"]["space"]["wesad"]["input_connectivity"] = spec
    with pytest.raises(ConfigError) as err:
        validate(params)
    assert f"params.yaml: budgets.default.{fragment}" in str(err.value) and "\n" not in str(err.value)


def test_a_valid_sparse_space_passes_the_schema():
    params = json.loads(json.dumps(REPO_PARAMS))
    for ds in ("wesad", "hhar"):
        params["budgets"]["paper"]["space"][ds].update(input_connectivity={"low": 1, "high": 60, "step": 1},
                                                       recurrent_connectivity={"low": 1.0, "high": 60.0})
    validate(params)


def test_a_saved_config_is_checked_naming_the_file_and_key(tmp_path):
    path = tmp_path / "best.json"
    cfg = {"units": 20, "spectral_radius": 0.9, "leak": 0.3, "input_scaling": 1.0, "lambda": 1e-3}
    check_best_config(path, Method("ridge"), {**cfg, "input_connectivity": 5, "recurrent_connectivity": 50.0})
    with pytest.raises(DataError, match=rf"^{path}: config\.recurrent_connectivity: must be > 0\.0, got 0$"):
        check_best_config(path, Method("ridge"), {**cfg, "recurrent_connectivity": 0})
    with pytest.raises(DataError, match=r"config\.density: not a hyperparameter of ridge"):
        check_best_config(path, Method("ridge"), {**cfg, "density": 5})
    assert Method("random").optional_keys == ()
    assert all(Method.parse(m).optional_keys == CONNECTIVITY_KEYS for m in METHODS if m != "random")


# ---------------------------------------------------------------- every path that draws a reservoir
def test_deep_layers_are_each_sparse_and_one_layer_is_the_shallow_reservoir():
    deep = build_deep_reservoir(DeepConfig.shared(8, 90, 3, 0.9, 0.3, 1.0, 10, 20), 5)
    for layer in deep.layers:
        assert np.count_nonzero(layer.w_in) == nonzero_count(10, layer.w_in.size)
        assert np.count_nonzero(layer.w) == nonzero_count(20, layer.w.size)
        assert math.isclose(spectral_radius(layer.w), 0.9, rel_tol=RHO_RTOL)
    one = make_reservoir({"units": 30, "spectral_radius": 0.9, "leak": 0.3, "input_scaling": 1.0, "layers": 1,
                          "input_connectivity": 10, "recurrent_connectivity": 20}, 8, 5)
    shallow = _sparse(8, 30, inp=10, rec=20, seed=5)
    assert one.layers[0].w_in.tobytes() == shallow.w_in.tobytes() and one.layers[0].w.tobytes() == shallow.w.tobytes()


def test_heterogeneous_clients_each_draw_a_sparse_reservoir():
    cfg = {"units": 40, "spectral_radius": 0.9, "leak": 0.3, "input_scaling": 1.0,
           "input_connectivity": 25, "recurrent_connectivity": 5}
    clients = draw_clients(Heterogeneity(), cfg, 8, 3, 11)
    assert len({c.reservoir.w.tobytes() for c in clients}) == 3
    for c in clients:
        assert c.config["recurrent_connectivity"] == 5
        assert np.count_nonzero(c.reservoir.w_in) == 80 and np.count_nonzero(c.reservoir.w) == 80
    dense = draw_clients(Heterogeneity(), {k: v for k, v in cfg.items() if k not in CONNECTIVITY_KEYS}, 8, 3, 11)
    assert all(set(c.config) == {"units", "spectral_radius", "leak", "input_scaling"} for c in dense)
    assert all(np.count_nonzero(c.reservoir.w) == 1600 for c in dense)


def test_reservoirpy_counts_nonzeros_the_same_way():
    """reservoirpy (0.4.2, mat_gen.random_sparse) takes connectivity as the fraction of nonzero
    entries of the whole matrix and keeps a fixed count of them (scipy's sparse.random rounds
    density·size): where that product is not a half, the counts equal ours at percent = 100 ×
    fraction."""
    from reservoirpy.mat_gen import random_sparse

    for (m, n), frac in (((100, 8), 0.05), ((100, 8), 0.5), ((100, 100), 0.01), ((250, 250), 0.6),
                         ((37, 3), 0.333)):
        theirs = random_sparse(m, n, connectivity=frac, dist="norm", seed=0, sparsity_type="dense")
        assert np.count_nonzero(theirs) == nonzero_count(100 * frac, m * n), (m, n, frac)


def test_the_accelerated_path_accepts_sparse_configs():
    from esnfed_core.accel import CONFIG_KEYS, check_supported

    assert set(CONNECTIVITY_KEYS) <= CONFIG_KEYS
    check_supported(Method("fedip"), {"units": 8, "input_connectivity": 5, "recurrent_connectivity": 50}, "torch-cpu")
    with pytest.raises(ConfigError, match="config key\\(s\\) density"):
        check_supported(Method("fedip"), {"units": 8, "density": 5}, "torch-cpu")


def test_reservoir_config_defaults_to_dense():
    cfg = ReservoirConfig(8, 10, 0.9, 0.3, 1.0)
    assert cfg.input_connectivity is None and cfg.recurrent_connectivity is None
    assert dataclasses.replace(cfg, input_connectivity=5).input_connectivity == 5


# ---------------------------------------------------------------- the stages
def test_select_searches_connectivity_and_continual_methods_keep_the_selected_one(tmp_path):
    """A space naming connectivity: every trial's config holds the drawn values (and its reservoir
    the matching nonzero counts), and CLIP's candidates reuse IP's selected connectivity as they
    reuse its other hyperparameters; the space without the keys plans the configs it always did."""
    from esnfed_stages.experiment import select as select_stage
    from esnfed_stages.params.experiment import experiment_params
    from esnfed_stages.layout import best_path, select_dir
    from experiment_data import make_dataset, small_params

    make_dataset(tmp_path)
    params = small_params()
    space = params["budgets"]["default"]["space"]["wesad"]
    dense_plan = [json.loads(json.dumps(sample_config(parse_space(space), params["seed"], "wesad", "25", i)))
                  for i in range(2)]
    space.update(input_connectivity=[30, 60], recurrent_connectivity={"low": 5, "high": 50, "step": 5})

    def run(method):
        return select_stage.run("wesad", method, ["25"], experiment_params(params), data_dir=tmp_path / "data",
                                runs_dir=tmp_path / "runs")

    run(Method("ip"))
    records = [json.loads(p.read_text()) for p in sorted(select_dir(tmp_path / "runs", "wesad", "ip", "25")
                                                          .glob("trial-*.json"))]
    assert len(records) == 2 and all(r["status"] == "ok" for r in records)
    for r, dense in zip(records, dense_plan):
        cfg = r["config"]
        assert cfg["input_connectivity"] in (30, 60) and 5 <= cfg["recurrent_connectivity"] <= 50
        assert {k: cfg[k] for k in dense} == dense  # the other draws are the dense plan's
    best = json.loads(best_path(tmp_path / "runs", "wesad", "ip", "25").read_text())
    run(Method("clip", "naive"))
    for p in select_dir(tmp_path / "runs", "wesad", "clip-naive", "25").glob("trial-*.json"):
        cfg = json.loads(p.read_text())["config"]
        assert all(cfg[k] == best["config"][k] for k in CONNECTIVITY_KEYS)


def test_the_selected_table_shows_connectivity_only_when_a_config_has_it():
    from esnfed_stages.report.selected_report import CSV_COLUMNS, Selected, render

    base = {"units": 100, "spectral_radius": 0.99, "leak": 1.0, "input_scaling": 1.0, "lambda": 1e-3}
    dense = [Selected("wesad", "fedavg", "25", {"config": base, "score": 0.8, "trial": 0, "n_trials": 2}, None)]
    md, csv_text = render(dense, [], None, None, "select")
    assert "connectivity" not in md and csv_text.splitlines()[0] == ",".join(
        c for c in CSV_COLUMNS if "connectivity" not in c)
    sparse = dense + [Selected("wesad", "incfed", "25", {"config": {**base, "input_connectivity": 5,
                                                                     "recurrent_connectivity": 50},
                                                          "score": 0.84, "trial": 1, "n_trials": 2}, None)]
    md, csv_text = render(sparse, [], None, None, "select")
    assert "| method | train users | N | ρ | leak | input scaling | input connectivity (%) | " \
           "recurrent connectivity (%) |" in md
    assert "| fedavg | 25% | 100 | 0.99 | 1 | 1 | 100 | 100 |" in md       # dense beside a sparse one
    assert "| incfed | 25% | 100 | 0.99 | 1 | 1 | 5 | 50 |" in md          # the paper's Table III IncFed
    head, *lines = csv_text.splitlines()
    assert head.split(",")[3:9] == ["units", "spectral_radius", "leak", "input_scaling", "input_connectivity",
                                    "recurrent_connectivity"]
    assert lines[1].split(",")[7:9] == ["5", "50"] and lines[0].split(",")[7:9] == ["100", "100"]


def test_the_flower_run_config_carries_the_connectivity_only_when_sparse():
    """The flower stage's run config: what the apps' clients rebuild the reservoir from
    (tests_flower/test_flower_apps.py runs a sparse IncFed app against the pipeline)."""
    from esnfed_core.settings import Settings
    from esnfed_stages.studies.flower import run_config
    from experiment_data import trial_data

    data, _ = trial_data()
    cfg = {"units": 10, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 0.8}
    seeds = {"reservoir": 5}
    dense = run_config(cfg, seeds, data, Settings(), 1e-3, "incfed", False)
    assert not set(CONNECTIVITY_KEYS) & set(dense)
    sparse = run_config({**cfg, "recurrent_connectivity": 20}, seeds, data, Settings(), 1e-3, "incfed", False)
    assert sparse == {**dense, "recurrent_connectivity": 20}


def test_retrain_and_assess_keep_the_selected_sparse_reservoir(tmp_path):
    """select -> retrain -> assess with a sparse space: each retrained model's saved W_in and Ŵ have
    the selected connectivity's nonzero counts (new seeds, same shares), and the assess file records
    the config with it."""
    from esnfed_core.vocabulary import PCTS
    from esnfed_stages.experiment import assess as assess_stage
    from esnfed_stages.experiment import retrain as retrain_stage
    from esnfed_stages.experiment import select as select_stage
    from esnfed_stages.params.experiment import experiment_params
    from esnfed_stages.layout import best_path
    from esnfed_stages.experiment.models import load_model
    from experiment_data import make_dataset, small_params

    make_dataset(tmp_path)
    params = small_params()
    params["budgets"]["default"]["space"]["wesad"].update(input_connectivity=[40], recurrent_connectivity=[15, 30])
    kw = {"data_dir": tmp_path / "data", "runs_dir": tmp_path / "runs"}
    exp = experiment_params(params)
    select_stage.run("wesad", Method("incfed"), list(PCTS), exp, **kw)
    retrain_stage.run("wesad", Method("incfed"), list(PCTS), exp, **kw)
    doc = assess_stage.run("wesad", Method("incfed"), exp, **kw)
    for pct in PCTS:
        cfg = json.loads(best_path(tmp_path / "runs", "wesad", "incfed", pct).read_text())["config"]
        assert cfg["input_connectivity"] == 40 and cfg["recurrent_connectivity"] in (15, 30)
        assert doc["pcts"][pct]["config"]["recurrent_connectivity"] == cfg["recurrent_connectivity"]
        for k in range(params["budgets"]["default"]["retrains"]):
            model, meta = load_model(tmp_path / "runs" / "models" / "wesad" / "incfed" / pct, k)
            w_in, w = model.reservoir.w_in, model.reservoir.w
            assert np.count_nonzero(w_in) == nonzero_count(40, w_in.size)
            assert np.count_nonzero(w) == nonzero_count(cfg["recurrent_connectivity"], w.size)
            assert meta["config"]["recurrent_connectivity"] == cfg["recurrent_connectivity"]


def test_check_params_refuses_a_bad_connectivity_in_one_line_and_writes_nothing(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from esnfed_cli.main import app

    monkeypatch.chdir(tmp_path)
    params = json.loads(json.dumps(REPO_PARAMS))
    params["budgets"]["paper"]["space"]["hhar"]["recurrent_connectivity"] = {"low": 0, "high": 60}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    result = CliRunner().invoke(app, ["check-params"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        "error: params.yaml: budgets.paper.space.hhar.recurrent_connectivity.low: must be > 0.0, got 0.0"]
    assert list(tmp_path.iterdir()) == [tmp_path / "params.yaml"]
