"""The SecAgg+ overhead section of the communication table: rows and ratios from
small fake `esnfed flower` documents, and the "not run" section without them."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from esnfed_core.errors import DataError
from esnfed_stages.layout import SECAGG_CSV
from esnfed_stages.report import report, secagg_report


def _doc(app: str, secagg: bool, rows: list[tuple[str, str, int, float, float]], dataset: str = "wesad") -> dict:
    return {"dataset": dataset, "app": app, "secagg": secagg, "pct": "100", "n_clients": 3,
            "config": {"units": 4}, "n_classes": 2,
            "flower": {"bytes": {"rows": [{"phase": ph, "stage": st, "rounds": n, "up_per_client_round": up,
                                           "down_per_client_round": down} for ph, st, n, up, down in rows]}}}


@pytest.fixture
def flower_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "flower" / "wesad"
    folder.mkdir(parents=True)
    docs = {"wesad-incfed-100.json": _doc("incfed", False, [("stats", "plain", 1, 1000.0, 200.0)]),
            "wesad-incfed-secagg-100.json": _doc("incfed", True, [
                ("stats", "setup", 1, 300.0, 100.0), ("stats", "collect_masked_vectors", 1, 1200.0, 500.0)]),
            "wesad-fedip-secagg-100.json": _doc("fedip", True, [("ip", "setup", 2, 50.0, 10.0)])}
    for name, doc in docs.items():
        (folder / name).write_text(json.dumps(doc))
    return tmp_path / "flower"


def test_rows_and_ratios_from_the_flower_documents(flower_dir):
    md, csv_text = secagg_report.render(flower_dir)
    got = list(csv.DictReader(io.StringIO(csv_text)))
    incfed = [r for r in got if r["method"] == "incfed"]
    assert [r["stage"] for r in incfed] == ["setup", "collect_masked_vectors", "total"]
    total = incfed[-1]
    assert float(total["plain_up_bytes"]) == 1000 and float(total["plain_down_bytes"]) == 200
    assert float(total["secagg_up_bytes"]) == 1500 and float(total["secagg_down_bytes"]) == 600
    assert float(total["ratio_up"]) == pytest.approx(1.5) and float(total["ratio_down"]) == pytest.approx(3.0)
    assert float(incfed[0]["ratio_up"]) == pytest.approx(0.3)  # a stage's share of the plain bytes
    # FedIP has no plain run here: its plain bytes and ratios are empty / n/a, its SecAgg+ bytes shown
    fedip_total = [r for r in got if r["method"] == "fedip" and r["stage"] == "total"][0]
    assert fedip_total["plain_up_bytes"] == "" and fedip_total["ratio_up"] == "" and fedip_total["rounds"] == "2"
    # The audit: the datasets as every other table names them, the byte counts as the table above writes
    # its own (thousands separated; it read 1000 | 200 | 1500 beside 1,760.0)
    assert "| WESAD | incfed | 100% | 3 | stats | 1 | **total** | 1,000 | 200 | 1,500 | 600 | 1.50 | 3.00 |" in md
    assert "| WESAD | fedip | 100% | 3 | ip | 2 | **total** | n/a | n/a | 50 | 10 | n/a | n/a |" in md
    assert "| WESAD | incfed | 100% | 3 | stats | 1 | SecAgg+ setup (public keys) |  |  | 300 | 100 | 0.30 | 0.50 |" in md


def test_a_dp_run_in_the_folder_is_not_part_of_the_overhead(flower_dir):
    """`esnfed flower --epsilon` results (a ``dp`` record) written beside the stage's would pair with
    its plain runs twice; the section leaves them out and its rows stay those of the stage's runs."""
    before = secagg_report.render(flower_dir)
    dp = _doc("incfed", True, [("stats", "setup", 1, 9999.0, 9999.0)])
    (flower_dir / "wesad" / "wesad-incfed-secagg-eps4-100.json").write_text(json.dumps({**dp, "dp": {"epsilon": "4"}}))
    assert secagg_report.render(flower_dir) == before
    (flower_dir / "wesad" / "wesad-incfed-secagg-eps4-100.json").write_text(json.dumps(dp))  # without "dp": counted
    assert "9,999" in secagg_report.render(flower_dir)[0]


