"""dvc.yaml takes its datasets from params.yaml: the foreach/matrix stages expand over
`datasets`, `continual_datasets`, `study_datasets`, `imported` and `embedded`, so declaring a
dataset adds its stages and removing one drops them, without editing dvc.yaml."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from esnfed_stages.params.load import load_params

pytestmark = pytest.mark.dvc
ROOT = Path(__file__).resolve().parents[1]


def _expanded(root: Path) -> dict[str, dict]:
    """Every stage DVC expands from dvc.yaml and params.yaml -> its cmd, deps and outs (paths)."""
    code = ("import json; from dvc.repo import Repo\n"
            "print(json.dumps({s.addressing: {'cmd': s.cmd, 'deps': [d.def_path for d in s.deps],"
            " 'outs': [o.def_path for o in s.outs]} for s in Repo('.').index.stages}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _stages(root: Path) -> dict[str, str]:
    return {name: stage["cmd"] for name, stage in _expanded(root).items()}


def _project(tmp_path: Path, change) -> Path:
    for name in ("dvc.yaml", ".dvcignore"):
        shutil.copy(ROOT / name, tmp_path / name)
    params = load_params(ROOT / "params.yaml")
    change(params)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (tmp_path / ".dvc").mkdir()
    (tmp_path / ".dvc" / "config").write_text("[core]\n    no_scm = True\n")
    return tmp_path


def variant_stages(tmp_path: Path, change, names: tuple[str, ...]) -> dict[str, dict]:
    """DVC's expansion with ``change`` made to the repository's params (protocol variants ``names``
    declared), checked against the repository's own: none of ``names`` in it, every one of its stages
    as it was, and every added stage one of a variant's; returns the changed expansion."""
    (tmp_path / "default").mkdir()
    (tmp_path / "variant").mkdir()
    default = _expanded(_project(tmp_path / "default", lambda p: None))
    variant = _expanded(_project(tmp_path / "variant", change))
    assert not any(n in stage for stage in default for n in names)
    assert {stage: variant[stage] for stage in default} == default  # every default stage as it was
    added = set(variant) - set(default)
    assert added and all(any(n in stage for n in names) for stage in added)
    code = ["esnfed_cli", "esnfed_stages", "esnfed_core"]
    for n in names:  # preprocessed from its base's embedded folder, never imported
        assert f"import@{n}" not in variant and f"partition@{n}" in variant
        assert variant[f"preprocess@{n}"]["cmd"] == f"esnfed preprocess --dataset {n}"
        assert variant[f"preprocess@{n}"]["deps"][:3] == code and variant[f"preprocess@{n}"]["outs"] == [
            f"data/processed/{n}"]
    return variant


def test_repository_pipeline_runs_the_example_everywhere(tmp_path):
    stages = _stages(_project(tmp_path, lambda p: None))
    assert stages["import@example"] == "esnfed import --dataset example"
    assert stages["partition@example"] == "esnfed partition --dataset example"
    assert stages["assess-continual@example"].startswith("esnfed assess --dataset example")
    assert "preprocess@example" not in stages
    assert stages["privacy@example"] == "esnfed privacy --dataset example"  # every declared dataset


def test_declaring_and_removing_datasets_changes_the_stages(tmp_path):
    def change(p):
        p["imports"]["mine"] = dict(p["imports"]["example"], source="mine.csv")
        p["imported"] = {"mine": "mine.csv"}  # the example paused: its imports entry stays
        p["datasets"] = ["wesad", "mine"]
        p["continual_datasets"] = ["wesad"]
    stages = _expanded(_project(tmp_path, change))
    mine = sorted(s for s in stages if "mine" in s)
    assert "import@mine" in mine and "select-esn@mine" in mine and "assess-ip@mine" in mine
    assert stages["import@mine"]["deps"][3] == "mine.csv"  # the source, from imported
    assert not [s for s in mine if "clip" in s]  # not continual
    assert "privacy@mine" in mine and "privacy@hhar" not in stages  # privacy follows `datasets`
    # The embedded data stages follow `embedded`, the deep, heterogeneous and flower stages
    # `study_datasets`, here the repository's (hhar's are stages of an undeclared dataset: the schema
    # refuses it, DVC only lists them); every other stage follows `datasets`.
    paper_only = ("synthesize", "preprocess", "select-deep", "retrain-deep", "assess-deep",
                  "select-hetero", "retrain-hetero", "assess-hetero", "flower")
    assert not [s for s in stages if "@hhar" in s and not s.startswith(paper_only)]
    # the example out of `datasets` and `imported`: no stage of it, though imports.example stays
    # (before, dvc.yaml imported every entry of imports: import@example ran for no stage)
    assert "partition@example" not in stages and "import@example" not in stages


