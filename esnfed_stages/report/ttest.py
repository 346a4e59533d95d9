"""The `ttest` stage: reads every runs/assess/<dataset>/<method>.json the tables need and writes
reports/ttest.json, the two-sided tests between the methods each table compares, and the tests of
the papers' claims across tables (federated against centralised: the same t-test; the spread of the
retrains: a test of equal variances, ``claims``).

Also the validated reader of the assess files, shared with the `report` stage.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from esnfed_core.data.paths import path_problem
from esnfed_core.errors import ConfigError, DataError
from esnfed_core.method import Method
from esnfed_core.quote import quote
from esnfed_core.stats import check_alpha, check_variance_test, check_variant, compare_pairs, ttest, variance_test
from esnfed_core.communication import check_communication
from esnfed_stages.report.cells import hetero_spec
from esnfed_stages.report.claims import MEAN_CLAIM, Claim, claim_groups, claim_specs
from esnfed_stages.report.table_specs import Scores, TableSpec, comparison_groups, required_inputs, table_specs
from esnfed_core.validation import ParameterError
from esnfed_core.vocabulary import DATASETS, PCTS
from esnfed_stages import provenance
from esnfed_stages.data._datasets import continual_declared, declared, study_declared
from esnfed_stages._io import output_lock, read_json, write_json
from esnfed_stages.params.experiment import BudgetSpec, budget_spec
from esnfed_stages.params.hetero import hetero_params
from esnfed_stages.layout import ASSESS_DIR, TTEST_PATH, assess_path
from esnfed_stages.params.sections import section


def hetero_table_methods(params: Mapping[str, Any]) -> tuple[str, ...]:
    """The heterogeneous table's methods when params.yaml has a ``heterogeneity`` section: local,
    ensemble, align at each α, and homogeneous IncFed (the reference: one shared reservoir); () without it."""
    if not isinstance(params, Mapping) or "heterogeneity" not in params:
        return ()
    return tuple(m.id for m in hetero_params(params).methods()) + ("incfed",)


# How a table's header names reports/ttest.json's variant (every table's, heterogeneous.md's too).
VARIANT_TEXT = {"welch": "Welch t-test (scipy.stats.ttest_ind, equal_var=False)",
                "student": "Student t-test (scipy.stats.ttest_ind, pooled variance)",
                "paired": "paired t-test (scipy.stats.ttest_rel; retrain k of both methods shares "
                          "its seed)"}
# How the claims section names reports/ttest.json's variance test (ttest.variance_test).
VARIANCE_TEXT = {"brown-forsythe": "Brown–Forsythe test (scipy.stats.levene, center='median')",
                 "levene": "Levene test (scipy.stats.levene, center='mean')"}
DEFAULT_VARIANCE_TEST = "brown-forsythe"  # the papers name none: the robust one (scipy's default centre)

RULE = ("two-sided t-test of each pair the table's paper compares (a = the proposed method, b = a "
        "baseline) in every group (table, dataset, share, column); the best = the highest mean of "
        "the tested methods; bold = the best, significant (p <= alpha) in every test it is part of; "
        "italic = otherwise the best and every method not significantly different from it; a "
        "method not tested against the best has no mark. paired: score k of a against score k of "
        "b (retrain k shares its reservoir seed across methods). Fewer than 2 scores: no test (p "
        "null). Zero variance in both groups (paired: of the differences): p = 1 if the means are "
        "equal, else p = 0. t is null when undefined or infinite.")
CLAIMS_RULE = ("claims: each pair (a, b) of a claim across the papers' tables, in every (dataset, share) where "
               "both have test scores: a mean claim by the two-sided t-test of `variant` (as the tables), a "
               "variance claim by the two-sided test of equal variances `variance_test` (fewer than 3 scores in "
               "a group: no test, p null; deviations from the centre constant in both groups: p = 1 if equal, "
               "else 0); std_a, std_b = population std (fractions). statistic = t or W, null when undefined or "
               "infinite.")


def _fractions(path: Path, key: str, value: Any, allow_none: bool = False) -> list[float] | None:
    """A non-empty list of finite scores in [0, 1], or a DataError naming the file and key."""
    if value is None and allow_none:
        return None
    if not isinstance(value, list) or not value:
        raise DataError(f"{path}: {key} must be a non-empty list of accuracies")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or not 0.0 <= v <= 1.0:
            raise DataError(f"{path}: {key} holds {quote(v)}, expected a fraction in [0, 1]")
        out.append(float(v))
    return out


def load_assess(path: str | Path, dataset: str, method: str, partial: bool = False,
                budget: BudgetSpec | None = None, expected: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An assess file checked against the contract: every share with its test scores (``partial``:
    the shares it lists, at least one: the heterogeneous methods run the budget's shares) and,
    given params.yaml's ``budget``, assessed under it as it is now (its name and, when params.yaml
    has its entry, digest; a table would mix budgets, or an edited budget's, otherwise); and
    computed with ``expected``, params.yaml's values by key (a heterogeneous method's
    ``heterogeneity.*``), where the file records them (esnfed_stages/provenance.py)."""
    path = Path(path)
    doc = read_json(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("pcts"), dict):
        raise DataError(f"{path}: expected an object with a 'pcts' mapping")
    for key, want in (("dataset", dataset), ("method", method)):
        if doc.get(key, want) != want:
            raise DataError(f"{path}: {key} is {quote(doc.get(key))}, expected {quote(want)}")
    m = Method.parse(method)
    rerun = f"select, retrain and `esnfed assess --dataset {dataset} {m.cli_options}` under it (dvc repro does)"
    if budget is not None:
        budget.check(path, doc, "budget", "assessed", dataset, m, rerun, assessed=True)
    provenance.check(path, doc, expected or {}, rerun)
    shares = [p for p in PCTS if p in doc["pcts"]] if partial else PCTS
    federated = m.federated
    if not shares:
        raise DataError(f"{path}: pcts lists none of {', '.join(PCTS)}")
    for pct in shares:
        entry = doc["pcts"].get(pct)
        if not isinstance(entry, dict):
            raise DataError(f"{path}: pcts.{pct} missing")
        test = _fractions(path, f"pcts.{pct}.test_accuracy", entry.get("test_accuracy"))
        _fractions(path, f"pcts.{pct}.train_accuracy", entry.get("train_accuracy"), allow_none=True)
        seeds = entry.get("seeds")
        if seeds is not None and (not isinstance(seeds, list) or len(seeds) != len(test)):
            raise DataError(f"{path}: pcts.{pct}.seeds must list one seed per test score")
        clients = entry.get("client_test_accuracy")  # a heterogeneous method's: retrains x clients
        if clients is not None:
            if not isinstance(clients, list) or len(clients) != len(test):
                raise DataError(f"{path}: pcts.{pct}.client_test_accuracy must list the clients' accuracies "
                                "of each retrain (one list per test score)")
            for i, row in enumerate(clients):
                _fractions(path, f"pcts.{pct}.client_test_accuracy[{i}]", row)
        try:
            check_communication(f"pcts.{pct}.communication", entry.get("communication"), federated)
        except ParameterError as exc:
            raise DataError(f"{path}: {exc}") from None
    return doc


