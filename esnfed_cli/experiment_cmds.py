"""`esnfed select`, `esnfed retrain` and `esnfed assess`: model selection, retraining with new
seeds and test-user assessment of methods on datasets, with progress bars and summaries."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from esnfed_cli._common import (EXIT_FAILURE, TRIALS_LEFT, bar_task, console, declared_dataset, err_console,
                                handle_errors, in_range, stop_cleanly, trial_progress)
from esnfed_cli.app import app
from esnfed_core.errors import ConfigError
from esnfed_core.vocabulary import Algo, Backend, Device, ShareOrAll, Strategy
from esnfed_stages.layout import assess_dir, assess_path


DatasetOpt = Annotated[Optional[list[str]], typer.Option(
    "--dataset", help="A dataset declared in params.yaml datasets (wesad, hhar, or your own); repeat "
    "--dataset for several. Default: every dataset the pipeline runs the method on (continual methods: "
    "continual_datasets; deep and heterogeneous reservoirs: study_datasets; the others: datasets).",
    show_default=False)]
AlgoOpt = Annotated[list[Algo], typer.Option(
    "--algo", help="The method: random (baseline), ridge (centralised ESN), incfed, fedavg, ip "
    "(centralised IP + ridge), fedip (FedIP + IncFed), clip / fedclip (continual; need --strategy); "
    "deep-incfed / deep-fedip (IncFed / FedIP on stacked reservoirs at the shallow selection's units; "
    "select needs incfed / fedip selected first); heterogeneous reservoirs: local, ensemble, align (every α of heterogeneity.alphas, or --alpha). "
    "Repeat --algo to run several methods in one command (one process and worker pool).",
    case_sensitive=False)]
StrategyOpt = Annotated[Optional[list[Strategy]], typer.Option(
    "--strategy", help="Continual strategy of clip/fedclip: naive, replay or joint (required for them; "
    "the other methods take none). Repeat --strategy to run each continual --algo under several.",
    case_sensitive=False, show_default=False)]
AlphaOpt = Annotated[Optional[float], typer.Option(
    "--alpha", min=0.0, max=1.0,
    help="align only: one alignment strength α in [0, 1] (default: every α of heterogeneity.alphas).")]
PctOpt = Annotated[ShareOrAll, typer.Option(
    "--pct", help="Share of training users: 25, 50, 75, 100, or all.")]
ParamsOpt = Annotated[Path, typer.Option("--params", help="The params file to read.")]
DataDirOpt = Annotated[Path, typer.Option(
    "--data-dir", help="Data root holding processed/<dataset>/ and partitions/<dataset>.json.")]
RunsDirOpt = Annotated[Path, typer.Option(
    "--runs-dir", help="Root of the experiment outputs (select/, models/, assess/).")]
BackendOpt = Annotated[Optional[Backend], typer.Option(
    "--backend", help="joblib backend for the trials: loky (local processes), sequential, or ray "
    "(needs the \\[ray] extra). Default: params.yaml runner.backend.", case_sensitive=False)]
DeviceOpt = Annotated[Optional[Device], typer.Option(
    "--device", help="Kernels of the ESN methods' trials: cpu (numpy), torch-cpu or cuda "
    "(batched torch; needs the \\[gpu] extra). Default: params.yaml runner.device.", case_sensitive=False)]
JobsOpt = Annotated[Optional[int], typer.Option(
    "--n-jobs", callback=in_range(not_zero=True),
    help="Parallel workers (-1 = all cores, -2 = all but one, as in joblib). "
    "Default: params.yaml runner.n_jobs.")]


def _method(algo: Algo, strategies: Optional[list[Strategy]]) -> list[Method]:
    """The methods of ``algo``: one per strategy, in the order given (repeats dropped), or the one
    without; a strategy missing (continual) or extra (stationary) is a usage error."""
    from esnfed_core.method import Method

    try:
        return [Method(algo.value, s.value if s else None) for s in dict.fromkeys(strategies or [None])]
    except ConfigError as exc:
        raise typer.BadParameter(str(exc).removeprefix("strategy: "), param_hint="--strategy") from None


def _methods(algos: list[Algo], strategy: Optional[list[Strategy]], alpha: Optional[float],
             params: dict) -> list[Method]:
    """The methods one command runs, in the order of the ``--algo`` options (repeats dropped)."""
    from esnfed_core.methods import family_of

    if alpha is not None and not any(family_of(a.value).takes_alpha for a in algos):
        raise typer.BadParameter(f"{algos[0].value} takes no alignment strength (align only)", param_hint="--alpha")
    out: list[Method] = []
    for algo in dict.fromkeys(algos):
        out += _methods_of(algo, strategy, alpha, params)
    return out


def _methods_of(algo: Algo, strategy: Optional[list[Strategy]], alpha: Optional[float], params: dict) -> list[Method]:
    """``--algo align`` is one method per α (``--alpha``, or every α of heterogeneity.alphas); any
    other algorithm is one method and takes no --alpha."""
    from esnfed_core.method import Method
    from esnfed_core.methods import family_of
    from esnfed_stages.params.hetero import hetero_params

    if not family_of(algo.value).takes_alpha:
        return _method(algo, strategy)
    if strategy:
        raise typer.BadParameter("align takes no strategy", param_hint="--strategy")
    alphas = [alpha] if alpha is not None else list(hetero_params(params).alphas)
    return [Method(algo.value, alpha=float(a)) for a in alphas]


def _runs(params: dict, datasets: Optional[list[str]], algos: list[Algo], strategy: Optional[list[Strategy]],
          alpha: Optional[float]) -> list[tuple[str, Method]]:
    """The (dataset, method) pairs one command runs, method by method in the order of ``--algo``
    (continual: one method per ``--strategy``; align: one method per α): on each ``--dataset`` given (checked first), or else on every
    dataset the pipeline runs that method on (esnfed_stages.data._datasets.method_datasets)."""
    from esnfed_stages.data._datasets import method_datasets

    given = [declared_dataset(params, d) for d in dict.fromkeys(datasets or [])]
    return [(ds, method) for method in _methods(algos, strategy, alpha, params)
            for ds in (given or method_datasets(params, method))]


def _prepare(datasets: Optional[list[str]], algo: list[Algo], strategy: Optional[list[Strategy]], pct: ShareOrAll,
             params: Path, backend: Optional[Backend], n_jobs: Optional[int],
             device: Optional[Device] = None, alpha: Optional[float] = None):
    """What select and retrain start from: the (dataset, method) pairs, shares, the experiment
    params (the file read once), and the runner with the command-line overrides."""
    from esnfed_stages.params.load import load_params
    from esnfed_stages.params.experiment import experiment_params, parse_pcts

    p = load_params(params)
    exp = experiment_params(p)
    runner = exp.runner.with_overrides(backend.value if backend else None, n_jobs,
                                       device.value if device else None)
    return _runs(p, datasets, algo, strategy, alpha), parse_pcts(pct.value), exp, runner


def _where(runner) -> str:
    n = runner.n_jobs
    if runner.backend == "sequential" or n == 1:  # esnfed_stages.experiment.runner: then the trials run in this process
        jobs = "in this process"
    else:
        jobs = f"{runner.backend}, " + (f"{n} jobs" if n > 0 else "all cores" if n == -1 else f"all cores but {-n - 1}")
    return jobs if runner.device == "cpu" else f"{jobs}, stationary trials batched on {runner.device}"


def _fail_listing(what: str, failed: list[tuple[str, int, str]]) -> None:
    err_console.print(f"[bold red]error:[/] {len(failed)} {what} failed:", highlight=False)
    for pct, i, error in failed:
        err_console.print(f"  {pct}% #{i}: {error}", highlight=False, soft_wrap=True, markup=False)
    raise typer.Exit(EXIT_FAILURE)


# Short names so a config fits one table cell, in the order shown, with the legend's words.
_SHORT = {"units": ("N", "units"), "spectral_radius": ("ρ", "spectral radius"), "leak": ("a", "leak"),
          "input_scaling": ("s", "input scaling"), "sigma": ("σ", "IP target std"),
          "rounds": ("R", "rounds/epochs"), "local_epochs": ("E", "local epochs"), "lambda": ("λ", "ridge"),
          "budget": ("B", "budget per context")}


def _order(key: str) -> tuple[int, str]:
    return (list(_SHORT).index(key) if key in _SHORT else len(_SHORT), key)


def _config(cfg: dict) -> str:
    return " ".join(f"{_SHORT.get(k, (k,))[0]}={v:.3g}" if isinstance(v, float) else f"{_SHORT.get(k, (k,))[0]}={v}"
                    for k, v in sorted(cfg.items(), key=lambda kv: _order(kv[0])))


def _legend(configs: list[dict]) -> str:
    """The short names the table's configs use, explained (others are shown by their own name)."""
    used = {k for cfg in configs for k in cfg if k in _SHORT}
    return ", ".join(" ".join(_SHORT[k]) for k in sorted(used, key=_order))


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}"


