"""The privacy table and figure (esnfed_stages/report/privacy_report.py) on made-up privacy documents:
the cells' spread, the header, the figure's legend and lines, and user datasets beside the papers'."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest

from esnfed_stages.report import privacy_report
from esnfed_stages.params.privacy import privacy_params
from esnfed_stages.layout import eps_key
from esnfed_stages.params.load import load_params

PRIVACY = {"epsilons": [1, 8, float("inf")], "delta": "auto", "relation": "user", "clip": 0.003,
           "ip_clip": 0.1, "pct": "100", "methods": ["incfed", "fedip"]}
# The shape of the default run's WESAD numbers (reports of /tmp/ci): the two ε = ∞ means 0.16 apart.
ACCURACY = {"incfed": {"1": [0.38, 0.26], "8": [0.47, 0.377], "inf": [0.7155, 0.7073]},
            "fedip": {"1": [0.30, 0.255], "8": [0.467, 0.362], "inf": [0.7149, 0.7048]}}


def privacy_doc(dataset: str = "wesad", n_users: int = 9, params: dict | None = None,
                accuracy: dict | None = None, source: str | None = "synthetic", budget: str = "default") -> dict:
    """runs/privacy/<dataset>.json as `esnfed privacy` writes it (made-up accuracies)."""
    pp = privacy_params({"privacy": params or PRIVACY})
    accuracy = accuracy or ACCURACY
    methods = {m: {"config": {}, "releases": 1, "epsilons": {
        eps_key(e): {"noise_multiplier": 0.0 if e == float("inf") else 8 / e,
                     "test_accuracy": accuracy[m][eps_key(e)]} for e in pp.epsilons}} for m in pp.methods}
    doc = {"dataset": dataset, "pct": pp.pct, "n_users": n_users, "n_units": n_users,
           "delta": pp.delta_for(n_users), "relation": pp.relation, "clip": pp.clip_for(dataset),
           "ip_clip": pp.ip_clip_for(dataset),
           "mechanism": "Gaussian mechanism (esnfed_core/privacy.py)", "accountant": "dp-accounting PLD",
           "seeds": [11, 12], "version": "0", "params": pp.record(budget), "methods": methods}
    if source is not None:
        doc["source"] = source
    return doc


def _csv(files: dict) -> list[dict]:
    return list(csv.DictReader(io.StringIO(files["privacy.csv"].decode())))


def test_cells_are_mean_and_population_std_as_every_other_table():
    """The audit: WESAD incfed at ε = inf read 71.14 ± 0.58 (sample std) in privacy.md but
    71.14 ± 0.41 in ijcnn-wesad.md for the same scores (population std, PROTOCOL §6)."""
    files = privacy_report.render({"wesad": privacy_doc()})
    row = next(r for r in _csv(files) if r["method"] == "incfed" and r["epsilon"] == "inf")
    assert float(row["std"]) == pytest.approx(100 * np.std([0.7155, 0.7073]))  # 0.41, not 0.58
    assert f"71.14 ± {100 * np.std([0.7155, 0.7073]):.2f} |" in files["privacy.md"].decode()
    assert "mean ± population std over the 2 retrains" in files["privacy.md"].decode()


def test_the_noise_multiplier_is_printed_at_a_finite_eps_only_and_no_column_repeats_eps_inf():
    """The audit: the ε=inf cells read `(z=0.00)`, a noise multiplier of no mechanism, and a
    'non-private' column, never explained, repeated their means without ±; the title wrote
    `100 % share` where every other table writes `100%`."""
    md = privacy_report.render({"wesad": privacy_doc()})["privacy.md"].decode().splitlines()
    assert md[0] == "# Test accuracy (%) under differential privacy, 100% training users: IncFed and FedIP"
    head = next(line for line in md if line.startswith("| dataset"))
    assert head == "| dataset | method | ε=1 | ε=8 | ε=inf |"
    row = next(line for line in md if line.startswith("| WESAD | incfed"))
    assert row.endswith(f"(z=1.00) | 71.14 ± {100 * np.std([0.7155, 0.7073]):.2f} |")  # 8 / ε = 1
    assert row.count("(z=") == 2 and "z=0.00" not in row
    assert any(line.startswith("- ε = inf: no mechanism") and "so no z" in line for line in md)


def _repo_params() -> dict:
    return load_params(Path(__file__).resolve().parents[1] / "params.yaml")


def _write(folder: Path, docs: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for ds, doc in docs.items():
        (folder / f"{ds}.json").write_text(json.dumps(doc))
    return folder


def _options(params: dict | None = None, privacy: dict | None = None, **kw):
    """The report's options: params.yaml's budget, ``privacy`` (default PRIVACY) as the section."""
    from esnfed_stages.params.experiment import budget_spec
    from esnfed_stages.report.report_params import ReportParams

    params = params or _repo_params()
    return ReportParams("100", budget=budget_spec(params),
                        privacy_record=privacy_params({"privacy": privacy or PRIVACY}).record(params["budget"]), **kw)


def _report(folder: Path, options=None) -> tuple[list[str], object]:
    """The privacy table's header lines (without their '- ') and the Report, as `esnfed report` adds them."""
    from esnfed_stages.report import report

    rep = report.Report()
    report.add_privacy(rep, folder, "2026-01-01", options or _options())
    md = rep.tables["privacy.md"].decode().splitlines()
    return [line[2:] for line in md[2:md.index("", 2)]], rep


