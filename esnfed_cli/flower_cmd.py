"""`esnfed flower`: apps (incfed | fedip | fedavg | fedclip-naive | fedclip-replay | fedclip-joint, --secagg) in
Flower's simulation engine beside the in-process pipeline's trial: test accuracy and bytes ->
runs/flower-manual/<name>.json by default (one per app; several stationary --app run in one Flower
process and Ray session, each FedCLIP app in its own); dvc.yaml's flower stage writes
runs/flower/<dataset>/, which `esnfed flower-table` reads by default."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from esnfed_cli._common import bar_task, console, declared_dataset, handle_errors, trial_progress
from esnfed_cli.data_cmds import DeclaredOpt
from esnfed_cli.app import app
from esnfed_core.vocabulary import Share
from esnfed_stages import layout


@app.command()
@handle_errors
def flower(
    dataset: DeclaredOpt,
    flower_apps: Annotated[list[str] | None, typer.Option(
        "--app", metavar="[" + "|".join(layout.FLOWER_APPS + layout.FEDCLIP_APPS) + "]",
        help="The app: " + ", ".join(layout.FLOWER_APPS + layout.FEDCLIP_APPS) + " (FedCLIP: "
        "per-context models and stream accuracy beside the continual trial's; joint: the validation users are "
        "evaluation nodes); repeat it for several (default incfed).")] = None,
    secagg: Annotated[bool, typer.Option("--secagg", help="Through Flower's SecAgg+ (incfed, fedip, "
                                                           "fedclip-naive, fedclip-replay; not fedclip-joint).")] = False,
    plain_and_secagg: Annotated[bool, typer.Option("--plain-and-secagg", help="Each app plain, then through "
                                                   "SecAgg+ (the apps that have it).")] = False,
    pct: Annotated[Share, typer.Option("--pct", help="The training share of the selected config (one share a "
                                       "call: 25, 50, 75 or 100).")] = Share.p100,
    params: Annotated[Path, typer.Option("--params", help="The params file (budgets.*, readout.*, "
                                         "plasticity.*, seed; federated.client_fraction: the share "
                                         "of clients each FedIP/FedCLIP round samples, at least 3 "
                                         "a round with --secagg; with --secagg --epsilon privacy.amplification "
                                         "must be none).")] = Path("params.yaml"),
    data_dir: Annotated[Path, typer.Option("--data-dir", help="Root of processed/ and partitions/.")] = Path("data"),
    runs_dir: Annotated[Path, typer.Option("--runs-dir", help="Root of select/ (best.json).")] = Path("runs"),
    out_dir: Annotated[Path, typer.Option("--out-dir", help="Where the JSONs go. The default is outside "
                                          "runs/flower, the flower stage's folder that the report depends on "
                                          "(dvc.yaml passes runs/flower/<dataset>). A run whose IP rounds sample "
                                          "federated.client_fraction f < 1 is named with -f<f>.")] = layout.FLOWER_MANUAL_DIR,
    flower_python: Annotated[Optional[Path], typer.Option("--flower-python", help="The Flower environment's "
                             "interpreter. Default: .venv-flower/bin/python in the current folder (`esnfed "
                             "flower-env` builds it there), else the source checkout's (`make flower-env`).",
                             show_default=False)] = None,
    epsilon: Annotated[float | None, typer.Option("--epsilon", help="Differential privacy (incfed, fedip; "
                       "fedavg plain: DP-FedAvg, central): user-level (ε, δ) with δ, clip, ip_clip and fedavg_clip "
                       "from params.yaml privacy, noise scale from the dp-accounting PLD accountant; inf: no noise. "
                       "The result (…-eps<ε>-<pct>.json) is beside "
                       "the in-process private trial of the same seed and records mechanism, ε, δ, σ, clip and "
                       "accountant (docs/privacy.md, \"Flower apps\"). Without it: no DP.")] = None,
    noise: Annotated[str | None, typer.Option("--noise", metavar="[central|distributed]", help="With --epsilon: "
                     "central = the trusted server adds N(0, σ²) to the sum (plain apps); distributed = each "
                     "client adds N(0, σ²/K_min), K_min SecAgg+'s threshold (the --secagg apps: no server sees a "
                     "sum before its noise). Default: central without --secagg, distributed with it.")] = None,
) -> None:
    """Run the selected config of each app in Flower's simulation engine beside the pipeline's trial.

    One SuperNode per training user; the pipeline's trial uses the same seeds. Test accuracy,
    readout difference and the bytes Flower sent per client -> <out-dir>/<name>.json. Several
    stationary apps share one Flower process and Ray session, and plain and SecAgg+ one trial fit;
    each FedCLIP app runs on its own after them. --epsilon: IncFed and FedIP under differential
    privacy (central noise on the plain apps, distributed under SecAgg+), FedAvg as DP-FedAvg
    (plain app, central noise)."""
    from esnfed_stages.report.flower_table import fraction_text
    from esnfed_stages.studies import flower as flower_stage
    from esnfed_stages.studies import flower_fedclip
    from esnfed_stages.params.load import load_params

    if secagg and plain_and_secagg:
        raise ValueError("--secagg and --plain-and-secagg: give one of them")
    if noise is not None and epsilon is None:
        raise ValueError("--noise: give --epsilon too (without it no noise is added)")
    names = flower_apps or ["incfed"]
    pairs = [(a, secagg) for a in names]
    if plain_and_secagg:
        pairs = [(a, s) for a in names for s in (False, True) if not s or a in flower_stage.SECAGG_APPS]
    pct = pct.value
    flower_python = layout.flower_python() if flower_python is None else flower_python
    flower_stage.check_args(pairs, pct, flower_python)  # every pair, before anything runs
    dp = None if epsilon is None else flower_stage.DPRequest(epsilon, noise)
    if dp is not None:
        flower_stage.check_dp(pairs, dp)
    loaded = load_params(params)
    dataset = declared_dataset(loaded, dataset)  # the papers' or your own (dvc.yaml: study_datasets)
    where = dict(data_dir=data_dir, runs_dir=runs_dir, out_dir=out_dir, python=flower_python)
    stationary = [(a, s) for a, s in pairs if a not in flower_stage.FEDCLIP_APPS]
    with trial_progress() as bar:  # the steps: each pipeline fit, each Flower simulation
        update, before = bar_task(bar, f"flower {dataset}"), 0
        total = flower_stage.progress_steps(pairs)

        def steps(done: int, _of: int) -> None:
            update(before + done, total)

        docs = (flower_stage.run_many(dataset, stationary, pct, loaded, **where, progress=steps, dp=dp)
                if stationary else [])
        before = flower_stage.progress_steps(stationary)
        for a, s in pairs:
            if a in flower_stage.FEDCLIP_APPS:
                docs.append(flower_fedclip.run(dataset, a, s, pct, loaded, **where, progress=steps))
                before += flower_stage.progress_steps([(a, s)])
    for doc in docs:
        f, p = doc["flower"], doc["pipeline"]
        d = doc.get("dp")
        dp_text = f" ε = {d['epsilon']} ({d['noise']}, σ = {d['sigma']:.3g})" if d else ""
        sampled = fraction_text(doc)  # federated.client_fraction < 1: "f = 0.5"
        console.print(f"{doc['dataset']} {doc['app']}{' + SecAgg+' if doc['secagg'] else ''}"
                      f"{' ' + sampled if sampled else ''}{dp_text} {doc['pct']} %: "
                      f"test accuracy {100 * f['test_accuracy']:.2f} (pipeline {100 * p['test_accuracy']:.2f}), "
                      f"readout difference {f['readout_relative_difference']:.2g}, "
                      f"{f['bytes']['up_per_client']['mean']:.0f} B up / "
                      f"{f['bytes']['down_per_client']['mean']:.0f} B down per client",
                      highlight=False, markup=False, soft_wrap=True)


TABLE_PATH = Path("runs/flower-table.md")  # beside runs/flower, not in it: the report's dependency


@app.command("flower-table")
@handle_errors
def flower_table(
    runs_dir: Annotated[Path, typer.Option("--flower-dir", "--runs-dir", help="Where esnfed flower wrote its JSONs: the "
                                           "folder's *.json and those of its sub-folders (the flower stage's "
                                           "runs/flower/<dataset>/); runs/flower-manual for `esnfed flower`'s "
                                           "default --out-dir (--runs-dir: its former name).")] = layout.FLOWER_DIR,
    out: Annotated[Path, typer.Option("--out", help="The Markdown table (outside runs/flower, which the report "
                                      "depends on).")] = TABLE_PATH,
) -> None:
    """The `esnfed flower` results as one Markdown table -> runs/flower-table.md.

    Accuracy beside the pipeline's, bytes per client beside the ledger's, SecAgg+ bytes by stage
    with the masked vector's formula."""
    from esnfed_stages.report.flower_table import load_docs, render_table
    from esnfed_stages._io import write_text

    docs = load_docs(runs_dir, nested=True)
    if not docs:
        raise ValueError(f"{runs_dir}: no esnfed flower results in {runs_dir / '*.json'} or {runs_dir / '*' / '*.json'} "
                         f"(run `esnfed flower` or `dvc repro flower` first)")
    write_text(out, render_table(docs))
    console.print(f"{out}: {len(docs)} runs", highlight=False, markup=False, soft_wrap=True)


