"""params.yaml is checked as a whole when any stage starts: each class of error (unknown key,
wrong type, out of range, impossible combination) is one line naming the key and exit code 1;
CLI misuse is Typer's usage error (exit 2); the schema and the repository's params.yaml agree."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_core.errors import ConfigError
from esnfed_stages.params.schema import declared_keys, validate
from esnfed_stages.params.load import load_params

REPO_PARAMS = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
runner = CliRunner()


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _write(root: Path, edit) -> None:
    params = copy.deepcopy(REPO_PARAMS)
    edit(params)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def _error_line(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def _space(p: dict, ds: str = "wesad") -> dict:
    return p["budgets"]["default"]["space"][ds]


SELECT = ["select", "--dataset", "wesad", "--algo", "ridge"]

# (edit, the exact message after "error: params.yaml: ")
CASES = {
    "unknown top-level key": (lambda p: p.update(partiton={}), "partiton: unknown key (expected seed, "),
    "unknown nested key": (lambda p: p["runner"].update(threads=2),
                           "runner.threads: unknown key (expected backend, n_jobs, blas_threads, device, tf32, fused_ip_sums)"),
    "unknown hyperparameter": (lambda p: _space(p).update(spectral_raduis=[0.9]),
                               "budgets.default.space.wesad.spectral_raduis: unknown key"),
    "missing key": (lambda p: p["plasticity"].pop("eta"), "plasticity.eta: missing"),
    "wrong type": (lambda p: p["readout"].update(batch_size="big"),
                   "readout.batch_size: expected a number, got 'big'"),
    "not an integer": (lambda p: p["budgets"]["paper"].update(retrains=2.5),
                       "budgets.paper.retrains: expected an integer, got 2.5"),
    "wrong type bool": (lambda p: p["plasticity"].update(normalize_step="yes"),
                        "plasticity.normalize_step: expected true or false, got 'yes'"),
    "trials < 1": (lambda p: p["budgets"]["default"].update(trials=0),
                   "budgets.default.trials: must be >= 1, got 0"),
    "trials a typo's 10^9": (lambda p: p["budgets"]["default"].update(trials=10**9),
                             "budgets.default.trials: must be <= 1000000, got 1000000000"),
    "retrains a typo's 10^9": (lambda p: p["budgets"]["default"].update(retrains=10**9),
                               "budgets.default.retrains: must be <= 10000, got 1000000000"),
    "spectral radius <= 0": (lambda p: _space(p).update(spectral_radius={"low": 0.0, "high": 0.9, "step": 0.1}),
                             "budgets.default.space.wesad.spectral_radius: must be > 0.0, got 0.0"),
    "leak > 1": (lambda p: _space(p, "hhar").update(leak={"low": 0.5, "high": 1.2, "step": 0.1}),
                 "budgets.default.space.hhar.leak: must be <= 1.0, got 1.1"),
    "leak range above 1": (lambda p: _space(p).update(leak={"low": 0.5, "high": 1.5}),
                           "budgets.default.space.wesad.leak.high: must be <= 1.0, got 1.5"),
    "units drawn as floats": (lambda p: _space(p).update(units={"low": 10, "high": 50}),
                              "budgets.default.space.wesad.units: must be a list or a {low, high, step} grid "
                              "of integers, got a continuous range {low: 10, high: 50}"),
    "rounds < 1": (lambda p: p["budgets"]["default"]["space"]["fedip"].update(rounds=[0, 2]),
                   "budgets.default.space.fedip.rounds: must be >= 1, got 0"),
    # leftovers of the input audit: no upper bound, so 10^9 units failed late, in every trial
    "units past MAX_UNITS": (lambda p: _space(p, "hhar").update(units=[200, 10**9]),
                             "budgets.default.space.hhar.units: must be <= 16384, got 1000000000"),
    # grids counted before any point is built (esnfed_core.search.MAX_GRID_POINTS): out of range
    # is said as such, an in-range grid too fine is refused at once
    "units grid past MAX_UNITS": (lambda p: _space(p, "hhar").update(units={"low": 1, "high": 10**9, "step": 1}),
                                  "budgets.default.space.hhar.units: must be <= 16384, got 1000000000"),
    "rounds grid too fine": (lambda p: p["budgets"]["default"]["space"]["ip"].update(
                                 rounds={"low": 1, "high": 10**9, "step": 1}),
                             "budgets.default.space.ip.rounds: the grid has 1000000000 points, more than 100000 "
                             "(use a coarser step, or {low, high} without step for a uniform range)"),
    "leak grid step 1e-12": (lambda p: _space(p).update(leak={"low": 0.1, "high": 0.8, "step": 1e-12}),
                             "budgets.default.space.wesad.leak: the grid has 700000000001 points, more than 100000"),
    "units past float range": (lambda p: _space(p).update(units=[20, 10**400]),
                               "budgets.default.space.wesad.units: must be <= 16384, got <int of 1329 bits>"),
    "deep layers < 1": (lambda p: p["budgets"]["default"]["space"]["deep"].update(layers=[0]),
                        "budgets.default.space.deep.layers: must be >= 1, got 0"),
    "alpha outside (0, 1)": (lambda p: p["ttest"].update(alpha=1.5), "ttest.alpha: must be < 1.0, got 1.5"),
    "n_jobs 0": (lambda p: p["runner"].update(n_jobs=0), "runner.n_jobs: must not be 0, got 0"),
    "unknown budget": (lambda p: p.update(budget="huge"),
                       "budget: expected one of default, paper, reduced (the entries of budgets), got 'huge'"),
    "unknown replay policy": (lambda p: p["continual"]["replay"].update(policy="stratified"),
                              "continual.replay.policy: expected one of uniform, proportional, got 'stratified'"),
    "unknown backend": (lambda p: p["runner"].update(backend="dask"),
                        "runner.backend: expected one of loky, sequential, ray, got 'dask'"),
    "share not 25/50/75/100": (lambda p: p["report"].update(activation_pct=30),
                               "report.activation_pct: expected one of 25, 50, 75, 100, got 30"),
    "matrix share not 25/50/75/100": (lambda p: p["report"].update(matrix_pct="30"),
                                      "report.matrix_pct: expected one of 25, 50, 75, 100, got '30'"),
    "partition share": (lambda p: p["partition"]["hhar"]["train"].update({30: ["a", "b", "c"]}),
                        "partition.hhar.train.30: the shares must be among 25, 50, 75, 100, got 30"),
    "unknown source": (lambda p: p["data"].update(source="cloud"),
                       "data.source: expected one of synthetic, raw, got 'cloud'"),
    "user in train and validation": (lambda p: p["partition"]["wesad"]["validation"].__setitem__(0, "S2"),
                                     "partition.wesad: train and validation share users ['S2']"),
    "validation overlaps test": (lambda p: p["partition"]["hhar"].update(test=["d", "f"]),
                                 "partition.hhar: validation and test share users ['f']"),
    "user not preprocessed": (lambda p: p["partition"]["wesad"].update(test=["S4", "S6", "S99"]),
                              "partition.wesad.test: user 'S99' is not in preprocess.wesad.subjects"),
    "raw files overwritten": (lambda p: p["data"].update(raw_dir="data/synthetic"),
                              "data.raw_dir: must differ from data.synthetic_dir ('data/synthetic'): "
                              "`esnfed synthesize` would overwrite the real files"),
    "preprocess (dataset module)": (lambda p: p["preprocess"]["wesad"].update(window=0),
                                    "preprocess.wesad.window: must be >= 1, got 0"),
    "synthetic (generator signature)": (lambda p: p["synthetic"]["wesad"].update(sclae=1),
                                        "synthetic.wesad.sclae is not a parameter"),
    "synthetic value": (lambda p: p["synthetic"]["wesad"].update(protocol=1),
                        "synthetic.wesad.protocol: expected one of 0, 2, got 1"),
    # privacy.clip per dataset (a number, or a mapping naming every declared dataset)
    "privacy clip of a dataset": (lambda p: p["privacy"].update(clip={"wesad": 2, "hhar": 0.003, "example": 0.003}),
                                  "privacy.clip.wesad: must be <= 1.0, got 2"),
    "privacy clip mapping lacks a dataset": (
        lambda p: p["privacy"].update(clip={"wesad": 0.003, "hhar": 0.003}),
        "privacy.clip.example: missing (datasets lists 'example'; privacy.clip is a mapping: give every "
        "declared dataset its clip, or one number for all)"),
    # privacy.ip_clip likewise
    "privacy ip_clip of a dataset": (
        lambda p: p["privacy"].update(ip_clip={"wesad": 0, "hhar": 0.1, "example": 0.1}),
        "privacy.ip_clip.wesad: must be > 0.0, got 0"),
    # the embedded data dvc.yaml writes must hold what the declared datasets read
    "declared paper dataset not preprocessed": (
        lambda p: p["embedded"]["preprocess"].pop("hhar"),
        "embedded.preprocess.hhar: missing (datasets lists 'hhar': preprocess@hhar writes data/processed/hhar)"),
    # ... and nothing else: an entry no stage reads is refused, naming it and what the run reads
    "unknown key of embedded": (lambda p: p["embedded"].update(import_={}),
                                "embedded.import_: unknown key (expected synthesize, preprocess)"),
    "embedded dataset of another name": (lambda p: p["embedded"]["synthesize"].update(mine="MINE"),
                                         "embedded.synthesize: expected some of wesad, hhar, example (the "
                                         "embedded datasets), got 'mine'"),
    "paper dataset preprocessed that datasets does not list": (
        lambda p: p.update(datasets=["wesad", "example"], continual_datasets=["wesad", "example"],
                           study_datasets=["wesad"]),
        "embedded.preprocess.hhar: nothing reads it (datasets does not list it); expected some of: wesad"),
    "embedded folder synthesized that nothing reads": (
        lambda p: p.update(datasets=["wesad", "hhar"], continual_datasets=["wesad", "hhar"], imported={}),
        "embedded.synthesize.example: nothing reads it (neither embedded.preprocess lists it nor does an import "
        "(`imported`) read its folder); expected some of: wesad, hhar"),
    "your data alone with a paper dataset left in embedded": (
        lambda p: p.update(datasets=["example"], continual_datasets=["example"], study_datasets=[],
                           assess={**p["assess"], "activation_datasets": []},
                           embedded={"synthesize": {"example": "EXAMPLE"}, "preprocess": {"wesad": "WESAD"}}),
        "embedded.preprocess.wesad: nothing reads it (datasets does not list it); expected some of: none ({})"),
    # imported: the imports dvc.yaml runs, exactly the declared ones of your own with their sources
    "import of a dataset taken out of datasets": (
        lambda p: p.update(datasets=["wesad", "hhar"], continual_datasets=["wesad", "hhar"]),
        "imported.example: 'example' is not in datasets (wesad, hhar): import@example would run for no stage; "
        "remove it here to leave the dataset out (imports.example may stay)"),
    "privacy ip_clip mapping lacks a dataset": (
        lambda p: p["privacy"].update(ip_clip={"wesad": 0.1, "hhar": 0.1}),
        "privacy.ip_clip.example: missing (datasets lists 'example'; privacy.ip_clip is a mapping: give every "
        "declared dataset its ip_clip, or one number for all)"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_class_of_error_is_one_line_naming_the_key(workdir, case):
    edit, message = CASES[case]
    _write(workdir, edit)
    line = _error_line(SELECT)
    assert line.startswith(f"error: params.yaml: {message}"), line
    assert not (workdir / "runs").exists()


STAGES = [
    ["synthesize", "--dataset", "hhar"],
    ["preprocess", "--dataset", "hhar"],
    ["partition", "--dataset", "hhar"],
    SELECT,
    ["retrain", "--dataset", "wesad", "--algo", "fedip"],
    ["assess", "--dataset", "hhar", "--algo", "clip", "--strategy", "joint"],
    ["ttest"],
    ["report"],
]


@pytest.mark.parametrize("args", STAGES, ids=lambda a: a[0])
def test_every_stage_checks_the_whole_file_before_doing_anything(workdir, args):
    # An error in a section the stage does not read still stops it, before any output.
    _write(workdir, lambda p: p["continual"]["replay"].update(fraction=0.0))
    line = _error_line(args)
    assert line == "error: params.yaml: continual.replay.fraction: must be > 0.0, got 0.0"
    assert list(workdir.iterdir()) == [workdir / "params.yaml"]


def test_check_params_says_valid_or_names_the_key_before_dvc_runs_anything(workdir):
    """`esnfed check-params` (`make repro` runs it before `dvc repro`): the schema's one line and exit 1
    where `dvc repro` would stop at a missing dependency first, naming a path (here import@example:
    data/synthetic/EXAMPLE/recordings.csv, which no stage writes); else what the run declares."""
    _write(workdir, lambda p: None)
    result = runner.invoke(app, ["check-params"])
    assert result.exit_code == 0, result.output
    assert " ".join(result.output.split()) == (
        "params.yaml: valid (datasets wesad, hhar, example; embedded.synthesize wesad, hhar, example; "
        "embedded.preprocess wesad, hhar; imported example)")
    _write(workdir, lambda p: p["embedded"]["synthesize"].pop("example"))
    assert _error_line(["check-params"]) == (
        "error: params.yaml: embedded.synthesize.example: missing (imports.example.source "
        "'data/synthetic/EXAMPLE/recordings.csv' lies in data/synthetic/EXAMPLE, which synthesize@example writes)")
    assert list(workdir.iterdir()) == [workdir / "params.yaml"]


def test_error_names_the_file_given(tmp_path):
    _write(tmp_path, lambda p: p["runner"].update(blas_threads=0))
    path = tmp_path / "params.yaml"
    assert _error_line([*SELECT, "--params", str(path)]) == (
        f"error: {path}: runner.blas_threads: must be >= 1, got 0")


@pytest.mark.parametrize("tail, message", [
    ("\nbudget: paper\n", "not valid YAML (key 'budget' appears twice in one mapping"),  # PyYAML kept the last
    ("\n# caf\xe9\n", "not UTF-8 text (invalid continuation byte"),
    # input audit: before, a RecursionError traceback and a ValueError naming no file
    ("\nzz: " + "[" * 100_000 + "\n", "not valid YAML (" + ("exceeded maximum nesting "
                                                             "depth" if hasattr(yaml, "CSafeLoader")
                                                             else "nested too deeply")),  # libyaml, or ours
    ("\nzz: " + "9" * 5000 + "\n", "not valid YAML (Exceeds the limit (4300 digits) for integer string conversion"),
])
def test_a_duplicate_key_or_non_utf8_file_is_one_line_naming_it(workdir, tail, message):
    _write(workdir, lambda p: None)
    path = workdir / "params.yaml"
    path.write_bytes(path.read_bytes() + tail.encode("latin-1"))
    line = _error_line(SELECT)
    assert line.startswith(f"error: params.yaml: {message}"), line
    assert list(workdir.iterdir()) == [path]


def test_a_yaml_syntax_error_names_line_and_column(tmp_path):
    """Before: PyYAML's own text, spanning lines, naming "<unicode string>" instead of the file."""
    from esnfed_stages.params.load import load_params

    bad = tmp_path / "mine.yaml"
    bad.write_text("seed: 1\nbudget: [a, b\n")
    with pytest.raises(ConfigError) as err:
        load_params(bad)
    assert str(err.value) == f"{bad}: not valid YAML (did not find expected ',' or ']' at line 3, column 1)"


