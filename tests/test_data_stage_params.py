"""The data stages' params: synthesize, preprocess, partition and
import take frozen objects, checked once; the schema reports the same problems with the
`params.yaml: <key>: ...` messages; declared datasets are cross-checked."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest

from esnfed_core.errors import ConfigError
from esnfed_stages.data import partition, preprocess, synthesize
from esnfed_stages.params.schema import validate
from esnfed_stages.params.load import load_params

REPO = load_params(Path(__file__).resolve().parents[1] / "params.yaml")


def _params(**changes):
    p = copy.deepcopy(REPO)
    for dotted, value in changes.items():
        *path, last = dotted.split("__")
        node = p
        for k in path:
            node = node[k]
        if value is None:
            node.pop(last)
        else:
            node[last] = value
    return p


def test_synthesize_params_are_frozen_and_the_command_line_wins():
    o = synthesize.synthesize_params(REPO, "example", seed=7, out_root="elsewhere")
    assert (o.seed, o.out_root, o.steps, dict(o.kwargs)["subjects"]) == (7, Path("elsewhere"), 10, 10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.seed = 1
    with pytest.raises(TypeError, match="does not support item assignment"):
        o.kwargs["subjects"] = 3
    with pytest.raises(ConfigError, match=r"params.yaml: synthetic.example.seed: "):
        synthesize.synthesize_params(_params(synthetic__example__seed=-1), "example")
    with pytest.raises(ConfigError, match=r"synthetic.example.colour is not a parameter"):
        synthesize.synthesize_params(_params(synthetic__example__colour=1), "example")
    with pytest.raises(ConfigError, match=r"--dataset: expected one of wesad, hhar, example, got 'mine'"):
        synthesize.synthesize_params(REPO, "mine")


def test_preprocess_params_are_frozen_and_papers_only():
    o = preprocess.preprocess_params(REPO, "hhar", source="raw", raw_dir="/x")
    assert (o.source, o.raw_root, o.described["classes"][0]) == ("raw", Path("/x"), "stand")
    with pytest.raises(TypeError, match="does not support item assignment"):
        o.settings["window"] = 3
    with pytest.raises(ConfigError, match="import your own with `esnfed import`"):
        preprocess.preprocess_params(REPO, "example")


def test_partition_fractions_are_seeded_nested_and_bounded():
    o = partition.partition_params(REPO, "example")
    users = [f"P{i:02d}" for i in range(1, 11)]
    a, b = o.resolve(users), o.resolve(users)
    assert a == b
    train = a["train"]
    assert [len(train[p]) for p in ("25", "50", "75", "100")] == [2, 3, 5, 6]
    assert all(set(train[p]) <= set(train["100"]) for p in train)
    assert len(a["validation"]) == 2 and len(a["test"]) == 2
    assert not (set(train["100"]) & set(a["validation"])) and not (set(a["validation"]) & set(a["test"]))
    assert partition.check_partition("example", {"fractions": {"validation": 0.2, "test": 0.2}, "seed": 1}
                                     ).resolve(users) != a
    for value, message in [
        ({"fractions": {"validation": 0.0, "test": 0.2}, "seed": 0}, "partition.example.fractions.validation: "),
        ({"fractions": {"validation": 0.5, "test": 0.5}, "seed": 0}, "validation + test must be below 1"),
        ({"fractions": {"validation": 0.2, "test": 0.2}, "seed": -1}, "partition.example.seed: "),
        ({"fractions": {"validation": 0.2}, "seed": 0}, "fractions must have exactly the keys validation, test"),
        ({"train": {"100": ["a b"]}, "validation": ["v"], "test": ["t"]}, "'a b' is not a plain user name"),
    ]:
        with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("+", r"\+")):
            partition.check_partition("example", value)


def test_integer_user_names_in_fixed_splits_say_to_quote_them():
    """Before: a numeric user column gives users "101", ...; `test: [107, 108]` in params.yaml was
    "must be a non-empty list of user names, got [107, 108]" with no hint. Not converted: YAML reads
    007 as 7, which would name another user than the column's "007"."""
    spec = {"train": {"100": ["101", "102"]}, "validation": ["103"], "test": [107, 108]}
    message = ("partition.example.test: user names are strings, got numbers [107, 108]: quote them as the user "
               "column spells them, e.g. ['107', '108']")
    with pytest.raises(ConfigError) as err:
        partition.check_partition("example", spec)
    assert str(err.value) == f"params.yaml: {message}"
    with pytest.raises(ConfigError) as err:
        validate(_params(partition__example=spec))
    assert str(err.value) == f"params.yaml: {message}"
    spec["test"] = ["107", "108"]
    assert partition.check_partition("example", spec).spec["test"] == ["107", "108"]