def test_the_header_says_what_every_table_header_says(tmp_path):
    """The audit: the index promises that each table's header says its data source, budget and
    retrains; privacy.md said none of them, nor that the synthetic data under budget `default` is
    not the papers' protocol (the line every table with published values carries)."""
    folder = _write(tmp_path, {"wesad": privacy_doc(), "hhar": privacy_doc("hhar", 5)})
    header, _ = _report(folder)
    assert header[0] == ("Data source: synthetic; budget: default; retrains per cell: 2 "
                         "(seeds [11, 12])")
    assert header[1].startswith("**Not comparable with the published values:** this run used the embedded "
                                "synthetic data (data.source: synthetic), not the real recordings, and budget "
                                "`default` (3 trials, 2 retrains, units 20–40), not the papers' protocol")
    # The audit: it spoke of "'paper' columns" as if this table had one.
    assert "This table has no 'paper' column (the papers publish no private results); its ε=inf cells are the " \
           "non-private runs that the IncFed and FedIP tables (ijcnn-*.md, fedip.md) show at 100% training users " \
           "beside the published values: absolute accuracies differ" in header[1]
    assert "columns are the published values" not in header[1]
    assert header[-2].startswith("Date: 2026-01-01; versions: esnfed ")
    assert "mean ± population std over the 2 retrains" in header[-3]
    assert header[-1] == "Missing inputs (n/a cells): none"


def test_a_document_without_source_or_budget_reads_unknown_and_the_real_paper_run_is_the_protocol(tmp_path):
    old = privacy_doc(source=None)
    del old["params"]  # written before the document recorded them
    header, _ = _report(_write(tmp_path / "old", {"wesad": old}), _options(datasets=("wesad",)))
    assert header[0].startswith("Data source: unknown; budget: unknown; retrains per cell: 2")
    params = _repo_params()
    params["budget"] = "paper"
    real = {ds: privacy_doc(ds, source="raw", budget="paper") for ds in ("wesad", "hhar")}
    header, _ = _report(_write(tmp_path / "real", real), _options(params))
    assert header[0].startswith("Data source: raw; budget: paper; retrains per cell: 2")
    assert header[1].startswith("Protocol: the papers' (PROTOCOL §6)") and "Not comparable" not in "".join(header)
    assert header[1].endswith(". This table has no 'paper' column (the papers publish no private results); "
                              "its ε=inf cells are the non-private runs that the IncFed and FedIP tables (ijcnn-*.md, fedip.md) show at 100% training "
                              "users beside the published values.")


def _artists(ax):
    """(DP line, its ε = ∞ line, its ε = ∞ point) per method label of one panel."""
    from matplotlib.lines import Line2D

    out = {}
    for container in ax.containers:  # errorbar: (line, caps, bars); DP lines carry the label
        line = container.lines[0]
        label = container.get_label()
        if label.endswith("(DP)"):
            out.setdefault(label.removesuffix(" (DP)"), {})["dp"] = line
        else:
            out.setdefault(None, []).append(line)
    for line in ax.lines:
        if isinstance(line, Line2D) and "without DP" in line.get_label():
            out[line.get_label().split(" without DP")[0]]["inf"] = line
    return out


