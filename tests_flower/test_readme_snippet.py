"""docs/flower-apps.md "Flower apps": the run_simulation snippet runs as printed (before, it named a
run.json nobody wrote, FileNotFoundError), from a folder holding only the packages it imports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_run_simulation_snippet_runs(tmp_path):
    text = (ROOT / "docs" / "flower-apps.md").read_text(encoding="utf-8")
    start = text.index("export PYTHONPATH=$PWD ESNFED_FLOWER_RUN=")
    end = text.index("```", start)
    script = text[start:end].replace(".venv-flower/bin/python", sys.executable)
    for package in ("esnfed_core", "esnfed_flower"):
        (tmp_path / package).symlink_to(ROOT / package)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ESNFED_FLOWER_RUN")}
    proc = subprocess.run(["bash", "-ec", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    readout = np.load(tmp_path / "runs" / "flower-demo" / "readout.npy")
    assert readout.shape == (2, 20) and np.isfinite(readout).all()
