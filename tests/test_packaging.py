"""The package metadata installs anywhere, the constraints file fixes every version.

pyproject.toml declares ranges (so esnfed-pipeline installs beside other tools); the exact
versions the pipeline is reproduced with live in requirements/constraints.txt, which the Makefile
passes to pip (-c). These tests check the two agree and that the declared Python range is one
every dependency accepts, using the metadata of the distributions installed in this environment.
"""

from __future__ import annotations

import importlib.metadata as md
import tomllib
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# The Flower extra installs into its own environment from requirements/flower.txt (flwr's pins
# clash with ours), so it is not covered by constraints.txt.
OWN_ENV_EXTRAS = {"flower"}


def _pins() -> dict[str, Version]:
    pins = {}
    for line in (ROOT / "requirements" / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"constraints.txt: {line} is not an exact pin"
            pins[canonicalize_name(req.name)] = Version(spec.version)
    return pins


PINS = _pins()


def _declared() -> list[tuple[str, Requirement]]:
    out = [("dependencies", Requirement(r)) for r in PROJECT["dependencies"]]
    for extra, reqs in PROJECT.get("optional-dependencies", {}).items():
        if extra not in OWN_ENV_EXTRAS:
            out += [(f"optional-dependencies.{extra}", Requirement(r)) for r in reqs]
    return out


@pytest.mark.parametrize("where,req", _declared(), ids=lambda v: str(v))
def test_declared_range_is_a_range_and_holds_the_pin(where, req):
    """Metadata ranges, not pins; the constraints pin of each lies inside its range, so
    `pip install -c requirements/constraints.txt` installs exactly the pinned version."""
    assert not any(s.operator in ("==", "===") for s in req.specifier), f"{where}: {req} is pinned"
    assert any(s.operator in (">=", "~=") for s in req.specifier), f"{where}: {req} has no lower bound"
    name = canonicalize_name(req.name)
    assert name in PINS, f"{where}: {req.name} missing from requirements/constraints.txt"
    assert req.specifier.contains(PINS[name], prereleases=True), f"{where}: pin {PINS[name]} outside {req}"


def _closure(roots: list[Requirement]) -> dict[str, md.Distribution]:
    """Every distribution the installed requirements pull in (markers evaluated for this Python)."""
    seen: dict[str, md.Distribution] = {}
    todo = [(r, frozenset(r.extras)) for r in roots]
    while todo:
        req, extras = todo.pop()
        env = default_environment()
        if req.marker is not None and not any(
                req.marker.evaluate({**env, "extra": e}) for e in (extras or {""})):
            continue
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        dist = md.distribution(req.name)
        seen[name] = dist
        for sub in dist.requires or []:
            sub_req = Requirement(sub)
            if sub_req.marker is None or any(
                    sub_req.marker.evaluate({**env, "extra": e}) for e in (set(req.extras) or {""})):
                todo.append((sub_req, frozenset(sub_req.extras)))
    return seen


def test_every_installed_dependency_is_pinned_at_its_installed_version():
    """The constraints file covers the whole dependency tree, not only the direct requirements:
    a transitive package missing from it would float to whatever is newest at install time."""
    roots = [req for _, req in _declared() if req.marker is None]
    for name, dist in _closure(roots).items():
        assert name in PINS, f"{name} (pulled in by the package) is not pinned in requirements/constraints.txt"
        # == admits a local label (torch's CPU build installs as 2.13.0+cpu), as pip's -c does.
        assert SpecifierSet(f"=={PINS[name]}").contains(dist.version, prereleases=True), \
            f"{name}: installed {dist.version}, pinned {PINS[name]}"


def test_requires_python_is_accepted_by_every_dependency():
    """No Python our metadata admits is refused by a dependency's own Requires-Python (pip would
    otherwise fall back to old releases or fail on that Python)."""
    ours = SpecifierSet(PROJECT["requires-python"])
    pythons = [Version(f"3.{minor}") for minor in range(8, 16)]
    admitted = [v for v in pythons if ours.contains(v)]
    assert admitted, PROJECT["requires-python"]
    for _, req in _declared():
        dist_python = md.metadata(req.name).get("Requires-Python")
        if dist_python:
            theirs = SpecifierSet(dist_python)
            refused = [str(v) for v in admitted if not theirs.contains(v)]
            assert not refused, f"{req.name} {md.version(req.name)} requires Python {dist_python}; ours admits {refused}"
    # And the bound is tight: the oldest Python admitted is refused by some pinned dependency's
    # predecessor minor, i.e. our lower bound is not lower than the dependencies allow.
    below = Version(f"3.{admitted[0].minor - 1}")
    assert any(not SpecifierSet(md.metadata(r.name).get("Requires-Python") or "").contains(below)
               for _, r in _declared()), f"requires-python could be lower than {admitted[0]}"


def test_classifiers_name_the_admitted_pythons():
    ours = SpecifierSet(PROJECT["requires-python"])
    listed = {Version(c.rsplit("::", 1)[1].strip()) for c in PROJECT["classifiers"]
              if c.startswith("Programming Language :: Python :: 3.")}
    assert listed and all(ours.contains(v) for v in listed), listed