def test_the_csv_names_each_stage_as_the_markdown_does(flower_dir):
    """Reader audit: the CSV's stage ids (collect_masked_vectors, setup, ...) matched none of the
    Markdown's labels ("SecAgg+ masked vector", ...); stage_label carries the Markdown's name."""
    md, csv_text = secagg_report.render(flower_dir)
    got = [(r["stage"], r["stage_label"]) for r in csv.DictReader(io.StringIO(csv_text)) if r["method"] == "incfed"]
    assert got == [("setup", "SecAgg+ setup (public keys)"), ("collect_masked_vectors", "SecAgg+ masked vector"),
                   ("total", "total")]
    assert all(f"| {label} |" in md for _, label in got[:-1]) and "| **total** |" in md
    assert "`stage` is Flower's stage id" in md and "`stage_label` the name used here" in md


def test_flowers_request_for_the_initial_parameters_has_a_label_too():
    """The audit: the raw id `get_parameters` stood among the readable labels: Flower's
    legacy workflow asks one client for the initial parameters before the first round."""
    doc = {"dataset": "wesad", "app": "incfed", "pct": "100", "secagg": True, "n_clients": 9,
           "flower": {"bytes": {"rows": [{"phase": "stats", "stage": "get_parameters", "rounds": 1,
                                          "up_per_client_round": 90.0, "down_per_client_round": 37.0}]}}}
    row = secagg_report.rows([doc])[0]
    assert (row["stage"], row["stage_label"]) == ("get_parameters", "initial parameters (server asks one client)")
    assert "| initial parameters (server asks one client) |  |  | 90 | 37 |" in secagg_report.markdown([row])


def test_a_sampled_run_names_its_client_fraction_in_the_section():
    """A flower stage result under federated.client_fraction < 1 (its IP rounds went to ⌊f·K⌋
    clients) says so beside its method; the CSV keeps its columns."""
    doc = {"dataset": "wesad", "app": "fedip", "pct": "100", "secagg": True, "n_clients": 4, "client_fraction": 0.75,
           "flower": {"bytes": {"rows": [{"phase": "ip", "stage": "setup", "rounds": 3,
                                          "up_per_client_round": 90.0, "down_per_client_round": 37.0}]}}}
    rows = secagg_report.rows([doc])
    assert "| fedip (f = 0.75) | 100% | 4 | ip | 3 |" in secagg_report.markdown(rows)
    assert "| fedip | 100% |" in secagg_report.markdown(secagg_report.rows([{**doc, "client_fraction": None}]))
    assert secagg_report.csv(rows).splitlines()[0] == ",".join(secagg_report.COLUMNS)


def test_the_section_says_why_plain_is_not_the_table_above(flower_dir):
    """Reader audit: WESAD IncFed 100 % read 3,856 B up / 648 B down in the table above and 5,288 /
    477 as "plain" here, unexplained: the Flower apps never send the readout back (incfed.py saves
    it on the server) and Flower frames each message (docs/flower.md)."""
    md, _ = secagg_report.render(flower_dir)
    assert "never send the readout back (the server solves it and keeps it)" in md
    assert "a ratio down compares with a download without the readout" in md
    assert "an upload of statistics is about 1.4 KB more than the table above's" in md


def test_not_run_without_flower_outputs(tmp_path):
    md, csv_text = secagg_report.render(tmp_path / "absent")
    assert "Not run" in md
    assert csv_text.splitlines() == [",".join(secagg_report.COLUMNS)]


def test_add_secagg_appends_to_the_communication_table(flower_dir):
    rep = report.Report()
    rep.tables["communication.md"] = b"# communication\n"
    report.add_secagg(rep, flower_dir, allow_missing=True)  # the fixture: 3 of wesad's 4 results, no hhar
    md = rep.tables["communication.md"].decode()
    assert md.startswith("# communication\n") and "## SecAgg+ overhead" in md and "| 1.50 | 3.00 |" in md
    assert [p.name for p in rep.missing] == ["wesad-fedip-100.json"] + [
        f"hhar-{a}{s}-100.json" for a in ("incfed", "fedip") for s in ("", "-secagg")]
    assert "- Missing results (their rows left out): " + str(flower_dir / "wesad" / "wesad-fedip-100.json") in md
    assert rep.tables[SECAGG_CSV].decode().count("\n") == 1 + 3 + 2