def test_a_dataset_paused_in_datasets_but_left_in_imported_is_refused_before_dvc_imports_it(tmp_path):
    """DVC's foreach cannot filter: left in `imported`, the example would still be imported (its
    source read, the run failed where it is gone). The schema names the key instead, as `esnfed
    check-params` and every stage run it."""
    from esnfed_core.errors import ConfigError
    from esnfed_stages.params.schema import validate

    def change(p):
        p["datasets"] = p["continual_datasets"] = ["wesad", "hhar"]
    root = _project(tmp_path, change)
    assert "import@example" in _stages(root)  # what DVC alone would run
    with pytest.raises(ConfigError, match=r"^params.yaml: imported.example: 'example' is not in datasets "
                                          r"\(wesad, hhar\): import@example would run for no stage"):
        validate(yaml.safe_load((root / "params.yaml").read_text()))


def _user_only(p: dict) -> None:
    """Only a dataset of your own declared (docs/own-data.md "Your own data"): no space.wesad or space.hhar
    in the budgets, no study on the papers' datasets, no embedded data."""
    p["imports"] = {"mine": dict(p["imports"]["example"], source="mine.csv")}
    p["imported"] = {"mine": "mine.csv"}
    p["partition"]["mine"] = p["partition"].pop("example")
    for budget in p["budgets"].values():
        space = budget["space"]
        space["mine"] = space.pop("example")
        del space["wesad"], space["hhar"]
    p.update(datasets=["mine"], continual_datasets=["mine"], study_datasets=[],
             embedded={"synthesize": {}, "preprocess": {}})
    p["assess"]["activation_datasets"] = []  # only the papers' datasets have activation densities


def test_the_repository_params_write_the_embedded_data_as_dvc_yaml_listed_it(tmp_path):
    """params.yaml `embedded` (before: literal foreach lists in dvc.yaml) gives the same embedded
    data stages, names, commands, deps and outs, so an existing dvc.lock still matches them."""
    stages = _expanded(_project(tmp_path, lambda p: None))
    code = ["esnfed_cli", "esnfed_stages", "esnfed_core"]
    embedded = {name: stage for name, stage in stages.items() if name.startswith(("synthesize", "preprocess"))}
    assert embedded == {
        **{f"synthesize@{ds}": {"cmd": f"esnfed synthesize --dataset {ds}", "deps": [*code, "params.yaml"],
                                "outs": [f"data/synthetic/{ds.upper()}"]} for ds in ("wesad", "hhar", "example")},
        **{f"preprocess@{ds}": {"cmd": f"esnfed preprocess --dataset {ds}",
                                "deps": [*code, f"data/synthetic/{ds.upper()}", "params.yaml"],
                                "outs": [f"data/processed/{ds}"]} for ds in ("wesad", "hhar")}}


def test_the_repository_params_import_the_example_as_dvc_yaml_did_over_imports(tmp_path):
    """dvc.yaml's import stage over params.yaml `imported` (before: over `imports`) resolves to the
    same definition for the repository's params (command, deps with the source, the params it
    records, outs), as dvc.lock stores it: an existing dvc.lock still matches."""
    root = _project(tmp_path, lambda p: None)
    code = ("import json; from dvc.repo import Repo\n"
            "print(json.dumps({s.addressing: s.dumpd() for s in Repo('.').index.stages"
            " if s.addressing.startswith('import')}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"import@example": {
        "cmd": "esnfed import --dataset example",
        "deps": [*({"hash": "md5", "path": p} for p in ("esnfed_cli", "esnfed_stages", "esnfed_core",
                                                         "data/synthetic/EXAMPLE/recordings.csv")),
                 {"params": ["imports.example"], "path": "params.yaml"}],
        "outs": [{"hash": "md5", "path": "data/processed/example"}]}}


