"""`esnfed init DIR`: a runnable project from the installed package, outside the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from esnfed_core.errors import EsnfedError
from esnfed_stages.init_project import CODE_PACKAGES, PACKAGE_NAME, PROJECT_FILES, init_project, project_dvc_yaml

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "esnfed_stages" / "project"


@pytest.mark.parametrize("name", PROJECT_FILES)
def test_package_copies_are_the_checkouts_files(name):
    """One source: the files init writes are the checkout's own, byte for byte (edit the
    checkout's and copy it over: cp params.yaml esnfed_stages/project/; cp dvc.yaml esnfed_stages/project/dvc.yaml.in;
    cp dvc-plots/dvc.yaml esnfed_stages/project/dvc-plots.yaml.in)."""
    assert (PACKAGE / PACKAGE_NAME.get(name, name)).read_bytes() == (ROOT / name).read_bytes(), name


def _code_deps(dvc_yaml: str) -> list[list[str]]:
    stages = yaml.safe_load(dvc_yaml)["stages"]
    return [(stage.get("do", stage)).get("deps", []) for stage in stages.values()]


def test_project_dvc_yaml_points_every_code_dep_at_the_installed_folders(tmp_path):
    folders = {name: tmp_path / "site" / name for name in CODE_PACKAGES}
    text = project_dvc_yaml((ROOT / "dvc.yaml").read_text(), folders)
    checkout_deps = _code_deps((ROOT / "dvc.yaml").read_text())
    flower = 0
    for before, after in zip(checkout_deps, _code_deps(text), strict=True):
        assert not set(after) & set(CODE_PACKAGES), after
        # each code dep in its place, named by its installed folder; every other dep kept as it was
        assert after == [str(folders[d]) if d in folders else d for d in before]
        flower += str(folders["esnfed_flower"]) in after
    assert flower == 1  # the flower stage's: the Flower apps' code
    # comments keep naming the checkout's folders
    assert [line for line in text.splitlines() if line.lstrip().startswith("#")] == [
        line for line in (ROOT / "dvc.yaml").read_text().splitlines() if line.lstrip().startswith("#")]


def test_every_dep_of_an_init_project_is_there_or_a_stage_output(tmp_path):
    """`dvc repro` in a new project finds every dep: the installed code folders, the project's own
    files (requirements/flower.txt: the flower stage's), or what an earlier stage writes."""
    project = tmp_path / "exp"
    init_project(project, git=False)
    from dvc.repo import Repo

    with Repo(str(project)) as repo:
        stages = list(repo.index.stages)
        assert "flower@wesad" in {st.name for st in stages}
        outs = [Path(str(o.fs_path)) for st in stages for o in st.outs]
        for stage in stages:
            for dep in stage.deps:  # params.yaml's params too
                path = Path(str(dep.fs_path))
                produced = any(path == o or o in path.parents or path in o.parents for o in outs)
                assert path.exists() or produced, f"{stage.addressing}: {dep.def_path} is neither there nor an output"


def test_init_refuses_a_non_empty_folder_and_leaves_it_alone(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(EsnfedError, match="not an empty folder"):
        init_project(tmp_path, git=False)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_init_cli_refusal_is_one_line(tmp_path):
    (tmp_path / "x").write_text("")
    done = subprocess.run([sys.executable, "-m", "esnfed_cli", "init", str(tmp_path)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1 and "not an empty folder" in done.stderr, done.stderr


@pytest.mark.slow
@pytest.mark.dvc
def test_wheel_install_init_check_params_and_repro_outside_the_checkout(tmp_path):
    """pip install the wheel into a fresh venv, `esnfed init` an empty folder, and there
    check-params and a first stage run; `dvc status` is then clean for that stage."""
    dist, venv, project = tmp_path / "dist", tmp_path / "venv", tmp_path / "exp"
    run = lambda cmd, cwd=tmp_path, **kw: subprocess.run(  # noqa: E731
        cmd, cwd=cwd, check=True, capture_output=True, text=True, **kw)
    # Built from a copy: setuptools leaves build/ and *.egg-info in the folder it builds.
    source = tmp_path / "source"
    top_level = {".git", ".venv", ".venv-flower", "data", "runs", "reports", "build", "site", ".dvc"}
    shutil.copytree(ROOT, source, ignore=lambda folder, names: [
        n for n in names if n == "__pycache__" or n.endswith(".egg-info") or (Path(folder) == ROOT and n in top_level)])
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(source)])
    (wheel,) = dist.glob("esnfed_pipeline-*.whl")
    run([sys.executable, "-m", "venv", str(venv)])
    # Without PYTHONPATH: the checkout on it (and the egg-info the wheel build leaves there) would
    # make pip think the package is installed already, and esnfed would run the checkout's code.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "-c", str(ROOT / "requirements" / "constraints.txt"), str(wheel)], env=env)
    run([str(venv / "bin" / "esnfed"), "init", str(project)], env=env)
    assert (project / ".dvc").is_dir() and all((project / n).is_file() for n in PROJECT_FILES)
    site = Path(run([str(venv / "bin" / "python"), "-c", "import esnfed_core; print(esnfed_core.__file__)"],
                    env=env).stdout.strip()).parent.parent
    assert f'"{site / "esnfed_core"}"' in (project / "dvc.yaml").read_text()
    assert "valid" in run([str(venv / "bin" / "esnfed"), "check-params"], cwd=project, env=env).stdout
    run([str(venv / "bin" / "dvc"), "repro", "synthesize@wesad"], cwd=project, env=env)
    assert any((project / "data" / "synthetic").rglob("*"))
    status = run([str(venv / "bin" / "dvc"), "status", "synthesize@wesad"], cwd=project, env=env).stdout
    assert "up to date" in status, status


def test_the_checkout_holds_one_pipeline_file():
    """DVC runs every file named dvc.yaml in a repository as a pipeline: the package's copies must
    not be one, or the checkout's `dvc repro` would run its stages (with paths under project/) too;
    beside the pipeline, only the plots file (no stage)."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*dvc.yaml"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert sorted(listed) == ["dvc-plots/dvc.yaml", "dvc.yaml"]
    assert "stages" not in yaml.safe_load((ROOT / "dvc-plots" / "dvc.yaml").read_text())