def test_a_merged_key_may_be_overridden():
    """`<<: *anchor` then the same key: YAML's override, not a duplicate."""
    from esnfed_stages.params.load import _UniqueKeyLoader

    doc = yaml.load("a: &x {b: 1, c: 2}\nd:\n  <<: *x\n  b: 3\n", Loader=_UniqueKeyLoader)  # noqa: S506
    assert doc["d"] == {"b": 3, "c": 2}


def test_params_are_parsed_by_libyaml_into_the_pure_python_document():
    """Every command reads params.yaml: libyaml's parser (≈ 2 ms, PyYAML's own ≈ 45 ms) when the
    installed PyYAML has it, as the pinned wheels do, giving the same document."""
    from esnfed_stages.params.load import _UniqueKeyLoader

    assert yaml.__with_libyaml__ and issubclass(_UniqueKeyLoader, yaml.CSafeLoader)
    text = (Path(__file__).resolve().parents[1] / "params.yaml").read_text(encoding="utf-8")
    assert yaml.load(text, Loader=_UniqueKeyLoader) == yaml.load(text, Loader=yaml.SafeLoader)  # noqa: S506


def test_repository_params_are_valid_and_match_the_schema():
    validate(REPO_PARAMS)

    def leaves(node, prefix=()):
        if isinstance(node, dict) and node:
            for k, v in node.items():
                yield from leaves(v, (*prefix, str(k)))
        else:
            yield prefix

    declared = [tuple(k.split(".")) for k in declared_keys()]

    def matches(decl, path):
        return len(path) >= len(decl) and all(d in ("*", p) for d, p in zip(decl, path))

    file_keys = list(leaves(REPO_PARAMS))
    # every key of the file is declared (or lies inside a declared value) ...
    undeclared = [".".join(k) for k in file_keys if not any(matches(d, k) for d in declared)]
    assert not undeclared
    # ... and every declared key is in the file, for each budget (no stale schema entry)
    budgets = list(REPO_PARAMS["budgets"])
    expanded = {tuple(b if s == "*" else s for s in d) for d in declared for b in budgets}
    missing = [".".join(d) for d in expanded if not any(matches(d, k) for k in file_keys)]
    assert not missing


