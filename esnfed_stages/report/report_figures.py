"""The report's figures and their DVC plots data, read from the assess documents (the drawing is
esnfed_stages/report/figures.py): stream accuracy per dataset and setting, the stationary methods' test
accuracy against the share of training users and the continual methods' accuracy matrices per
dataset, and the activation densities of the papers' Fig. 3 and 5 (pooled, per test user, after
each context, per training share).

Contexts are numbered from 0 everywhere (figures and plots data), as PROTOCOL §6 numbers them
("stream accuracy after context i ... contexts 0..i") and as the data stores them, with the
dataset's name of each where the partition file lists them (``context_label``: "3: lgwatch")."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from esnfed_core.errors import DataError
from esnfed_core.quote import failure, quote
from esnfed_stages.report.table_specs import dataset_label
from esnfed_core.vocabulary import PCTS, STRATEGIES
from esnfed_stages.report import figures
from esnfed_stages._io import read_json
from esnfed_stages.report.tables import to_csv
from esnfed_stages.report.ttest import Inputs
from esnfed_stages.layout import matrix_csv, stream_csv

# Continual method prefix and the stationary IP method of each setting (figures).
# The keys name the files (the papers' spelling); titles say the setting in the docs' prose.
SETTINGS = {"federated": ("fedclip", "fedip"), "centralized": ("clip", "ip")}
_SETTING_TITLE = {"federated": "federated", "centralized": "centralised"}
_PRETTY = {"fedclip": "FedCLIP", "clip": "CLIP", "fedip": "FedIP", "ip": "IP", "incfed": "IncFed",
           "fedavg": "FedAvg"}
# The stationary methods of the tables (the IncFed tables, FedIP's Tables 1 and 4, a user dataset's
# stationary tables), a panel per setting in the shares figure; random, the chance level, in each.
STATIONARY = {"federated": ("fedavg", "incfed", "fedip"), "centralized": ("ridge", "ip")}
REFERENCE = "random"
# The methods of the shares figure's plot CSV, a mean and a std column each: random, then each setting's.
SHARES_METHODS = tuple(dict.fromkeys(m for ms in STATIONARY.values() for m in (REFERENCE, *ms)))
ACTIVATION_DATASET = "wesad"
ACTIVATION_CONTEXTS = 5  # WESAD contexts (PROTOCOL §5): fixed columns for the DVC plots


def matrix_column(j: int) -> str:
    return f"on_context{j}"


ContextNames = Sequence[str] | None  # a dataset's context names in context order, None: unknown


def context_names(data_dir: str | Path, dataset: str) -> list[str] | None:
    """The names of ``dataset``'s contexts, in context order (``context_names`` of
    data/partitions/<dataset>.json, copied from the processed manifest: HHAR's devices, WESAD's
    runs, a user dataset's context values); None without a partition file (numbers only)."""
    path = Path(data_dir) / "partitions" / f"{dataset}.json"
    if not path.is_file():
        return None
    doc = read_json(path)
    names = doc.get("context_names") if isinstance(doc, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise DataError(f"{path}: context_names must be a list of names, got {quote(names)}; rerun "
                        f"`esnfed partition --dataset {dataset}`")
    return names


def method_label(method: str) -> str:
    """A method as the figures name it, in the papers' spelling the titles use: "FedIP",
    "FedCLIP naive" (the file ids fedip, fedclip-naive)."""
    prefix, _, strategy = method.partition("-")
    return f"{_PRETTY.get(prefix, prefix)} {strategy}" if strategy else _PRETTY.get(method, method)


def context_label(t: int, names: ContextNames) -> str:
    """Context ``t`` as every figure names it: its 0-based number, and its name when known."""
    return f"{t}: {names[t]}" if names is not None and t < len(names) else str(t)


def _stream(inputs: Inputs, ds: str, method: str, pct: str) -> np.ndarray | None:
    doc = inputs.docs.get((ds, method))
    if doc is None or not doc["pcts"][pct].get("stream_accuracy"):
        return None
    try:
        return np.asarray(doc["pcts"][pct]["stream_accuracy"], dtype=np.float64)
    except ValueError:
        raise DataError(f"{inputs.paths[(ds, method)]}: pcts.{pct}.stream_accuracy must be "
                        "retrains × contexts") from None


def _context_row(t: int, names: ContextNames) -> dict[str, Any]:
    """The first two columns of a plots CSV row of context ``t``: ``context`` its 0-based number,
    ``context_name`` its name (``names``; empty when unknown)."""
    return {"context": t, "context_name": names[t] if names is not None and t < len(names) else None}


def stream_figure_and_plots(inputs: Inputs, ds: str, setting: str, names: ContextNames = None
                            ) -> tuple[bytes, dict[str, str]]:
    """PNG of stream accuracy for one dataset × setting, a panel per share, and a DVC plots CSV per
    share as the panels (stream-<ds>-<setting>-<share>.csv, percent): a row per context
    (_context_row), a column per strategy (its mean over the retrains, the line drawn) and
    ``<strategy>_std`` (their population std, the band), after every mean. A share per file: DVC
    draws the lines of one plot apart by dash pattern, and has 7 of them; a plot per share compares
    the strategies, as each panel."""
    prefix = SETTINGS[setting][0]
    panels = [(pct, {s: _stream(inputs, ds, f"{prefix}-{s}", pct) for s in STRATEGIES})
              for pct in PCTS]
    n_ctx = max((a.shape[1] for _, lines in panels for a in lines.values() if a is not None),
                default=0)
    png = figures.stream_accuracy(
        f"{dataset_label(ds)} {_SETTING_TITLE[setting]}: stream accuracy after each context "
        f"({_PRETTY[prefix]}; mean ± std over retrains)", panels,
        [context_label(t, names) for t in range(n_ctx)])
    plots = {}
    for pct, lines in panels:
        rows = [{**_context_row(t, names),
                 **{k: v for s, acc in lines.items() if acc is not None and t < acc.shape[1]
                    for k, v in _mean_std_columns(s, acc[:, t] * 100.0).items()}} for t in range(n_ctx)]
        plots[stream_csv(ds, setting, pct)] = to_csv(rows, ["context", "context_name", *STRATEGIES,
                                                                  *(f"{s}_std" for s in STRATEGIES)])
    return png, plots


def _mean_std_columns(column: str, values: np.ndarray) -> dict[str, float]:
    """A plots CSV's ``column`` (the mean over the first axis, the retrains: the line a figure draws)
    and ``<column>_std`` (their population std: its band), rounded to 6 decimals; NaN (no data) stays
    NaN, an empty field."""
    mean, std = _spread(np.asarray(values, dtype=np.float64))
    return {column: round(float(mean), 6), f"{column}_std": round(float(std), 6)}


def shares_figure_and_plot(inputs: Inputs, ds: str) -> tuple[bytes, str]:
    """PNG of the stationary methods' test accuracy against the share of training users on ``ds``:
    a panel per setting (federated: FedAvg, IncFed, FedIP; centralised: ridge, IP), random dashed
    in both; the tables' scores, mean ± std over retrains. And its DVC plots CSV: a row per share
    (``share``), ``<method>_mean`` and ``<method>_std`` (population, percent) per method, empty
    where a share has no scores."""
    panels, rows = [], [{"share": int(pct)} for pct in PCTS]
    for setting, methods in STATIONARY.items():
        lines: dict[str, Any] = {}
        for m in (REFERENCE, *methods):
            points = [(int(pct), inputs.scores.get((ds, m, pct, "test"))) for pct in PCTS]
            lines[method_label(m)] = points if any(v for _, v in points) else None
            for row, (_, v) in zip(rows, points):
                if v is not None and len(v):
                    acc = np.asarray(v, dtype=np.float64) * 100.0
                    row[f"{m}_mean"], row[f"{m}_std"] = round(float(acc.mean()), 6), round(float(acc.std()), 6)
        panels.append((_SETTING_TITLE[setting], lines))
    png = figures.accuracy_by_share(
        f"{dataset_label(ds)}: test accuracy against the share of training users (stationary methods; "
        "mean ± std over retrains)", panels)
    return png, to_csv(rows, ["share", *(f"{m}_{stat}" for m in SHARES_METHODS for stat in ("mean", "std"))])


def matrices(inputs: Inputs, ds: str, method: str, pct: str) -> np.ndarray | None:
    """``method``'s accuracy matrices at share ``pct``, (retrains, contexts, contexts) fractions (NaN
    where a context has no test data), None without them; a malformed entry is a DataError naming
    the file and key."""
    doc = inputs.docs.get((ds, method))
    if doc is None or not doc["pcts"].get(pct, {}).get("accuracy_matrix"):
        return None
    try:
        mats = np.asarray(doc["pcts"][pct]["accuracy_matrix"], dtype=np.float64)  # null -> NaN
    except (TypeError, ValueError):
        mats = None
    if mats is None or mats.ndim != 3 or mats.shape[1] != mats.shape[2]:
        raise DataError(f"{inputs.paths[(ds, method)]}: pcts.{pct}.accuracy_matrix must be retrains × "
                        "contexts × contexts; rerun `esnfed assess`")
    return mats


def matrix_figure_and_plots(inputs: Inputs, ds: str, pct: str, names: ContextNames = None
                            ) -> tuple[bytes, dict[str, str]]:
    """PNG of the continual methods' accuracy matrices on ``ds`` at share ``pct`` (params.yaml
    ``report.matrix_pct``): a row per setting (FedCLIP, CLIP), a panel per strategy, the model after
    context i (rows) on the test data of context j (columns), mean over retrains; below the
    diagonal, the contexts already seen (what is forgotten), the diagonal each context just learnt.
    And a DVC plots CSV per method (accuracy-matrix-<ds>-<method>.csv, the same means in percent):
    a row per context i trained (_context_row), ``on_context<j>`` the accuracy on context j's test
    data, empty where it has none or the method no matrices; a line per context j, which falls
    after context j where the model forgets it; after them ``on_context<j>_std``, the population std
    over the retrains."""
    methods = [[f"{SETTINGS[setting][0]}-{s}" for s in STRATEGIES] for setting in SETTINGS]
    stacks = {m: matrices(inputs, ds, m, pct) for row in methods for m in row}
    rows = [[(m, None if stacks[m] is None else stacks[m].mean(axis=0)) for m in row] for row in methods]
    n_ctx = max((m.shape[0] for row in rows for _, m in row if m is not None), default=0)
    png = figures.accuracy_matrices(
        f"{dataset_label(ds)}: accuracy of the model after each context (rows) on the test data of each "
        f"context (columns), {pct}% training users (continual methods; mean over retrains; below the "
        "diagonal: the contexts seen before, where forgetting shows)",
        [[(method_label(m), matrix) for m, matrix in row] for row in rows],
        [context_label(t, names) for t in range(n_ctx)])
    columns = ["context", "context_name", *(matrix_column(j) for j in range(n_ctx)),
               *(f"{matrix_column(j)}_std" for j in range(n_ctx))]
    plots = {}
    for m, stack in stacks.items():
        plots[matrix_csv(ds, m)] = to_csv(
            [{**_context_row(i, names),
              **({k: v for j in range(stack.shape[2])
                  for k, v in _mean_std_columns(matrix_column(j), stack[:, i, j] * 100.0).items()}
                 if stack is not None and i < stack.shape[1] else {})} for i in range(n_ctx)], columns)
    return png, plots


@dataclass(frozen=True)
class _Activation:
    """The activation densities of one assess file and share (see assess.py), as arrays."""

    edges: np.ndarray
    users: list[str]
    pooled: np.ndarray  # (retrains, models, contexts, bins)
    per_user: np.ndarray  # (retrains, models, users, contexts, bins)
    target: tuple[float, float] | None = None  # the IP target's (μ, σ); None: a file without it

    def targets(self, line: int | None = None) -> list[figures.Target]:
        """The IP target as a density panel draws it (none without one)."""
        return [] if self.target is None else [(*self.target, line)]


def _activation(inputs: Inputs, method: str, pct: str) -> _Activation | None:
    doc = inputs.docs.get((ACTIVATION_DATASET, method))
    act = doc["pcts"][pct].get("activation") if doc else None
    if not act:
        return None
    where = f"{inputs.paths[(ACTIVATION_DATASET, method)]}: pcts.{pct}.activation"
    try:
        edges = np.asarray(act["edges"], dtype=np.float64)
        pooled = np.asarray(act["density"], dtype=np.float64)  # null (no window) -> NaN
        per_user = np.asarray(act["user_density"], dtype=np.float64)
        users = [str(u) for u in act["users"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{where}: expected edges, users, density [retrain][model][context][bin] "
                        f"and user_density [retrain][model][user][context][bin] ({failure(exc)}); rerun "
                        "`esnfed assess`") from None
    bins = edges.size - 1
    if pooled.ndim != 4 or pooled.shape[-1] != bins or per_user.ndim != 5 \
            or per_user.shape[-1] != bins or per_user.shape[2] != len(users) \
            or per_user.shape[:2] != pooled.shape[:2] or per_user.shape[3] != pooled.shape[2]:
        raise DataError(f"{where}: density {pooled.shape} / user_density {per_user.shape} do not fit "
                        f"{edges.size} edges and {len(users)} users")
    return _Activation(edges, users, pooled, per_user, ip_target(act, where))


def ip_target(act: dict[str, Any], where: str) -> tuple[float, float] | None:
    """``target`` of an assess file's activation entry (``where`` names it): the IP target's (μ, σ),
    σ > 0; None for a file written before it was recorded; else a DataError naming the key."""
    target = act.get("target")
    if target is None:
        return None
    try:
        mu, sigma = float(target["mu"]), float(target["sigma"])
    except (KeyError, TypeError, ValueError):
        mu = sigma = float("nan")
    if not (np.isfinite(mu) and np.isfinite(sigma) and sigma > 0):
        raise DataError(f"{where}.target: expected {{mu: a number, sigma: a number > 0}}, got {quote(target)}; "
                        "rerun `esnfed assess`")
    return mu, sigma


def _spread(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and population std over the first axis (retrains)."""
    return values.mean(axis=0), values.std(axis=0)


def _context_lines(dens: np.ndarray, names: ContextNames) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """A line per context from (retrains, contexts, bins)."""
    return [(f"context {context_label(t, names)}", *_spread(dens[:, t])) for t in range(dens.shape[1])]


def activation_figure_and_plots(inputs: Inputs, setting: str, pct: str, names: ContextNames = None
                                ) -> tuple[bytes, dict[str, str]]:
    """The pooled figure: one panel per method, the final reservoir's density per context on the
    test users together (mean ± std over retrains), and one DVC plots CSV per method (column
    context<t>: the mean density on context t, numbered from 0 as in every figure; after them
    context<t>_std, the population std over the retrains)."""
    prefix, stationary = SETTINGS[setting]
    methods = [stationary] + [f"{prefix}-{s}" for s in STRATEGIES]
    cells, targets, plots, edges = [], [], {}, None
    columns = ["value", *(f"context{t}" for t in range(ACTIVATION_CONTEXTS)),
               *(f"context{t}_std" for t in range(ACTIVATION_CONTEXTS))]
    for m in methods:
        act = _activation(inputs, m, pct)
        targets.append([] if act is None else act.targets())
        if act is None:
            cells.append(None)
            continue
        edges = act.edges
        lines = _context_lines(act.pooled[:, -1], names)
        cells.append(lines)
        centres = (edges[:-1] + edges[1:]) / 2
        rows = [{"value": round(float(c), 6),
                 **{f"context{t}": round(float(mean[i]), 6) for t, (_, mean, _) in enumerate(lines)},
                 **{f"context{t}_std": round(float(std[i]), 6) for t, (_, _, std) in enumerate(lines)}}
                for i, c in enumerate(centres)]
        plots[f"activation-{ACTIVATION_DATASET}-{m}.csv"] = to_csv(rows, columns)
    png = figures.density_grid(
        f"{dataset_label(ACTIVATION_DATASET)} {_SETTING_TITLE[setting]}: activation density per context of the trained "
        f"reservoir (test users pooled, {pct}% training users; mean ± std over retrains)",
        edges, [""], [method_label(m) for m in methods], [cells], [targets])
    return png, plots


def activation_users_figure(inputs: Inputs, setting: str, names: ContextNames = None) -> bytes:
    """The papers' Fig. 3: one panel per test user (columns) and training share (rows), the
    trained stationary IP reservoir's density per context, mean ± std over retrains."""
    stationary = SETTINGS[setting][1]
    acts = {pct: _activation(inputs, stationary, pct) for pct in PCTS}
    users = next((a.users for a in acts.values() if a is not None), [])
    edges = next((a.edges for a in acts.values() if a is not None), None)
    cells = []
    for pct in PCTS:
        a = acts[pct]
        cells.append([None if a is None or u not in a.users else
                      _context_lines(a.per_user[:, -1, a.users.index(u)], names) for u in users] or [None])
    targets = [[[] if acts[pct] is None else acts[pct].targets() for _ in row] for pct, row in zip(PCTS, cells)]
    return figures.density_grid(
        f"{dataset_label(ACTIVATION_DATASET)} {_SETTING_TITLE[setting]}: activation density on each test user "
        f"({method_label(stationary)}; a row per share of training users; mean ± std over retrains)", edges,
        [f"{pct}% training users" for pct in PCTS], [f"test user {u}" for u in users] or ["test users"], cells,
        targets)


def activation_contexts_figure(inputs: Inputs, setting: str, pct: str, names: ContextNames = None) -> bytes:
    """The papers' Fig. 5 (right): the continual reservoir after each context (lines), on the test
    data of each context (columns), one row per strategy; test users pooled, mean ± std."""
    prefix = SETTINGS[setting][0]
    acts = {s: _activation(inputs, f"{prefix}-{s}", pct) for s in STRATEGIES}
    n_ctx = max((a.pooled.shape[2] for a in acts.values() if a is not None), default=1)
    edges = next((a.edges for a in acts.values() if a is not None), None)
    cells = []
    for s in STRATEGIES:
        a = acts[s]
        if a is None:
            cells.append([None] * n_ctx)
            continue
        cells.append([[(f"after context {context_label(i, names)}", *_spread(a.pooled[:, i, j]))
                       for i in range(a.pooled.shape[1])] for j in range(a.pooled.shape[2])])
    targets = [[[] if acts[s] is None else acts[s].targets()] * len(row) for s, row in zip(STRATEGIES, cells)]
    return figures.density_grid(
        f"{dataset_label(ACTIVATION_DATASET)} {_SETTING_TITLE[setting]}: activation density after each context "
        f"({_PRETTY[prefix]}, {pct}% training users; columns: test data of each context)", edges,
        [method_label(f"{prefix}-{s}") for s in STRATEGIES],
        [f"data of context {context_label(j, names)}" for j in range(n_ctx)], cells, targets)


def activation_shares_figure(inputs: Inputs, setting: str, names: ContextNames = None) -> bytes:
    """The papers' Fig. 5 (left): the final continual reservoir on the last context's test data,
    a line per training share, one panel per strategy; mean ± std over retrains. A share without
    densities keeps its place (and colour) as an empty "n/a" line, so a share has one colour in
    every panel."""
    prefix = SETTINGS[setting][0]
    acts = {(s, pct): _activation(inputs, f"{prefix}-{s}", pct) for s in STRATEGIES for pct in PCTS}
    found = [a for a in acts.values() if a is not None]
    edges = found[0].edges if found else None
    last = max((a.pooled.shape[2] for a in found), default=0) - 1
    cells, targets = [], []
    for s in STRATEGIES:
        lines = []
        for pct in PCTS:
            a = acts[(s, pct)]
            if a is not None:
                lines.append((f"{pct}% training users", *_spread(a.pooled[:, -1, -1])))
            elif edges is not None:
                lines.append((f"{pct}% training users (n/a)", np.full(edges.size - 1, np.nan), None))
        cells.append(lines if any(acts[(s, pct)] is not None for pct in PCTS) else None)
        # each share's target in its line's colour: the shares' selected σ differ
        targets.append([t for i, pct in enumerate(PCTS) if acts[(s, pct)] is not None
                        for t in acts[(s, pct)].targets(i)])
    on = f"the test data of the last context, {context_label(last, names)}" if found else "the last context"
    return figures.density_grid(
        f"{dataset_label(ACTIVATION_DATASET)} {_SETTING_TITLE[setting]}: activation density on {on} "
        f"({_PRETTY[prefix]}, final reservoir; mean ± std over retrains)", edges, [""],
        [method_label(f"{prefix}-{s}") for s in STRATEGIES], [cells], [targets])
