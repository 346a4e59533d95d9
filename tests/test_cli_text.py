"""What the CLI says: `esnfed <command> --help` explains what the code accepts (every --algo choice
in the option's text, not only listed as a choice; the report's outputs as written), and an error
about a params file names the file that was read (--params)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_core.vocabulary import Algo
from esnfed_stages.params.load import load_params

runner = CliRunner()


def _help(*command: str) -> str:
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "2000"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", ["select", "retrain", "assess"])
def test_every_algo_is_explained(command):
    line = next(l for l in _help(command).splitlines() if "--algo" in l)
    text = line.split("The method:", 1)[1]  # the explanation, after the list of choices
    missing = [a.value for a in Algo if a.value not in text]
    assert not missing, f"--algo help of {command} does not explain {missing}"


def test_report_help_names_its_metrics_folder():
    out = _help("report")
    assert "metrics.json" not in out  # report writes reports/metrics/<dataset>-<method>.json
    assert "metrics/" in out and "<dataset>-<method>.json" in out


@pytest.mark.parametrize("command, reads", [("report", "report_params"), ("ttest", "ttest_params")])
def test_the_params_help_of_ttest_and_report_names_every_section_they_read(command, reads):
    """Report's --params help said "(ttest.* / report.* sections)"; it reads and
    checks privacy, heterogeneity, the budget, the dataset lists and imports too (ttest no report.*)."""
    from esnfed_stages.report import report_params, ttest  # noqa: PLC0415
    from esnfed_stages.params.load import load_params  # noqa: PLC0415

    class Recording(dict):
        def __getitem__(self, key):
            seen.add(key)
            return super().__getitem__(key)

        def get(self, key, default=None):
            seen.add(key)
            return super().get(key, default)

        def __contains__(self, key):
            seen.add(key)
            return super().__contains__(key)

    seen: set[str] = set()
    getattr(report_params if command == "report" else ttest, reads)(Recording(load_params(Path("params.yaml"))))
    line = " ".join(next(l for l in _help(command).splitlines() if "--params" in l).split())
    named = set(re.findall(r"\b([a-z_]+)(?:\.\*|\.<|\b)", line.split("--params", 1)[1]))
    assert seen <= named, f"{command} --params help does not name {sorted(seen - named)}"
    if command == "ttest":
        assert "report." not in line


def test_synthesize_help_names_every_folder_it_writes():
    from esnfed_stages.data._datasets import DIRNAMES, SYNTHESIZED  # noqa: PLC0415

    out = _help("synthesize")
    for name in SYNTHESIZED:
        assert f"<out>/{DIRNAMES[name]}" in out, name


def test_ttest_help_says_which_pairs_are_tested():
    out = " ".join(_help("ttest").split())
    assert "each pair the table's paper compares is tested" in out
    assert "tested against every other method" not in out  # not what esnfed_stages.report.ttest does (RULE)


def test_import_help_says_which_options_are_required():
    out = _help("import")
    for option in ("--features", "--window"):
        line = next(l for l in out.splitlines() if l.lstrip("│ ").startswith(option))
        assert "required unless imports.<dataset>" in line, line


@pytest.mark.parametrize("drop, command", [
    ("ttest", ["ttest", "--allow-missing"]),
    ("heterogeneity", ["select", "--dataset", "wesad", "--algo", "local"]),
])
def test_a_params_error_names_the_file_given_with_params(tmp_path, drop, command):
    """Errors raised after the schema check say "params.yaml: ..."; under --params they name the
    file given, not a params.yaml that may not even exist."""
    doc = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
    doc.pop(drop)
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump(doc))
    result = runner.invoke(app, [*command, "--params", str(mine), "--out" if drop == "ttest" else "--runs-dir",
                                 str(tmp_path / "out")])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {mine}: missing key '{drop}"), lines


def _click_commands():
    import typer.main  # noqa: PLC0415

    group = typer.main.get_command(app)
    return group, group.commands


def test_every_command_and_option_has_help():
    group, commands = _click_commands()
    missing = [f"esnfed {p.opts[0] if p.opts else p.name}" for p in group.params if not (p.help or "").strip()]
    for name, command in commands.items():
        if not (command.help or "").strip():
            missing.append(f"esnfed {name}")
        missing += [f"esnfed {name} {p.opts[0] if getattr(p, 'opts', None) else p.name}"
                    for p in command.params if not (getattr(p, "help", None) or "").strip()]
    assert not missing, f"no help text: {missing}"


def test_every_output_folder_option_answers_to_out_dir():
    """Audit: the output folder was --out in some commands and --out-dir in others. Each option
    that names a folder the command writes into answers to --out-dir (--out stays for the older
    commands' users); --out alone names a file (ttest's JSON, flower-table's Markdown). And the
    folder of Flower results is --flower-dir in flower-table as in report (--runs-dir elsewhere is
    the runs root)."""
    _, commands = _click_commands()
    folder_writers = {"synthesize", "download", "preprocess", "partition", "import", "report", "privacy", "flower"}
    for name in folder_writers:
        opts = {o for p in commands[name].params for o in getattr(p, "opts", [])}
        assert "--out-dir" in opts, name
    for name in ("ttest", "flower-table"):
        opts = {o for p in commands[name].params for o in getattr(p, "opts", [])}
        assert "--out" in opts and "--out-dir" not in opts, name
    flower_table = {o for p in commands["flower-table"].params for o in getattr(p, "opts", [])}
    assert "--flower-dir" in flower_table and "--flower-dir" in {
        o for p in commands["report"].params for o in getattr(p, "opts", [])}


def test_command_help_has_no_line_break_inside_a_paragraph():
    """Docstrings are wrapped at the source's width; Typer's rich mode keeps those breaks, so the
    help must be flowed (esnfed_cli._common.flowed) or it breaks mid-sentence on the terminal."""
    _, commands = _click_commands()
    broken = {name: p for name, c in commands.items() for p in c.help.split("\n\n") if "\n" in p}
    assert not broken, broken


def test_top_level_listing_gives_each_command_one_line():
    """`esnfed --help` on a wide terminal: each command's short help is one row, no continuation
    rows from hard line breaks."""
    _, commands = _click_commands()
    out = _help()
    panel = out.split("Commands")[1].splitlines()[1:]
    rows = [line.strip("│ ").split(None, 1) for line in panel if line.startswith("│")]
    assert [r[0] for r in rows] == list(commands), rows
    assert all(len(r) == 2 and r[1].strip() for r in rows), rows


def test_python_m_esnfed_cli_is_the_esnfed_command():
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from esnfed_core import __version__  # noqa: PLC0415

    result = subprocess.run([sys.executable, "-m", "esnfed_cli", "--version"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0 and result.stdout.strip() == f"esnfed {__version__}", result


def test_no_stray_output_where_stdout_is_no_terminal(tmp_path):
    """A cleared progress display left a blank line on stdout in pipes and logs (before every
    error line, and in `dvc repro`'s output): off where stdout is no terminal."""
    result = runner.invoke(app, ["ttest", "--assess-dir", str(tmp_path / "none"), "--out", str(tmp_path / "t.json")])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("error: "), result.stderr


def test_select_and_retrain_tables_show_configs_in_a_fixed_order_and_explain_only_their_names():
    from types import SimpleNamespace  # noqa: PLC0415

    from esnfed_cli.experiment_cmds import _config, _legend, _where  # noqa: PLC0415

    cfg = {"units": 40, "lambda": 0.5, "leak": 0.1, "spectral_radius": 0.7, "extra": 3}
    assert _config(cfg) == "N=40 ρ=0.7 a=0.1 λ=0.5 extra=3"  # was sorted by key: λ a ρ N
    assert _legend([cfg]) == "N units, ρ spectral radius, a leak, λ ridge"  # no σ, R, E, B: not in the table
    assert [_where(SimpleNamespace(backend=b, n_jobs=n, device="cpu"))
            for b, n in [("loky", 1), ("sequential", 4), ("loky", 4), ("loky", -1), ("loky", -3)]] == [
        "in this process", "in this process", "loky, 4 jobs", "loky, all cores", "loky, all cores but 2"]


def test_an_option_without_a_shown_default_says_what_happens_without_it():
    """Typer shows [default: ...] only for a value; an option defaulting to None must say in its
    help what it defaults to (params.yaml, none, ...) or when it is required."""
    _, commands = _click_commands()
    says = ("default", "required", "without it", "instead of")
    silent = [f"{name} {p.opts[0]}" for name, c in commands.items() for p in c.params
              if not getattr(p, "is_flag", False) and not p.required and p.default is None
              and not any(w in (p.help or "").lower() for w in says)]
    assert not silent, silent


def test_a_failed_trial_listing_keeps_brackets(capsys):
    """An error naming an extra ("needs the [gpu] extra") lost "[gpu]": Rich read it as markup."""
    import typer  # noqa: PLC0415

    from esnfed_cli.experiment_cmds import _fail_listing  # noqa: PLC0415

    with pytest.raises(typer.Exit):
        _fail_listing("trial(s)", [("25", 3, "runner.device: cuda needs torch (install the [gpu] extra)")])
    assert "  25% #3: runner.device: cuda needs torch (install the [gpu] extra)" in capsys.readouterr().err


def test_top_level_help_names_the_commands_outside_the_pipeline():
    """The help said every command is a DVC stage; these are not (dvc.yaml runs none of them)."""
    stages = (Path(__file__).resolve().parents[1] / "dvc.yaml").read_text()
    _, commands = _click_commands()
    by_hand = [name for name in commands if f"cmd: esnfed {name} " not in stages and f"cmd: esnfed {name}\n" not in stages]
    description = " ".join(_help().split("Options")[0].split())  # before the option and command panels
    assert "except" in description, description
    named = description.split("except", 1)[1]
    assert by_hand and all(name in named for name in by_hand), (by_hand, description)


def test_a_flag_shows_no_value_type():
    """Typer's "<bool>" beside --force, --help ... reads as if a value were expected."""
    _, commands = _click_commands()
    shown = {name: _help(*([name] if name else [])) for name in ["", *commands]}
    assert not [name for name, out in shown.items() if "<bool>" in out]
    assert "<path>" in shown["report"]  # the type column itself is still there for options taking a value


def test_usage_lines_name_arguments_in_capitals():
    """Typer wrote `esnfed check-data [OPTIONS] {folder}`: braces read as a placeholder syntax."""
    _, commands = _click_commands()
    usage = {name: next(line for line in _help(name).splitlines() if "Usage:" in line) for name in commands}
    assert " ".join(usage["check-data"].split()) == "Usage: esnfed check-data [OPTIONS] FOLDER"
    assert " ".join(usage["import"].split()) == "Usage: esnfed import [OPTIONS] [SOURCE]"
    assert not [name for name, line in usage.items() if "{" in line]
    missing = runner.invoke(app, ["check-data"])
    assert missing.exit_code == 2 and "check-data [OPTIONS] FOLDER" in missing.output + (missing.stderr or "")


# `esnfed <command> --option ...` as the documents show it: in a code block (a line, with its `\`
# continuations joined) or in an inline code span. Options end at a comment, a pipe or a `;`.
_INVOCATION = re.compile(r"\besnfed((?:\s+--(?:debug|wait))*)\s+([a-z][a-z-]*)([^#;|&`\n]*)")
_FENCED = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def doc_invocations(text: str) -> list[tuple[str, list[str]]]:
    """(command, its --options) of every `esnfed` command line in a Markdown text."""
    lines = [line for block in _FENCED.findall(text) for line in block.replace("\\\n", " ").splitlines()]
    prose = _FENCED.sub("", text)
    lines += re.findall(r"`([^`]*\besnfed [^`]*)`", prose.replace("\n", " "))
    return [(m.group(2), re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", m.group(3)))
            for line in lines for m in _INVOCATION.finditer(line)]


def invocation_problems(text: str) -> list[str]:
    """The commands and options a text's `esnfed` command lines name that the CLI does not have."""
    group, commands = _click_commands()
    problems = []
    for command, options in doc_invocations(text):
        if command not in commands:
            problems.append(f"esnfed {command}")
            continue
        known = {o for p in commands[command].params for o in [*getattr(p, "opts", []),
                                                                  *getattr(p, "secondary_opts", [])]}
        problems += [f"esnfed {command} {o}" for o in options if o not in known | {"--help"}]
    return problems


def test_every_esnfed_command_line_in_the_documents_names_options_the_command_has():
    """The README, BENCHMARKS.md and the user guide in docs/ show how to run each stage by hand; an
    option renamed or removed in the CLI must not survive in them (audit: every documented command
    was run)."""
    root = Path(__file__).resolve().parents[1]
    docs = [root / "README.md", root / "BENCHMARKS.md", *sorted((root / "docs").glob("*.md"))]
    found = {d.name: doc_invocations(d.read_text(encoding="utf-8")) for d in docs}
    # the scanner finds them, in the guide's pages that hold the manual (the README's before it moved there)
    assert sum(map(len, found.values())) > 50, found
    assert all(found[page] for page in ("experiments.md", "own-data.md", "reports.md", "scaling.md")), found
    problems = {d.name: bad for d in docs if (bad := invocation_problems(d.read_text(encoding="utf-8")))}
    assert not problems, problems


@pytest.mark.parametrize("text, expected", [
    ("```bash\nesnfed select --dataset wesad --algo fedip  # --not-an-option\n```", []),
    ("```bash\nesnfed select --dataset wesad \\\n  --algos fedip\n```", ["esnfed select --algos"]),
    ("run `esnfed flower-table --runs-dir runs/x` (former name)", []),
    ("run `esnfed flower-table --flowr-dir x`", ["esnfed flower-table --flowr-dir"]),
    ("`esnfed --debug selekt --dataset wesad`", ["esnfed selekt"]),
    ("`esnfed download --no-unpack`", []),
])
def test_the_invocation_scanner_flags_unknown_commands_and_options(text, expected):
    assert invocation_problems(text) == expected
