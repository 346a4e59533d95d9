"""The shared-run workflow of docs/sharing.md on the smallest project that shows it: an init'd
project runs a stage, pushes to a local directory remote, a fresh copy of its committed files
(git clone: params.yaml, dvc.yaml, dvc.lock, .dvc/config) pulls, and has nothing to run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from esnfed_stages.init_project import init_project

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.dvc]
STAGE = "synthesize@wesad"


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.skipif(shutil.which("git") is None, reason="the workflow shares dvc.lock through git")
def test_push_then_pull_in_a_fresh_clone_serves_every_output_and_runs_nothing(tmp_path):
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}

    def run(cwd, *cmd):
        cmd = (str(bin_dir / "dvc"), *cmd[1:]) if cmd[0] == "dvc" else cmd
        return subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout

    origin, clone, remote = tmp_path / "origin", tmp_path / "clone", tmp_path / "remote"
    init_project(origin, git=True)
    run(origin, "dvc", "remote", "add", "-d", "shared", str(remote))
    run(origin, "dvc", "repro", STAGE)
    run(origin, "dvc", "push")
    run(origin, "git", "add", "-A")
    run(origin, "git", "commit", "-qm", "run")
    run(tmp_path, "git", "clone", "-q", str(origin), str(clone))
    before = _files(clone / "data")  # git carries only DVC's .gitignore files there
    assert before and all(name.endswith(".gitignore") for name in before), sorted(before)
    run(clone, "dvc", "pull", STAGE)  # the stages run here; `dvc pull` alone after a whole run
    assert "up to date" in run(clone, "dvc", "status", STAGE)
    assert "didn't change, skipping" in run(clone, "dvc", "repro", STAGE)
    assert _files(clone / "data") == _files(origin / "data") and _files(origin / "data")
