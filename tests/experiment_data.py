"""A tiny processed dataset and partition (per docs/data-contract.md) for the experiment-stage tests,
written with the project's own writer so the tests never depend on the synthetic generator."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from esnfed_core.data.processed import UserData, save_user
from esnfed_core.trial import TrialData

TRAIN = {"25": ["u0"], "50": ["u0", "u1"], "75": ["u0", "u1", "u2"], "100": ["u0", "u1", "u2", "u3"]}
VALIDATION = ["v0", "v1"]
TEST = ["t0", "t1"]


def make_user(rng: np.random.Generator, windows_per_context: int, steps: int, features: int,
              n_classes: int, n_contexts: int) -> UserData:
    """Windows whose per-step class shifts the mean of the inputs: learnable, but not trivially."""
    xs, ys, cs = [], [], []
    centres = np.linspace(-1.0, 1.0, n_classes)[:, None] * np.linspace(1.0, -1.0, features)[None, :]
    for ctx in range(n_contexts):
        for _ in range(windows_per_context):
            # Two label runs per window so a context holds more than one class.
            cut = int(rng.integers(1, steps))
            a, b = rng.integers(0, n_classes, size=2)
            y = np.where(np.arange(steps) < cut, a, b).astype(np.int8)
            x = centres[y] + 0.8 * rng.standard_normal((steps, features))
            xs.append(x.astype(np.float32))
            ys.append(y)
            cs.append(ctx)
    return UserData(np.stack(xs), np.stack(ys), np.asarray(cs, np.int8))


def make_dataset(root: Path, dataset: str = "wesad", *, windows_per_context: int = 4, steps: int = 12,
                 features: int = 3, n_classes: int = 3, n_contexts: int = 3, seed: int = 0) -> dict:
    """Write data/processed/<dataset>/ and data/partitions/<dataset>.json under ``root``."""
    rng = np.random.default_rng(seed)
    proc = root / "data" / "processed" / dataset
    proc.mkdir(parents=True, exist_ok=True)
    users = {}
    for name in TRAIN["100"] + VALIDATION + TEST:
        u = make_user(rng, windows_per_context, steps, features, n_classes, n_contexts)
        save_user(proc / f"{name}.npz", u)
        users[name] = {"file": f"{name}.npz", "windows": u.windows,
                       "sha256": hashlib.sha256((proc / f"{name}.npz").read_bytes()).hexdigest(),
                       "windows_per_context": [windows_per_context] * n_contexts}
    manifest = {
        "dataset": dataset, "window": steps, "n_features": features,
        "feature_names": [f"f{i}" for i in range(features)], "classes": [f"c{i}" for i in range(n_classes)],
        "n_classes": n_classes, "n_contexts": n_contexts, "context_names": [f"run{i}" for i in range(n_contexts)],
        "users": users, "sources": {}, "params": {}, "source": "synthetic",
    }
    (proc / "manifest.json").write_text(json.dumps(manifest, indent=2))
    part = {"dataset": dataset, "train": TRAIN, "validation": VALIDATION, "test": TEST,
            "n_contexts": n_contexts, "context_names": manifest["context_names"]}
    (root / "data" / "partitions").mkdir(parents=True, exist_ok=True)
    (root / "data" / "partitions" / f"{dataset}.json").write_text(json.dumps(part, indent=2))
    return manifest


def trial_data(seed: int = 0, pct: str = "50", **kw) -> tuple[TrialData, dict[str, UserData]]:
    """In-memory TrialData (train of ``pct`` + validation) and the test users, without files."""
    rng = np.random.default_rng(seed)
    n_classes, n_contexts = kw.get("n_classes", 3), kw.get("n_contexts", 3)
    users = {name: make_user(rng, kw.get("windows_per_context", 4), kw.get("steps", 12),
                             kw.get("features", 3), n_classes, n_contexts)
             for name in TRAIN["100"] + VALIDATION + TEST}
    data = TrialData({u: users[u] for u in TRAIN[pct]}, {u: users[u] for u in VALIDATION},
                     n_classes, n_contexts)
    return data, {u: users[u] for u in TEST}


def small_params(**runner) -> dict:
    """The project's params.yaml with a tiny default budget (fast tests) and in-process trials."""
    import copy

    # imported here: the trial tests count the core modules a trial loads (test_select), and the
    # schema behind load_params imports most of the core
    from esnfed_stages.params.load import load_params

    params = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
    params = copy.deepcopy(params)
    params["budget"] = "default"
    space = params["budgets"]["default"]["space"]
    for ds in ("wesad", "hhar"):
        space[ds]["units"] = [8, 12]
    space["ip"]["rounds"] = [1, 2]
    space["fedip"]["rounds"] = [1, 2]
    space["fedip"]["local_epochs"] = [1]
    params["budgets"]["default"].update(trials=2, retrains=2)
    params["plasticity"]["batch_size"] = 4
    params["runner"] = {"backend": "sequential", "n_jobs": 1, "blas_threads": 1, **runner}
    return params