def test_the_figure_keeps_the_legend_off_the_panels_and_both_lines_without_dp_in_sight():
    """The audit: the HHAR panel's legend sat over the dashed ε = ∞ lines; on WESAD the two dashed
    lines (70.98 vs 71.14) drew over each other, one invisible; δ read 0.0123 beside the table's 0.01235."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import to_hex

    docs = {"wesad": privacy_doc(), "hhar": privacy_doc("hhar", 5)}
    fig = privacy_report.draw(docs)
    FigureCanvasAgg(fig).draw()
    axes = fig.axes
    legends = [ax.get_legend() for ax in axes if ax.get_legend() is not None] + list(fig.legends)
    assert legends
    for legend in legends:
        box = legend.get_window_extent()
        assert not any(box.overlaps(ax.get_window_extent()) for ax in axes)
    table = privacy_report.render(docs)["privacy.md"].decode()
    for ax, (ds, doc) in zip(axes, docs.items()):
        art = _artists(ax)
        inc, fed = art["IncFed"], art["FedIP"]
        for method in (inc, fed):  # the line without DP in its method's colour
            assert to_hex(method["inf"].get_color()) == to_hex(method["dp"].get_color())
        assert to_hex(inc["dp"].get_color()) != to_hex(fed["dp"].get_color())
        assert inc["inf"].get_linestyle() != fed["inf"].get_linestyle()  # dashed and dotted: both show
        points = art[None]  # ε = ∞ as a point per method, side by side at the ∞ tick
        assert len(points) == 2 and points[0].get_xdata()[0] != points[1].get_xdata()[0]
        assert [t.get_text() for t in ax.get_xticklabels()][-1] == "∞"
        delta = f"{doc['delta']:.4g}"
        assert f"δ = {delta})" in ax.get_title() and f"{'WESAD' if ds == 'wesad' else 'HHAR'} {delta} (" in table
    assert "δ = 1e-05" in axes[0].get_title()


def test_the_figure_names_its_share_of_training_users():
    """Figure audit: the table's title says "100% training users" (privacy.pct), the figure said
    nothing of which share its models were trained on."""
    fig = privacy_report.draw({"wesad": privacy_doc(), "hhar": privacy_doc("hhar", 5)})
    assert fig.get_suptitle().startswith("Differential privacy, 100% training users: test accuracy against ε")
    other = privacy_doc(params={**PRIVACY, "pct": "50"})
    assert privacy_report.draw({"wesad": other}).get_suptitle().startswith("Differential privacy, 50% training users:")


def test_a_declared_dataset_of_your_own_gets_its_rows_after_the_papers(tmp_path):
    """The report read runs/privacy/{wesad,hhar}.json only (DATASET_ORDER); now
    every declared dataset, the papers' first, then the user's in params.yaml order."""
    docs = {"zeta": privacy_doc("zeta", 6, source="import"), "wesad": privacy_doc(),
            "alpha": privacy_doc("alpha", 4, source="import"), "hhar": privacy_doc("hhar", 5)}
    folder = _write(tmp_path, docs)
    header, rep = _report(folder, _options(datasets=("zeta", "wesad", "alpha", "hhar")))
    md = rep.tables["privacy.md"].decode()
    rows = [line.split(" | ")[:2] for line in md.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert rows == [["| WESAD", "incfed"], ["| WESAD", "fedip"], ["| HHAR", "incfed"], ["| HHAR", "fedip"],
                    ["| zeta", "incfed"], ["| zeta", "fedip"], ["| alpha", "incfed"], ["| alpha", "fedip"]]
    assert [r["dataset"] for r in _csv(rep.tables)][::6] == ["wesad", "hhar", "zeta", "alpha"]
    assert "δ = WESAD 1e-05 (min(1e-5, 1/(10·n)), n = 9 users), HHAR 1e-05 (min(1e-5, 1/(10·n)), n = 5 users), " \
           "zeta 1e-05 (min(1e-5, 1/(10·n)), n = 6 users), alpha 1e-05 (min(1e-5, 1/(10·n)), n = 4 users)" in md
    # The audit: "Data source: import, synthetic" above "this run used ... (data.source:
    # synthetic)": the run line names the datasets of each source where they differ.
    assert header[0].startswith("Data source: import (zeta, alpha), synthetic (WESAD, HHAR); budget: default")
    assert "(data.source: synthetic)" in header[1]
    assert "Missing inputs (n/a cells): none" in header and rep.missing == []
    fig = privacy_report.draw(privacy_report.load(folder, datasets=("zeta", "wesad", "alpha", "hhar")))
    assert [ax.get_title().split(" (")[0] for ax in fig.axes] == ["WESAD", "HHAR", "zeta", "alpha"]
    only_own = _write(tmp_path / "own", {"mine": privacy_doc("mine", 4, source="import")})
    header, _ = _report(only_own, _options(datasets=("mine",)))
    assert not any("Not comparable" in line for line in header)  # no published values on the user's alone


def test_a_missing_privacy_output_is_refused_or_shown_as_n_a_as_an_assess_file(tmp_path):
    """Without --allow-missing a declared dataset's privacy output not written is one error naming
    it and the command; with it, its rows read n/a, the header and `esnfed report` list it; with no
    privacy output at all the stage did not run: no table, nothing missing (as before)."""
    from esnfed_core.errors import DataError

    folder = _write(tmp_path / "privacy", {"wesad": privacy_doc(), "hhar": privacy_doc("hhar", 5)})
    options = _options(datasets=("wesad", "hhar", "mine", "other"))
    with pytest.raises(DataError) as info:
        _report(folder, options)
    assert str(info.value) == (f"{folder / 'mine.json'}: not found: run `esnfed privacy --dataset mine` first, "
                               "or pass --allow-missing (1 more privacy file(s) missing)")
    from esnfed_stages.report import report

    rep = report.Report()
    report.add_privacy(rep, folder, "2026-01-01", options, allow_missing=True)
    md = rep.tables["privacy.md"].decode()
    assert f"- Missing inputs (n/a cells): {folder / 'mine.json'}, {folder / 'other.json'}" in md
    assert "| mine | incfed | n/a | n/a | n/a |" in md and "| other | fedip | n/a | n/a | n/a |" in md
    assert rep.missing == [folder / "mine.json", folder / "other.json"]
    empty = report.Report()
    report.add_privacy(empty, tmp_path / "none", "2026-01-01", options)
    assert "privacy.md" not in empty.tables and "privacy.png" not in empty.figures and empty.missing == []


@pytest.mark.parametrize("key, per_dataset, once", [
    ("clip", "(clip = WESAD 0.003, HHAR 0.003, mine 0.01)", "(clip = 0.003)"),
    # as clip: FedIP's bound was the first document's ip_clip, for every dataset
    ("ip_clip", "clipped to WESAD 0.1, HHAR 0.1, mine 0.01 (L2)", "clipped to 0.1 (L2)"),
])
def test_a_clip_per_dataset_is_printed_per_dataset_and_one_clip_once(tmp_path, key, per_dataset, once):
    mapping = {**PRIVACY, key: {"wesad": PRIVACY[key], "hhar": PRIVACY[key], "mine": 0.01}}
    docs = {ds: privacy_doc(ds, n, params=mapping) for ds, n in (("wesad", 9), ("hhar", 5), ("mine", 4))}
    _, rep = _report(_write(tmp_path / "mapping", docs), _options(privacy=mapping, datasets=("wesad", "hhar", "mine")))
    assert per_dataset in rep.tables["privacy.md"].decode()
    _, rep = _report(_write(tmp_path / "number", {"wesad": privacy_doc(), "hhar": privacy_doc("hhar", 5)}))
    assert once in rep.tables["privacy.md"].decode()


def test_auto_delta_is_well_below_one_over_n_and_the_header_states_it(tmp_path):
    """privacy.delta: auto = min(1e-5, 1/(10·n)): the papers' 9 WESAD and 5 HHAR training users get
    δ = 1e-5 (the former 1/n² gave 1/81 and 1/25, not ≪ 1/n); the header names δ and its rule."""
    from esnfed_core.privacy import auto_delta

    pp = privacy_params({"privacy": PRIVACY})
    assert pp.delta_for(9) == auto_delta(9) == 1e-5 and pp.delta_for(5) == auto_delta(5) == 1e-5
    assert auto_delta(20_000) == 1 / 200_000  # 1/(10·n) once it is below the cap
    assert all(auto_delta(n) <= 0.1 / n for n in (1, 5, 9, 100, 20_000))
    docs = {"wesad": privacy_doc(), "hhar": privacy_doc("hhar", 5)}
    header, rep = _report(_write(tmp_path, docs))
    assert ("δ = WESAD 1e-05 (min(1e-5, 1/(10·n)), n = 9 users), HHAR 1e-05 (min(1e-5, 1/(10·n)), n = 5 users)"
            in header)


def test_the_header_states_relation_accountant_epsilon_what_is_not_accounted_and_seeded_noise(tmp_path):
    header, _ = _report(_write(tmp_path, {"wesad": privacy_doc(), "hhar": privacy_doc("hhar", 5)}))
    assert "Neighbouring relation: user-level (add/remove one user = one client); L2 sensitivity = the clipping norm" \
        in header
    assert any(line.startswith("Accountant: dp-accounting PLD") for line in header)
    eps_line = next(line for line in header if line.startswith("ε: "))
    assert eps_line.startswith("ε: 1, 8, inf (columns); Not accounted") and "non-private selection on the same " \
        "training users" in eps_line and "clip / ip_clip, tuned by runs on them" in eps_line
    assert any(line.startswith("Noise: simulation, seeded noise") for line in header)


def test_a_document_computed_under_the_former_auto_delta_is_refused(tmp_path):
    """A runs/privacy document of privacy.delta: auto whose δ is not min(1e-5, 1/(10·n)) (the former
    1/n²) is not rendered under the new rule's name: one line naming the key and the rerun."""
    from esnfed_core.errors import DataError

    old = {**privacy_doc(), "delta": 1 / 81}
    with pytest.raises(DataError, match=r"delta: expected min\(1e-5, 1/\(10·9\)\) = 1e-05 of privacy.delta: auto, "
                                        r"got 0.012345679012345678 \(rerun `esnfed privacy`\)$"):
        _report(_write(tmp_path, {"wesad": old}))


