"""The select stage: trial files, resume without repetition, failure recording, best.json,
params validation, backend independence."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from esnfed_core.errors import ConfigError, DataError
from esnfed_core.method import Method
from esnfed_core import trial as trial_mod
from esnfed_stages.experiment.best import best_of, trial_seed
from esnfed_stages.experiment import select as select_stage
from esnfed_stages.params.experiment import RunnerConfig, experiment_params
from esnfed_stages.experiment.fingerprint import TRIAL_MODULES, trial_modules
from esnfed_core.vocabulary import PCTS
from esnfed_stages.layout import best_path, select_dir
from experiment_data import VALIDATION, make_dataset, small_params

RIDGE = Method("ridge")


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    make_dataset(tmp_path)
    return tmp_path


def _select(root: Path, params: dict, method: Method = RIDGE, pcts=("25",), **kw):
    return select_stage.run("wesad", method, list(pcts), experiment_params(params), data_dir=root / "data",
                            runs_dir=root / "runs", **kw)


def _trials(root: Path, method: str = "ridge", pct: str = "25") -> dict[str, bytes]:
    d = select_dir(root / "runs", "wesad", method, pct)
    return {p.name: p.read_bytes() for p in sorted(d.glob("trial-*.json"))}


def test_writes_one_record_per_trial_and_the_best(root):
    params = small_params()
    params["budgets"]["default"]["trials"] = 4
    result = _select(root, params, pcts=("25", "50"))
    assert [s.ran for s in result.shares] == [4, 4] and not result.failed
    records = [json.loads(b) for b in _trials(root).values()]
    assert [r["index"] for r in records] == [0, 1, 2, 3]
    for r in records:
        assert r["status"] == "ok" and r["error"] is None and r["seconds"] >= 0
        assert set(r["config"]) == {"units", "spectral_radius", "leak", "input_scaling"}
        assert r["selected_config"] == {**r["config"], "lambda": r["scores"]["lambda"]}
    best = json.loads(best_path(root / "runs", "wesad", "ridge", "25").read_text())
    top = max(records, key=lambda r: r["scores"]["score"])
    assert best["score"] == top["scores"]["score"] and best["config"] == top["selected_config"]
    assert best["n_trials"] == 4 and best["base"] is None


def test_rerun_resumes_without_repeating_finished_trials(root):
    params = small_params()
    params["budgets"]["default"]["trials"] = 3
    _select(root, params)
    d = select_dir(root / "runs", "wesad", "ridge", "25")
    before = _trials(root)
    mtimes = {p.name: p.stat().st_mtime_ns for p in d.glob("trial-*.json")}
    (d / "trial-0001.json").unlink()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs: its temporaries are stale
    (d / f".trial-0002.json.{dead.pid}.0123456789abcdef.tmp").write_text("{partial")  # a killed atomic write
    (d / ".x.tmp").write_text("someone else's")  # not ours: must survive
    result = _select(root, params)
    assert (result.shares[0].resumed, result.shares[0].ran) == (2, 1)
    after = _trials(root)
    for name in ("trial-0000.json", "trial-0002.json"):
        assert after[name] == before[name]
        assert (d / name).stat().st_mtime_ns == mtimes[name]  # not rewritten
    redo, orig = json.loads(after["trial-0001.json"]), json.loads(before["trial-0001.json"])
    redo.pop("seconds"), orig.pop("seconds")
    assert redo == orig  # the recomputed trial is the same trial
    assert [p.name for p in d.glob(".*.tmp")] == [".x.tmp"]
    # Nothing left to do: a third run only resumes.
    assert _select(root, params).shares[0].ran == 0


def test_changed_settings_recompute_and_fewer_trials_drop_stale_files(root):
    params = small_params()
    _select(root, params)
    params["readout"]["lambdas"] = [1e-3, 1.0]
    assert _select(root, params).shares[0].ran == 2  # keys changed: nothing reused
    params["runner"]["n_jobs"] = 2  # workers do not change a result's bits ...
    assert _select(root, params).shares[0].ran == 0
    params["runner"]["blas_threads"] = 2  # ... BLAS threads do (OpenBLAS splits sums by thread)
    assert _select(root, params).shares[0].ran == 2
    params["budgets"]["default"]["trials"] = 1
    _select(root, params)
    assert list(_trials(root)) == ["trial-0000.json"]


def test_failed_trial_is_recorded_and_the_others_finish(root, monkeypatch):
    params = small_params()
    params["budgets"]["default"]["trials"] = 3
    real_fit = trial_mod.fit
    bad_seed = trial_seed(experiment_params(params), "wesad", "25", 1)

    def flaky(method, config, seed, *a, **kw):
        if seed == bad_seed:
            raise FloatingPointError("reservoir diverged")
        return real_fit(method, config, seed, *a, **kw)

    monkeypatch.setattr(trial_mod, "fit", flaky)
    result = _select(root, params, pcts=("25", "50"))
    assert result.failed == [("25", 1, "FloatingPointError: reservoir diverged")]
    rec = json.loads(_trials(root)["trial-0001.json"])
    assert rec["status"] == "failed" and "reservoir diverged" in rec["traceback"] and rec["scores"] is None
    assert not best_path(root / "runs", "wesad", "ridge", "25").exists()  # incomplete share: no best
    assert best_path(root / "runs", "wesad", "ridge", "50").exists()
    monkeypatch.setattr(trial_mod, "fit", real_fit)
    again = _select(root, params, pcts=("25", "50"))
    assert not again.failed and [(s.resumed, s.ran) for s in again.shares] == [(2, 1), (3, 0)]
    assert best_path(root / "runs", "wesad", "ridge", "25").exists()


def test_best_ties_go_to_the_lowest_index():
    recs = [{"index": i, "scores": {"score": s}} for i, s in ((2, 0.5), (0, 0.4), (1, 0.5))]
    assert best_of(recs)["index"] == 1


def test_loky_and_sequential_give_identical_results(root, tmp_path_factory):
    other = tmp_path_factory.mktemp("loky")
    make_dataset(other)
    params = small_params()
    _select(root, params, pcts=("25", "50"))
    _select(other, params, pcts=("25", "50"), runner=RunnerConfig("loky", 2, 1))
    for pct in ("25", "50"):
        assert (best_path(root / "runs", "wesad", "ridge", pct).read_bytes()
                == best_path(other / "runs", "wesad", "ridge", pct).read_bytes())
        for (na, a), (nb, b) in zip(_trials(root, pct=pct).items(), _trials(other, pct=pct).items()):
            ra, rb = json.loads(a), json.loads(b)
            ra.pop("seconds"), rb.pop("seconds")
            assert na == nb and ra == rb


def test_ridge_incfed_fedavg_search_the_same_configs_and_seeds(root):
    params = small_params()
    for m in ("ridge", "incfed", "fedavg"):
        _select(root, params, Method(m))
    rec = {m: [json.loads(b) for b in _trials(root, m).values()] for m in ("ridge", "incfed", "fedavg")}
    for m in ("incfed", "fedavg"):
        assert [(r["config"], r["seed"]) for r in rec[m]] == [(r["config"], r["seed"]) for r in rec["ridge"]]
    assert [r["scores"]["score"] for r in rec["incfed"]] == pytest.approx(
        [r["scores"]["score"] for r in rec["ridge"]], abs=1e-12)


@pytest.mark.parametrize("edit, fragment", [
    (lambda p: p["runner"].update(threads=2), "runner.threads"),
    (lambda p: p.update(budget="huge"), "'budget' is 'huge'"),
    (lambda p: p["budgets"]["default"].update(trials=0), "budgets.default.trials"),
    (lambda p: p["readout"].update(lambdas=[-1.0]), "readout.lambdas"),
    (lambda p: p["plasticity"].update(normalize_step="yes"), "plasticity.normalize_step"),
    (lambda p: p["runner"].update(backend="dask"), "runner.backend"),
    (lambda p: p["budgets"]["default"]["space"]["wesad"].pop("leak"), "needs leak in its search space"),
    (lambda p: p["budgets"]["default"]["space"]["ip"].update(units=[4]), "redefines"),
    (lambda p: p["continual"]["replay"].update(fraction=0.0), "continual.replay.fraction"),
    (lambda p: p["continual"]["joint"].update(patience=0), "continual.joint.patience"),
    (lambda p: p["continual"]["naive"].update(budget=3), "continual.naive.budget"),
])
def test_bad_params_name_the_key(root, edit, fragment):
    params = small_params()
    edit(params)
    with pytest.raises(ConfigError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        _select(root, params, Method("ip"))
    assert not (root / "runs" / "select").exists() or not list((root / "runs" / "select").rglob("*.json"))


def test_a_processed_file_changed_after_preprocessing_is_refused_before_any_trial(root):
    """Windows are read lazily (past the zip CRCs): the manifest's sha256 catches a flipped bit."""
    manifest = json.loads((root / "data" / "processed" / "wesad" / "manifest.json").read_text())
    victim = root / "data" / "processed" / "wesad" / manifest["users"][VALIDATION[0]]["file"]
    raw = bytearray(victim.read_bytes())
    raw[len(raw) // 2] ^= 0x01  # inside the x array: the zip structure stays valid
    victim.write_bytes(bytes(raw))
    with pytest.raises(DataError, match=f"{victim}: contents differ from the sha256 in manifest.json"):
        _select(root, small_params())
    assert not list(root.rglob("trial-*.json"))


@pytest.mark.parametrize("name, edit, fragment", [
    ("partition", lambda d: d.update(validation="v0v1"), "validation must be a list of user names, got 'v0v1'"),
    ("partition", lambda d: d["train"].update({"25": None}), "train.25 must be a list of user names"),
    ("partition", lambda d: d.update(test=[["t0"]]), "test must be a list of user names"),
    # input audit: before, a test or validation user also trained on (or listed twice) went through
    ("partition", lambda d: d.update(test=d["test"] + d["train"]["25"][:1]),
     "is in both train.25 and test (the splits must be disjoint; rerun `esnfed partition`)"),
    ("partition", lambda d: d.update(validation=d["validation"] + d["test"][:1]), "is in both test and validation"),
    ("partition", lambda d: d.update(test=d["test"] + d["test"][:1]), "test lists user 't0' twice"),
    ("manifest", lambda d: d.update(users=None), "manifest.json: users must be a dict"),
    ("manifest", lambda d: d.update(n_classes="three"), "manifest.json: n_classes must be an integer"),
    ("manifest", lambda d: d["users"].update(u0=5), "manifest.json: users.u0 must be an object"),
])
def test_a_malformed_manifest_or_partition_is_a_data_error_naming_it(root, name, edit, fragment):
    """Valid JSON of the wrong shape stops the stage with one DataError naming the file and the key
    (not a TypeError deep inside, nor a string read as a list of one-letter users)."""
    path = (root / "data" / "partitions" / "wesad.json" if name == "partition"
            else root / "data" / "processed" / "wesad" / "manifest.json")
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(DataError, match=re.escape(fragment)) as info:
        _select(root, small_params())
    assert str(path) in str(info.value)
    assert not list(root.rglob("trial-*.json"))


def _inf_at(u):
    u.x[2, 3, 0] = float("inf")


def _label(u):
    u.y[1, 0] = 3  # the fixture has classes 0..2


def _context(u):
    u.context[-1] = 3  # and contexts 0..2


@pytest.mark.parametrize("edit, fragment", [
    (_inf_at, "x holds NaN or infinity (first in window 2"),
    (_label, "y holds values outside 0..2 of manifest.json (min 0, max 3"),
    (_context, "context holds values outside 0..2 of manifest.json (min 0, max 3"),
])
def test_a_processed_file_with_bad_values_is_refused_naming_it(root, edit, fragment):
    """A folder written by hand whose manifest hashes match but whose x holds an infinity, or whose
    labels or contexts exceed the manifest's: one DataError naming the file before any trial (each
    trial failed naming neither, or the values went through)."""
    import hashlib

    from esnfed_core.data.processed import UserData, load_user, save_user

    folder = root / "data" / "processed" / "wesad"
    user = VALIDATION[1]
    data = load_user(folder, user)
    data = UserData(data.x.copy(), data.y.copy(), data.context.copy())
    edit(data)
    save_user(folder / f"{user}.npz", data)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["users"][user]["sha256"] = hashlib.sha256((folder / f"{user}.npz").read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=re.escape(f"{folder / user}.npz: {fragment}")):
        _select(root, small_params(), Method("random"))
    assert not list(root.rglob("trial-*.json"))


def test_continual_select_needs_the_stationary_best(root):
    with pytest.raises(DataError, match=r"best\.json: not found: run `esnfed select --dataset wesad --algo ip "
                                        r"--pct 25` before clip-naive"):
        _select(root, small_params(), Method("clip", "naive"))


def test_continual_candidates_run_on_the_selected_stationary_trials_seed(root):
    """PROTOCOL §6 reuses the best IP config and searches the budget alone: every budget candidate
    (and joint's one trial) runs on the seed of the IP trial best.json selected, hence on its
    reservoir. A best.json with another seed is a new selection: no candidate is resumed."""
    params = small_params()
    _select(root, params, Method("ip"))
    ip_best = best_path(root / "runs", "wesad", "ip", "25")
    seed = json.loads(ip_best.read_text())["seed"]
    for strategy in ("naive", "joint"):
        _select(root, params, Method("clip", strategy))
        records = [json.loads(b) for b in _trials(root, f"clip-{strategy}").values()]
        assert {r["seed"] for r in records} == {seed}
        if strategy == "joint":
            assert len(records) == 1
        else:  # several budgets, one reservoir
            assert len({r["config"]["budget"] for r in records}) == len(records) >= 2
        assert json.loads(best_path(root / "runs", "wesad", f"clip-{strategy}", "25").read_text())["seed"] == seed
    edited = {**json.loads(ip_best.read_text()), "seed": seed + 1}
    ip_best.write_text(json.dumps(edited))
    result = _select(root, params, Method("clip", "naive"))
    n = result.shares[0].n_trials
    assert (result.shares[0].resumed, result.shares[0].ran) == (0, n)
    assert {json.loads(b)["seed"] for b in _trials(root, "clip-naive").values()} == {seed + 1}
    for bad in (None, "7", -1, True):
        ip_best.write_text(json.dumps({**edited, "seed": bad}))
        with pytest.raises(DataError, match=re.escape(f"{ip_best}: seed: expected the selected trial's seed")):
            _select(root, params, Method("clip", "naive"))


def test_select_before_partition_names_the_command_to_run_first(root):
    (root / "data" / "partitions" / "wesad.json").unlink()
    with pytest.raises(DataError, match=r"wesad\.json: not found: run `esnfed partition --dataset wesad` first"):
        _select(root, small_params())
    assert not (root / "runs").exists()


def test_a_share_missing_its_base_stops_select_before_any_share_is_cleaned(root):
    """fedclip over every share with fedip's selection missing for 75%: one error naming the fedip
    select to run, and the shares already selected keep their best.json."""
    params = small_params()
    _select(root, params, Method("fedip"), pcts=PCTS)
    _select(root, params, Method("fedclip", "naive"), pcts=PCTS)
    runs = {p: p.read_bytes() for p in sorted((root / "runs").rglob("*")) if p.is_file()}
    assert best_path(root / "runs", "wesad", "fedclip-naive", "25") in runs
    base = best_path(root / "runs", "wesad", "fedip", "75")
    base.unlink()
    del runs[base]
    with pytest.raises(DataError, match=re.escape(f"{base}: not found: select did not finish (2 trial file(s) "
                                                  "written); rerun `esnfed select --dataset wesad --algo fedip "
                                                  "--pct 75`")):
        _select(root, params, Method("fedclip", "naive"), pcts=PCTS)
    assert {p: p.read_bytes() for p in sorted((root / "runs").rglob("*")) if p.is_file()} == runs


def _loaded_after(code: str) -> set[str]:
    script = code + "\nimport sys\nprint('\\n'.join(m for m in sys.modules if m.startswith('esnfed_core')))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parent)
    return set(out.stdout.split())


@pytest.mark.parametrize("method", ["ridge", "fedip", "fedclip-joint"])
def test_trial_modules_cover_everything_a_trial_imports(method):
    """The code fingerprint in trial keys must cover every core module a trial of the method runs."""
    m = Method.parse(method)
    cfg = {"units": 4, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 1.0, "sigma": 0.3,
           "rounds": 1, "local_epochs": 1, "budget": 1}
    loaded = _loaded_after(
        "from experiment_data import trial_data\n"
        "from esnfed_core.settings import Settings\n"
        "from esnfed_core.trial import fit\n"
        f"fit({method!r}, {cfg!r}, 0, trial_data()[0], Settings(ip={{'batch_size': 4}}))")
    assert set(trial_modules(m)) <= set(TRIAL_MODULES)
    assert loaded <= set(trial_modules(m)), loaded - set(trial_modules(m))
    assert ("esnfed_core.plasticity" in loaded) == m.uses_ip


@pytest.mark.parametrize("budget, size", [("paper", (100, 5)), ("reduced", (20, 3))])
def test_paper_and_reduced_budgets_build_every_method_space(budget, size):
    params = small_params()
    params["budget"] = budget
    exp = experiment_params(params)
    assert (exp.trials, exp.retrains) == size
    for ds in ("wesad", "hhar"):
        for mid in ("ridge", "incfed", "fedavg", "ip", "fedip"):
            m = Method.parse(mid)
            assert {d.name for d in exp.method_space(ds, m)} == set(m.config_keys)
    assert exp.n_trials(Method("random")) == 1


def test_reduced_budget_has_the_paper_spaces():
    budgets = small_params()["budgets"]
    assert budgets["reduced"]["space"] == budgets["paper"]["space"]
    assert budgets["reduced"]["trials"] < budgets["paper"]["trials"]
    assert budgets["reduced"]["retrains"] < budgets["paper"]["retrains"]


@pytest.mark.parametrize("edit", [
    lambda r: r["scores"].update(score="x"),
    lambda r: r["scores"].update(score=float("nan")),
    lambda r: r.update(scores="x"),
    lambda r: r.update(index="x"),
    lambda r: r.update(selected_config="x"),
    lambda r: r["selected_config"].update(leak=float("nan")),
])
def test_a_damaged_record_with_its_key_is_recomputed_not_ranked(root, edit):
    """A finished record is reused by its key; before, a non-number score or index or a config
    string was a traceback (TypeError in best_of) and a NaN score or config went into best.json."""
    params = small_params()
    params["budgets"]["default"]["trials"] = 2
    _select(root, params)
    d = select_dir(root / "runs", "wesad", "ridge", "25")
    before = _trials(root)
    best = best_path(root / "runs", "wesad", "ridge", "25").read_bytes()
    record = json.loads(before["trial-0000.json"])
    edit(record)
    (d / "trial-0000.json").write_text(json.dumps(record))
    result = _select(root, params)
    assert (result.shares[0].resumed, result.shares[0].ran) == (1, 1) and not result.failed
    redo, orig = json.loads(_trials(root)["trial-0000.json"]), json.loads(before["trial-0000.json"])
    redo.pop("seconds"), orig.pop("seconds")
    assert redo == orig and best_path(root / "runs", "wesad", "ridge", "25").read_bytes() == best


# ------------------------------------------------- the budget checked by content, not only by name
def _digest(params: dict, method: str, **kw) -> str | None:
    return experiment_params(params).budget_spec.digest("wesad", Method.parse(method), **kw)


@pytest.mark.parametrize("method, changed, kept", [
    ("ridge", ["space.wesad", "trials", "seed"],
     ["space.hhar", "space.ip", "space.fedip", "space.deep", "retrains"]),
    ("fedip", ["space.wesad", "space.fedip", "trials", "seed"], ["space.hhar", "space.ip", "space.deep", "retrains"]),
    ("clip-naive", ["space.wesad", "space.ip", "trials", "seed"], ["space.fedip", "retrains"]),  # its base ip's
    ("deep-fedip", ["space.wesad", "space.fedip", "space.deep", "trials", "seed"],
     ["space.ip", "space.hhar", "retrains"]),
    ("random", ["seed"], ["space.wesad", "trials", "retrains"]),  # one trial, no space
])
def test_the_budget_digest_covers_what_the_selection_draws_from(method, changed, kept):
    """A selection's digest changes with the entries its trials are drawn from and with nothing
    else: another dataset's or method's space, or the retrain count, leave it (and its models)
    valid; an assess file's digest adds the retrains."""
    base = small_params()
    before = _digest(base, method)
    assert len(before) == 16 and before == _digest(small_params(), method)

    def edited(what: str) -> dict:
        params = small_params()
        entry = params["budgets"]["default"]
        if what == "seed":
            params["seed"] += 1
        elif what in ("trials", "retrains"):
            entry[what] += 1
        else:
            entry["space"][what.split(".")[1]]["changed"] = [1]  # digests hash the entry as written
        return params

    for what in changed:
        assert _digest(edited(what), method) != before, what
    for what in kept:
        assert _digest(edited(what), method) == before, what
    assert _digest(edited("retrains"), method, assessed=True) != _digest(base, method, assessed=True)
    other = small_params()
    other["budgets"]["small"] = other["budgets"]["default"]
    other["budget"] = "small"
    assert _digest(other, method) == before  # the name is compared on its own


def test_best_json_records_the_budget_digest_and_a_stale_base_is_refused(root):
    """clip builds on ip's best.json: after budgets.default.space.ip is edited by hand (same name),
    the stale selection is refused naming it and the select to rerun; nothing is written."""
    params = small_params()
    _select(root, params, Method("ip"))
    ip_best = best_path(root / "runs", "wesad", "ip", "25")
    best = json.loads(ip_best.read_text())
    assert (best["params_budget"], best["params_budget_digest"]) == ("default", _digest(params, "ip"))
    params["budgets"]["default"]["space"]["ip"]["rounds"] = [1, 3]
    runs = {p: p.read_bytes() for p in sorted((root / "runs").rglob("*")) if p.is_file()}
    with pytest.raises(DataError) as err:
        _select(root, params, Method("clip", "naive"))
    assert str(err.value) == (f"{ip_best}: selected under budget 'default' with another search space, trials or "
                              "seed than params.yaml's now: rerun `esnfed select --dataset wesad --algo ip --pct 25`")
    assert {p: p.read_bytes() for p in sorted((root / "runs").rglob("*")) if p.is_file()} == runs


def test_an_unrelated_budget_edit_or_a_best_json_without_the_digest_is_accepted(root):
    """Another method's space leaves ip's selection valid; a best.json written before the digest was
    recorded is trusted, as one without the budget's name is."""
    params = small_params()
    _select(root, params, Method("ip"))
    params["budgets"]["default"]["space"]["fedip"]["rounds"] = [1, 3]
    params["budgets"]["default"]["space"]["hhar"]["units"] = [4]
    params["budgets"]["default"]["retrains"] = 5
    _select(root, params, Method("clip", "naive"))
    clip_best = json.loads(best_path(root / "runs", "wesad", "clip-naive", "25").read_text())
    assert clip_best["params_budget_digest"] == _digest(params, "ip")  # a continual method's is its base's
    ip_best = best_path(root / "runs", "wesad", "ip", "25")
    ip_best.write_text(json.dumps({k: v for k, v in json.loads(ip_best.read_text()).items()
                                   if k != "params_budget_digest"}))
    params["budgets"]["default"]["space"]["ip"]["rounds"] = [1, 3]
    assert _select(root, params, Method("clip", "naive")).shares[0].best is not None
