"""Paper tables recomputed under their paper's own protocol (opt-in, docs/protocol.md "ESANN 2022
protocol variant"): params.yaml ``report.<table>_protocol`` names, per paper dataset, the declared
dataset whose scores fill its columns (a variant preprocessed as that paper did); the report then
writes that table under the id ``<table>-protocol`` (reports/tables/esann-protocol.md and .csv)
beside the single-protocol table."""

from __future__ import annotations

from typing import Any, Mapping

from esnfed_core.quote import quote
from esnfed_core.tables import TableSpec, protocol_table, table_spec
from esnfed_stages._datasets import declared, reader_of
from esnfed_stages.schema_nodes import Invalid

# report.<key>: the paper table it recomputes and the paper's name in the protocol line
PROTOCOLS = {"esann_protocol": ("esann", "ESANN 2022")}


def check_shape(key: str, value: Any) -> None:
    """``report.<table>_protocol`` alone: a mapping of some of the table's paper datasets to names."""
    datasets = table_spec(PROTOCOLS[key.rsplit(".", 1)[-1]][0]).datasets
    if not isinstance(value, Mapping) or not value:
        raise Invalid(f"{key}: expected a mapping of some of {', '.join(datasets)} to the declared dataset "
                      f"computing its columns, e.g. {{hhar: hhar_esann}}, got {quote(value)}")
    for ds, name in value.items():
        if ds not in datasets:
            raise Invalid(f"{key}: expected some of {', '.join(datasets)} as keys, got {quote(ds)}")
        if not isinstance(name, str):
            raise Invalid(f"{key}.{ds}: expected a dataset name, got {quote(name)}")


def sources(params: Mapping[str, Any], key: str) -> dict[str, str]:
    """Each paper dataset of the table -> the dataset computing its columns (itself where not named)."""
    given = ((params.get("report") or {}).get(key)) or {}
    return {ds: given.get(ds, ds) for ds in table_spec(PROTOCOLS[key][0]).datasets}


def check(params: Mapping[str, Any]) -> None:
    """Each column's dataset is declared and is the paper dataset or a variant of it (Invalid naming the key)."""
    report = params.get("report")
    for key in PROTOCOLS if isinstance(report, Mapping) else ():
        if key not in report:
            continue
        names = declared(params)
        table = PROTOCOLS[key][0]
        lacking = [ds for ds in table_spec(table).datasets if ds not in names]
        if lacking:  # the single-protocol table stands beside it, and its t-tests are borrowed from there
            raise Invalid(f"report.{key}: needs {', '.join(table_spec(table).datasets)} in datasets (table {table} "
                          f"stands beside it, its t-tests come from there); datasets lacks {', '.join(map(quote, lacking))}")
        for ds, name in sources(params, key).items():
            where = f"report.{key}.{ds}" if ds in report[key] else f"report.{key}"
            if name not in names:
                raise Invalid(f"{where}: {quote(name)} is not in datasets ({', '.join(names)}): the {ds} columns "
                              "need its assess files")
            if reader_of(params, name) != ds:
                raise Invalid(f"{where}: {quote(name)} is not {ds} nor a variant of it (preprocess.{name}.base: {ds})")


def protocol_line(params: Mapping[str, Any], key: str) -> str:
    """Which protocol the table used: each column's dataset with its preprocessing, and the budget."""
    table, paper = PROTOCOLS[key]
    pre = params.get("preprocess") or {}
    parts = []
    for ds, name in sources(params, key).items():
        if name == ds:  # the paper dataset itself: the single protocol's preprocessing
            parts.append(f"{ds} columns from `{ds}` (preprocess.{ds}, as the single protocol)")
            continue
        settings = ", ".join(f"{k} {v}" for k, v in (pre.get(name) or {}).items() if k != "base")
        parts.append(f"{ds} columns from `{name}` (preprocess.{name}: {settings})")
    return (f"Protocol: {paper} (docs/protocol.md, \"ESANN 2022 protocol variant\"): " + "; ".join(parts)
            + f"; budget `{params.get('budget')}`. The single-protocol recomputation is table {table}.")


def specs(params: Mapping[str, Any]) -> tuple[TableSpec, ...]:
    """The protocol tables params.yaml asks for (none by default)."""
    report = params.get("report")
    return tuple(protocol_table(PROTOCOLS[key][0], sources(params, key), protocol_line(params, key))
                 for key in PROTOCOLS if isinstance(report, Mapping) and key in report)