def _select_table(ds: str, method: Method, runner, result) -> None:
    table = Table(title=f"select {ds}/{method.id} ({_where(runner)})",
                  caption=_legend([(s.best or {}).get("config", {}) for s in result.shares]))
    for col in ("train users", "trials", "resumed", "ran", "failed", "best trial", "val acc %", "config"):
        table.add_column(col, justify="left" if col == "config" else "right")
    for s in result.shares:
        best = s.best or {}
        cfg = _config(best.get("config", {}))
        table.add_row(f"{s.pct}%", str(s.n_trials), str(s.resumed), str(s.ran), str(len(s.failed)),
                      str(best.get("trial", "-")), _fmt(best.get("score")), cfg)
    console.print(table, highlight=False)


def _retrain_table(ds: str, method: Method, runner, result) -> None:
    table = Table(title=f"retrain {ds}/{method.id} ({_where(runner)})",
                  caption=_legend([s.config for s in result.shares]))
    for col in ("train users", "models", "resumed", "ran", "failed", "config"):
        table.add_column(col, justify="left" if col == "config" else "right")
    for s in result.shares:
        cfg = _config(s.config)
        table.add_row(f"{s.pct}%", str(len(s.seeds)), str(s.resumed), str(s.ran), str(len(s.failed)), cfg)
    console.print(table, highlight=False)


