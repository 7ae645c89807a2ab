"""Protocol, folds and splits checks: the README's config for a corpus of one's own validates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from experiments.config.loading import expand, from_dict
from experiments.config.protocols import ProtocolProblem, check_splits

README = Path(__file__).resolve().parents[3] / "README.md"


def test_the_readme_config_for_your_own_corpus_validates_and_expands():
    section = README.read_text(encoding="utf-8").split("## Your own corpus", 1)[1].split("\n## ")[0]
    raw = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))
    cfg = from_dict(raw)
    assert (cfg.target, cfg.splits, cfg.protocol, cfg.folds, cfg.averaging) == (
        "valence",
        {},
        "kfold_person",
        5,
        "concatenated",
    )
    trials = expand(cfg)
    assert trials and all(t.personalization == "global" and t.folds == 5 for t in trials)
    assert {t.params()["ccc_averaging"] for t in trials} == {"concatenated"}


def test_splits_keep_their_checks():
    assert check_splits({"train": [2], "val": [1]}, "val") == {"train": [2], "val": [1]}
    with pytest.raises(ProtocolProblem, match="story 1 is also in splits.train") as e:
        check_splits({"train": [1], "val": [1]}, "val")
    assert e.value.key == "splits.val"
    with pytest.raises(ProtocolProblem, match="did you mean 'test'"):
        check_splits({"train": [1], "tset": [2]}, "loso")