def test_a_foreign_json_is_one_line_error(flower_dir):
    (flower_dir / "wesad" / "other.json").write_text("{}")
    with pytest.raises(DataError, match="other.json: not an esnfed flower result"):
        secagg_report.render(flower_dir)


def test_a_truncated_json_is_one_line_error_naming_it(flower_dir):
    (flower_dir / "wesad" / "cut.json").write_text('{"flower": ')
    with pytest.raises(DataError, match=r"wesad/cut.json: not valid JSON"):
        secagg_report.render(flower_dir)


def test_both_pipeline_datasets_render_and_an_untracked_folder_is_not_read(flower_dir):
    """The flower stage runs WESAD and HHAR (dvc.yaml foreach = PIPELINE_DATASETS): the section has
    both; a folder the pipeline does not track (e.g. an own dataset's) stays out of it."""
    for ds in ("hhar", "mine"):
        (flower_dir / ds).mkdir()
        for name, doc in {f"{ds}-incfed-100.json": _doc("incfed", False, [("stats", "plain", 1, 800.0, 100.0)], ds),
                          f"{ds}-incfed-secagg-100.json": _doc("incfed", True, [
                              ("stats", "setup", 1, 400.0, 100.0)], ds)}.items():
            (flower_dir / ds / name).write_text(json.dumps(doc))
    md, csv_text = secagg_report.render(flower_dir)
    totals = [(r["dataset"], r["method"]) for r in csv.DictReader(io.StringIO(csv_text)) if r["stage"] == "total"]
    assert totals == [("wesad", "incfed"), ("wesad", "fedip"), ("hhar", "incfed")]
    assert "| HHAR | incfed | 100% | 3 | stats | 1 | **total** | 800 | 100 | 400 | 100 | 0.50 | 1.00 |" in md
    assert "| mine |" not in md


@pytest.mark.parametrize("edit, problem", [
    (lambda d: d.pop("dataset"), "dataset missing (not an esnfed flower result? rerun `esnfed flower`)"),
    (lambda d: d.update(app="zzz"), "app: expected an esnfed flower app, got 'zzz'"),
    (lambda d: d.update(secagg="yes"), "secagg: expected true or false, got 'yes'"),
    (lambda d: d["flower"].pop("bytes"), "flower.bytes.rows missing"),
    (lambda d: d["flower"]["bytes"]["rows"][0].update(up_per_client_round="x"),
     "flower.bytes.rows[0].up_per_client_round: expected a finite number >= 0, got 'x'"),
    # a negative byte count was accepted (NaN was refused)
    (lambda d: d["flower"]["bytes"]["rows"][0].update(up_per_client_round=-5.0),
     "flower.bytes.rows[0].up_per_client_round: expected a finite number >= 0, got -5.0"),
    (lambda d: d["flower"]["bytes"]["rows"][0].update(down_per_client_round=-1),
     "flower.bytes.rows[0].down_per_client_round: expected a finite number >= 0, got -1"),
    (lambda d: d["flower"]["bytes"]["rows"][0].update(rounds=-1),
     "flower.bytes.rows[0].rounds: expected an integer >= 0"),
    (lambda d: d["flower"]["bytes"]["rows"].append(3), "flower.bytes.rows[1]: expected an object, got 3"),
])
def test_a_flower_result_of_the_wrong_shape_is_one_line_naming_file_and_key(flower_dir, edit, problem):
    """Input audit: before, a missing key was a KeyError traceback, an unknown app
    "tuple.index(x): x not in tuple" naming no file, a string byte count a TypeError."""
    path = flower_dir / "wesad" / "wesad-incfed-100.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(DataError) as info:
        secagg_report.render(flower_dir)
    assert str(info.value).startswith(f"{path}: {problem}"), str(info.value)


def test_flower_table_checks_the_fields_it_prints(flower_dir):
    """`esnfed flower-table` reads more of each result (accuracy, λ, the ledger's bytes)."""
    from esnfed_stages.report.flower_table import load_docs

    with pytest.raises(DataError, match=r"wesad-fedip-secagg-100\.json: lambda missing"):
        load_docs(flower_dir / "wesad")
    assert len(load_docs(flower_dir / "wesad", table=False)) == 3


@pytest.mark.parametrize("key", ["flower.bytes.up_per_client.mean", "flower.bytes.down_per_client.mean",
                                 "pipeline.communication.up_bytes", "pipeline.communication.down_bytes"])
