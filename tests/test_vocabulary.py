"""The vocabulary's enums behave as their plain-string values (params.yaml, JSON files and keys hold
strings) and agree with the names the modules outside it check against."""

from __future__ import annotations

import json

from esnfed_core import accel
from esnfed_core.vocabulary import (ALGOS, DATASETS, PCTS, STRATEGIES, Dataset, Device, Share, ShareOrAll,
                                    Strategy)


def test_members_are_their_values():
    assert Dataset.hhar == "hhar" and hash(Dataset.hhar) == hash("hhar")
    assert str(Device.torch_cpu) == "torch-cpu" and f"{Share.p25}%" == "25%"
    assert json.dumps({Strategy.joint: [Dataset.wesad]}) == json.dumps({"joint": ["wesad"]})
    assert Dataset("wesad") is Dataset.wesad


def test_tuples_and_choices():
    assert DATASETS == ("wesad", "hhar") and PCTS == ("25", "50", "75", "100")
    assert STRATEGIES == ("naive", "replay", "joint") and ALGOS[6:8] == ("clip", "fedclip")
    assert ALGOS[8:] == ("deep-incfed", "deep-fedip", "local", "ensemble", "align")  # deep, then heterogeneous
    assert ShareOrAll.values() == PCTS + ("all",)


def test_devices_match_the_accelerator_check():
    assert Device.values() == accel.DEVICES


def test_n_classes_from_the_dataset_modules():
    from esnfed_core.data import hhar, wesad
    from esnfed_stages.data._datasets import n_classes

    assert (n_classes("wesad"), n_classes("hhar")) == (len(wesad.CLASSES), len(hhar.CLASSES)) == (4, 6)