@app.command("flower-export")
@handle_errors
def flower_export(
    dataset: DeclaredOpt,
    flower_app: Annotated[str, typer.Option("--app", metavar="[incfed|fedip|fedavg|fedclip-naive|fedclip-replay]",
                                            help="The app to run with `flwr run esnfed_flower/app`: incfed, fedip, "
                                            "fedavg, fedclip-naive or fedclip-replay.")] = "incfed",
    secagg: Annotated[bool, typer.Option("--secagg", help="The run config of the SecAgg+ app (incfed, fedip, "
                                         "fedclip-naive, fedclip-replay).")] = False,
    pct: Annotated[Share, typer.Option("--pct", help="The training share of the selected config.")] = Share.p100,
    params: Annotated[Path, typer.Option("--params", help="The params file (budgets.*, readout.*, plasticity.*, "
                                         "seed).")] = Path("params.yaml"),
    data_dir: Annotated[Path, typer.Option("--data-dir", help="Root of processed/ and partitions/.")] = Path("data"),
    runs_dir: Annotated[Path, typer.Option("--runs-dir", help="Root of select/ (best.json).")] = Path("runs"),
    out: Annotated[Path, typer.Option("--out", help="The folder to write (replaced as a whole when it "
                                      "exists): clients/, node-config.txt, run-config.toml, expected.json.")]
    = Path("runs/flower-export"),
) -> None:
    """Export one app's deployment inputs for Flower's own tooling (`flwr run`, flower-supernode).

    Per training user its data file and its --node-config line, the run config of the selected
    config (runs/select/.../best.json) and the pipeline's result of the same seed to compare
    with (docs/flower-deploy.md)."""
    from esnfed_stages.studies import flower_export as export_stage
    from esnfed_stages.params.load import load_params

    loaded = load_params(params)
    dataset = declared_dataset(loaded, dataset)
    doc = export_stage.export(dataset, flower_app, secagg, pct.value, loaded, out, data_dir=data_dir,
                              runs_dir=runs_dir)
    console.print(f"{out}: {doc['num-clients']} clients, {flower_app}{' + SecAgg+' if secagg else ''}, "
                  f"λ = {doc['lambda']:g}, pipeline test accuracy {100 * doc['pipeline_test_accuracy']:.2f}; "
                  f"run it with `flwr run esnfed_flower/app -c {out / 'run-config.toml'}`",
                  highlight=False, markup=False, soft_wrap=True)


@app.command("flower-env")
@handle_errors
def flower_env(
    folder: Annotated[Path, typer.Argument(metavar="DIR", help="The environment's folder: new, empty, or an "
                                           "environment to install into.")] = layout.FLOWER_ENV,
) -> None:
    """Build the Flower apps' environment in DIR (default .venv-flower, where `esnfed flower` and the
    flower stage look first): a virtual environment of this Python with flwr and the pins the apps
    were tested with, which clash with this package's own (a few minutes; pip's cache makes a
    rebuild quick). Run it once in a project folder before `dvc repro`.

    Example: esnfed flower-env
    """
    from esnfed_stages.studies.flower_env import build

    console.print(f"{folder}: installing flwr and the Flower apps' pinned requirements (pip; a few minutes)",
                  markup=False, highlight=False, soft_wrap=True)
    python = build(folder)
    console.print(f"{folder}: ready ({python})", markup=False, highlight=False, soft_wrap=True)
