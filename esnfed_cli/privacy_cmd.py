"""`esnfed privacy`: IncFed and FedIP (opt-in: DP-FedAvg, `--extra`; DP-FedIP at other client
fractions, `--sampling`) test accuracy under differential privacy, per ε."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from esnfed_cli._common import bar_task, console, declared_dataset, handle_errors, trial_progress
from esnfed_stages import layout
from esnfed_cli.app import app

DatasetsOpt = Annotated[Optional[list[str]], typer.Option(
    "--dataset", help="A dataset declared in params.yaml datasets (wesad, hhar, or your own); repeat "
    "--dataset for several. Default: every declared dataset (as dvc.yaml's privacy stages).",
    show_default=False)]


@app.command()
@handle_errors
def privacy(
    dataset: DatasetsOpt = None,
    params: Annotated[Path, typer.Option("--params", help="The params file to read (privacy.*: "
                                         "privacy.config public chooses the configs and clips on the validation "
                                         "users alone, select takes runs/select's and clip / ip_clip; "
                                         "budgets.*, readout.*, plasticity.*, seed; "
                                         "federated.client_fraction: FedIP's rounds sample, no amplification claimed; DP-FedCLIP "
                                         "needs 1 or federated.sampling_pool: roster).")] = Path("params.yaml"),
    data_dir: Annotated[Path, typer.Option("--data-dir", help="Root of processed/ and partitions/.")] = Path("data"),
    runs_dir: Annotated[Path, typer.Option("--runs-dir", help="Root of select/ (best.json; read under "
                                           "privacy.config: select and by --extra / --sampling).")] = Path("runs"),
    out_dir: Annotated[Path, typer.Option("--out-dir", help="Where <dataset>.json goes.")] =
    layout.PRIVACY_DIR,
    extra: Annotated[Optional[list[str]], typer.Option(
        "--extra", help="Instead of IncFed and FedIP, an opt-in method listed in params.yaml "
        "privacy.extra_methods (fedavg: DP-FedAvg) -> <out-dir>/extra/<dataset>/<method>.json; repeatable "
        "(dvc.yaml's privacy-extra stages run one each).", show_default=False)] = None,
    sampling: Annotated[Optional[list[str]], typer.Option(
        "--sampling", help="Instead of IncFed and FedIP, DP-FedIP at a client fraction listed in params.yaml "
        "privacy.sampling_study.fractions, as written there (0.5), under each accounting of "
        "privacy.sampling_study.amplification -> <out-dir>/sampling/<dataset>/<fraction>.json; repeatable "
        "(dvc.yaml's privacy-sampling stages run one each).", show_default=False)] = None,
) -> None:
    """Differential privacy: IncFed and FedIP retrained under the Gaussian mechanism -> runs/privacy/<dataset>.json.

    Each method's config and the clips come from privacy.config: public (the select stage's
    candidates scored on the validation users split by user, clip chosen likewise, ip_clip from
    their FedIP updates: no training user's data) or select (runs/select's best.json, clip and
    ip_clip as given). They are retrained once per ε of privacy.epsilons; `esnfed report` renders
    reports/tables/privacy.md/.csv and reports/figures/privacy.png."""
    from esnfed_stages.studies import privacy as privacy_stage
    from esnfed_stages.data._datasets import declared
    from esnfed_stages.params.experiment import experiment_params
    from esnfed_stages.params.load import load_params
    from esnfed_stages.params.privacy import privacy_params

    p = load_params(params)  # read once; each stage gets its sections as frozen objects
    names = [declared_dataset(p, d) for d in dict.fromkeys(dataset or [])] or list(declared(p))
    pp, exp = privacy_params(p), experiment_params(p)
    if extra and sampling:
        raise typer.BadParameter("give --extra or --sampling, not both", param_hint="--sampling")
    for ds in names:
        for fraction in dict.fromkeys(sampling or []):
            with trial_progress() as bar:
                doc = privacy_stage.run_sampling(ds, pp, exp, fraction, data_dir=data_dir, runs_dir=runs_dir,
                                                 out_dir=out_dir, progress=bar_task(bar, f"privacy {ds} f={fraction}"))
            _sampling_summary(ds, doc, layout.sampling_path(out_dir, ds, fraction))
        if sampling:
            continue
        for method in list(dict.fromkeys(extra or [])) or [None]:
            with trial_progress() as bar:
                doc = privacy_stage.run(ds, pp, exp, data_dir=data_dir, runs_dir=runs_dir, out_dir=out_dir,
                                        progress=bar_task(bar, f"privacy {ds}" + (f" {method}" if method else "")),
                                        extra=method)
            _summary(ds, doc, layout.privacy_path(out_dir, ds) if method is None
                     else layout.extra_path(out_dir, ds, method))


def _sampling_summary(ds: str, doc: dict, written: Path) -> None:
    table = Table(title=f"privacy {ds}: DP-FedIP at client fraction {doc['client_fraction']} "
                  f"(m = {doc['sample_size']} of {doc['n_users']} clients, user-level, δ = {doc['delta']:.4g}; "
                  f"simulation, seeded noise; {_configured(doc)})")
    table.add_column("accounting")
    eps = list(next(iter(doc["accountings"].values())))
    for e in eps:
        table.add_column(f"ε={e}", justify="right")
    for acc, cells in doc["accountings"].items():
        table.add_row(acc, *(_mean(cells[e]["test_accuracy"]) for e in eps))
    console.print(table, highlight=False)
    console.print(f"wrote {written}", highlight=False, markup=False, soft_wrap=True)


def _configured(doc: dict) -> str:
    """How the document's configuration was chosen (privacy.config), in a few words."""
    if doc["configuration"]["mode"] == "public":
        return f"configuration public: chosen on the validation users alone, clip {doc['clip']:g}, ip_clip {doc['ip_clip']:.4g}"
    return "configuration select: hyperparameters and clips chosen on the training users, not accounted"


def _mean(acc: list[float]) -> str:
    return f"{100 * sum(acc) / len(acc):.2f}"


def _summary(ds: str, doc: dict, written: Path) -> None:
    table = Table(title=f"privacy {ds} ({doc['relation']}-level, δ = {doc['delta']:.4g}, "
                  f"{doc['n_users']} users; {doc['accountant']}; simulation, seeded noise; {_configured(doc)})")
    table.add_column("method")
    eps = list(next(iter(doc["methods"].values()))["epsilons"])
    for e in eps:
        table.add_column(f"ε={e}", justify="right")
    for m, row in doc["methods"].items():
        table.add_row(m, *(_mean(row["epsilons"][e]["test_accuracy"]) for e in eps))
    console.print(table, highlight=False)
    console.print(f"wrote {written}", highlight=False, markup=False, soft_wrap=True)
