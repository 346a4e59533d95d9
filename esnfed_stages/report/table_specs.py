"""The papers' tables (PROTOCOL §7) as data: which methods each compares on which datasets, under
which title and note, and the published values beside them (paper_results.yaml). A user's own
dataset gets the generic tables; a protocol variant, its paper's table recomputed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Iterator, Mapping, Sequence

from esnfed_core.method import CONTINUAL_METHODS as CONTINUAL_NAMES
from esnfed_core.errors import DataError
from esnfed_core.vocabulary import DATASETS, PCTS, papers_first


DATASET_LABELS = {"wesad": "WESAD", "hhar": "HHAR"}  # as the papers name them (titles, headers)


def dataset_label(ds: str) -> str:
    """A dataset's name in titles and headers: WESAD and HHAR as the papers write them, a user's own
    dataset as declared in params.yaml (``example``, not ``EXAMPLE``)."""
    return DATASET_LABELS.get(ds, ds)



# (dataset, method, pct, column) -> retrain scores; a missing key is a method not (yet) assessed.
ScoreKey = tuple[str, str, str, str]
Scores = Mapping[ScoreKey, Sequence[float]]

OTHER_PREPROCESSING = (
    "The {paper} paper used its own preprocessing ({what}); its published numbers are shown for "
    "reference and are not directly comparable: under this single protocol (PROTOCOL §1) the table "
    "is recomputed."
)


@dataclass(frozen=True)
class TableSpec:
    """One table of PROTOCOL §7: its datasets, the compared methods (id, paper label), columns.

    ``published`` formats the column name of a cell in paper_results.yaml; ``tested`` lists the
    columns that carry t-test marks (the IncFed tables mark the test column only). ``pairs`` are
    the (proposed, baseline) method pairs the paper compares, the only ones tested (PROTOCOL §6).
    A family is one proposed method and its baselines (a paper table has one; deep and a user's
    continual table have two); each family is marked on its own (``families``), and no method is
    in two families, so a cell's one mark compares it within its family only.
    """

    id: str
    title: str
    datasets: tuple[str, ...]
    methods: tuple[tuple[str, str], ...]
    columns: tuple[str, ...] = ("test",)
    tested: tuple[str, ...] = ("test",)
    published: str = "{dataset}/{label}"
    note: str = ""
    pairs: tuple[tuple[str, str], ...] = ()
    # False: a table with no published values and no paper column (this project's own, e.g. deep,
    # or a user dataset's generic table)
    has_published: bool = True
    # a protocol table (protocol_table): the paper table whose published values it shows, and the
    # paper dataset each of its datasets stands for there ((variant, base) pairs)
    published_table: str = ""
    published_as: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for a, b in self.pairs:
            if a not in self.method_ids or b not in self.method_ids or a == b:
                raise ValueError(f"table {self.id}: pair ({a}, {b}) is not two of its methods")

    @property
    def families(self) -> tuple[tuple[tuple[str, str], ...], ...]:
        """The pairs grouped by proposed method (a family: it and its baselines), in pair order.

        ValueError when a method is in two families: a cell holds one bold/italic mark (the
        heterogeneous table, which marks each pair with ▲/▼ instead, does not ask for them)."""
        by_proposed: dict[str, list[tuple[str, str]]] = {}
        for a, b in self.pairs:
            by_proposed.setdefault(a, []).append((a, b))
        seen: set[str] = set()
        for family in by_proposed.values():
            members = {m for pair in family for m in pair}
            if members & seen:
                raise ValueError(f"table {self.id}: {', '.join(sorted(members & seen))} is in the pairs "
                                 "of two proposed methods; mark them in separate tables")
            seen |= members
        return tuple(tuple(family) for family in by_proposed.values())

    def pairs_text(self) -> str:
        labels = dict(self.methods)
        return "; ".join(f"{labels[a]} vs {labels[b]}" for a, b in self.pairs)

    @property
    def method_ids(self) -> tuple[str, ...]:
        return tuple(m for m, _ in self.methods)

    def published_column(self, dataset: str, label: str, column: str) -> str:
        return self.published.format(dataset=dict(self.published_as).get(dataset, dataset), label=label, column=column)


_IJCNN_METHODS = (("random", "random"), ("ridge", "centralized"), ("fedavg", "fedavg"),
                  ("incfed", "incfed"))
_IJCNN_NOTE = OTHER_PREPROCESSING.format(
    paper="IncFed (IJCNN 2021)",
    what="WESAD windows of 350 samples; HAR as HHAR with 32 engineered features, sequences of 500; "
    "its ± values look like fractions and are copied as printed")

TABLES: tuple[TableSpec, ...] = tuple(
    [
        TableSpec(f"ijcnn-{ds}", f"IncFed (IJCNN 2021), Table {'V' if ds == 'wesad' else 'VI'}: "
                  f"train and test accuracy on {DATASET_LABELS[ds]}",
                  (ds,), _IJCNN_METHODS, columns=("train", "test"), published="{label}/{column}",
                  note=_IJCNN_NOTE, pairs=(("incfed", "fedavg"),))
        for ds in DATASETS
    ]
    + [
        TableSpec("esann", "ESANN 2022, Table 2: IncFed vs FedIP (+IncFed readout)", DATASETS,
                  (("incfed", "incfed"), ("fedip", "fedip")),
                  note=OTHER_PREPROCESSING.format(
                      paper="ESANN 2022", what="HHAR Nexus4 only, windows of 400 steps"),
                  pairs=(("fedip", "incfed"),)),
        TableSpec("fedip", "Decentralized Plasticity, Table 1: federated stationary, without vs "
                  "with FedIP (IncFed readout)", DATASETS,
                  (("incfed", "without-fedip"), ("fedip", "with-fedip")),
                  pairs=(("fedip", "incfed"),)),
        TableSpec("fedclip", "Decentralized Plasticity, Table 2: federated continual (FedCLIP), "
                  "stream accuracy after the last context", DATASETS,
                  (("fedclip-naive", "naive"), ("fedclip-replay", "replay"),
                   ("fedclip-joint", "joint")),
                  pairs=(("fedclip-replay", "fedclip-naive"), ("fedclip-replay", "fedclip-joint"))),
        TableSpec("ip-centralized", "Decentralized Plasticity, Table 4: centralised stationary, "
                  "without vs with IP", DATASETS, (("ridge", "without-ip"), ("ip", "with-ip")),
                  pairs=(("ip", "ridge"),)),
        TableSpec("clip-centralized", "Decentralized Plasticity, Table 5: centralised continual "
                  "(CLIP), stream accuracy after the last context", DATASETS,
                  (("clip-naive", "naive"), ("clip-replay", "replay"), ("clip-joint", "joint")),
                  pairs=(("clip-replay", "clip-naive"), ("clip-replay", "clip-joint"))),
    ]
    # deep reservoirs (docs/deep.md): not in the papers
    + [
        TableSpec("deep", "Deep vs shallow reservoirs at the same total units: IncFed "
                  "readout (= centralised ridge), without and with FedIP", DATASETS,
                  (("incfed", "shallow-incfed"), ("deep-incfed", "deep-incfed"),
                   ("fedip", "shallow-fedip"), ("deep-fedip", "deep-fedip")),
                  note="Same total units: each deep method has the units selected for its shallow "
                  "counterpart in that share (runs/select/*/<incfed|fedip>/*/best.json), split over "
                  "`layers` stacked reservoirs sharing ρ, leak and input scaling (docs/deep.md); trial i "
                  "of a deep and of a shallow method draws the same ρ, leak and scaling, and each keeps "
                  "its best trial on the validation users; marks compare deep with shallow within "
                  "IncFed and within FedIP, separately.",
                  pairs=(("deep-incfed", "incfed"), ("deep-fedip", "fedip")), has_published=False),
    ]
)
TABLE_IDS: tuple[str, ...] = tuple(t.id for t in TABLES)
DEEP_TABLE = "deep"  # the deep reservoirs' table: on params.yaml study_datasets (table_specs)


# ---------------------------------------------------------------------------------------------
# Generic tables of a user's own dataset

CONTINUAL_METHODS = tuple((m, m.replace("-", " ")) for m in CONTINUAL_NAMES)  # (name, label)


def generic_tables(dataset: str, continual: bool) -> tuple[TableSpec, ...]:
    """A user dataset's tables, each marked as the papers' tables are (their comparisons, no
    other): IncFed vs FedAvg (as IncFed, IJCNN 2021, with random for reference), FedIP vs IncFed
    (as Decentralized Plasticity, Table 1) and IP vs ridge (its Table 4), the stationary methods'
    test accuracy; with contexts, CLIP and FedCLIP side by side (replay vs naive and joint, as
    its Tables 5 and 2), stream accuracy after the last context, each setting marked on its own.
    Three stationary tables, not one: IncFed is in two of their comparisons, and one cell holds
    one mark."""
    def stationary(name: str, what: str, methods: tuple[tuple[str, str], ...], pair: tuple[str, str],
                   note: str = "") -> TableSpec:
        return TableSpec(f"{dataset}-stationary-{name}", f"{dataset}: {what}, test accuracy", (dataset,),
                         methods, has_published=False, pairs=(pair,), note=note)

    specs = [
        stationary("incfed", "federated readouts, IncFed vs FedAvg",
                   (("random", "random"), ("fedavg", "fedavg"), ("incfed", "incfed")), ("incfed", "fedavg"),
                   note=f"random (chance level) is shown for reference and not tested; centralised ridge "
                   f"is in {dataset}-stationary-ip."),
        stationary("fedip", "federated, without vs with FedIP (IncFed readout)",
                   (("incfed", "incfed"), ("fedip", "fedip")), ("fedip", "incfed")),
        stationary("ip", "centralised, without vs with IP (ridge readout)",
                   (("ridge", "centralised"), ("ip", "ip")), ("ip", "ridge")),
    ]
    if continual:
        specs.append(TableSpec(
            f"{dataset}-continual", f"{dataset}: continual methods (CLIP centralised, FedCLIP federated), "
            "stream accuracy after the last context", (dataset,), CONTINUAL_METHODS, has_published=False,
            pairs=tuple((f"{a}-replay", f"{a}-{b}") for a in ("clip", "fedclip") for b in ("naive", "joint")),
            note="Marks compare CLIP methods among themselves and FedCLIP methods among themselves, "
            "separately (as the papers' Tables 5 and 2)."))
    return tuple(specs)


def table_specs(datasets: Sequence[str] = DATASETS, continual: Sequence[str] = DATASETS,
                studies: Sequence[str] | None = None) -> tuple[TableSpec, ...]:
    """The tables of the declared datasets: each paper table whose datasets are all declared, the
    deep table on the declared datasets of ``studies`` (params.yaml study_datasets, where the deep
    reservoirs run, the papers' or your own, papers' first; None: the declared papers' datasets;
    none: no deep table), then the generic tables of every other declared dataset (in declaration
    order)."""
    studies = tuple(d for d in papers_first(DATASETS if studies is None else studies) if d in datasets)
    papers = tuple(t for t in TABLES if t.id != DEEP_TABLE and set(t.datasets) <= set(datasets))
    deep = replace(table_spec(DEEP_TABLE), datasets=studies)
    if len(studies) == 1:  # a table of one dataset has no dataset column: its title names it
        deep = replace(deep, title=f"{deep.title} ({dataset_label(studies[0])})")
    return papers + ((deep,) if studies else ()) + tuple(spec for ds in datasets if ds not in DATASETS
                                                         for spec in generic_tables(ds, ds in continual))



# ---------------------------------------------------------------------------------------------
# A paper table recomputed under that paper's own protocol (docs/protocol.md, "ESANN 2022 protocol
# variant", "IJCNN 2021 protocol variant"): its columns on protocol variants of the papers' datasets
# (params.yaml report.<paper>_protocol)

def protocol_table(table_id: str, sources: Mapping[str, str], protocol: str, protocol_id: str) -> TableSpec:
    """Paper table ``table_id`` with each paper dataset's columns computed on ``sources[dataset]``
    (itself, or a variant preprocessed as that paper did), the paper's published values beside;
    ``protocol``: the line saying which protocol it used; ``protocol_id``: its id (esann-protocol, ...)."""
    spec = table_spec(table_id)
    datasets = tuple(sources.get(ds, ds) for ds in spec.datasets)
    return replace(spec, id=protocol_id, title=f"{spec.title}, under that paper's protocol",
                   datasets=datasets, note=protocol, published_table=table_id,
                   published_as=tuple((sources.get(ds, ds), ds) for ds in spec.datasets))


def borrowed_comparisons(spec: TableSpec, comparisons: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The t-tests a protocol table shows, taken from the tables the ttest stage ran: a test depends
    on the two methods' scores alone (dataset, share, column), whichever table it was run for, so
    the same pair on the same dataset tested for another table (the paper table, a variant's
    generic table) is this table's test; each once, relabelled ``spec.id``."""
    out: dict[tuple, dict[str, Any]] = {}
    for c in comparisons:
        key = (c["dataset"], str(c["pct"]), c.get("column", "test"), c["a"], c["b"])
        if c["dataset"] in spec.datasets and (c["a"], c["b"]) in spec.pairs and key[2] in spec.tested:
            out.setdefault(key, {**c, "table": spec.id})
    return list(out.values())


