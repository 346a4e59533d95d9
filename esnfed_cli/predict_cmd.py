"""`esnfed predict`: a model saved by `esnfed retrain` applied to a processed folder, the
predictions written to CSV (esnfed_stages/experiment/predict.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from esnfed_cli._common import console, handle_errors
from esnfed_cli.app import app
from esnfed_stages.layout import DATA_DIR


@app.command()
@handle_errors
def predict(
    model: Annotated[Path, typer.Argument(
        help="A saved model: runs/models/<dataset>/<method>/<pct>/seed-<k>.json (or its .npz).")],
    folder: Annotated[Path, typer.Argument(
        help="A processed folder (manifest.json and <user>.npz, docs/data-contract.md), e.g. what `esnfed "
        "import` wrote for new recordings (with --unlabelled for recordings without labels).")],
    out: Annotated[Path, typer.Option(
        "--out", help="The per-window CSV to write: user, window, context, steps, label, predicted (the class "
        "predicted at most steps of the window), correct_steps (label and correct_steps empty for an unlabelled "
        "folder).")] = Path("predictions.csv"),
    steps: Annotated[Optional[Path], typer.Option(
        "--steps", help="Also write the per-step predictions to this CSV: user, window, step, label, "
        "predicted (default: no per-step file).")] = None,
    user: Annotated[Optional[list[str]], typer.Option(
        "--user", help="A user of the folder to predict; repeat for several. Default: every user of its "
        "manifest.", show_default=False)] = None,
    context: Annotated[Optional[int], typer.Option(
        "--context", min=0, help="Continual models (clip-*, fedclip-*) only: apply the model as it was after "
        "this context (0-based). Default: after the last context, the model assess scores.",
        show_default=False)] = None,
    client: Annotated[Optional[int], typer.Option(
        "--client", min=0, help="Heterogeneous local and align models only (a reservoir and readout per "
        "client): apply client K's (0-based, in the model's client order; required for them). The ensemble "
        "combines every client as assess does.", show_default=False)] = None,
    data_dir: Annotated[Path, typer.Option(
        "--data-dir", help="Data root holding processed/<dataset>/ of the dataset the model was trained on: "
        "the folder's feature names, window and classes must equal its manifest's.")] = DATA_DIR,
    batch_size: Annotated[int, typer.Option(
        "--batch-size", min=1, help="Windows run through the reservoir at a time (memory only).")] = 256,
) -> None:
    """Apply a model saved by `esnfed retrain` to a processed folder and write its predictions.

    Every method with a trained model: ridge, incfed, fedavg, ip, fedip, the deep ones, clip /
    fedclip under any strategy (the model after the last context unless --context says another),
    the ensemble (its clients combined by the model's heterogeneity.combine, as assess does), and
    local and align-α applied through one client's reservoir and readout (--client). The random
    baseline, which has no model, is refused. A folder whose feature names, window or classes differ from those of the
    data the model was trained on is refused in one line naming the file and field. New recordings
    without labels: import them with `esnfed import --unlabelled` (the same features, rate and
    window as the training data) and predict that folder. Both CSVs are written under a temporary
    name and renamed when complete.

    Example: esnfed predict runs/models/wesad/fedip/100/seed-0.json data/processed/wesad --user S2
    --out predictions.csv
    """
    from esnfed_stages.experiment import predict as predict_stage

    s = predict_stage.run(model, folder, out, users=user, context=context, client=client, steps_out=steps,
                          data_dir=data_dir, batch_size=batch_size)
    after = "" if s.context is None else f" (the model after context {s.context})"
    after += "" if s.client is None else f" (client {s.client})"
    console.print(f"{s.method}{after}: {s.windows} windows of {len(s.users)} users -> {s.out}"
                  + (f" and {s.steps_out}" if s.steps_out else "")
                  + (f"; {s.accuracy:.4f} of {s.steps} steps predicted as labelled" if s.accuracy is not None
                     else f"; {s.steps} steps, unlabelled"), highlight=False,
                  markup=False, soft_wrap=True)
