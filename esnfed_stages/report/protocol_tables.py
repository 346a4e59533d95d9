"""Paper tables recomputed under their paper's own protocol (opt-in, docs/protocol.md "ESANN 2022
protocol variant" and "IJCNN 2021 protocol variant"): params.yaml ``report.<table>_protocol`` names,
per paper dataset, the declared dataset whose scores fill its columns (a variant preprocessed as that
paper did); the report then writes each of that paper's tables under its protocol id
(reports/tables/esann-protocol.md, ijcnn-protocol-wesad.md, ...) beside the single-protocol table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from esnfed_core.quote import quote
from esnfed_stages.report.table_specs import TableSpec, protocol_table, table_spec
from esnfed_stages.data._datasets import declared, reader_of
from esnfed_stages.params.nodes import Invalid


@dataclass(frozen=True)
class Protocol:
    """What ``report.<key>`` recomputes: ``tables``, (paper table, id of its protocol table) pairs;
    ``paper``, its name in the protocol line; ``section``, the docs/protocol.md section saying what
    differs; ``example``, a value for the error messages; ``budget``, the params.yaml budget name
    of that paper's own budget (docs/protocol-variants.md: ``budget: esann``), which is, besides budget ``paper``, the
    protocol of its tables and of theirs alone (comparability.py)."""

    tables: tuple[tuple[str, str], ...]
    paper: str
    section: str
    example: str
    budget: str

    @property
    def datasets(self) -> tuple[str, ...]:
        """The paper datasets of its tables, in table order, each once."""
        return tuple(dict.fromkeys(ds for table, _ in self.tables for ds in table_spec(table).datasets))

    @property
    def table_ids(self) -> tuple[str, ...]:
        return tuple(table for table, _ in self.tables)

    @property
    def all_table_ids(self) -> tuple[str, ...]:
        """Every table taken from the paper: each paper table, then its protocol table."""
        return tuple(t for pair in self.tables for t in pair)


# report.<key>: the paper tables it recomputes
PROTOCOLS = {
    "esann_protocol": Protocol((("esann", "esann-protocol"),), "ESANN 2022", "ESANN 2022 protocol variant",
                               "{hhar: hhar_esann}", "esann"),
    "ijcnn_protocol": Protocol((("ijcnn-wesad", "ijcnn-protocol-wesad"), ("ijcnn-hhar", "ijcnn-protocol-hhar")),
                               "IncFed (IJCNN 2021)", "IJCNN 2021 protocol variant",
                               "{wesad: wesad_ijcnn, hhar: hhar_ijcnn}", "ijcnn"),
}


def check_shape(key: str, value: Any) -> None:
    """``report.<table>_protocol`` alone: a mapping of some of the table's paper datasets to names."""
    protocol = PROTOCOLS[key.rsplit(".", 1)[-1]]
    datasets = protocol.datasets
    if not isinstance(value, Mapping) or not value:
        raise Invalid(f"{key}: expected a mapping of some of {', '.join(datasets)} to the declared dataset "
                      f"computing its columns, e.g. {protocol.example}, got {quote(value)}")
    for ds, name in value.items():
        if ds not in datasets:
            raise Invalid(f"{key}: expected some of {', '.join(datasets)} as keys, got {quote(ds)}")
        if not isinstance(name, str):
            raise Invalid(f"{key}.{ds}: expected a dataset name, got {quote(name)}")


def sources(params: Mapping[str, Any], key: str) -> dict[str, str]:
    """Each paper dataset of the table -> the dataset computing its columns (itself where not named)."""
    given = ((params.get("report") or {}).get(key)) or {}
    return {ds: given.get(ds, ds) for ds in PROTOCOLS[key].datasets}


def check(params: Mapping[str, Any]) -> None:
    """Each column's dataset is declared and is the paper dataset or a variant of it (Invalid naming the key)."""
    report = params.get("report")
    for key in PROTOCOLS if isinstance(report, Mapping) else ():
        if key not in report:
            continue
        names = declared(params)
        protocol = PROTOCOLS[key]
        lacking = [ds for ds in protocol.datasets if ds not in names]
        if lacking:  # the single-protocol tables stand beside it, and their t-tests are borrowed from there
            tables = protocol.table_ids
            raise Invalid(f"report.{key}: needs {', '.join(protocol.datasets)} in datasets (table"
                          f"{'s' if len(tables) > 1 else ''} {', '.join(tables)} "
                          f"{'stand' if len(tables) > 1 else 'stands'} beside it, its t-tests come from there); "
                          f"datasets lacks {', '.join(map(quote, lacking))}")
        for ds, name in sources(params, key).items():
            where = f"report.{key}.{ds}" if ds in report[key] else f"report.{key}"
            if name not in names:
                raise Invalid(f"{where}: {quote(name)} is not in datasets ({', '.join(names)}): the {ds} columns "
                              "need its assess files")
            if reader_of(params, name) != ds:
                raise Invalid(f"{where}: {quote(name)} is not {ds} nor a variant of it (preprocess.{name}.base: {ds})")


def protocol_line(params: Mapping[str, Any], key: str, table: str) -> str:
    """Which protocol paper table ``table`` used: each column's dataset with its preprocessing, and the budget."""
    protocol = PROTOCOLS[key]
    pre = params.get("preprocess") or {}
    parts = []
    for ds, name in sources(params, key).items():
        if ds not in table_spec(table).datasets:
            continue
        if name == ds:  # the paper dataset itself: the single protocol's preprocessing
            parts.append(f"{ds} columns from `{ds}` (preprocess.{ds}, as the single protocol)")
            continue
        settings = ", ".join(f"{k} {v}" for k, v in (pre.get(name) or {}).items() if k != "base")
        parts.append(f"{ds} columns from `{name}` (preprocess.{name}: {settings})")
    return (f"Protocol: {protocol.paper} (docs/protocol.md, \"{protocol.section}\"): " + "; ".join(parts)
            + f"; budget `{params.get('budget')}`. The single-protocol recomputation is table {table}.")


def specs(params: Mapping[str, Any]) -> tuple[TableSpec, ...]:
    """The protocol tables params.yaml asks for (none by default)."""
    report = params.get("report")
    return tuple(protocol_table(table, sources(params, key), protocol_line(params, key, table), table_id)
                 for key, protocol in PROTOCOLS.items() if isinstance(report, Mapping) and key in report
                 for table, table_id in protocol.tables)