def test_synthetic_schema_keys_are_generator_arguments():
    import inspect

    from esnfed_stages.data._datasets import dataset_function
    from esnfed_stages.params.schema import SYNTHETIC

    for ds, fields in SYNTHETIC.items():
        signature = inspect.signature(dataset_function(ds, "synthesize")).parameters
        assert set(fields) <= set(signature), ds


def test_every_synthetic_hhar_layout_of_the_generator_is_a_valid_param():
    hhar = REPO_PARAMS["synthetic"]["hhar"]
    for layout in ("csv", "zip", "both"):  # what hhar_synth.synthesize_hhar accepts
        validate({"synthetic": {"hhar": {**hhar, "layout": layout}}})
    with pytest.raises(ConfigError, match="synthetic.hhar.layout: expected one of csv, zip, both"):
        validate({"synthetic": {"hhar": {**hhar, "layout": "tar"}}})


def test_validate_accepts_partial_files_and_checks_what_is_present():
    validate({"ttest": {"variant": "welch", "alpha": 0.05}})
    with pytest.raises(ConfigError, match=r"^x.yaml: ttest.variant: expected one of welch, student"):
        validate({"ttest": {"variant": "fisher", "alpha": 0.05}}, "x.yaml")
    with pytest.raises(ConfigError, match="^params.yaml: expected a mapping"):
        validate(["not", "a", "mapping"])


