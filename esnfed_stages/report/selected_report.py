"""reports/tables/selected.md and .csv: the configuration model selection chose per dataset, method
and share (runs/select/<dataset>/<method>/<pct>/best.json; the IncFed paper prints its own in
Tables III-IV, the Decentralized Plasticity paper reads its results through the selected σ), with
the λ each retrain solved with (the assess file's ``lambda``) and the validation score."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from esnfed_core.errors import DataError
from esnfed_core.method import METHODS, Method
from esnfed_core.quote import quote
from esnfed_core.vocabulary import papers_first
from esnfed_stages.report.table_specs import dataset_label
from esnfed_core.vocabulary import PCTS
from esnfed_stages.params.experiment import BudgetSpec
from esnfed_stages.layout import best_under
from esnfed_stages.experiment.best import check_best
from esnfed_stages.report.tables import NA, NOT_APPLICABLE, to_csv
from esnfed_stages.report.ttest import Inputs
from esnfed_stages.layout import SELECT_DIR  # the select stage's outputs (report --select-dir)

NAME = "selected"

# The searched hyperparameters as the Markdown heads them (config keys of best.json), in order.
HYPERPARAMETERS = (("units", "N"), ("spectral_radius", "ρ"), ("leak", "leak"), ("input_scaling", "input scaling"),
                   ("input_connectivity", "input connectivity (%)"),
                   ("recurrent_connectivity", "recurrent connectivity (%)"), ("layers", "layers"), ("sigma", "σ"),
                   ("rounds", "rounds"), ("local_epochs", "local epochs"), ("budget", "budget per context"))
# A sparse reservoir's connectivity (optional keys): a column only where some selected config has it,
# so a run of dense reservoirs writes the table it always did.
SPARSE = ("input_connectivity", "recurrent_connectivity")
DENSE = 100  # the connectivity (%) of a config without the key: every entry nonzero
CSV_COLUMNS = ("dataset", "method", "pct", *(k for k, _ in HYPERPARAMETERS), "mu", "eta", "lambda_selection",
               "lambda_retrains", "lambda_rule", "validation_score", "trial", "n_trials", "seed")
# How each retrain's λ was chosen (the CSV's lambda_rule): retrain.lambda select / frozen, or the
# continual methods' fixed continual.lambda.
LAMBDA_RULES = {"select": ("validation", "chosen again on the validation users for each retrain from readout.lambdas "
                           "(retrain.lambda: select, the authors' retraining)"),
                "frozen": ("selection", "the selected trial's λ, kept for every retrain (retrain.lambda: frozen)"),
                "fixed": ("fixed", "continual.lambda, fixed (not searched)")}


@dataclass(frozen=True)
class Selected:
    """One share's selection (``best``: its best.json, None where missing) and the λ of its
    retrains (None without an assess file)."""

    dataset: str
    method: str
    pct: str
    best: Mapping[str, Any] | None
    lambdas: tuple[float, ...] | None


def table_name(dataset: str | None = None) -> str:
    """selected (the papers' datasets) or <dataset>-selected (one of your own, so the papers' table
    stays as it is whatever else is declared, as <dataset>-continual-metrics beside continual-metrics)."""
    return NAME if dataset is None else f"{dataset}-{NAME}"


def methods(needed: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (dataset, method) the table lists: those of the tables but the random baseline (no
    hyperparameters), the papers' datasets first, each dataset's methods in METHODS order."""
    rank = {m: i for i, m in enumerate(METHODS)}
    order = papers_first([ds for ds, _ in needed])
    return [(ds, m) for d in order for ds, m in sorted(needed, key=lambda k: rank.get(k[1], len(rank)))
            if ds == d and not Method.parse(m).baseline]


def _score(path: Path, best: Mapping[str, Any]) -> None:
    v = best.get("score")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v <= 1:
        raise DataError(f"{path}: score: expected the validation score, a fraction in [0, 1], got {quote(v)}")