@pytest.mark.parametrize("changes, message", [
    ({"imports__example__window": 0}, "params.yaml: imports.example.window: "),
    ({"imports__example__max_gap": 0}, "params.yaml: imports.example.max_gap: "),
    ({"imports__example__time_unit": "h"}, "params.yaml: imports.example.time_unit: expected one of"),
    ({"imports__example__missing": "fill"},
     "params.yaml: imports.example.missing: expected one of refuse, interpolate, drop, got 'fill'"),
    ({"datasets": ["wesad", "Bad-Name"]}, "params.yaml: datasets: 'Bad-Name' is not a dataset name"),
    ({"datasets": ["wesad", "ip"]}, "params.yaml: datasets: 'ip' is not a dataset name"),
    ({"datasets": ["wesad", "hhar", "example", "other"]}, "params.yaml: imports.other: missing"),
    ({"imports__example__context": None, "imports__example__contexts": None},
     "params.yaml: continual_datasets: 'example' has no contexts"),
    ({"continual_datasets": ["mine"]}, "params.yaml: continual_datasets: 'mine' is not in datasets"),
    ({"partition__example": None}, "params.yaml: partition.example: missing"),
    ({"budgets__paper__space__example": None}, "params.yaml: budgets.paper.space.example: missing"),
    ({"partition__example__seed": 1.5}, "params.yaml: partition.example.seed: "),
    # a budget needs the space of each declared dataset, and says so
    ({"budgets__default__space__wesad": None},
     "params.yaml: budgets.default.space.wesad: missing ('wesad' is declared in datasets: every budget searches "
     "its reservoirs)"),
    ({"budgets__paper__space__ip": None}, "params.yaml: budgets.paper.space.ip: missing"),
    # study_datasets: any declared dataset, the papers' or yours; an undeclared one is refused
    ({"study_datasets": ["wesad", "mine"]},
     "params.yaml: study_datasets: 'mine' is not in datasets (wesad, hhar, example)"),
    ({"study_datasets": ["example", "Bad-Name"]}, "params.yaml: study_datasets: 'Bad-Name' is not a dataset name"),
    # what the deep stages of a study dataset read (dvc.yaml lists it as a param)
    ({"budgets__default__space__deep": None},
     "params.yaml: budgets.default.space.deep: missing (study_datasets lists 'wesad': the deep reservoirs search "
     "their layers there)"),
    ({"datasets": ["wesad", "example"]}, "params.yaml: continual_datasets: 'hhar' is not in datasets (wesad, example)"),
    ({"datasets": ["wesad", "example"], "continual_datasets": ["wesad"]},
     "params.yaml: study_datasets: 'hhar' is not in datasets (wesad, example)"),
    ({"study_datasets": ["wesad", "wesad"]}, "params.yaml: study_datasets: lists a value twice"),
    # assess.activation_datasets: as continual and study datasets, only declared ones (assess would skip
    # an undeclared one unseen)
    ({"datasets": ["hhar", "example"], "continual_datasets": ["hhar"], "study_datasets": ["hhar"]},
     "params.yaml: assess.activation_datasets: 'wesad' is not in datasets (hhar, example)"),
    ({"datasets": ["example"], "continual_datasets": [], "study_datasets": [],
      "assess__activation_datasets": ["wesad", "hhar"]},
     "params.yaml: assess.activation_datasets: 'wesad', 'hhar' are not in datasets (example)"),
    # embedded: the embedded data dvc.yaml writes, at least what the run reads (a dataset of `datasets`
    # neither embedded-and-listed nor imported is refused, naming the key)
    ({"embedded__preprocess": {"wesad": "WESAD"}},
     "params.yaml: embedded.preprocess.hhar: missing (datasets lists 'hhar': preprocess@hhar writes "
     "data/processed/hhar)"),
    ({"embedded__synthesize": {"hhar": "HHAR", "example": "EXAMPLE"}},
     "params.yaml: embedded.synthesize.wesad: missing (embedded.preprocess lists 'wesad': preprocess@wesad "
     "depends on data.synthetic_dir/WESAD)"),
    ({"embedded__synthesize": {"wesad": "WESAD", "hhar": "HHAR"}},
     "params.yaml: embedded.synthesize.example: missing (imports.example.source "
     "'data/synthetic/EXAMPLE/recordings.csv' lies in data/synthetic/EXAMPLE, which synthesize@example writes)"),
    ({"embedded__synthesize__wesad": "wesad"},
     "params.yaml: embedded.synthesize.wesad: expected 'WESAD' (the folder under data.synthetic_dir that "
     "`esnfed synthesize --dataset wesad` writes), got 'wesad'"),
    ({"embedded__preprocess__example": "EXAMPLE"},
     "params.yaml: embedded.preprocess: expected some of wesad, hhar (the papers' datasets, or a variant of one: "
     "preprocess.<name>.base; yours are imported), got 'example'"),
    ({"embedded__synthesize__mine": "MINE"},
     "params.yaml: embedded.synthesize: expected some of wesad, hhar, example (the embedded datasets), got 'mine'"),
    ({"embedded__synthesize": ["wesad", "hhar", "example"]},  # a list: dvc.yaml takes the folders from the values
     "params.yaml: embedded.synthesize: expected a mapping of dataset -> folder ({} for none), "
     "got ['wesad', 'hhar', 'example']"),
    ({"embedded__preprocess": None}, "params.yaml: embedded.preprocess: missing"),
    ({"synthetic__hhar": None},
     "params.yaml: synthetic.hhar: missing (embedded.synthesize lists 'hhar': synthesize@hhar reads it)"),
    ({"preprocess__wesad": None},
     "params.yaml: preprocess.wesad: missing (embedded.preprocess lists 'wesad': preprocess@wesad reads it)"),
    # imported: the imports dvc.yaml runs, exactly your own datasets of `datasets`, each with its source
    ({"imported": {}},
     "params.yaml: imported.example: missing (datasets lists 'example': import@example writes "
     "data/processed/example; give it its source, imports.example.source 'data/synthetic/EXAMPLE/recordings.csv')"),
    ({"datasets": ["wesad", "hhar"], "continual_datasets": ["wesad", "hhar"]},
     "params.yaml: imported.example: 'example' is not in datasets (wesad, hhar): import@example would run for no "
     "stage; remove it here to leave the dataset out (imports.example may stay)"),
    ({"imported__example": "data/synthetic/EXAMPLE/old.csv"},
     "params.yaml: imported.example: expected 'data/synthetic/EXAMPLE/recordings.csv' (imports.example.source: "
     "import@example depends on the file it reads), got 'data/synthetic/EXAMPLE/old.csv'"),
    ({"imported__example": ""}, "params.yaml: imported.example: expected a non-empty string, got ''"),
    ({"imported__wesad": "data/raw/WESAD"}, "params.yaml: imported.wesad: 'wesad' is one of the papers' datasets"),
    ({"imported": ["example"]}, "params.yaml: imported: expected a mapping, got ['example']"),
])
def test_schema_names_the_key_of_a_declared_dataset_problem(changes, message):
    with pytest.raises(ConfigError) as err:
        validate(_params(**changes))
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