def _run_label(runs: list[tuple[str, Method]], ds: str, method: Method) -> str:
    """What a failure listing puts before a share: ``hhar/fedip `` when the command ran several
    datasets, ``fedip `` when several methods on one, nothing when it ran one method on one dataset."""
    if len({d for d, _ in runs}) > 1:
        return f"{ds}/{method.id} "
    return f"{method.id} " if len(runs) > 1 else ""


def _select_run(*args, **kwargs):
    from esnfed_stages.experiment import select as select_stage

    return select_stage.run(*args, **kwargs)


def _retrain_run(*args, **kwargs):
    from esnfed_stages.experiment import retrain as retrain_stage

    return retrain_stage.run(*args, **kwargs)


def _stage_command(verb: str, run, table, what: str, doc: str) -> None:
    """Register `esnfed <verb>`: select and retrain take the same options. Each method (align: one
    per α) runs ``run`` (the stage's) under a progress bar and ``table`` prints its summary; then every
    failed ``what`` is listed (with its method when there are several) and the exit code is 1."""

    def command(
        algo: AlgoOpt,
        dataset: DatasetOpt = None,
        strategy: StrategyOpt = None,
        pct: PctOpt = ShareOrAll.all,
        backend: BackendOpt = None,
        n_jobs: JobsOpt = None,
        device: DeviceOpt = None,
        params: ParamsOpt = Path("params.yaml"),
        data_dir: DataDirOpt = Path("data"),
        runs_dir: RunsDirOpt = Path("runs"),
        alpha: AlphaOpt = None,
    ) -> None:
        runs, pcts, exp, runner = _prepare(dataset, algo, strategy, pct, params, backend, n_jobs, device, alpha)
        failed = []
        for ds, method in runs:
            with stop_cleanly(verb, TRIALS_LEFT), trial_progress() as bar:  # a stop ends the workers too
                result = run(ds, method, pcts, exp, data_dir=data_dir, runs_dir=runs_dir, runner=runner,
                             progress=bar_task(bar, f"{verb} {ds}/{method.id}"))
            table(ds, method, runner, result)
            label = _run_label(runs, ds, method)
            failed += [(f"{label}{share}", i, e) for share, i, e in result.failed]
        if failed:
            _fail_listing(what, failed)

    command.__name__ = command.__qualname__ = verb
    command.__doc__ = doc
    app.command(verb)(handle_errors(command))