def test_flower_table_refuses_a_negative_byte_count(tmp_path, key):
    """Every byte field of a result is a count >= 0 (NaN was refused, -1 was not)."""
    from esnfed_stages.report.flower_table import load_docs

    doc = _doc("incfed", False, [("stats", "plain", 1, 1000.0, 200.0)])
    doc.update({"lambda": 0.1, "flower": {**doc["flower"], "test_accuracy": 0.5, "readout_relative_difference": 0.0},
                "pipeline": {"test_accuracy": 0.5, "communication": {"up_bytes": 400, "down_bytes": 80}}})
    doc["flower"]["bytes"].update(up_per_client={"mean": 1.0}, down_per_client={"mean": 1.0})
    path = tmp_path / "wesad-incfed-100.json"
    path.write_text(json.dumps(doc))
    assert len(load_docs(tmp_path)) == 1
    parent, last = key.rsplit(".", 1)
    node = doc
    for part in parent.split("."):
        node = node[part]
    node[last] = -8
    path.write_text(json.dumps(doc))
    with pytest.raises(DataError) as info:
        load_docs(tmp_path)
    assert str(info.value) == f"{path}: {key}: expected a finite number >= 0, got -8"


def test_a_result_of_another_budget_is_one_line_naming_the_flower_command(flower_dir):
    """Each result records the budget its config was selected under; the report passes params.yaml's
    (tests/test_report.py: the command exits 1 and writes nothing). A result without it is trusted."""
    path = flower_dir / "wesad" / "wesad-incfed-secagg-100.json"
    doc = json.loads(path.read_text())
    doc["params"] = {"budget": "paper"}
    path.write_text(json.dumps(doc))
    assert "**total**" in secagg_report.render(flower_dir, budget="paper")[0]
    with pytest.raises(DataError) as info:
        secagg_report.render(flower_dir, budget="default")
    assert str(info.value) == (f"{path}: computed with budget 'paper' but params.yaml's budget is 'default': rerun "
                               f"`esnfed flower --dataset wesad --app incfed --secagg "
                               f"--out-dir {flower_dir / 'wesad'}`")


def test_a_study_dataset_of_your_own_gets_the_section_in_its_communication_table(flower_dir):
    """study_datasets [wesad, mine]: wesad's SecAgg+ rows in communication.md, mine's in
    communication-mine.md (before: the section went to communication.md alone, and a pipeline of
    your own data alone, which has no communication.md, had none); the CSV holds both; the index
    links the section in each table."""
    from esnfed_stages.report import report_index

    mine = flower_dir / "mine"
    mine.mkdir()
    for name, secagg in (("mine-incfed-100.json", False), ("mine-incfed-secagg-100.json", True)):
        doc = _doc("incfed", secagg, [("stats", "setup" if secagg else "plain", 1, 600.0 if secagg else 400.0, 50.0)],
                   dataset="mine")
        (mine / name).write_text(json.dumps(doc))
    rep = report.Report()
    rep.tables = {"communication.md": b"# communication\n", "communication-mine.md": b"# communication-mine\n"}
    report.add_secagg(rep, flower_dir, datasets=("wesad", "mine"), allow_missing=True)
    papers, own = rep.tables["communication.md"].decode(), rep.tables["communication-mine.md"].decode()
    assert "## SecAgg+ overhead" in own and "| mine | incfed | 100% |" in own and "| 1.50 |" in own
    assert "| mine |" not in papers and "| WESAD | incfed | 100% |" in papers
    rows = list(csv.DictReader(io.StringIO(rep.tables[SECAGG_CSV].decode())))
    assert {r["dataset"] for r in rows} == {"wesad", "mine"}
    index = report_index.render(rep.tables, {}, {}, {}, "d", "v")
    assert "[communication-mine.md, section \"SecAgg+ overhead\"](tables/communication-mine.md#" in index
    assert "[communication.md, section \"SecAgg+ overhead\"](tables/communication.md#" in index
    # your own data alone: no communication.md, the section in communication-mine.md
    alone = report.Report()
    alone.tables = {"communication-mine.md": b"# communication-mine\n"}
    report.add_secagg(alone, flower_dir, datasets=("mine",), allow_missing=True)
    assert "| mine | incfed | 100% |" in alone.tables["communication-mine.md"].decode()
    assert "communication.md" not in alone.tables


