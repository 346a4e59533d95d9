"""dvc.yaml's dependencies cannot go stale: every stage depends on the package folders that its
`esnfed` command imports, so `dvc status` flags it when any module of them changes (shown on a
copy of the project), and `runner` settings that do not change results are no dependency."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from esnfed_stages.params.load import load_params
from test_dvc_plots import _plots as shipped_plots

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PACKAGES = ("esnfed_cli", "esnfed_stages", "esnfed_core")

pytestmark = pytest.mark.dvc


def _run(args: list[str], cwd: Path) -> str:
    out = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _stages(root: Path, field: str = "deps") -> dict[str, list[str]]:
    """Every expanded stage (foreach/matrix) -> its dep (or out) paths, as DVC reads dvc.yaml."""
    code = ("import json; from dvc.repo import Repo\n"
            f"print(json.dumps({{s.addressing: [d.def_path for d in s.{field} if not d.def_path.endswith('.yaml')]"
            " for s in Repo('.').index.stages}))")
    return json.loads(_run([sys.executable, "-c", code], root))


def _flagged(root: Path) -> dict[str, dict]:
    """`dvc status`: stage -> its changed deps."""
    status = json.loads(_run([str(BIN / "dvc"), "status", "--json"], root) or "{}")
    out = {}
    for stage, entries in status.items():
        for entry in entries:
            if isinstance(entry, dict) and "changed deps" in entry:
                out[stage] = entry["changed deps"]
    return out


def _flagged_with(root: Path, section: str, key: str, value) -> dict[str, dict]:
    """:func:`_flagged` with params.yaml's ``section.key`` set to ``value`` (restored after)."""
    params_path = root / "params.yaml"
    original = params_path.read_text()
    params = yaml.safe_load(original)
    try:
        params[section][key] = value
        params_path.write_text(yaml.safe_dump(params))
        return _flagged(root)
    finally:
        params_path.write_text(original)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of the code, dvc.yaml and params.yaml with a dvc.lock recorded for the current
    code: every output and data dep stands in as an empty file or folder, and `dvc commit`
    records the hashes without running anything."""
    root = tmp_path_factory.mktemp("project")
    for name in PACKAGES:
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", "params.yaml", ".dvcignore"):
        shutil.copy(ROOT / name, root / name)
    _run([str(BIN / "dvc"), "init", "--no-scm", "-q"], root)
    paths = {p for field in ("deps", "outs") for ps in _stages(root, field).values() for p in ps}
    for path in sorted(p for p in paths if p not in PACKAGES):
        target = root / path
        if target.suffix:  # a file (possibly inside an output folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("{}")
        else:
            target.mkdir(parents=True, exist_ok=True)
    _run([str(BIN / "dvc"), "commit", "--force", "-q"], root)
    return root


def test_every_stage_depends_on_every_package_its_command_imports(project):
    loaded = _run([sys.executable, "-c", "import sys, esnfed_cli.main\n"
                   "print('\\n'.join(m for m in sys.modules if m.startswith('esnfed')))"], ROOT).split()
    imported = {m.split(".")[0] for m in loaded}
    assert imported == set(PACKAGES)  # the entry point loads every package (any stage, any command)
    stages = _stages(project)
    assert len(stages) > 50 and "select-ip@wesad" in stages
    for stage, deps in stages.items():
        assert imported <= set(deps), (stage, deps)


def test_changing_one_core_module_flags_every_stage(project):
    assert _flagged(project) == {}  # the recorded lock matches the copy
    windows = project / "esnfed_core" / "data" / "windows.py"
    original = windows.read_bytes()
    windows.write_bytes(original + b"\n# changed\n")
    try:
        flagged = _flagged(project)
    finally:
        windows.write_bytes(original)
    assert set(flagged) == set(_stages(project))
    assert all(changes == {"esnfed_core": "modified"} for changes in flagged.values()), flagged
    (project / "esnfed_core" / "__pycache__").mkdir(exist_ok=True)
    (project / "esnfed_core" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"bytecode")
    assert _flagged(project) == {}  # bytecode caches are .dvcignore'd


def test_runner_is_a_dependency_only_through_blas_threads(project):
    params_path = project / "params.yaml"
    original = params_path.read_text()
    params = yaml.safe_load(original)
    try:
        params["runner"].update(backend="sequential", n_jobs=1)
        params_path.write_text(yaml.safe_dump(params))
        assert _flagged(project) == {}  # backend and workers do not change a result's bits
        params["runner"]["blas_threads"] = 2
        params_path.write_text(yaml.safe_dump(params))
        flagged = _flagged(project)
    finally:
        params_path.write_text(original)
    # the stages whose trials run reservoirs (every one: the random baseline, which runs none,
    # shares its stages with the ESN readouts)
    runs_reservoirs = {s for s in _stages(project) if s.startswith(("select", "retrain"))}
    assert flagged and set(flagged) == runs_reservoirs
    assert all(c == {"params.yaml": {"runner.blas_threads": "modified"}} for c in flagged.values())


def test_client_fraction_reruns_exactly_the_stages_with_fedip_rounds(project):
    """federated.client_fraction samples the clients of FedIP, deep FedIP and FedCLIP rounds: their
    select and retrain stages declare it (select-ip/retrain-ip run ip and fedip in one command, the
    continual stages clip and fedclip), as
    do the flower stage (its FedIP apps sample the same rounds) and the privacy stage (DP-FedIP
    samples its rounds), and nothing else (assess reads the models; DP-FedCLIP only refuses a
    fraction below 1)."""
    assert yaml.safe_load((project / "params.yaml").read_text())["federated"] == {
        "client_fraction": 1.0, "sampling_pool": "context"}
    flagged = _flagged_with(project, "federated", "client_fraction", 0.5)
    prefixes = ("select-ip@", "retrain-ip@", "select-continual@", "retrain-continual@", "select-deep@", "retrain-deep@",
                "flower@", "privacy@")
    expected = {s for s in _stages(project) if s.startswith(prefixes)}
    assert expected and set(flagged) == expected
    assert all(c == {"params.yaml": {"federated.client_fraction": "modified"}} for c in flagged.values())


def test_sampling_pool_reruns_exactly_the_fedclip_stages(project):
    """federated.sampling_pool says whom FedCLIP's sampled rounds draw from: the select and retrain
    continual stages (CLIP and FedCLIP in one command) declare it (and privacy-extra, through its whole `federated` section: an empty
    matrix by default), nothing else (FedIP, without contexts, has no pool to choose)."""
    flagged = _flagged_with(project, "federated", "sampling_pool", "roster")
    expected = {s for s in _stages(project) if s.startswith(("select-continual@", "retrain-continual@"))}
    assert expected and set(flagged) == expected
    assert all(c == {"params.yaml": {"federated.sampling_pool": "modified"}} for c in flagged.values())


def test_the_report_reruns_when_the_matrix_share_changes(project):
    """params.yaml report.matrix_pct, the accuracy-matrix figure's share: the report stage declares
    the `report` section, so changing it flags the report and nothing else."""
    flagged = _flagged_with(project, "report", "matrix_pct", "50")
    assert flagged == {"report": {"params.yaml": {"report": "modified"}}}  # the section, as declared


def test_dvc_metrics_show_fits_a_120_column_terminal(project):
    from esnfed_core.vocabulary import DATASETS
    from esnfed_stages.report.report import metric_files

    means = {ds: {m: {pct: 0.123456 for pct in ("25", "50", "75", "100")} for m in _methods()}
             for ds in DATASETS}
    folder = project / "reports" / "metrics"
    for name, data in metric_files(means).items():
        (folder / name).write_bytes(data)
    lines = _run([str(BIN / "dvc"), "metrics", "show"], project).splitlines()
    assert len(lines) == 1 + len(DATASETS) * len(_methods())  # a header, then a row per file
    assert max(map(len, lines)) <= 120, max(lines, key=len)


def _methods() -> list[str]:
    from esnfed_core.method import METHODS

    return list(METHODS)


def test_every_plot_reads_its_own_data_file():
    """The anchored plot definitions expand to one plot per CSV the report writes."""
    from esnfed_stages.report.table_specs import dataset_label
    from esnfed_core.vocabulary import PCTS, STRATEGIES
    from esnfed_stages.report import report_figures

    plots = [{plot_id: spec} for plot_id, spec in shipped_plots()]  # dvc-plots/dvc.yaml's, from the project folder
    ids = [next(iter(p)) for p in plots]
    assert len(set(ids)) == len(ids)
    # a stream plot per dataset, setting and share (the figure's panels), a line per strategy
    assert {i for i in ids if i.startswith("stream-")} == {
        f"stream-{ds}-{s}-{pct}" for ds in ("wesad", "hhar", "example") for s in ("federated", "centralized")
        for pct in PCTS}
    assert {i for i in ids if i.startswith("test-accuracy-")} == {f"test-accuracy-{ds}" for ds in ("wesad", "hhar", "example")}
    # an accuracy-matrix plot per dataset and continual method, a line per context's test data
    assert {i for i in ids if i.startswith("accuracy-matrix-")} == {
        f"accuracy-matrix-{ds}-{algo}-{s}" for ds in ("wesad", "hhar", "example") for algo in ("fedclip", "clip")
        for s in STRATEGIES}
    setting_titles = {"federated": "federated (FedCLIP)", "centralized": "centralised (CLIP)"}
    assert [i for i in ids if i.startswith("heterogeneous-")] == ["heterogeneous-alpha-wesad", "heterogeneous-alpha-hhar"]
    for p, plot_id in zip(plots, ids):
        spec = p[plot_id]
        columns = next(iter(spec["y"].values()))
        if plot_id.startswith("heterogeneous-alpha-"):  # a plot per study dataset, a line per default share
            shares = load_params(ROOT / "params.yaml")["heterogeneity"]["pcts"]["default"]
            ds = plot_id.removeprefix("heterogeneous-alpha-")
            assert list(spec["y"]) == ["reports/plots/heterogeneous-alpha.csv"], plot_id
            assert spec["x"] == "alpha" and columns == [f"{ds}_{p}" for p in shares]
            continue
        assert list(spec["y"]) == [f"reports/plots/{plot_id}.csv"], plot_id
        if plot_id.startswith("stream-"):
            _, ds, setting, pct = plot_id.split("-")
            assert spec["template"] == "linear" and spec["x"] == "context" and columns == list(STRATEGIES)
            assert spec["title"] == (f"{dataset_label(ds)} {setting_titles[setting]}: stream accuracy after each "
                                     f"context, {pct}% training users"), plot_id
        elif plot_id.startswith("test-accuracy-"):  # the means of the figure's methods, both panels
            assert spec["x"] == "share" and columns == [f"{m}_mean" for m in ("random", "fedavg", "incfed", "fedip",
                                                                             "ridge", "ip")]
            assert spec["title"].startswith(f"{dataset_label(plot_id.split('-')[2])}: test accuracy against the share")
        elif plot_id.startswith("accuracy-matrix-"):
            ds, method = plot_id.removeprefix("accuracy-matrix-").split("-", 1)
            assert spec["x"] == "context" and columns and columns == [f"on_context{j}" for j in range(len(columns))]
            assert spec["title"] == (f"{dataset_label(ds)} {report_figures.method_label(method)}: accuracy on each "
                                     "context's test data after each context, ${report.matrix_pct}% training users")
        else:
            assert spec["x"] == "value" and columns == [f"context{i}" for i in range(5)]
            # reader audit: the activation CSVs hold one share; the plot's title names it, as the
            # figures write a share ("100%", not "100 %"), and (figure audit) its method: one title
            # over all eight read the same in `dvc plots show`
            method = report_figures.method_label(plot_id.removeprefix("activation-wesad-"))
            assert spec["title"] == f"WESAD {method}: activation density per context, " \
                "${report.activation_pct}% training users"
            assert spec["x_label"] == "state value"


def plots_of_dvc() -> list:
    return [{plot_id: spec} for plot_id, spec in shipped_plots()]


def test_the_index_knows_which_plot_csvs_dvc_declares():
    """Reader audit: the index said `dvc plots show` draws every plots/ CSV, but the example's
    stream CSVs were not declared. dvc-plots/dvc.yaml now declares them (DVC cannot expand a plot per
    params.yaml `datasets`); report_index.DVC_PLOTS is that list, and the index names any CSV
    outside it (a dataset of your own's) with the command that declares its plots."""
    from esnfed_stages.report import report_index

    plots = plots_of_dvc()
    assert {next(iter(p[next(iter(p))]["y"])).removeprefix("reports/plots/") for p in plots} == \
        report_index.DVC_PLOTS
    params = load_params(ROOT / "params.yaml")
    assert set(report_index.PLOTTED_DATASETS) == set(params["datasets"]) == set(params["continual_datasets"])
    names = sorted(report_index.DVC_PLOTS) + ["stream-mine-federated-25.csv", "stream-mine-centralized-25.csv"]
    plots = {**dict.fromkeys(names, b""), "heterogeneous-alpha.csv": b"alpha,wesad_25,wesad_100,hhar_25,hhar_100\n"}
    index = report_index.render({}, {}, plots, {}, "d", "v", activation_pct="50")
    assert (f"- `plots/`: {len(names)} CSV files, the data of the stream-accuracy, test-accuracy, accuracy-matrix, "
            f"activation and alignment figures; `dvc plots show` draws the {len(names) - 2} that the repository's "
            "dvc-plots/dvc.yaml declares; it draws the others, a dataset of your own's, once `esnfed dvc-plots "
            "--dataset <name> --write` has declared its plots in dvc-plots/dvc.yaml (until then: `dvc plots show "
            "reports/plots/<file> -x context`): stream-mine-federated-25.csv, stream-mine-centralized-25.csv:") in index
    assert "trained on 50% of the training users only" in index
    # the alignment plots draw the columns dvc-plots/dvc.yaml lists: a study of other datasets' columns are named
    alpha = [c for p in plots_of_dvc() if next(iter(p)).startswith("heterogeneous-alpha-")
             for c in next(iter(p.values()))["y"]["reports/plots/heterogeneous-alpha.csv"]]
    assert tuple(alpha) == report_index.DVC_ALPHA_COLUMNS
    mine = report_index.render({}, {}, {"heterogeneous-alpha.csv": b"alpha,mine_25,mine_100\n"}, {}, "d", "v")
    assert ("`dvc plots show` draws them, a dataset of your own's, once `esnfed dvc-plots --dataset <name> --write` "
            "has declared its plots in dvc-plots/dvc.yaml (until then: `dvc plots show reports/plots/<file> -x context`): "
            "heterogeneous-alpha.csv (heterogeneous-alpha.csv's columns mine_25, mine_100: drawn once `esnfed "
            "dvc-plots --dataset <name> --write` has declared the dataset's heterogeneous-alpha-<name> plot, or "
            "-x alpha):") in mine


def test_the_index_does_not_call_a_csv_of_your_own_not_declared_once_dvc_plots_may_have_declared_it():
    """After `esnfed dvc-plots --dataset mine --write` the index still listed mine's CSVs as "not
    declared" (it knew the shipped declarations only). It does not read dvc.yaml (the report would
    depend on every edit of it, and a --write after the report would leave it stale all the same):
    it says which CSVs the repository's dvc-plots/dvc.yaml declares and that the others are drawn once the
    command has declared them, true before and after the command runs."""
    from esnfed_stages.report import report_index

    plots = {"test-accuracy-wesad.csv": b"", "test-accuracy-mine.csv": b"",
             "heterogeneous-alpha.csv": b"alpha,wesad_25,wesad_100,mine_25,mine_100\n"}
    index = report_index.render({}, {}, plots, {}, "d", "v")
    line = next(x for x in index.splitlines() if x.startswith("- `plots/`"))
    assert "not declared" not in line and "declares none" not in line
    assert "draws the 2 that the repository's dvc-plots/dvc.yaml declares" in line  # test-accuracy-wesad, the alignment CSV
    assert "once `esnfed dvc-plots --dataset <name> --write` has declared its plots in dvc-plots/dvc.yaml" in line
    assert line.count("test-accuracy-mine.csv") == 1 and "columns mine_25, mine_100: drawn once" in line


def test_the_report_stage_tracks_the_budget_scale_its_headers_print():
    """The paper tables' headers print budgets.<budget>'s trials, retrains and units
    (esnfed_stages/report/comparability.py): the report stage declares them (the whole entry)."""
    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["report"]
    assert {"budget", "budgets.${budget}"} <= set(stage["params"])


def test_the_report_stage_tracks_what_the_selected_table_reads():
    """reports/tables/selected.md reads every best.json (runs/select: the select stages' outputs) and
    prints plasticity.mu, plasticity.eta and the λ rule (retrain.lambda); reports/ttest.json records
    ttest.variance_test, in the `ttest` section both stages declare."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    report = stages["report"]
    assert "runs/select" in report["deps"]
    assert {"plasticity.mu", "plasticity.eta", "retrain", "ttest"} <= set(report["params"])
    assert "ttest" in stages["ttest"]["params"]
    assert "variance_test" in load_params(ROOT / "params.yaml")["ttest"]
    outs = [o for s in stages.values() for o in (s.get("do", s).get("outs") or []) if isinstance(o, dict)]
    assert any(next(iter(o)).startswith("runs/select/") for o in outs)  # best.json lives under it


def test_flower_stage_feeds_the_report(project):
    """The flower stage depends on the Flower apps' code, environment and the
    selected IncFed/FedIP configs, and its outputs are the report's deps (SecAgg+ overhead). The
    pipeline measures params.yaml study_datasets (both papers' datasets), those the report reads
    (report_params.studies; secagg_report.PIPELINE_DATASETS is the repository's value)."""
    from esnfed_stages.report.report_params import report_params
    from esnfed_stages.report.secagg_report import PIPELINE_DATASETS

    deps, outs = _stages(project), _stages(project, "outs")
    params = load_params(ROOT / "params.yaml")
    assert [s for s in deps if s.startswith("flower@")] == ["flower@wesad", "flower@hhar"]
    assert report_params(params).studies == PIPELINE_DATASETS == tuple(params["study_datasets"]) == ("wesad", "hhar")
    for ds in PIPELINE_DATASETS:
        stage = f"flower@{ds}"
        assert {"esnfed_flower", "requirements/flower.txt", f"runs/select/{ds}/incfed/100/best.json",
                f"runs/select/{ds}/fedip/100/best.json"} <= set(deps[stage])
        assert outs[stage] == [f"runs/flower/{ds}"]
    # what the report requires once the stage ran (secagg_report.missing) is what the stage writes
    from esnfed_stages.report.secagg_report import PIPELINE_APPS, PIPELINE_PCT

    cmd = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["flower"]["do"]["cmd"].split()
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--app"] == list(PIPELINE_APPS)
    assert "--plain-and-secagg" in cmd and "--pct" not in cmd and PIPELINE_PCT == "100"
    # the folder as a whole (every flower@<dataset>), there in every clone even when no flower stage
    # runs (study_datasets: []): git keeps runs/flower/README.md and ignores the rest
    assert "runs/flower" in deps["report"]
    assert (ROOT / "runs" / "flower" / "README.md").is_file()
    tracked = subprocess.run(["git", "ls-files", "runs"], cwd=ROOT, capture_output=True, text=True)
    if tracked.returncode == 0:  # a git checkout (not an exported tree)
        assert tracked.stdout.split() == ["runs/flower/README.md"]


def test_privacy_stages_feed_the_report(project):
    """`esnfed privacy` runs on every declared dataset (privacy@<name>, the
    embedded example too) and the report depends on each output (runs/privacy holds them all, as
    runs/assess the assess files), so a rerun privacy stage reruns the report. What it reads in
    either privacy.config is declared: select, the best.json of privacy.pct; public, the select
    stage's search (seed, trials, the dataset's space and FedIP's) scored on the validation users."""
    params = load_params(ROOT / "params.yaml")
    deps, outs, declared = _stages(project), _stages(project, "outs"), _commands_and_params(project)
    privacy = [s for s in deps if s.startswith("privacy@")]
    assert privacy == [f"privacy@{ds}" for ds in params["datasets"]] and "privacy@example" in privacy
    for stage in privacy:
        ds = stage.split("@")[1]
        assert outs[stage] == [f"runs/privacy/{ds}.json"]
        assert {f"data/processed/{ds}", f"data/partitions/{ds}.json", f"runs/select/{ds}/incfed/100/best.json",
                f"runs/select/{ds}/fedip/100/best.json"} <= set(deps[stage])
        budget = f"budgets.{params['budget']}"
        assert {"privacy", "seed", "budget", f"{budget}.retrains", f"{budget}.trials", f"{budget}.space.{ds}",
                f"{budget}.space.fedip", "readout.lambdas", "plasticity"} <= set(declared[stage][1]), stage
        assert any(outs[stage][0].startswith(f"{dep}/") for dep in deps["report"]), stage


def _commands_and_params(root: Path) -> dict[str, tuple[str, list[str]]]:
    """Every expanded stage -> (its command, the params.yaml keys it declares), as DVC reads dvc.yaml."""
    code = ("import json; from dvc.repo import Repo\n"
            "from dvc.dependency.param import ParamsDependency\n"
            "print(json.dumps({s.addressing: [s.cmd, [p for d in s.deps if isinstance(d, ParamsDependency)"
            " for p in d.params]] for s in Repo('.').index.stages}))")
    return {k: (cmd, params) for k, (cmd, params) in json.loads(_run([sys.executable, "-c", code], root)).items()}


def _methods_of(cmd: str) -> list[str] | None:
    """The method ids of an `esnfed select|retrain|assess` command (each --algo under each
    --strategy); None for another command. `--algo align` stands for its every α: align-0 is one
    of them."""
    words = cmd.split()
    if words[:1] != ["esnfed"] or words[1] not in ("select", "retrain", "assess"):
        return None
    algos = [words[i + 1] for i, w in enumerate(words) if w == "--algo"]
    strategies = [words[i + 1] for i, w in enumerate(words) if w == "--strategy"]
    if strategies:
        return [f"{a}-{s}" for a in algos for s in strategies]
    return ["align-0" if a == "align" else a for a in algos]


def test_each_experiment_stage_declares_the_runner_settings_its_methods_read(project):
    """assess-continual read runner.device (assess scores a continual method's retrains on the torch
    kernels when runner.device is torch-cpu | cuda) without declaring it, so a device change left
    its assess files as they were. Whether a method runs on the device is the code's own rule
    (Settings.accelerated): each select, retrain and assess stage of such a method declares
    runner.device, and select and retrain (whose trials read it: Settings.used_by) runner.tf32,
    and runner.fused_ip_sums where the method runs IP;
    the numpy-only ones (deep and heterogeneous reservoirs, as dvc.yaml's comments say) declare
    neither, so a device change reruns nothing of theirs (the random baseline shares the ESN
    readouts' stages, whose trials it resumes). Every one declares `budget`:
    each records the budget it ran under and the next stage refuses another (select-random did not,
    so a new budget name reran retrain-random, which refused the old best.json)."""
    from esnfed_core.method import Method
    from esnfed_core.settings import Settings

    on_device = Settings(device="cuda")
    checked = set()
    for stage, (cmd, params) in _commands_and_params(project).items():
        methods = _methods_of(cmd)
        if methods is None:
            continue
        checked.add(cmd.split()[1])
        accelerated = any(on_device.accelerated(Method.parse(m)) for m in methods)
        assert ("runner.device" in params) == accelerated, (stage, methods, params)
        assert ("runner.tf32" in params) == (accelerated and cmd.split()[1] != "assess"), (stage, params)
        ip = any(on_device.accelerated(Method.parse(m)) and Method.parse(m).uses_ip for m in methods)
        assert ("runner.fused_ip_sums" in params) == (ip and cmd.split()[1] != "assess"), (stage, params)
        assert "budget" in params, (stage, params)
    assert checked == {"select", "retrain", "assess"}
    stages = _commands_and_params(project)
    assert "runner.device" in stages["assess-continual@wesad"][1]
    assert "runner.device" not in stages["assess-deep@wesad"][1]


def test_dvc_lock_is_not_git_ignored():
    """`dvc repro` refuses to start in a git work tree that ignores dvc.lock ("'dvc.lock' is
    git-ignored"): the lock is left untracked, never ignored."""
    out = subprocess.run(["git", "check-ignore", "-q", "dvc.lock"], cwd=ROOT)
    assert out.returncode == 1, "dvc.lock is git-ignored: dvc repro would refuse to run"