@dataclass
class Inputs:
    """The assess documents found, the scores they hold, and the files that were missing."""

    docs: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    paths: dict[tuple[str, str], Path] = field(default_factory=dict)
    scores: dict[tuple[str, str, str, str], list[float]] = field(default_factory=dict)
    missing: list[Path] = field(default_factory=list)

    @property
    def digests(self) -> dict[str, str]:
        """{"<dataset>/<method>": :func:`doc_digest`} of every document found."""
        return {f"{ds}/{m}": doc_digest(doc) for (ds, m), doc in self.docs.items()}


# reports/ttest.json's record of the assess files it was computed from ({"<dataset>/<method>": digest})
INPUTS_KEY = "assess_digests"


def doc_digest(doc: Any) -> str:
    """16 hex digits of the sha256 of a document's canonical JSON: what of an assess file a t-test
    depends on is all of it (its scores, and the budget and its digest it was assessed under)."""
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def check_computed_from(path: str | Path, doc: Mapping[str, Any], *read: Inputs) -> None:
    """Refuse reports/ttest.json (``doc``, read from ``path``) when the assess files ``read`` now
    are not those its tests were computed from (its ``assess_digests``): a file assessed again
    since (an edited budget's select, retrain and assess rerun, say), one missing then and found now,
    or the reverse; one DataError naming the file and `esnfed ttest`. A ttest.json without the key
    (written before it was recorded) is trusted."""
    recorded = doc.get(INPUTS_KEY)
    if recorded is None:
        return
    if not isinstance(recorded, Mapping):
        raise DataError(f"{path}: {INPUTS_KEY}: expected an object of assess file digests, got "
                        f"{quote(recorded)} (rerun `esnfed ttest`)")
    for inputs in read:
        for (ds, method), now in inputs.docs.items():
            key, file = f"{ds}/{method}", inputs.paths[(ds, method)]
            if key not in recorded:
                raise DataError(f"{path}: computed without {file} (missing then): rerun `esnfed ttest`")
            if recorded[key] != doc_digest(now):
                raise DataError(f"{path}: computed from {file} before it was assessed again: rerun `esnfed ttest`")
        for file in inputs.missing:
            if f"{file.parent.name}/{file.stem}" in recorded:
                raise DataError(f"{path}: computed from {file}, missing now: rerun `esnfed ttest`")