def _check_retrained_from(path: Path, best: Mapping[str, Any], method: Method, inputs: Inputs, ds: str,
                          pct: str) -> tuple[float, ...] | None:
    """The λ of each retrain of the share (the assess file's ``lambda``), after checking that the
    models were retrained from this selection (the hyperparameters the assess file's ``config``
    records are best.json's): else one DataError naming both files and what to rerun."""
    doc = inputs.docs.get((ds, method.id))
    entry = doc["pcts"].get(pct) if doc is not None else None
    if not isinstance(entry, Mapping):
        return None
    assessed = entry.get("config")
    if isinstance(assessed, Mapping):
        differ = [k for k in method.config_keys if k in assessed and assessed[k] != best["config"].get(k)]
        differ += [k for k in method.optional_keys if assessed.get(k) != best["config"].get(k)]
        if differ:
            raise DataError(f"{inputs.paths[(ds, method.id)]}: pcts.{pct}.config.{differ[0]} is "
                            f"{quote(assessed.get(differ[0]))} but {path} selected {quote(best['config'].get(differ[0]))}: "
                            f"rerun `esnfed retrain --dataset {ds} {method.cli_options}` and assess")
    lam = entry.get("lambda")
    if not isinstance(lam, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in lam):
        return None
    return tuple(float(v) for v in lam)


def load(select_dir: str | Path, needed: Sequence[tuple[str, str]], inputs: Inputs, budget: BudgetSpec | None,
         allow_missing: bool = False) -> tuple[list[Selected], list[Path]]:
    """Every share's best.json of ``methods(needed)`` under ``select_dir``, checked as retrain checks
    it (best.check_best: params.yaml's budget, the hyperparameters' ranges) and against the assess
    file read (``inputs``); a missing one is an error naming it and the select to run, unless
    ``allow_missing`` (its row n/a, the path returned)."""
    out, missing = [], []
    for ds, m in methods(needed):
        method = Method.parse(m)
        for pct in PCTS:
            path = best_under(select_dir, ds, m, pct)
            if allow_missing and not path.exists() and not path.is_symlink():
                missing.append(path)
                out.append(Selected(ds, m, pct, None, None))
                continue
            best = check_best(path, ds, method, pct, budget)
            _score(path, best)
            out.append(Selected(ds, m, pct, best, _check_retrained_from(path, best, method, inputs, ds, pct)))
    return out, missing


def lambda_rule(method: str, retrain_lambda: str | None) -> str | None:
    """The key of LAMBDA_RULES for ``method`` (None: params.yaml names no retrain.lambda)."""
    return "fixed" if Method.parse(method).continual else retrain_lambda


def _num(v: Any) -> str:
    return f"{v:g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def _lambdas(values: tuple[float, ...] | None) -> str:
    if not values:
        return NA
    if len(set(values)) == 1:
        return f"{_num(values[0])} (all {len(values)})"
    return ", ".join(map(_num, values))


def rows(selected: Sequence[Selected], mu: float | None, eta: float | None,
         retrain_lambda: str | None) -> list[dict[str, Any]]:
    """The CSV rows: a missing value (a key the method does not search, or a missing input) None."""
    out = []
    for s in selected:
        method = Method.parse(s.method)
        row: dict[str, Any] = {"dataset": s.dataset, "method": s.method, "pct": s.pct}
        if s.best is not None:
            cfg = s.best["config"]
            row.update({k: cfg.get(k) for k, _ in HYPERPARAMETERS})
            row.update(mu=mu if method.uses_ip else None, eta=eta if method.uses_ip else None,
                       lambda_selection=cfg.get("lambda"), validation_score=100.0 * float(s.best["score"]),
                       trial=s.best.get("trial"), n_trials=s.best.get("n_trials"), seed=s.best.get("seed"))
            rule = lambda_rule(s.method, retrain_lambda)
            row["lambda_rule"] = LAMBDA_RULES[rule][0] if rule in LAMBDA_RULES else None
        row["lambda_retrains"] = ";".join(map(_num, s.lambdas)) if s.lambdas else None
        out.append(row)
    return out


