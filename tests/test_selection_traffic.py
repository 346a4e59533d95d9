"""The communication table's model-selection total from runs/select's trial records
(esnfed_stages/report/selection_traffic.py, esnfed_core.communication.selection_columns): every trial counted at its
own N, IP rounds and λ values, so the total is the sum of the trials' ledgers, computed here by hand
from the message shapes, and not trials × the selected config's; the rest of the communication
table is unchanged by it; a damaged trial record is one error naming its file."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import yaml

from esnfed_core.errors import DataError
from esnfed_core.method import Method
from esnfed_core.communication import Communication, communication_rows
from esnfed_stages.report.table_specs import required_inputs
from esnfed_core.vocabulary import PCTS
from esnfed_stages.experiment import select as select_stage
from esnfed_stages.report import selection_traffic
from esnfed_stages.params.experiment import experiment_params
from esnfed_stages.report.report_inputs import communication_items, validation_sizes
from esnfed_stages.report.report_params import report_params
from esnfed_stages.report.tables import communication_csv
from esnfed_stages.report.ttest import load_inputs
from experiment_data import VALIDATION, make_dataset, small_params
from test_report import PARAMS, write_assess

K, C, V = 3, 4, 2  # training clients, classes (WESAD's), validation users
F32, F64, INT = 4, 8, 8  # bytes: (g, b) in float32, statistics and readouts in float64, a count
# (N, IP rounds, λ values scored) of each hand-built trial: other N and rounds than the selected one
# (trial 1), and trial 2 scored a single λ (one fixed in its config)
TRIALS = [(10, 2, 7), (20, 5, 7), (30, 3, 1)]
SELECTED = 1


def fedip_training(n: int, rounds: int) -> tuple[int, int]:
    """(up, down) bytes of one FedIP trial: every client's (g, b) and a count each way in each IP
    round, then IncFed: statistics A (N×N) and B (N·C) with 2 counts up, the readout down."""
    ip = rounds * K * (2 * n * F32 + INT)
    return ip + K * ((n * n + n * C) * F64 + 2 * INT), ip + K * (n * C * F64 + INT)


def fedavg_training(n: int) -> tuple[int, int]:
    """(up, down) bytes of the FedAvg round a trial keeps (readout.bias: N+1 columns)."""
    readout = (n + 1) * C * F64 + INT
    return K * readout, K * readout


def fedip_trial(n: int, rounds: int, lambdas: int) -> int:
    """One FedIP trial in total: training, then each validation client gets (g, b) and every λ's
    readout and answers a count per readout and its steps."""
    validation = V * ((2 * n * F32 + INT) + lambdas * (n * C * F64 + INT)) + V * INT * (lambdas + 1)
    return sum(fedip_training(n, rounds)) + validation


def fedavg_trial(n: int, lambdas: int) -> int:
    """One FedAvg trial (bias): its kept round, the validation scoring and its other λ rounds."""
    readout = (n + 1) * C * F64 + INT
    return sum(fedavg_training(n)) + V * lambdas * readout + V * INT * (lambdas + 1) + 2 * K * (lambdas - 1) * readout


def write_share(select: Path, method: str, pct: str = "25", ds: str = "wesad") -> Path:
    """runs/select/<ds>/<method>/<pct>: best.json (trial 1 selected) and TRIALS as select writes them."""
    share = select / ds / method / pct
    share.mkdir(parents=True)
    for i, (n, rounds, lambdas) in enumerate(TRIALS):
        up, down = fedavg_training(n) if method == "fedavg" else fedip_training(n, rounds)
        comm = {"up_floats": 1, "up_bytes": up, "down_floats": 1, "down_bytes": down, "rounds": rounds + 1,
                "clients": K, **({"readout_bias": True} if method == "fedavg" else {})}
        config = {"units": n, "rounds": rounds, "sigma": 0.3}
        scores = {"score": 0.5, "accuracy": 0.5, "lambda": 0.1}
        if not method.startswith("fedclip"):
            scores["per_lambda"] = [0.5] * lambdas
        (share / f"trial-{i:04d}.json").write_text(json.dumps({
            "dataset": ds, "method": method, "pct": pct, "index": i, "seed": 7, "config": config, "key": "k",
            "seconds": 1.0, "status": "ok", "scores": scores, "selected_config": {**config, "lambda": 0.1},
            "communication": comm, "error": None, "traceback": None}))
    n, rounds, _ = TRIALS[SELECTED]
    (share / "best.json").write_text(json.dumps({"dataset": ds, "method": method, "pct": pct, "trial": SELECTED,
                                                 "n_trials": len(TRIALS), "config": {"units": n, "rounds": rounds}}))
    return share


def _row(method: str, trials) -> dict:
    """The communication row of ``method`` at the selected trial's sizes, with ``trials``."""
    n, rounds, _ = TRIALS[SELECTED]
    up, down = fedavg_training(n) if method == "fedavg" else fedip_training(n, rounds)
    return communication_rows([Communication("wesad", "25", method, 1, 1, up, down, rounds + 1, K, n, C,
                                             ip_rounds=rounds, readouts=1, readout_bias=method == "fedavg",
                                             validation_clients=V, selection=trials)])[0]


