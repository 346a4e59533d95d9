"""Shell completion is on: Typer's --install-completion / --show-completion (docs/sharing.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_show_completion_prints_a_bash_script_for_esnfed():
    done = subprocess.run([sys.executable, "-m", "esnfed_cli", "--show-completion", "bash"], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert "complete" in done.stdout and "_ESNFED_COMPLETE" in done.stdout.upper(), done.stdout[:300]