_stage_command("select", _select_run, _select_table, "trial(s)", """
    Model selection: seeded random search scored on the validation users.

    Continual methods search the budget grid built from the best IP/FedIP config.

    Each finished trial is written at once to runs/select/<dataset>/<method>/<pct>/trial-XXXX.json;
    a rerun skips the trials already done. best.json is written per share when all its trials
    succeeded; failed trials are recorded and listed, and the command then exits with code 1.
    """)
_stage_command("retrain", _retrain_run, _retrain_table, "retrain(s)", """
    Retrain the selected config with budgets.<budget>.retrains new seeds per share.

    Models go to runs/models/<dataset>/<method>/<pct>/seed-<k>.npz + .json (an open format: see
    docs/reference.md, "Saved models"); a rerun skips models already trained with the same inputs.
    """)


@app.command()
@handle_errors
def assess(
    algo: AlgoOpt,
    dataset: DatasetOpt = None,
    strategy: StrategyOpt = None,
    device: DeviceOpt = None,
    params: ParamsOpt = Path("params.yaml"),
    data_dir: DataDirOpt = Path("data"),
    runs_dir: RunsDirOpt = Path("runs"),
    alpha: AlphaOpt = None,
) -> None:
    """Score every retrained model on the test users -> runs/assess/<dataset>/<method>.json.

    Every share at once; random, ridge, fedavg and incfed are also scored on the training users.

    Continual methods also get the accuracy matrix and stream accuracy per context; IP methods
    on the datasets in assess.activation_datasets get activation densities per context.
    """
    from esnfed_stages.experiment import assess as assess_stage
    from esnfed_stages.params.experiment import experiment_params
    from esnfed_stages.params.load import load_params

    p = load_params(params)
    exp = experiment_params(p)
    for ds, method in _runs(p, dataset, algo, strategy, alpha):
        with trial_progress() as bar:
            doc = assess_stage.run(ds, method, exp, data_dir=data_dir, runs_dir=runs_dir,
                                   progress=bar_task(bar, f"assess {ds}/{method.id}"),
                                   device=device.value if device else None)
        _assess_table(ds, method, runs_dir, doc)


def _assess_table(ds: str, method: Method, runs_dir: Path, doc: dict) -> None:
    table = Table(title=f"assess {ds}/{method.id}: accuracy % (mean ± std over retrains)")
    for col in ("train users", "retrains", "test", "train", "communication up/down floats"):
        table.add_column(col, justify="right")
    for pct, row in doc["pcts"].items():
        comm = row["communication"]
        table.add_row(f"{pct}%", str(len(row["seeds"])), _mean_std(row["test_accuracy"]),
                      _mean_std(row["train_accuracy"]),
                      "-" if comm is None else f"{comm['up_floats']:,} / {comm['down_floats']:,}")
    console.print(table, highlight=False)
    console.print(f"wrote {assess_path(assess_dir(runs_dir), ds, method.id)}", highlight=False, markup=False,
                  soft_wrap=True)


def _mean_std(values: list[float] | None) -> str:
    if not values:
        return "-"
    mean = sum(values) / len(values)
    std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5
    return f"{100 * mean:.2f} ± {100 * std:.2f}"