@pytest.mark.parametrize("method, per_trial", [
    ("fedip", lambda n, r, lam: fedip_trial(n, r, lam)), ("fedavg", lambda n, r, lam: fedavg_trial(n, lam))])
def test_the_total_is_the_sum_of_each_trial_at_its_own_sizes(tmp_path, method, per_trial):
    write_share(tmp_path, method)
    trials = selection_traffic.load(tmp_path, [("wesad", method)])[("wesad", method, "25")]
    row = _row(method, trials)
    expected = [per_trial(*t) for t in TRIALS]
    assert (row["selection_trials"], row["selection_bytes"]) == (3, sum(expected))
    # what the estimate gave (trials × the selected config's trial) is another number
    assert row["selection_bytes"] != len(TRIALS) * expected[SELECTED]
    only_selected = _row(method, (trials[SELECTED],) * len(TRIALS))
    assert only_selected["selection_bytes"] == len(TRIALS) * expected[SELECTED]


def test_fedip_by_hand():
    """The helpers' numbers, worked out once (K = 3, C = 4, V = 2; (g, b) 88 bytes, a readout 328)."""
    # N = 10, 2 rounds: up 2·3·88 + 3·(140·8 + 16) = 3936, down 528 + 3·328 = 1512,
    # validation 2·(88 + 7·328) + 2·8·8 = 4896
    assert fedip_trial(10, 2, 7) == 3936 + 1512 + 4896
    assert fedip_training(20, 5) == (5 * 3 * 168 + 3 * (480 * 8 + 16), 5 * 3 * 168 + 3 * (80 * 8 + 8))


def test_the_report_reads_the_records_and_only_the_selection_columns_change(tmp_path):
    write_assess(tmp_path)
    parts = tmp_path / "data" / "partitions"
    parts.mkdir(parents=True)
    (parts / "wesad.json").write_text(json.dumps({"validation": ["a", "b"]}))  # V = 2
    select = tmp_path / "runs" / "select"
    write_share(select, "fedip")
    write_share(select, "fedavg", pct="50")
    inputs = load_inputs(tmp_path / "runs" / "assess", required_inputs())
    options = report_params(yaml.safe_load(PARAMS))
    sizes = validation_sizes(options, inputs, tmp_path / "data", select)
    rows = communication_rows(communication_items(inputs, validation=sizes))
    plain = communication_rows(communication_items(inputs, validation=validation_sizes(
        options, inputs, tmp_path / "data", tmp_path / "absent")))
    by = {(r["dataset"], r["pct"], r["method"]): r for r in rows}
    assert by[("wesad", "25", "fedip")]["selection_bytes"] == sum(fedip_trial(*t) for t in TRIALS)
    assert by[("wesad", "50", "fedavg")]["selection_bytes"] == sum(fedavg_trial(n, lam) for n, _, lam in TRIALS)
    counted = {k for k, r in by.items() if r["selection_bytes"] is not None}
    assert counted == {("wesad", "25", "fedip"), ("wesad", "50", "fedavg")}  # no records elsewhere: n/a
    # every other column of the CSV byte for byte as without any record
    table, before = (list(csv.DictReader(io.StringIO(communication_csv(r)))) for r in (rows, plain))
    drop = ("selection_trials", "selection_bytes")
    assert [{k: v for k, v in r.items() if k not in drop} for r in table] == \
        [{k: v for k, v in r.items() if k not in drop} for r in before]
    assert all(r["selection_bytes"] == "" for r in before)