def render(selected: Sequence[Selected], header: Sequence[str], mu: float | None, eta: float | None,
           retrain_lambda: str | None, footer: Sequence[str] = (), dataset: str | None = None) -> tuple[str, str]:
    """(selected.md, selected.csv): a table per dataset, a row per method and share; the header's
    lines, then what the columns mean, then ``footer``'s (missing inputs, date); ``dataset``: the
    table of one of your own (table_name)."""
    table = rows(selected, mu, eta, retrain_lambda)
    sparse = [k for k in SPARSE if any(r.get(k) is not None for r in table)]
    columns = tuple(c for c in CSV_COLUMNS if c not in SPARSE or c in sparse)
    for r, s in zip(table, selected):  # beside a sparse selection, a config without the key is dense
        if s.best is not None:
            r.update({k: DENSE for k in sparse if r.get(k) is None})
    rules = [r for r in ("select", "frozen") if r == retrain_lambda] + ["fixed"]
    lines = [f"# {table_name(dataset)}: The selected hyperparameters per dataset, method and share", ""]
    lines += [f"- {h}" for h in header]
    lines += [f"- μ = {_num(mu) if mu is not None else NA}, η = {_num(eta) if eta is not None else NA} for every IP "
              "method (params.yaml plasticity: fixed, not searched; CSV: mu, eta); rounds = IP epochs (ip) or FedIP "
              "rounds (fedip); local epochs = FedIP's per round; budget per context = the IP epochs (CLIP) or FedIP "
              "rounds (FedCLIP) at each context (joint: early stopping, no budget)",
              "- λ (selection): the selected trial's λ (best.json config.lambda); λ (retrains): the λ each retrain "
              "solved with (the assess file's `lambda`): stationary ESN methods "
              + (LAMBDA_RULES[retrain_lambda][1] if retrain_lambda in LAMBDA_RULES else "(params.yaml names no "
                 "retrain.lambda)") + f"; continual methods {LAMBDA_RULES['fixed'][1]} (CSV: lambda_rule "
              + ", ".join(LAMBDA_RULES[r][0] for r in rules) + ")",
              "- Validation score: the selected trial's score on the validation users, ×100: accuracy with the best λ "
              "(stationary), mean stream accuracy over the contexts (CLIP), stream accuracy after the last context "
              "(FedCLIP); trial: the selected trial's index, from 0, of the n searched (CSV: trial, n_trials, seed)",
              f"- {NOT_APPLICABLE}: not a hyperparameter of the method; n/a: a missing input"]
    if sparse:  # only where a selected config has it: a dense run's table is unchanged
        lines += [f"- connectivity (%): the share of W_in's (input) or Ŵ's (recurrent) entries that are nonzero, as "
                  f"the IncFed paper's Tables III-IV print it (docs/protocol.md §2); {DENSE}: dense, the default; "
                  f"{NOT_APPLICABLE} where no selected config of the dataset is sparse"]
    lines += [f"- {h}" for h in footer]
    for ds in dict.fromkeys(r["dataset"] for r in table):
        mine = [r for r in table if r["dataset"] == ds]
        shown = [(k, h) for k, h in HYPERPARAMETERS if any(r.get(k) is not None for r in mine)]
        head = ["method", "train users", *(h for _, h in shown), "λ (selection)", "λ (retrains)", "validation (%)",
                "trial"]
        lines += ["", f"## {dataset_label(ds)}", "", "| " + " | ".join(head) + " |",
                  "|" + "|".join(["---", "---"] + ["---:"] * (len(head) - 2)) + "|"]
        for r, s in zip(mine, [s for s in selected if s.dataset == ds]):
            keys = Method.parse(r["method"]).config_keys
            if s.best is None:
                cells = [NA] * (len(shown) + 4)
            else:
                cells = [_num(r[k]) if r.get(k) is not None else (NA if k in keys else NOT_APPLICABLE) for k, _ in shown]
                cells += [_num(r["lambda_selection"]) if r["lambda_selection"] is not None else NA,
                          _lambdas(s.lambdas), f"{r['validation_score']:.2f}",
                          f"{r['trial']} (of {r['n_trials']})" if r["trial"] is not None else NA]
            lines.append("| " + " | ".join([r["method"], f"{r['pct']}%", *cells]) + " |")
    return "\n".join(lines) + "\n", to_csv(table, columns)
