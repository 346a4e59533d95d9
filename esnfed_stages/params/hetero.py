"""params.yaml ``heterogeneity`` (docs/heterogeneous.md), checked into a frozen
:class:`HeteroParams`: how the clients' reservoirs differ, the ensemble's combination, the alignment
strengths α of the align methods and the training shares the heterogeneous methods run under each
budget. Part of :class:`esnfed_stages.params.experiment.ExperimentParams`."""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Mapping

from esnfed_core.errors import ConfigError
from esnfed_core.heterogeneity import COMBINE, MODES
from esnfed_core.method import Method, RESERVOIR_KEYS
from esnfed_core.quote import quote
from esnfed_core.vocabulary import PCTS
from esnfed_stages import provenance
from esnfed_stages.params.sections import check_keys, section

KEYS = ("seed", "mode", "vary", "combine", "alphas", "pcts")


@dataclass(frozen=True)
class HeteroParams:
    seed: int
    mode: str
    vary: tuple[str, ...]
    combine: str
    alphas: tuple[float, ...]
    pcts: Mapping[str, tuple[str, ...]]  # budget -> shares (a budget not listed: every share)

    def methods(self) -> list[Method]:
        """Every heterogeneous method: local, ensemble, then align at each α."""
        return [Method("local"), Method("ensemble")] + [Method("align", alpha=a) for a in self.alphas]

    def shares(self, budget: str) -> list[str]:
        return list(self.pcts.get(budget, PCTS))

    @property
    def record(self) -> dict[str, Any]:
        """What a heterogeneous method's assess file is computed with, by params.yaml key (its
        ``params``; the report refuses a file whose values differ from params.yaml's): how the
        clients' reservoirs differ and the ensemble's combination."""
        return provenance.record({"heterogeneity.seed": self.seed, "heterogeneity.mode": self.mode,
                                  "heterogeneity.vary": self.vary, "heterogeneity.combine": self.combine})


def hetero_params(params: Mapping[str, Any]) -> HeteroParams:
    """The validated ``heterogeneity`` section; every error names its key."""
    p = check_keys("heterogeneity", section(params, "heterogeneity"), KEYS)
    missing = [k for k in KEYS if k not in p]
    if missing:
        raise ConfigError(f"params.yaml: heterogeneity.{missing[0]}: missing")
    seed = p["seed"]
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ConfigError(f"params.yaml: heterogeneity.seed must be a non-negative integer, got {quote(seed)}")
    if p["mode"] not in MODES:
        raise ConfigError(f"params.yaml: heterogeneity.mode must be one of {', '.join(MODES)}, got {quote(p['mode'])}")
    if p["combine"] not in COMBINE:
        raise ConfigError(f"params.yaml: heterogeneity.combine must be one of {', '.join(COMBINE)}, "
                          f"got {quote(p['combine'])}")
    vary = p["vary"]
    if not isinstance(vary, list) or any(v not in RESERVOIR_KEYS for v in vary) or len(set(vary)) != len(vary):
        raise ConfigError(f"params.yaml: heterogeneity.vary must list distinct names among "
                          f"{', '.join(RESERVOIR_KEYS)}, got {quote(vary)}")
    alphas = p["alphas"]
    if not isinstance(alphas, list) or not alphas or any(
            isinstance(a, bool) or not isinstance(a, (int, float)) or not 0 <= a <= 1 for a in alphas) \
            or len({f"{a:g}" for a in alphas}) != len(alphas):
        raise ConfigError(f"params.yaml: heterogeneity.alphas must be a non-empty list of distinct numbers "
                          f"in [0, 1], got {quote(alphas)}")
    if "units" in vary and p["mode"] == "space":
        raise ConfigError("params.yaml: heterogeneity.vary: units cannot vary: alignment interpolates "
                          "matrices of equal units (docs/heterogeneous.md)")
    pcts = p["pcts"]
    if not isinstance(pcts, Mapping) or any(
            not isinstance(v, list) or not v or any(str(s) not in PCTS for s in v) for v in pcts.values()):
        raise ConfigError(f"params.yaml: heterogeneity.pcts must map budget names to non-empty lists of "
                          f"shares among {', '.join(PCTS)}, got {quote(pcts)}")
    return HeteroParams(int(seed), p["mode"], tuple(vary) if p["mode"] == "space" else (), p["combine"],
                        tuple(float(a) for a in alphas),
                        {str(b): tuple(s for s in PCTS if s in {str(x) for x in v}) for b, v in pcts.items()})
