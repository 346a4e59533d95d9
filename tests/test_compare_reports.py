"""benchmarks/compare_reports.py: a table cell agrees when mean and std print the same at the
shown decimals and the mark is the same; JSON numbers and selection picks are diffed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "compare_reports.py"
HEADER = "table,dataset,pct,method,column,n,mean,std,p_value,mark,published_mean,published_std\n"


def _load():
    spec = importlib.util.spec_from_file_location("compare_reports", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(root: Path, rows: list[str], metric: float, lam: float) -> Path:
    (root / "reports/tables").mkdir(parents=True)
    (root / "reports/metrics").mkdir()
    (root / "reports/tables/t.csv").write_text(HEADER + "".join(r + "\n" for r in rows))
    # keyed as the report writes it (esnfed_stages/report/report.py metric_files)
    (root / "reports/metrics/wesad-ip.json").write_text(json.dumps({"test": {"025": metric}}))
    best = root / "runs/select/wesad/ip/25/best.json"
    best.parent.mkdir(parents=True)
    best.write_text(json.dumps({"trial": 1, "config": {"lambda": lam}, "scores": {"score": 0.5}}))
    return root


def test_cells_within_the_shown_decimals_agree_and_others_are_listed(tmp_path, capsys):
    mod = _load()
    a = _run(tmp_path / "a", ["t,wesad,25,ip,test,2,61.2341,0.5,,,,", "t,wesad,25,ip,train,2,70.001,1.0,0.01,*,,"],
             0.612341, 1e-5)
    b = _run(tmp_path / "b", ["t,wesad,25,ip,test,2,61.2349,0.5,,,,", "t,wesad,25,ip,train,2,70.011,1.0,0.01,,,"],
             0.612349, 1e-2)
    cells, bad, lines = mod.compare_tables(a, b, 2)
    assert (cells, bad) == (2, 1)  # 61.2341 vs 61.2349 print alike; 70.00 vs 70.01 and the mark do not
    assert "train" in lines[0] and "mean 70.00 vs 70.01" in lines[0] and "mark" in lines[0]
    n, nb, worst, _ = mod.compare_json(a, b, "reports/metrics/*.json")
    assert (n, nb) == (1, 1) and abs(worst - 8e-6) < 1e-12
    assert len(mod.compare_selection(a, b)) == 1
    assert mod.main([str(a), str(a)]) == 0
    assert "2 cells, 0 differ" in capsys.readouterr().out
