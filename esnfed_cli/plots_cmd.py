"""`esnfed dvc-plots`: the plot declarations of a declared dataset (yours: DVC cannot expand a
dvc.yaml's `plots` per params.yaml `datasets`), printed, or written into dvc-plots/dvc.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from esnfed_cli._common import console, dataset_option, handle_errors
from esnfed_cli.app import app
from esnfed_stages.layout import DVC_PLOTS_FILE, PARAMS_FILE


@app.command("dvc-plots")
@handle_errors
def dvc_plots(
    dataset: Annotated[list[str], typer.Option(
        "--dataset", help="A dataset of params.yaml datasets whose plots to declare, e.g. your own; repeat "
        "for several.")],
    write: Annotated[bool, typer.Option(
        "--write", help="Write the plots into --dvc-file instead of printing them: at the end of its plots, "
        "atomically (a temporary file renamed), once the result reads back with every other plot and the "
        "stages as they were. A block it wrote before for the dataset is replaced (run it again after the "
        "dataset's contexts, continual_datasets or study_datasets change); plots declared otherwise already "
        "are kept where they are the same (wesad, hhar and example as the repository ships them) and refused where "
        "they differ.")]
    = False,
    dvc_file: Annotated[Path, typer.Option(
        "--dvc-file", help="The dvc.yaml of plots --write edits (the plots name their CSVs relative to its "
        "folder; DVC collects every dvc.yaml of the project).")] = DVC_PLOTS_FILE,
    params: Annotated[Path, typer.Option(
        "--params", help="The params file to read: datasets (the dataset must be declared); continual_datasets "
        "(a continual dataset has stream and accuracy-matrix plots besides its test-accuracy plot); "
        "imports.<dataset>.contexts, or preprocess.<dataset> for the papers' (how many contexts: a line each "
        "in the accuracy-matrix plots); study_datasets, budget and heterogeneity.pcts (a study dataset has an "
        "alignment plot, a line per share the budget runs the heterogeneous methods on). Its folder is the "
        "project's, where the report writes reports/plots/.")] = PARAMS_FILE,
    data_dir: Annotated[Path, typer.Option(
        "--data-dir", help="Where <dir>/processed/<dataset>/manifest.json gives the contexts of a continual "
        "dataset of yours whose imports.<dataset>.contexts is not set (import it first).")] = Path("data"),
) -> None:
    """Declare a dataset's plots in dvc-plots/dvc.yaml (DVC cannot expand plots per params.yaml datasets).

    Prints, or with --write writes into dvc-plots/dvc.yaml, the plots of the CSVs `esnfed report` writes for the
    dataset into reports/plots/, as that file declares wesad's, hhar's and example's: its test accuracy
    against the share of training users; when it is in continual_datasets, its stream accuracy per
    setting and share and its accuracy matrix per continual method; when it is in study_datasets, align's
    test accuracy against α (heterogeneous-alpha-<dataset>: its columns of heterogeneous-alpha.csv, a
    line per share of heterogeneity.pcts for the budget). DVC tells at most 7 lines of a plot
    apart (7 dash patterns), so the matrix of more than 7 contexts is declared as several plots of its
    CSV of at most 7 lines each (accuracy-matrix-<dataset>-<method>-contexts-0-4, -contexts-5-9, ...).
    The printed block carries the comment lines --write finds: pasted into the file's plots, a later
    --write replaces it.

    Example: esnfed dvc-plots --dataset mystudy --write
    """
    from esnfed_stages.report import dvc_plots as plots_stage
    from esnfed_stages.data._datasets import check_declared
    from esnfed_stages.params.load import load_params

    p = load_params(params)
    names = [dataset_option(check_declared, p, name) for name in dict.fromkeys(dataset)]
    declared = {name: plots_stage.located(plots_stage.declared_plots(p, name, data_dir), params.parent, dvc_file)
                for name in names}
    if not write:
        for name, plots in declared.items():
            typer.echo(plots_stage.render(name, plots), nl=False)
        return
    for name, what in plots_stage.write_plots(dvc_file, declared).items():
        console.print(f"{dvc_file}: {name}: {what}", markup=False, highlight=False, soft_wrap=True)