def test_papers_only_params_without_datasets_keys_still_validate():
    p = _params(datasets=None, continual_datasets=None, study_datasets=None, imports=None, imported=None,
                embedded={"synthesize": {"wesad": "WESAD", "hhar": "HHAR"}, "preprocess": {"wesad": "WESAD", "hhar": "HHAR"}})  # no example: nothing imports it
    validate(p)
    from esnfed_stages.data._datasets import continual_declared, declared, study_declared
    assert declared(p) == ("wesad", "hhar") and continual_declared(p) == ("wesad", "hhar")
    assert study_declared(p) == ("wesad", "hhar")


def test_your_own_data_only_needs_no_space_of_the_papers_datasets():
    """Before: `budgets.tiny.space.wesad: missing` for a budget of a pipeline that never runs wesad."""
    p = _params(datasets=["example"], continual_datasets=["example"], study_datasets=[],
                assess__activation_datasets=[], embedded={"synthesize": {"example": "EXAMPLE"}, "preprocess": {}})
    for budget in p["budgets"].values():
        del budget["space"]["wesad"], budget["space"]["hhar"]
    validate(p)
    from esnfed_stages.data._datasets import study_declared
    assert study_declared(p) == ()
    assert study_declared(_params(datasets=["wesad", "example"], continual_datasets=["wesad"],
                                  study_datasets=None)) == ("wesad",)  # absent: the declared papers' datasets


def test_a_dataset_of_your_own_can_be_a_study_dataset():
    """study_datasets admits any declared dataset (before: 'example' is not one of the papers'
    datasets): the deep, heterogeneous and Flower studies run on it, the papers' first in the
    tables' order; a pipeline of your own data alone studies it without a space of the papers'."""
    from esnfed_stages.data._datasets import method_datasets, study_declared
    from esnfed_core.method import Method

    p = _params(study_datasets=["example", "hhar", "wesad"])
    validate(p)
    assert study_declared(p) == ("wesad", "hhar", "example")
    assert method_datasets(p, Method("deep-incfed")) == method_datasets(p, Method("local")) == study_declared(p)
    mine = _params(datasets=["example"], continual_datasets=["example"], study_datasets=["example"],
                   assess__activation_datasets=[], embedded={"synthesize": {"example": "EXAMPLE"}, "preprocess": {}})
    for budget in mine["budgets"].values():
        del budget["space"]["wesad"], budget["space"]["hhar"]
    validate(mine)
    assert study_declared(mine) == ("example",)


