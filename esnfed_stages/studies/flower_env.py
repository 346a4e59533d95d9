"""`esnfed flower-env [DIR]`: the Flower apps' own environment (flwr's pins clash with this
package's: requirements/flower.txt says which), built with this interpreter's venv and pip from
the pinned requirements this package carries (esnfed_stages/project/flower-requirements.txt, a
copy of the checkout's requirements/flower.txt). The flower stage finds it as .venv-flower in the
project folder (esnfed_stages.layout.flower_python); `make flower-env` builds the checkout's so.
esnfed's own packages are not installed there: the stage puts them on its PYTHONPATH
(esnfed_stages.layout.code_path)."""

from __future__ import annotations

import shutil
import sys
from importlib import resources
from pathlib import Path

from esnfed_core.errors import EsnfedError
from esnfed_stages.init_project import run_checked

REQUIREMENTS = "flower-requirements.txt"  # in esnfed_stages/project/


def build(folder: Path) -> Path:
    """Create ``folder`` as a virtual environment (or install into the one there) and pip-install
    the pinned Flower requirements; returns its interpreter. A new folder that fails half way is
    removed; an environment that was there is left as pip leaves it."""
    folder = Path(folder)
    python = folder / "bin" / "python"
    new = not python.is_file()
    if new and folder.exists() and any(folder.iterdir()):
        raise EsnfedError(f"{folder}: not an empty folder nor a virtual environment")
    try:
        if new:
            run_checked([sys.executable, "-m", "venv", str(folder)], folder)
        with requirements() as req:
            run_checked([str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", "-r", str(req)], folder)
    except BaseException:
        if new:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    return python


def requirements():
    """The pinned requirements file this package carries, as a path (a context manager)."""
    return resources.as_file(resources.files("esnfed_stages") / "project" / REQUIREMENTS)