def load_inputs(assess_dir: str | Path, needed: Iterable[tuple[str, str]],
                allow_missing: bool = False, partial: bool = False, budget: BudgetSpec | None = None,
                expected: Mapping[str, Any] | None = None) -> Inputs:
    """Read every needed (dataset, method); a missing file is an error unless ``allow_missing``
    (``partial``: files may list a subset of the shares; ``budget``: params.yaml's, which every
    file must have been assessed under; ``expected``: other values of params.yaml a file must have
    been computed with where it records them; see :func:`load_assess`)."""
    inputs = Inputs()
    needed = list(needed)
    for i, (ds, method) in enumerate(needed):
        path = assess_path(assess_dir, ds, method)
        missing = "file not found"
        problem = path_problem(path, missing)
        if problem == missing and allow_missing:
            inputs.missing.append(path)
            continue
        if problem == missing:
            others = sum(not assess_path(assess_dir, d, m).exists() for d, m in needed[i + 1:])
            raise DataError(f"{path}: not found: run `esnfed assess --dataset {ds} "
                            f"{Method.parse(method).cli_options}` first, or pass --allow-missing"
                            + (f" ({others} more assess file(s) missing)" if others else ""))
        if problem is not None:  # a folder or a FIFO there is not a missing input
            raise DataError(f"{path}: {problem}")
        doc = load_assess(path, ds, method, partial, budget, expected)
        inputs.docs[(ds, method)] = doc
        inputs.paths[(ds, method)] = path
        for pct in PCTS:
            entry = doc["pcts"].get(pct)
            if entry is None:
                continue
            inputs.scores[(ds, method, pct, "test")] = [float(v) for v in entry["test_accuracy"]]
            if entry.get("train_accuracy") is not None:
                inputs.scores[(ds, method, pct, "train")] = [float(v) for v in
                                                             entry["train_accuracy"]]
    return inputs