def test_fedclip_trials_are_counted_and_their_bytes_not_totalled(tmp_path):
    write_share(tmp_path, "fedclip-naive")  # no per_lambda: a continual trial scores no λ grid
    trials = selection_traffic.load(tmp_path, [("wesad", "fedclip-naive")])[("wesad", "fedclip-naive", "25")]
    assert [t.lambdas for t in trials] == [None] * 3 and [t.units for t in trials] == [10, 20, 30]
    row = communication_rows([Communication("wesad", "25", "fedclip-naive", 1, 1, 1, 1, 4, K, 20, C,
                                            validation_clients=V, selection=trials)])[0]
    assert (row["selection_trials"], row["selection_bytes"]) == (3, None)


def test_unknown_without_best_json_or_without_any_record(tmp_path):
    assert selection_traffic.load(tmp_path / "absent", [("wesad", "fedip")]) == {}
    share = write_share(tmp_path, "fedip")
    for p in share.glob("trial-*.json"):
        p.unlink()
    assert selection_traffic.share_trials(tmp_path, "wesad", "fedip", "25") is None  # best.json alone
    assert selection_traffic.load(tmp_path, [("wesad", "fedip")]) == {("wesad", "fedip", p): None for p in PCTS}


def _drop(key: str, sub: str | None = None):
    def edit(rec: dict) -> None:
        del (rec[sub] if sub else rec)[key]
    return edit


@pytest.mark.parametrize("edit, problem", [
    (_drop("up_bytes", "communication"), r"communication\.up_bytes: missing"),
    (_drop("communication"), r"communication: missing"),
    (_drop("units", "selected_config"), r"selected_config\.units: expected a positive integer, got None"),
    (_drop("per_lambda", "scores"), r"scores\.per_lambda: expected the validation score of each λ scored"),
    (lambda rec: rec.update(status="failed"), r"status: expected \"ok\""),
    (lambda rec: rec["communication"].update(down_bytes=-1), r"communication\.down_bytes: expected an integer >= 0"),
    ("corrupt", r"trial-0001\.json"), ("gone", r"trial-0001\.json: not found"),
])
def test_a_damaged_trial_record_is_one_error_naming_it(tmp_path, edit, problem):
    share = write_share(tmp_path, "fedip")
    path = share / "trial-0001.json"
    if edit == "corrupt":
        path.write_text('{"status": "ok", ')
    elif edit == "gone":
        path.unlink()
    else:
        rec = json.loads(path.read_text())
        edit(rec)
        path.write_text(json.dumps(rec))
    with pytest.raises(DataError, match=problem) as err:
        selection_traffic.load(tmp_path, [("wesad", "fedip")])
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).endswith("rerun `esnfed select --dataset wesad --algo fedip --pct 25`")


def test_a_real_fedip_selection_sums_its_trials_as_they_ran(tmp_path):
    """select itself writes the records: 4 FedIP trials over units {8, 12} and rounds {1, 2}; each
    trial's recorded training bytes are its own config's (by hand from the message shapes) and the
    total adds each one's validation scoring of every λ."""
    make_dataset(tmp_path)  # 3 classes
    params = small_params()
    params["budgets"]["default"]["trials"] = 4
    select_stage.run("wesad", Method("fedip"), ["25"], experiment_params(params), data_dir=tmp_path / "data",
                     runs_dir=tmp_path / "runs")
    trials = selection_traffic.share_trials(tmp_path / "runs" / "select", "wesad", "fedip", "25")
    records = [json.loads(p.read_text())
               for p in sorted((tmp_path / "runs" / "select" / "wesad" / "fedip" / "25").glob("trial-*.json"))]
    sizes = [(r["selected_config"]["units"], r["selected_config"]["rounds"]) for r in records]
    assert len(trials) == 4 and len(set(sizes)) > 1  # the trials drew other sizes than one another
    c, v, lam = 3, len(VALIDATION), len(params["readout"]["lambdas"])
    total = 0
    for t, (n, rounds) in zip(trials, sizes):
        k = t.clients
        ip = rounds * k * (2 * n * F32 + INT)
        assert (t.units, t.lambdas, t.up_bytes, t.down_bytes) == (
            n, lam, ip + k * ((n * n + n * c) * F64 + 2 * INT), ip + k * (n * c * F64 + INT))
        total += t.up_bytes + t.down_bytes + v * ((2 * n * F32 + INT) + lam * (n * c * F64 + INT)) + v * INT * (lam + 1)
    row = communication_rows([Communication("wesad", "25", "fedip", 1, 1, 1, 1, 1, trials[0].clients, 8, c,
                                            validation_clients=v, selection=trials)])[0]
    assert row["selection_bytes"] == total