def write_params(root: Path, params: dict) -> Path:
    import yaml

    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def read_params(root: Path) -> dict:
    """``root``'s params.yaml as written by :func:`write_params`."""
    import yaml

    return yaml.safe_load((root / "params.yaml").read_text())


def cli_ok(*args: str) -> str:
    """``esnfed ARGS`` through Typer's runner; asserts exit 0 and returns the output."""
    from typer.testing import CliRunner  # noqa: PLC0415 - the Flower tests import this module too

    from esnfed_cli.main import app  # noqa: PLC0415

    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def cli_fails(*args: str) -> str:
    """``esnfed ARGS`` through Typer's runner; asserts a non-zero exit and returns the output as one
    line of words (the error box's frame dropped)."""
    from typer.testing import CliRunner  # noqa: PLC0415

    from esnfed_cli.main import app  # noqa: PLC0415

    result = CliRunner().invoke(app, list(args))
    assert result.exit_code != 0, result.output
    return " ".join(w for w in result.output.split() if w not in "│╭╮╰╯─")


def stage_options(root: Path, dataset: str = "wesad") -> list[str]:
    """The options of an experiment command (select, retrain, assess, privacy) for ``dataset`` on
    ``root``'s params, data and runs."""
    return ["--dataset", dataset, "--params", str(root / "params.yaml"), "--data-dir", str(root / "data"),
            "--runs-dir", str(root / "runs")]


def run_method_stages(root: Path, dataset: str, methods) -> None:
    """select (every share), retrain and assess of each (algo, strategy or None) of ``methods`` on
    ``root``'s params, data and runs."""
    common = stage_options(root, dataset)
    for algo, strategy in methods:
        extra = ["--strategy", strategy] if strategy else []
        cli_ok("select", "--algo", algo, *extra, "--pct", "all", *common)
        cli_ok("retrain", "--algo", algo, *extra, *common)
        cli_ok("assess", "--algo", algo, *extra, *common)



def ttest_and_report(root: Path) -> None:
    """`esnfed ttest` then `esnfed report` on ``root``'s params.yaml and runs/assess (missing inputs
    allowed), run from ``root`` with a fixed date: reports/ttest.json and reports/tables/ there."""
    import pytest  # noqa: PLC0415

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SOURCE_DATE_EPOCH", "1700000000")
        mp.chdir(root)
        common = ["--params", "params.yaml", "--assess-dir", "runs/assess", "--allow-missing"]
        cli_ok("ttest", *common, "--out", "reports/ttest.json")
        cli_ok("report", *common, "--ttest", "reports/ttest.json", "--out-dir", "reports")


def leave_one_out_moves(units, bound: float) -> list[float]:
    """For each unit, ‖released(Σ clipped, all units) − released(Σ clipped, that unit removed)‖₂: how
    far removing it moves the numbers the IncFed release noises (esnfed_core.privacy)."""
    from esnfed_core.privacy import clipped_stats_sum, released_vector

    full = released_vector(*clipped_stats_sum(units, bound))
    return [float(np.linalg.norm(full - released_vector(*clipped_stats_sum(units[:i] + units[i + 1:], bound))))
            for i in range(len(units))]