@pytest.mark.parametrize("alone", ["readme recipe", "example"])
def test_your_data_alone_runs_no_embedded_data_stage_it_does_not_read(tmp_path, alone):
    """docs/own-data.md "Your data alone" (its recipe, tests/readme_recipe.py, and the shipped example in its
    place): the params validate and DVC expands no stage of the papers' datasets (before:
    synthesize@wesad, @hhar and preprocess@wesad, @hhar ran, minutes of data read by nothing); the
    example keeps the one embedded stage its import reads."""
    from readme_recipe import user_only_params

    from esnfed_stages.params.schema import validate

    name = "mystudy" if alone == "readme recipe" else "example"

    def change(p):
        p.clear()
        p.update(user_only_params())
        if alone == "example":
            for key in ("datasets", "continual_datasets"):
                p[key] = ["example"]
            repo = load_params(ROOT / "params.yaml")
            p["imports"] = {"example": repo["imports"]["example"]}
            p["imported"] = repo["imported"]
            p["embedded"]["synthesize"] = {"example": "EXAMPLE"}
            for budget in p["budgets"].values():
                budget["space"].setdefault("example", budget["space"].pop("mystudy"))

    root = _project(tmp_path, change)
    validate(yaml.safe_load((root / "params.yaml").read_text()))
    stages = _expanded(root)
    assert [s for s in stages if s.endswith(("@wesad", "@hhar"))] == []
    data = sorted(s for s in stages if s.startswith(("synthesize", "preprocess", "import")))
    assert data == ([f"import@{name}"] if alone == "readme recipe" else ["import@example", "synthesize@example"])
    if alone == "example":  # the import reads what the synthesize stage writes: DVC runs them in order
        assert stages["synthesize@example"]["outs"] == ["data/synthetic/EXAMPLE"]
        assert "data/synthetic/EXAMPLE/recordings.csv" in stages["import@example"]["deps"]
    # every other stage is one of the declared dataset's or the two reading them all
    others = [s for s in stages if s not in data]
    assert all(s.split("@")[1].startswith(name) for s in others if "@" in s)
    assert sorted(s for s in others if "@" not in s) == ["report", "ttest"]
    # partition; select, retrain and assess each: esn, ip and continual (every strategy in one);
    # privacy; ttest, report
    assert len(stages) == len(data) + 1 + 3 * 3 + 1 + 2