def table_spec(table_id: str) -> TableSpec:
    for spec in TABLES:
        if spec.id == table_id:
            return spec
    raise KeyError(table_id)


def required_inputs(specs: Iterable[TableSpec] = TABLES) -> list[tuple[str, str]]:
    """Every (dataset, method) the tables need, in first-use order."""
    seen: dict[tuple[str, str], None] = {}
    for spec in specs:
        for ds in spec.datasets:
            for m in spec.method_ids:
                seen.setdefault((ds, m), None)
    return list(seen)


def comparison_groups(spec: TableSpec, scores: Scores
                      ) -> Iterator[tuple[str, str, str, dict[str, Sequence[float]]]]:
    """(dataset, pct, column, {method: scores}) for every marked group, methods in table order.

    Methods without scores are left out (so a partial report still compares what it has).
    """
    for ds in spec.datasets:
        for pct in PCTS:
            for col in spec.tested:
                group = {m: scores[(ds, m, pct, col)] for m in spec.method_ids
                         if (ds, m, pct, col) in scores}
                if len(group) >= 2:
                    yield ds, pct, col, group


# ---------------------------------------------------------------------------------------------
# Published values

Published = dict[str, dict[tuple[str, str], tuple[float, float | None, str]]]


def parse_published(doc: Mapping[str, Any], source: str = "paper_results.yaml") -> Published:
    """{table: {(pct, column name): (mean, std | None, mark)}} from the paper-results document."""
    out: Published = {}
    for spec in TABLES:
        if not spec.has_published:
            continue
        entry = doc.get(spec.id)
        if not isinstance(entry, Mapping) or "columns" not in entry or "rows" not in entry:
            raise DataError(f"{source}: table '{spec.id}' missing or without columns/rows")
        columns = list(entry["columns"])
        table: dict[tuple[str, str], tuple[float, float | None, str]] = {}
        for pct, row in entry["rows"].items():
            if len(row) != len(columns):
                raise DataError(f"{source}: {spec.id} row {pct} has {len(row)} cells for "
                                f"{len(columns)} columns")
            for name, cell in zip(columns, row):
                mean, std, mark = cell
                table[(str(pct), name)] = (float(mean), None if std is None else float(std),
                                           str(mark or ""))
        out[spec.id] = table
    return out