def test_once_the_stage_ran_a_missing_result_is_an_error_naming_it_and_the_command(flower_dir, tmp_path):
    """Audit: a Flower result missing (a dataset's folder, or one app's SecAgg+ run) left its rows
    out of the section with exit 0. Once any result of the stage is there, every one it writes
    (secagg_report.PIPELINE_APPS, plain and SecAgg+) must be, as the privacy documents: an error
    naming the first missing and the command that writes it, unless --allow-missing (then listed);
    none there: the stage did not run, the section says so and nothing is missing."""
    rep = report.Report()
    rep.tables["communication.md"] = b"# communication\n"
    with pytest.raises(DataError) as info:
        report.add_secagg(rep, flower_dir, datasets=("wesad",))
    assert str(info.value) == (
        f"{flower_dir / 'wesad' / 'wesad-fedip-100.json'}: not found: run `esnfed flower --dataset wesad --app incfed "
        f"--app fedip --plain-and-secagg --out-dir {flower_dir / 'wesad'}` first, or pass --allow-missing")
    (flower_dir / "wesad" / "wesad-fedip-100.json").write_text(
        json.dumps(_doc("fedip", False, [("ip", "plain", 2, 40.0, 8.0)])))
    report.add_secagg(rep, flower_dir, datasets=("wesad",))  # all four there
    assert rep.missing == [] and "Missing results" not in rep.tables["communication.md"].decode()
    with pytest.raises(DataError, match=r"hhar/hhar-incfed-100.json: not found: .*\(3 more Flower result"):
        report.add_secagg(report.Report(), flower_dir, datasets=("wesad", "hhar"))
    empty = report.Report()
    empty.tables["communication.md"] = b"# communication\n"
    report.add_secagg(empty, tmp_path / "none", datasets=("wesad", "hhar"))
    assert empty.missing == [] and "Not run: no SecAgg+ results" in empty.tables["communication.md"].decode()


def test_runs_at_two_client_fractions_pair_with_their_own_plain_run_and_count_as_the_stage_result(tmp_path):
    """A sampled result is named with its fraction (esnfed_stages.studies.flower.out_name: -f<f>): the
    stage under federated.client_fraction < 1 writes wesad-fedip-f0.5-100.json where f = 1 wrote
    wesad-fedip-100.json, and the report counts it as the stage's FedIP result (a DP run's name,
    -eps<ε>, does not); a folder holding both fractions pairs each SecAgg+ run with the plain run
    of its own fraction."""
    from esnfed_stages.layout import out_name

    folder = tmp_path / "flower" / "wesad"
    folder.mkdir(parents=True)
    for app in ("incfed", "fedip"):
        for secagg in (False, True):
            f = 0.5 if app == "fedip" else None  # IncFed has no IP rounds to sample: no fraction
            doc = {**_doc(app, secagg, [("ip", "plain", 2, 40.0 + 10 * secagg, 8.0)]),
                   **({} if f is None else {"client_fraction": f})}
            (folder / out_name("wesad", app, secagg, "100", fraction=f)).write_text(json.dumps(doc))
    assert not (folder / "wesad-fedip-100.json").exists()
    assert secagg_report.missing(tmp_path / "flower", ("wesad",)) == []
    (folder / "wesad-fedip-f0.5-100.json").rename(folder / "wesad-fedip-f0.5-eps4-100.json")
    assert secagg_report.missing(tmp_path / "flower", ("wesad",), allow_missing=True) == [
        folder / "wesad-fedip-100.json"]
    (folder / "wesad-fedip-f0.5-eps4-100.json").rename(folder / "wesad-fedip-f0.5-100.json")
    # the f = 1 runs beside them, with other bytes: each SecAgg+ run's ratio is against its own fraction
    for secagg in (False, True):
        (folder / out_name("wesad", "fedip", secagg, "100")).write_text(
            json.dumps(_doc("fedip", secagg, [("ip", "plain", 2, 100.0 + 100 * secagg, 8.0)])))
    table = secagg_report.rows(secagg_report.load(tmp_path / "flower", ("wesad",)))
    ratios = {r["sampled"]: r["ratio_up"] for r in table if r["method"] == "fedip" and r["stage"] == "total"}
    assert ratios == {"": 2.0, "f = 0.5": 1.25}
