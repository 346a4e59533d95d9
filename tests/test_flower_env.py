"""Where the flower stage finds the Flower environment and esnfed's code for it
(esnfed_stages.layout.flower_python, code_path), and `esnfed flower-env`'s refusals
(esnfed_stages.studies.flower_env). The build itself: `make flower-env` runs it (every fresh
clone's `make repro` and `make test`)."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import pytest

from esnfed_core.errors import EsnfedError
from esnfed_stages import layout
from esnfed_stages.studies import flower_env

ROOT = Path(__file__).resolve().parents[1]


def test_the_packaged_requirements_are_the_checkouts():
    with flower_env.requirements() as req:
        assert Path(req).read_bytes() == (ROOT / "requirements" / "flower.txt").read_bytes()


def test_the_project_folders_environment_comes_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert layout.flower_python() == layout.FLOWER_PYTHON  # none here: the checkout's
    python = tmp_path / ".venv-flower" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.symlink_to(sys.executable)  # as venv makes it: the environment is the link's folder, not its target's
    assert layout.flower_python() == python


def test_the_checkout_is_its_own_code_path():
    with layout.code_path() as code:
        assert code == ROOT == layout.SOURCE_ROOT


def test_an_installed_package_gets_a_folder_of_its_packages_alone(tmp_path, monkeypatch):
    """site-packages holds this environment's pins too: the Flower environment sees only esnfed's."""
    site = tmp_path / "site-packages"
    for name in (*layout.CODE_PACKAGES, "numpy", "typer"):
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text("")
    monkeypatch.setattr(layout, "SOURCE_ROOT", site)
    with layout.code_path() as code:
        assert code != site and sorted(os.listdir(code)) == sorted(layout.CODE_PACKAGES)
        assert all((code / n).resolve() == site / n for n in layout.CODE_PACKAGES)
    assert not code.exists()


def test_a_folder_that_is_not_an_environment_is_refused_and_left_alone(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(EsnfedError, match="not an empty folder nor a virtual environment"):
        flower_env.build(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


@pytest.mark.slow
def test_a_failed_install_names_the_folder_and_leaves_no_environment(tmp_path, monkeypatch):
    bad = tmp_path / "bad.txt"
    bad.write_text("this is not a requirement ===\n")
    monkeypatch.setattr(flower_env, "requirements", lambda: contextlib.nullcontext(bad))
    env = tmp_path / "env"
    with pytest.raises(EsnfedError) as err:
        flower_env.build(env)
    assert str(err.value).startswith(f"{env}: `python -m pip install") and "\n" not in str(err.value)
    assert not env.exists()