@pytest.mark.parametrize("args", [
    ["select", "--dataset", "wesad"],                                  # required option (--algo) missing
    ["select", "--dataset", "wesad", "--algo", "lasso"],               # unknown choice
    ["select", "--dataset", "mnist", "--algo", "ridge"],
    ["select", "--dataset", "wesad", "--algo", "ridge", "--pct", "30"],
    ["select", "--dataset", "wesad", "--algo", "ridge", "--backend", "dask"],
    ["select", "--dataset", "wesad", "--algo", "ridge", "--n-jobs", "many"],
    ["select", "--dataset", "wesad", "--algo", "clip"],                # continual method without --strategy
    ["select", "--dataset", "wesad", "--algo", "ridge", "--strategy", "replay"],  # strategy of a stationary one
    ["assess", "--dataset", "wesad", "--algo", "ridge", "--bogus"],
    ["ttest", "--variant", "fisher"],
])
def test_cli_misuse_is_a_usage_error(workdir, args):
    _write(workdir, lambda p: None)
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Usage:" in result.output + result.stderr


@pytest.mark.parametrize("args", [
    ["ttest", "--alpha", "2"],
    ["ttest", "--alpha", "0"],
    ["select", "--dataset", "wesad", "--algo", "ridge", "--n-jobs", "0"],
    ["synthesize", "--dataset", "wesad", "--seed", "-1"],
    ["download", "--dataset", "wesad", "--size", "-5"],
])
def test_out_of_range_cli_value_is_a_usage_error_naming_the_option(workdir, args):
    _write(workdir, lambda p: None)
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{args[-2]}'" in result.output + result.stderr
