"""The papers' claims across their tables: federated against centralised, and the spread of the
retrains; each claim's groups of scores and its verdict from reports/ttest.json's test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Sequence

from esnfed_core.vocabulary import DATASETS, PCTS
from esnfed_stages.report.table_specs import Scores, TableSpec


# ---------------------------------------------------------------------------------------------
# Claims across the papers' tables: federated against centralised, and the spread of the retrains

MEAN_CLAIM, VARIANCE_CLAIM = "mean", "variance"
NOT_WORSE, LOWER_VARIANCE, NOT_LOWER_VARIANCE = "not-worse", "lower-variance", "not-lower-variance"


@dataclass(frozen=True)
class Claim:
    """A claim of a paper that its tables support across tables or through the spread of the
    retrains, tested on every (dataset, share) where both methods of a pair have scores.

    ``test``: :data:`MEAN_CLAIM` (the two-sided t-test of ``ttest.variant``) or
    :data:`VARIANCE_CLAIM` (the test of equal variances of ``ttest.variance_test``). ``expect``,
    what the claim says of ``a`` against ``b`` in each pair: :data:`NOT_WORSE` (a's mean not
    significantly below b's: "comparable, if not greater"), :data:`LOWER_VARIANCE` (a's spread
    significantly below b's) or :data:`NOT_LOWER_VARIANCE` (not significantly below). ``tables``:
    the tables whose cells it compares (it is tested where they are rendered)."""

    id: str
    source: str
    statement: str
    test: str
    expect: str
    pairs: tuple[tuple[str, str], ...]
    tables: tuple[str, ...]
    datasets: tuple[str, ...] = DATASETS

    @property
    def column(self) -> str:
        return "test"


CLAIMS: tuple[Claim, ...] = (
    Claim("federated-stationary", "Decentralized Plasticity, Sec. 3 (Tables 1 and 4)",
          "the performance obtained in the federated setting is comparable, if not greater than the one "
          "reported for the centralized setting", MEAN_CLAIM, NOT_WORSE, (("fedip", "ip"),),
          ("fedip", "ip-centralized")),
    Claim("federated-continual", "Decentralized Plasticity, Sec. 3 (Tables 2 and 5) and Sec. 4",
          "the performances in the federated setting are consistent with the ones of the centralized "
          "baseline; ... comparable results to ... their centralized versions", MEAN_CLAIM, NOT_WORSE,
          tuple((f"fedclip-{s}", f"clip-{s}") for s in ("naive", "replay", "joint")),
          ("fedclip", "clip-centralized")),
    Claim("ip-variance", "ESANN 2022, Sec. 4 (Table 2); Decentralized Plasticity, Sec. 2.1",
          "the centralized version of IP is able to mitigate the variance of performance with respect to "
          "bad reservoir initializations", VARIANCE_CLAIM, LOWER_VARIANCE, (("ip", "ridge"),),
          ("ip-centralized",)),
    Claim("fedip-variance", "Decentralized Plasticity, Sec. 3 (Table 1)",
          "training the reservoir via FedIP mitigates the variance in the performance in comparison with "
          "the ESNs adapted only via FedRR", VARIANCE_CLAIM, LOWER_VARIANCE, (("fedip", "incfed"),), ("fedip",)),
    Claim("fedip-variance-esann", "ESANN 2022, Sec. 4 (Table 2)",
          "[mitigating the variance of performance is] an effect that FedIP does not produce in our "
          "scenario", VARIANCE_CLAIM, NOT_LOWER_VARIANCE, (("fedip", "incfed"),), ("esann",)),
)


def claim_specs(specs: Iterable[TableSpec]) -> tuple[Claim, ...]:
    """The claims whose tables are all among ``specs`` (table_specs: the declared datasets')."""
    ids = {s.id for s in specs}
    return tuple(c for c in CLAIMS if set(c.tables) <= ids)


def claim_groups(claim: Claim, scores: Scores) -> Iterator[tuple[str, str, str, str, Sequence[float], Sequence[float]]]:
    """(dataset, pct, a, b, scores of a, scores of b) of every pair of ``claim`` with both scores."""
    for ds in claim.datasets:
        for pct in PCTS:
            for a, b in claim.pairs:
                sa, sb = scores.get((ds, a, pct, claim.column)), scores.get((ds, b, pct, claim.column))
                if sa is not None and sb is not None:
                    yield ds, pct, a, b, sa, sb


def claim_verdict(spec: Claim, record: Mapping[str, Any]) -> str:
    """"holds", "fails" or "untested" (no test: p null) for one test record of the claim ``spec``
    (the keys mean_a, mean_b, std_a, std_b, p, significant of reports/ttest.json's ``claims``)."""
    if record.get("p") is None:
        return "untested"
    if spec.test == MEAN_CLAIM:
        worse = record["significant"] and record["mean_a"] < record["mean_b"]
        return "fails" if worse else "holds"
    lower = record["significant"] and record["std_a"] < record["std_b"]
    if spec.expect == LOWER_VARIANCE:
        return "holds" if lower else "fails"
    return "fails" if lower else "holds"


def claim(claim_id: str) -> Claim:
    """The claim of CLAIMS with this id (KeyError if none)."""
    for c in CLAIMS:
        if c.id == claim_id:
            return c
    raise KeyError(claim_id)
