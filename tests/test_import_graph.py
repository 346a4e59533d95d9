"""No import cycle inside any package: the module graph of esnfed_core, esnfed_stages and esnfed_cli,
built from the source (ast, so imports inside functions count too), must be acyclic, and the layers
import downwards only (cli -> stages -> core); inside esnfed_stages the chains stay short and the
modules small."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("esnfed_core", "esnfed_stages", "esnfed_cli")
LAYER = {"esnfed_core": 0, "esnfed_stages": 1, "esnfed_cli": 2}


def _modules(package: str) -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``module`` imports anywhere in its source."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, path, node)
            names = [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names]
        else:
            continue
        found.update(n for n in names if n in known and n != module)
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path of modules (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def _graph(package: str) -> dict[str, set[str]]:
    mods = _modules(package)
    return {m: imports_of(m, p, set(mods)) for m, p in mods.items()}


@pytest.mark.parametrize("package", PACKAGES)
def test_package_has_no_import_cycle(package):
    graph = _graph(package)
    assert len(graph) > 3 and any(graph.values())  # the walk found modules and imports
    cycle = find_cycle(graph)
    assert cycle is None, f"{package}: import cycle " + " -> ".join(cycle)


def longest_chain(graph: dict[str, set[str]]) -> list[str]:
    """The longest import chain of an acyclic ``graph``: modules, each importing the next."""
    memo: dict[str, list[str]] = {}

    def from_(node: str) -> list[str]:
        if node not in memo:
            memo[node] = [node] + max((from_(n) for n in sorted(graph.get(node, ()))), key=len, default=[])
        return memo[node]

    return max((from_(n) for n in sorted(graph)), key=len, default=[])


MAX_STAGE_DEPTH = 8  # imports in a row inside esnfed_stages (it was 15 before the sub-packages)


def test_stage_imports_stay_shallow():
    """A stage module reaches what it needs in at most MAX_STAGE_DEPTH imports inside
    esnfed_stages: a module imports a sibling for what it computes, and output names from layout,
    never a whole stage for a file name or a params section."""
    chain = longest_chain(_graph("esnfed_stages"))
    assert len(chain) > 3  # the walk found chains
    assert len(chain) - 1 <= MAX_STAGE_DEPTH, " -> ".join(chain)


def test_longest_chain_counts_imports():
    graph = {"a": {"b", "c"}, "b": {"c"}, "c": {"d"}, "d": set(), "e": {"d"}}
    assert longest_chain(graph) == ["a", "b", "c", "d"]


MAX_LINES = 500


def test_no_stage_module_is_over_500_lines():
    """esnfed_stages is small modules named for what they hold: one over MAX_LINES lines is split
    along its seams."""
    long = {m: n for m, p in _modules("esnfed_stages").items()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long


@pytest.mark.parametrize("package", PACKAGES)
def test_layers_import_downwards(package):
    known = {m for p in PACKAGES for m in _modules(p)}
    upward = sorted(f"{m} imports {t}" for m, path in _modules(package).items()
                    for t in imports_of(m, path, known) if LAYER[t.split(".")[0]] > LAYER[package])
    assert not upward


def test_the_trial_module_leaves_the_accelerator_to_the_stages():
    """The former cycle trial.fit -> accel.trials -> trial: the stages pick the kernels now."""
    mods = _modules("esnfed_core")
    assert "esnfed_core.trial" in imports_of("esnfed_core.accel.trials", mods["esnfed_core.accel.trials"], set(mods))
    assert "esnfed_core.accel.trials" not in imports_of("esnfed_core.trial", mods["esnfed_core.trial"], set(mods))


def test_cycle_finder_finds_a_hidden_cycle(tmp_path):
    # The shape of the old params <-> params_schema cycle: one import sits inside a function.
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg.b import g\n")
    (pkg / "b.py").write_text("from pkg import a\n")
    mods = {"pkg": pkg / "__init__.py", "pkg.a": pkg / "a.py", "pkg.b": pkg / "b.py"}
    graph = {m: imports_of(m, p, set(mods)) for m, p in mods.items()}
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.a"}
    assert find_cycle(graph) in (["pkg.a", "pkg.b", "pkg.a"], ["pkg.b", "pkg.a", "pkg.b"])


def test_start_up_leaves_slow_libraries_to_the_commands_that_use_them():
    """Every `esnfed` command imports the CLI and validates params.yaml (which imports the dataset
    modules for their signatures) before it does anything: pandas, scipy.signal, matplotlib and
    torch, ~0.2-1 s each, must not load there, or each of the ~130 pipeline stages pays for them;
    nor joblib and scipy.special (~30 ms each), which only a worker pool and the activation
    histograms need."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    code = ("import sys, esnfed_cli.main\n"
            "from esnfed_stages.params.load import load_params\n"
            "load_params('params.yaml')\n"
            "print(' '.join(m for m in ('pandas', 'scipy.signal', 'scipy.stats', 'matplotlib', 'torch',\n"
            "                           'joblib', 'scipy.special')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == []


def test_every_cli_module_imports_first_in_a_fresh_interpreter():
    """Each esnfed_cli module can be the first one imported (a test or a tool importing one
    command module): an import cycle through the app's command registration shows here even
    where the graph above cannot see it."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    names = [n for n in sorted(_modules("esnfed_cli")) if not n.endswith("__main__")]
    assert "esnfed_cli.privacy_cmd" in names and "esnfed_cli.experiment_cmds" in names
    failed = []
    for name in names:
        run = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, text=True, cwd=ROOT)
        if run.returncode:
            failed.append(f"{name}: {run.stderr.strip().splitlines()[-1]}")
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("argv", [["--version"], ["--help"], ["select", "--help"], ["report", "--help"]])
def test_version_and_help_import_no_numeric_library(argv):
    """`esnfed --version` and every `--help` stay under half a second: the stage modules, and with
    them numpy, scipy, pandas, yaml, torch and dvc, load only inside the command that runs."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    code = ("import sys\n"
            f"sys.argv = ['esnfed'] + {argv!r}\n"
            "from esnfed_cli.main import app\n"
            "try:\n"
            "    app(prog_name='esnfed')\n"
            "except SystemExit:\n"
            "    pass\n"
            "print('LOADED', ' '.join(m for m in ('numpy', 'scipy', 'pandas', 'yaml', 'torch', 'dvc')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    assert "LOADED" in out and out.split("LOADED", 1)[1].split() == [], out[-300:]