def test_a_fixed_delta_is_not_called_one_over_n_squared(tmp_path):
    fixed = {**PRIVACY, "delta": 1e-5}
    docs = {"wesad": privacy_doc(params=fixed), "hhar": privacy_doc("hhar", 5, params=fixed)}
    _, rep = _report(_write(tmp_path, docs), _options(privacy=fixed))
    assert "- δ = WESAD 1e-05 (privacy.delta), HHAR 1e-05 (privacy.delta)" in rep.tables["privacy.md"].decode()


def test_a_sampled_fedip_run_says_so_in_the_mechanism_line(tmp_path):
    """federated.client_fraction < 1: the document records the fraction and "amplification": "none"
    (esnfed_stages/studies/privacy.py); the mechanism line names them, and a default run's does not."""
    sampled = {**privacy_doc(), "client_fraction": 0.5, "amplification": "none"}
    _, rep = _report(_write(tmp_path / "sampled", {"wesad": sampled, "hhar": privacy_doc("hhar", 5)}))
    md = rep.tables["privacy.md"].decode()
    assert ("noised sum / K (federated.client_fraction 0.5: each round's m = max(1, ⌊fraction·K⌋) sampled clients, "
            "noised sum / m, accounted as without sampling: no amplification; WESAD only)") in md
    _, rep = _report(_write(tmp_path / "default", {"wesad": privacy_doc(), "hhar": privacy_doc("hhar", 5)}))
    assert "client_fraction" not in rep.tables["privacy.md"].decode()


def test_an_amplified_sampled_run_says_which_accounting_in_the_mechanism_line(tmp_path):
    """privacy.amplification: sampling: the document's "amplification": "sampling" turns the clause
    into the amplified accounting's (RDP, replace-one, sensitivity 2·clip), per dataset where they differ."""
    amplified = {**privacy_doc(), "client_fraction": 0.5, "amplification": "sampling"}
    plain = {**privacy_doc("hhar", 5), "client_fraction": 0.5, "amplification": "none"}
    _, rep = _report(_write(tmp_path, {"wesad": amplified, "hhar": plain}))
    md = rep.tables["privacy.md"].decode()
    assert ("noised sum / m, accounted with amplification by sampling without replacement (RDP, replace-one "
            "neighbours: sensitivity 2·clip) for WESAD, the others without amplification)") in md
