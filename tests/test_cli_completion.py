"""Shell completion is on: Typer's --install-completion / --show-completion (docs/sharing.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_show_completion_prints_a_bash_script_for_esnfed():
    # Typer detects the shell from the process's ancestors (shellingham), as when a user types the
    # command in bash: run it from a bash that stays its parent (a second command keeps bash from
    # exec-ing it), not from pytest's worker, whose ancestry may hold no shell at all.
    done = subprocess.run(["bash", "-c", '"$0" -m esnfed_cli --show-completion; status=$?; exit $status',
                           sys.executable], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert "complete" in done.stdout and "_ESNFED_COMPLETE" in done.stdout.upper(), done.stdout[:300]