def test_the_readme_recipe_for_your_data_alone_validates():
    """docs/own-data.md "Your data alone": its keys set in the repository's params.yaml as its text says
    (tests/readme_recipe.py) pass the schema. Before assess.activation_datasets was in the recipe,
    the default [wesad] was refused there (an undeclared dataset); imports is replaced, not merged:
    imports.example would read the embedded CSV the recipe's `embedded` no longer writes."""
    from readme_recipe import user_only_params

    p = user_only_params()
    assert p["assess"]["activation_datasets"] == [] and p["datasets"] == ["mystudy"]
    assert p["embedded"] == {"synthesize": {}, "preprocess": {}} and list(p["imports"]) == ["mystudy"]
    assert p["imported"] == {"mystudy": "data/mystudy.csv"}
    validate(p)
    wrong = copy.deepcopy(p)
    wrong["assess"]["activation_datasets"] = ["wesad"]
    with pytest.raises(ConfigError, match=r"^params.yaml: assess.activation_datasets: 'wesad' is not in datasets "
                                          r"\(mystudy\)$"):
        validate(wrong)
    # imports.example kept beside it runs no stage (not in imported), so it needs no embedded data
    # (before, dvc.yaml imported every entry: it read the embedded CSV no stage wrote any more)
    kept = copy.deepcopy(p)
    kept["imports"]["example"] = REPO["imports"]["example"]
    validate(kept)
    kept["imported"]["example"] = REPO["imported"]["example"]
    with pytest.raises(ConfigError, match=r"^params.yaml: imported.example: 'example' is not in datasets \(mystudy\)"):
        validate(kept)


def test_imported_may_write_the_source_as_another_path_to_the_same_file():
    """imported.<name> and imports.<name>.source compare as the stale-data check compares sources:
    one file written two ways (./x, an absolute path) is the same dependency for DVC."""
    import os

    source = REPO["imports"]["example"]["source"]
    for same in (f"./{source}", os.path.abspath(source)):
        validate(_params(imported__example=same))
    with pytest.raises(ConfigError, match=r"^params.yaml: imported.example: expected "):
        validate(_params(imported__example=source.replace("EXAMPLE", "OTHER")))


def test_a_dataset_of_your_own_taken_out_of_datasets_and_imported_is_paused_with_its_settings_kept():
    """Pausing the example: out of the dataset lists and of `imported`, its imports, partition and
    budgets entries stay (for later, and for `esnfed import` outside DVC); the params validate and
    no key asks for its embedded CSV. Left in `imported`, it is refused, naming the key: dvc.yaml
    would import it for no stage (before: it was imported silently, and failed the run where its
    source was gone)."""
    p = _params(datasets=["wesad", "hhar"], continual_datasets=["wesad", "hhar"], imported={},
                embedded={"synthesize": {"wesad": "WESAD", "hhar": "HHAR"}, "preprocess": {"wesad": "WESAD",
                                                                                        "hhar": "HHAR"}})
    assert "example" in p["imports"] and "example" in p["partition"] and "example" in p["budgets"]["paper"]["space"]
    validate(p)
    p["imported"]["example"] = REPO["imports"]["example"]["source"]
    with pytest.raises(ConfigError, match=r"^params.yaml: imported.example: 'example' is not in datasets"):
        validate(p)


def test_the_shipped_example_alone_writes_its_embedded_csv_only():
    """docs/own-data.md "Your data alone" on the shipped example: `datasets: [example]` with
    embedded.synthesize {example: EXAMPLE} validates without the papers' embedded data; declaring
    a paper dataset again asks for its embedded data, naming the key."""
    p = _params(datasets=["example"], continual_datasets=["example"], study_datasets=[],
                assess__activation_datasets=[], embedded={"synthesize": {"example": "EXAMPLE"}, "preprocess": {}})
    validate(p)
    p.update(datasets=["hhar", "example"])
    with pytest.raises(ConfigError, match=r"^params.yaml: embedded.preprocess.hhar: missing \(datasets lists 'hhar'"):
        validate(p)
    p["embedded"]["preprocess"]["hhar"] = "HHAR"
    with pytest.raises(ConfigError, match=r"^params.yaml: embedded.synthesize.hhar: missing \(embedded.preprocess "):
        validate(p)
    p["embedded"]["synthesize"]["hhar"] = "HHAR"
    validate(p)