def _finite_or_none(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def comparisons(specs: Iterable[TableSpec], scores: Scores, variant: str,
                alpha: float) -> list[dict[str, Any]]:
    """The contract's comparison records: each pair of ``spec.pairs`` with scores, the proposed
    method (``a``) against a baseline (``b``)."""
    out = []
    for spec in specs:
        for ds, pct, col, group in comparison_groups(spec, scores):
            for a, b, r in compare_pairs(group, spec.pairs, variant, alpha):
                out.append({"table": spec.id, "dataset": ds, "pct": pct, "column": col,
                            "a": a, "b": b, "mean_a": r.mean_a, "mean_b": r.mean_b,
                            "n_a": r.n_a, "n_b": r.n_b, "t": _finite_or_none(r.t), "p": r.p,
                            "significant": r.significant})
    return out


def claim_tests(claims: Iterable[Claim], scores: Scores, variant: str, alpha: float,
                variance: str) -> list[dict[str, Any]]:
    """The records of ``claims`` (reports/ttest.json ``claims``): one per claim, dataset, share and
    pair with both scores; a mean claim by the tables' t-test ``variant``, a variance claim by the
    test of equal variances ``variance``."""
    out = []
    for c in claims:
        for ds, pct, a, b, sa, sb in claim_groups(c, scores):
            if c.test == MEAN_CLAIM:
                r = ttest(sa, sb, variant, alpha)
                test, stat = variant, r.t
            else:
                r = variance_test(sa, sb, variance, alpha)
                test, stat = variance, r.statistic
            out.append({"claim": c.id, "test": test, "dataset": ds, "pct": pct, "column": c.column,
                        "a": a, "b": b, "mean_a": _mean(sa), "mean_b": _mean(sb),
                        "std_a": _std(sa), "std_b": _std(sb), "n_a": len(sa), "n_b": len(sb),
                        "statistic": _finite_or_none(stat), "p": r.p, "significant": r.significant})
    return out


def _mean(x: Sequence[float]) -> float:
    return float(np.mean(np.asarray(x, dtype=np.float64)))


def _std(x: Sequence[float]) -> float:
    return float(np.std(np.asarray(x, dtype=np.float64)))


def check_pairing(specs: Iterable[TableSpec | Claim], inputs: Inputs) -> None:
    """Paired tests pair score k of two methods (a table's pairs, a mean claim's): both must list
    the same retrain seeds, in order."""
    for spec in specs:
        for ds in spec.datasets:
            for a, b in spec.pairs:
                da, db = inputs.docs.get((ds, a)), inputs.docs.get((ds, b))
                if da is None or db is None:
                    continue
                for pct in PCTS:
                    if pct not in da["pcts"] or pct not in db["pcts"]:  # heterogeneous: budget's shares
                        continue
                    sa, sb = da["pcts"][pct].get("seeds"), db["pcts"][pct].get("seeds")
                    if sa is None or sa != sb:
                        raise DataError(f"{inputs.paths[(ds, b)]}: pcts.{pct}.seeds {sb} differ from "
                                        f"{inputs.paths[(ds, a)]}'s {sa}: the paired t-test needs "
                                        "retrain k of both methods on the same seed (ttest.variant: paired)")


@dataclass(frozen=True)
class TTestParams:
    """params.yaml ``ttest``, checked: the t-test variant, the significance level and the test of
    equal variances of the variance claims."""

    variant: str
    alpha: float
    hetero_methods: tuple[str, ...] = ()  # the heterogeneous table's methods (if any)
    datasets: tuple[str, ...] = DATASETS  # params.yaml datasets / continual_datasets
    continual: tuple[str, ...] = DATASETS
    budget: BudgetSpec | None = None  # params.yaml budget: every assess file read must be of it
    alphas: tuple[float, ...] = ()  # heterogeneity.alphas (the align methods of hetero_methods)
    studies: tuple[str, ...] = DATASETS  # params.yaml study_datasets: the deep and heterogeneous tables'
    variance_test: str = DEFAULT_VARIANCE_TEST  # ttest.variance_test: the variance claims' test

    @property
    def tables(self) -> tuple[TableSpec, ...]:
        """The papers' tables of the declared datasets, then the generic ones of the user's."""
        return table_specs(self.datasets, self.continual, self.studies)

    @property
    def claims(self) -> tuple[Claim, ...]:
        """The papers' claims across the tables rendered (claims.py CLAIMS)."""
        return claim_specs(self.tables)

    @property
    def record(self) -> dict[str, Any]:
        """What reports/ttest.json is computed with, by params.yaml key (its ``params``; the report
        refuses a file whose values differ from params.yaml's). The budget by name."""
        return provenance.record({"ttest.variant": self.variant, "ttest.alpha": self.alpha,
                                  "ttest.variance_test": self.variance_test,
                                  "budget": None if self.budget is None else self.budget.name,
                                  "datasets": self.datasets, "continual_datasets": self.continual,
                                  "study_datasets": self.studies,
                                  "heterogeneity.alphas": self.alphas or None})


def ttest_params(params: Mapping[str, Any], variant: str | None = None,
                 alpha: float | None = None, variance: str | None = None) -> TTestParams:
    """The ``ttest`` section of the loaded params; command-line values win over its keys
    (``variance_test`` is optional: Brown–Forsythe without it)."""
    variant = section(params, "ttest.variant") if variant is None else variant
    alpha = section(params, "ttest.alpha") if alpha is None else alpha
    if variance is None:
        variance = section(params, "ttest").get("variance_test", DEFAULT_VARIANCE_TEST)
    try:
        check_variant(variant)
        check_alpha(alpha)
        check_variance_test(variance)
    except ParameterError as exc:
        raise ConfigError(f"ttest.{exc}") from None
    methods = hetero_table_methods(params)
    alphas = hetero_params(params).alphas if methods else ()
    return TTestParams(variant, float(alpha), methods, declared(params), continual_declared(params),
                       budget_spec(params), alphas, study_declared(params), variance)


def run(options: TTestParams, *, assess_dir: str | Path = ASSESS_DIR, out: str | Path = TTEST_PATH,
        allow_missing: bool = False, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run every table's tests and write ``out``; returns the written document."""
    variant, alpha = options.variant, options.alpha
    specs = options.tables
    inputs = load_inputs(assess_dir, required_inputs(specs), allow_missing, budget=options.budget)
    claims = options.claims
    if variant == "paired":
        check_pairing(list(specs) + [c for c in claims if c.test == MEAN_CLAIM], inputs)
    comps = []
    for spec in specs:
        comps += comparisons([spec], inputs.scores, variant, alpha)
        if progress:
            progress(spec.id)
    missing = [str(p) for p in inputs.missing]
    het_digests: dict[str, str] = {}
    if options.hetero_methods and options.studies:  # every method against the ensemble; absent files allowed
        spec = hetero_spec(options.hetero_methods, options.studies)
        het = load_inputs(assess_dir, required_inputs([spec]), allow_missing=True, partial=True,
                          budget=options.budget)
        if variant == "paired":
            check_pairing([spec], het)
        comps += comparisons([spec], het.scores, variant, alpha)
        missing += [str(p) for p in het.missing if str(p) not in missing]
        het_digests = het.digests
    doc = {"variant": variant, "alpha": alpha, "variance_test": options.variance_test, provenance.KEY: options.record,
           "rule": RULE, "claims_rule": CLAIMS_RULE, "comparisons": comps,
           "claims": claim_tests(claims, inputs.scores, variant, alpha, options.variance_test),
           "missing": missing, INPUTS_KEY: {**inputs.digests, **het_digests}}
    with output_lock(out):
        write_json(out, doc)
    return doc
