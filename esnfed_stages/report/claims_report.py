"""reports/tables/claims.md and .csv: the papers' claims across their tables (federated against
centralised, the spread of the retrains; claims.py CLAIMS) as reports/ttest.json tested
them, a row per dataset, share and pair with its verdict, and per claim where it holds."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from esnfed_core.quote import quote
from esnfed_stages.report.claims import (
    LOWER_VARIANCE, MEAN_CLAIM, NOT_LOWER_VARIANCE, NOT_WORSE, Claim, claim, claim_verdict,
)
from esnfed_stages.report.table_specs import dataset_label
from esnfed_stages.report.tables import NA, format_value, signed, to_csv

NAME = "claims"
CSV_COLUMNS = ("claim", "source", "test", "expect", "dataset", "pct", "a", "b", "n_a", "n_b", "mean_a", "std_a",
               "mean_b", "std_b", "statistic", "p_value", "significant", "verdict")
EXPECT_TEXT = {NOT_WORSE: "holds unless a's mean is significantly below b's",
               LOWER_VARIANCE: "holds where a's spread is significantly below b's",
               NOT_LOWER_VARIANCE: "holds unless a's spread is significantly below b's"}
_NUMBERS = ("mean_a", "mean_b", "std_a", "std_b", "statistic", "p")


def problem(record: Any) -> str | None:
    """What is wrong with one record of reports/ttest.json ``claims`` (its key and value), or None."""
    if not isinstance(record, Mapping):
        return f"expected an object, got {quote(record)}"
    for key in ("claim", "test", "dataset", "pct", "a", "b"):
        if not isinstance(record.get(key), str):
            return f"{key}: expected a string, got {quote(record.get(key))}"
    try:
        c = claim(record["claim"])
    except KeyError:
        return f"claim: unknown claim {quote(record['claim'])}"
    if (record["a"], record["b"]) not in c.pairs:
        return f"a, b: ({record['a']}, {record['b']}) is not a pair of claim {c.id}"
    for key in _NUMBERS:
        v = record.get(key)
        if key not in ("statistic", "p") and v is None:
            return f"{key}: missing"
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
            return f"{key}: expected a finite number or null, got {quote(v)}"
    if record["p"] is not None and not 0 <= record["p"] <= 1:
        return f"p: expected a probability in [0, 1], got {quote(record['p'])}"
    if not isinstance(record.get("significant"), bool):
        return f"significant: expected true or false, got {quote(record.get('significant'))}"
    return None


def _pct(v: float) -> float:
    return float(v) * 100.0


def rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The CSV rows: every test record with its claim's source and expectation, means and stds in
    percent (as the tables), and its verdict (claims.py claim_verdict)."""
    out = []
    for r in records:
        c = claim(r["claim"])
        out.append({"claim": c.id, "source": c.source, "test": r["test"], "expect": c.expect,
                    "dataset": r["dataset"], "pct": r["pct"], "a": r["a"], "b": r["b"],
                    "n_a": r.get("n_a"), "n_b": r.get("n_b"), "mean_a": _pct(r["mean_a"]), "std_a": _pct(r["std_a"]),
                    "mean_b": _pct(r["mean_b"]), "std_b": _pct(r["std_b"]), "statistic": r.get("statistic"),
                    "p_value": r["p"], "significant": "yes" if r["significant"] else "no",
                    "verdict": claim_verdict(c, r)})
    return out


def summary(c: Claim, mine: Sequence[Mapping[str, Any]]) -> str:
    """'holds in k of n rows; fails in: WESAD 25% (fedip vs ip), ...; untested in: ...'."""
    def where(r: Mapping[str, Any]) -> str:
        pair = f" ({r['a']} vs {r['b']})" if len(c.pairs) > 1 else ""
        return f"{dataset_label(r['dataset'])} {r['pct']}%{pair}"

    by = {v: [r for r in mine if r["verdict"] == v] for v in ("holds", "fails", "untested")}
    tested = len(by["holds"]) + len(by["fails"])
    if not tested:
        return f"untested in all {len(mine)} rows (fewer scores than the test needs)"
    text = f"holds in {len(by['holds'])} of {tested} tested rows"
    if by["fails"]:
        text += "; fails in: " + ", ".join(map(where, by["fails"]))
    if by["untested"]:
        text += f"; untested in {len(by['untested'])} (fewer scores than the test needs): " + \
            ", ".join(map(where, by["untested"]))
    return text


def render(records: Sequence[Mapping[str, Any]], claims: Sequence[Claim], header: Sequence[str]) -> tuple[str, str]:
    """(claims.md, claims.csv): a section per claim of ``claims`` (those of the tables rendered),
    its statement quoted, its verdict per claim and a row per dataset, share and pair."""
    table = rows(records)
    lines = [f"# {NAME}: The papers' claims across their tables, tested on this run's retrains", ""]
    lines += [f"- {h}" for h in header]
    for c in claims:
        mine = [r for r in table if r["claim"] == c.id]
        diff = "a − b (mean)" if c.test == MEAN_CLAIM else "a − b (std)"
        lines += ["", f"## {c.id}: {c.source}", "", f"> \"{c.statement}\"", "",
                  f"Tested: {', '.join(f'{a} vs {b}' for a, b in c.pairs)} ({c.test}; the claim "
                  f"{EXPECT_TEXT[c.expect]}): **{summary(c, mine)}**.", ""]
        if not mine:
            lines.append("No row: the claim's methods have no scores (n/a inputs).")
            continue
        lines.append(f"| dataset | train users | a | b | a (mean ± std) | b (mean ± std) | {diff} | p | verdict |")
        lines.append("|---|---|---|---|---:|---:|---:|---:|---|")
        for r in mine:
            d = r["mean_a"] - r["mean_b"] if c.test == MEAN_CLAIM else r["std_a"] - r["std_b"]
            p = NA if r["p_value"] is None else f"{r['p_value']:.3g}"
            lines.append(f"| {dataset_label(r['dataset'])} | {r['pct']}% | {r['a']} | {r['b']} | "
                         f"{format_value(r['mean_a'], r['std_a'])} | {format_value(r['mean_b'], r['std_b'])} | "
                         f"{signed(d)} | {p} | {r['verdict']} |")
    return "\n".join(lines) + "\n", to_csv(table, CSV_COLUMNS)