def _report_upstream(root: Path) -> list[str]:
    """The stages the report stage depends on, directly or not."""
    code = ("import json; import networkx as nx; from dvc.repo import Repo\n"
            "g = Repo('.').index.graph\n"
            "report = next(s for s in g if s.addressing == 'report')\n"
            "print(json.dumps(sorted(s.addressing for s in nx.descendants(g, report))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_pipeline_of_your_own_data_only_has_no_stage_of_the_papers_upstream_of_the_report(tmp_path):
    """`datasets: [mine]`, `study_datasets: []`, `embedded` empty: the params validate, no stage runs
    on wesad, hhar or the example and none of the report's upstream stages needs their data (before:
    select-deep@wesad and the flower stages were always there, and the report depended on
    runs/flower/wesad; the embedded data stages of all three ran, unused)."""
    from esnfed_stages.params.schema import validate

    root = _project(tmp_path, _user_only)
    validate(yaml.safe_load((root / "params.yaml").read_text()))
    stages = _stages(root)
    assert [s for s in stages if s.endswith(("@wesad", "@hhar", "@example"))] == []
    assert not [s for s in stages if s.startswith(("synthesize", "preprocess"))]
    assert not [s for s in stages if s.startswith(("flower", "select-deep", "select-hetero"))]
    assert {"import@mine", "partition@mine", "assess-ip@mine", "assess-continual@mine",
            "privacy@mine"} <= set(stages)
    upstream = _report_upstream(root)
    assert {"assess-esn@mine", "privacy@mine", "ttest"} <= set(upstream)
    assert [s for s in upstream if s.endswith(("@wesad", "@hhar", "@example"))] == []


def _select_datasets(stages: dict[str, str]) -> dict[str, set[str]]:
    """Method id -> the datasets dvc.yaml's select stages run it on (from their commands)."""
    from esnfed_core.method import Method

    out: dict[str, set[str]] = {}
    for name, cmd in stages.items():
        if not name.startswith("select"):
            continue
        args = cmd.split()
        opts = list(zip(args[2::2], args[3::2]))
        dataset = dict(opts)["--dataset"]
        strategies = [v for k, v in opts if k == "--strategy"] or [None]
        for algo in (v for k, v in opts if k == "--algo"):
            for strategy in strategies:
                method = Method(algo, strategy, alpha=0.5 if algo == "align" else None)
                out.setdefault(method.id, set()).add(dataset)
    return out


@pytest.mark.parametrize("edit", ["repository", "declared"])
def test_the_cli_default_datasets_are_those_dvc_runs_each_method_on(tmp_path, edit):
    """select, retrain and assess without --dataset run a method on method_datasets(params):
    the datasets of its dvc.yaml stages (deep and heterogeneous ones: study_datasets)."""
    from esnfed_core.method import Method
    from esnfed_stages.data._datasets import method_datasets

    def change(p):
        if edit == "declared":
            p["imports"]["mine"] = dict(p["imports"]["example"], source="mine.csv")
            p["imported"] = {"mine": "mine.csv"}
            p["datasets"] = ["wesad", "mine"]
            p["continual_datasets"] = ["wesad"]
            p["study_datasets"] = ["wesad"]
    root = _project(tmp_path, change)
    params = yaml.safe_load((root / "params.yaml").read_text())
    runs = _select_datasets(_stages(root))
    assert len(runs) >= 15 and {"ridge", "fedclip-joint", "deep-fedip", "align-0.5"} <= set(runs)
    for method_id, datasets in runs.items():
        assert set(method_datasets(params, Method.parse(method_id))) == datasets, method_id
    # without the key: every declared paper dataset (as before it existed)
    del params["study_datasets"]
    assert method_datasets(params, Method.parse("deep-incfed")) == (("wesad",) if edit == "declared" else
                                                                    ("wesad", "hhar"))


def test_a_study_of_your_own_data_alone_runs_every_study_stage_on_it_upstream_of_the_report(tmp_path):
    """`datasets: [mine]`, `study_datasets: [mine]` (before: the schema refused a study dataset of
    your own): the params validate, the deep, heterogeneous and flower stages run on mine, the
    report depends on them, and no stage of the papers' datasets is upstream of it."""
    from esnfed_stages.params.schema import validate

    def change(p):
        _user_only(p)
        p["study_datasets"] = ["mine"]

    root = _project(tmp_path, change)
    validate(yaml.safe_load((root / "params.yaml").read_text()))
    stages = _stages(root)
    assert stages["flower@mine"].startswith("esnfed flower --dataset mine ")
    upstream = _report_upstream(root)
    assert {"assess-deep@mine", "assess-hetero@mine", "flower@mine", "select-deep@mine", "ttest"} <= set(upstream)
    assert [s for s in upstream if s.endswith(("@wesad", "@hhar", "@example"))] == []


def test_privacy_depends_on_the_selections_of_its_share(tmp_path):
    """The privacy stage retrains the selections of params privacy.pct: its deps follow that share
    (they named the 100 % selections whatever privacy.pct said, so a changed 25 % selection never
    reran it)."""
    def change(p):
        p["privacy"]["pct"] = "25"
    deps = _expanded(_project(tmp_path, change))["privacy@wesad"]["deps"]
    assert {"runs/select/wesad/incfed/25/best.json", "runs/select/wesad/fedip/25/best.json"} <= set(deps)
    assert not [d for d in deps if d.startswith("runs/select/") and "/25/" not in d]


def test_privacy_extra_stages_follow_the_opt_in(tmp_path):
    """Opt-in DP methods (params privacy.extra_methods) get a stage per declared dataset and method,
    privacy-extra@<dataset>-<method>, whose deps name the selection of privacy.pct it retrains; with
    the default [] there is none, and opting in leaves every other stage as it resolves by default."""
    def project(name, change):
        (tmp_path / name).mkdir()
        return _expanded(_project(tmp_path / name, change))

    def opt_in(p, pct="100"):
        p["privacy"]["extra_methods"] = ["fedavg", "fedclip-naive"]
        p["privacy"]["config"] = "select"  # the opt-in methods retrain the select stage's configs
        p["privacy"]["pct"] = pct

    default = project("default", lambda p: None)
    assert not [s for s in default if s.startswith("privacy-extra")]
    stages = project("opt-in", opt_in)
    assert {k: v for k, v in stages.items() if not k.startswith("privacy-extra")} == default
    extra = sorted(s for s in stages if s.startswith("privacy-extra@"))
    assert extra == sorted(f"privacy-extra@{ds}-{m}" for ds in ("wesad", "hhar", "example")
                           for m in ("fedavg", "fedclip-naive"))
    stage = project("opt-in-50", lambda p: opt_in(p, "50"))["privacy-extra@hhar-fedclip-naive"]
    assert stage["cmd"] == "esnfed privacy --dataset hhar --extra fedclip-naive"
    assert {"data/processed/hhar", "runs/select/hhar/fedclip-naive/50/best.json"} <= set(stage["deps"])
    assert not [d for d in stage["deps"] if d.startswith("runs/select/") and "/fedclip-naive/50/" not in d]
    assert stage["outs"] == ["runs/privacy/extra/hhar/fedclip-naive.json"]


def test_privacy_sampling_stages_follow_the_opt_in(tmp_path):
    """The sampling study (params privacy.sampling_study.fractions) gets a stage per declared dataset
    and fraction, privacy-sampling@<dataset>-<fraction>, whose cmd names the fraction as its output
    file does (as params.yaml writes it: esnfed_stages.studies.privacy.fraction_name), whose deps name the FedIP
    selection of privacy.pct and whose params are those it reads (federated.client_fraction: not
    read, the study sets it); with the default [] there is none, and opting in leaves every other
    stage as it resolves by default."""
    from esnfed_stages.layout import fraction_name

    def project(name, change):
        (tmp_path / name).mkdir()
        return _expanded(_project(tmp_path / name, change))

    def opt_in(p, pct="100"):
        p["privacy"]["sampling_study"]["fractions"] = [0.5, 1, 0.25]
        p["privacy"]["config"] = "select"  # the study retrains the select stage's FedIP config
        p["privacy"]["pct"] = pct

    default = project("default", lambda p: None)
    assert not [s for s in default if s.startswith("privacy-sampling")]
    stages = project("opt-in", opt_in)
    assert {k: v for k, v in stages.items() if not k.startswith("privacy-sampling")} == default
    names = [fraction_name(f) for f in (0.5, 1, 0.25)]
    assert names == ["0.5", "1", "0.25"]
    assert sorted(s for s in stages if s.startswith("privacy-sampling@")) == sorted(
        f"privacy-sampling@{ds}-{f}" for ds in ("wesad", "hhar", "example") for f in names)
    stage = project("opt-in-50", lambda p: opt_in(p, "50"))["privacy-sampling@hhar-0.25"]
    assert stage["cmd"] == "esnfed privacy --dataset hhar --sampling 0.25"
    assert stage["outs"] == ["runs/privacy/sampling/hhar/0.25.json"]
    assert {"esnfed_cli", "esnfed_stages", "esnfed_core", "data/processed/hhar", "data/partitions/hhar.json",
            "runs/select/hhar/fedip/50/best.json"} <= set(stage["deps"])
    assert not [d for d in stage["deps"] if d.startswith("runs/select/") and d != "runs/select/hhar/fedip/50/best.json"]
    stage_params = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["privacy-sampling"]["params"]
    main_params = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["privacy"]["do"]["params"]
    # the privacy stage's search keys are read under privacy.config: public only, which refuses the study
    public = ("budgets.${budget}.trials", "budgets.${budget}.space.${item}", "budgets.${budget}.space.fedip")
    assert stage_params == [p for p in main_params if p != "federated.client_fraction" and p not in public]
