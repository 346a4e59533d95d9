"""`esnfed init DIR`: a runnable project (params.yaml, dvc.yaml, dvc-plots/dvc.yaml, .dvcignore, DVC
initialised)
written from the installed package, so the pipeline runs outside the source checkout.

The project files are package data (esnfed_stages/project/, byte-identical copies of the
checkout's own files: tests/test_init_project.py checks it); requirements/flower.txt among them,
the flower stage's dep (the pins `esnfed flower-env` installs). The checkout's stages list the code
folders esnfed_cli, esnfed_stages, esnfed_core (and esnfed_flower) as deps; an init'd project has
no such folders, so its dvc.yaml names the installed package's folders by absolute path instead:
a new install of other code changes their hashes, and `dvc status` flags every stage, as in the
checkout.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path

from esnfed_core.errors import EsnfedError
from esnfed_stages.layout import CODE_PACKAGES

PROJECT_FILES = ("params.yaml", "dvc.yaml", "dvc-plots/dvc.yaml", ".dvcignore", "requirements/flower.txt")
# Stored under other names: a .dvcignore inside a code folder that is a stage dep stops DVC
# ("should not be in collected dir path"), and DVC collects every file named dvc.yaml in a
# repository as a pipeline, so the checkout's `dvc repro` would run the copy's stages too.
PACKAGE_NAME = {".dvcignore": "dvcignore", "dvc.yaml": "dvc.yaml.in", "dvc-plots/dvc.yaml": "dvc-plots.yaml.in",
                "requirements/flower.txt": "flower-requirements.txt"}
CODE_DEPS = "deps: [esnfed_cli, esnfed_stages, esnfed_core"
# A code folder named as a dep in a deps list: after "[" or ", ", before "," or "]".
_CODE_DEP = re.compile(r"(?<=[\[ ])(" + "|".join(CODE_PACKAGES) + r")(?=[,\]])")


def installed_code_folders() -> dict[str, Path]:
    """The folders the running esnfed imports its code from (site-packages for a wheel install)."""
    import importlib.util

    return {name: Path(importlib.util.find_spec(name).origin).parent for name in CODE_PACKAGES}


def project_dvc_yaml(template: str, code_folders: dict[str, Path]) -> str:
    """The checkout's dvc.yaml with its code deps (the folders of ``code_folders``' names, in any
    stage's deps list) pointed at ``code_folders``' paths; comments are left as they are."""
    if CODE_DEPS not in template:
        raise EsnfedError(f"package dvc.yaml: no stage lists the code deps `{CODE_DEPS}]`")
    out, in_deps = [], False
    for line in template.splitlines(keepends=True):
        code = line.split("#", 1)[0]
        in_deps = in_deps or "deps: [" in code
        if in_deps:
            line = _CODE_DEP.sub(lambda m: f'"{code_folders[m.group(1)]}"', code) + line[len(code):]
            in_deps = "]" not in code
        out.append(line)
    return "".join(out)


def run_checked(cmd: list[str], where: Path, cwd: Path | None = None) -> None:
    """Run ``cmd`` (in ``cwd``); when it fails, one line naming ``where``, the command (its program
    by name) and the last line it printed."""
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()
        shown = " ".join([Path(cmd[0]).name, *cmd[1:]])
        raise EsnfedError(f"{where}: `{shown}` failed: {last[-1] if last else done.returncode}")


def init_project(folder: Path, *, git: bool | None = None) -> list[str]:
    """Write the project into ``folder`` (absent or empty) and initialise DVC there: with git
    where git is installed (``git=None``) or asked for, else `dvc init --no-scm`. Built in a
    temporary sibling folder and renamed into place, so a failure leaves no half project."""
    folder = Path(folder)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise EsnfedError(f"{folder}: not an empty folder; init writes a new project into an empty or new folder")
    use_git = shutil.which("git") is not None if git is None else git
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=folder.parent))
    try:
        package = resources.files("esnfed_stages") / "project"
        for name in PROJECT_FILES:
            text = (package / PACKAGE_NAME.get(name, name)).read_text()
            if name == "dvc.yaml":
                text = project_dvc_yaml(text, installed_code_folders())
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(text)
        if use_git:
            run_checked(["git", "init", "-q"], tmp, cwd=tmp)
        # The dvc of this environment (the one esnfed depends on), found without PATH.
        run_checked([sys.executable, "-m", "dvc", "init", "-q"] + ([] if use_git else ["--no-scm"]), tmp, cwd=tmp)
        if folder.exists():
            folder.rmdir()
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return list(PROJECT_FILES) + [".dvc/"] + ([".git/"] if use_git else [])
