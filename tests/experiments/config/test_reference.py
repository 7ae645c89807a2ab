"""docs/config.md's generated tables against the code, and the warning on a config that leaves
``models`` or ``feature_set`` to the defaults."""

from __future__ import annotations

import importlib.util
import warnings

import pytest

from experiments.cli import main
from experiments.config.grid import expand
from experiments.config.loading import CONFIG_DIR, load_config
from experiments.config.models import model_specs
from experiments.config.options import ConfigWarning
from experiments.config.reference import (
    KEY_MEANINGS,
    markdown_tables,
)
from experiments.config.schema import TOP_KEYS, ExperimentConfig
from tests.experiments.helpers import ROOT


def tool():
    spec = importlib.util.spec_from_file_location(
        "config_tables", ROOT / "tools" / "config_tables.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_page_tables_are_the_codes():
    t = tool()
    page = t.PAGE.read_text(encoding="utf-8")
    assert t.page_block(page) == t.generated_block(), "run python tools/config_tables.py --write"
    assert t.main([]) == 0


def test_every_key_and_model_is_described():
    cfg = ExperimentConfig()
    assert set(TOP_KEYS) == set(cfg.to_dict()) | {"folds"}  # folds: under k-fold protocols
    assert list(KEY_MEANINGS) == list(TOP_KEYS)
    tables = markdown_tables()
    for model, spec in model_specs().items():
        assert f"| `{model}` | {spec.doc}" in tables
        for hp in spec.params:
            assert f"`{hp}` | `" in tables, (model, hp)
    assert "| `jobs` | `null` |" in tables


def write(tmp_path, text):
    p = tmp_path / "exp.yaml"
    p.write_text(text)
    return p


def test_a_config_that_leaves_models_and_feature_set_to_the_defaults_is_warned(tmp_path, capsys):
    path = write(tmp_path, "target: valence_self\n")
    with pytest.warns(ConfigWarning) as record:
        cfg = load_config(path)
    n = len(expand(cfg))
    message = str(record[0].message)
    assert n == 720 and f"{n} configurations" in message
    assert "no `models`" in message and "no `feature_set`" in message and "'omg-default'" in message
    # the --set options count as given
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        load_config(path, overrides=["models=[{name: ridge}]", "feature_set=[both]"])
        for packaged in sorted(CONFIG_DIR.glob("*.yaml")):  # the packaged configs say it all
            load_config(packaged)
    one_model = ["models=[{name: ridge, alpha: [1]}]"]
    with pytest.warns(ConfigWarning, match=r"no `feature_set`, so every feature set") as record:
        cfg = load_config(path, overrides=one_model)
    assert f": {len(expand(cfg))} configurations" in str(record[0].message)
    assert main(["sweep", "--config", str(path), "--print-config"]) == 0
    assert "note: " in capsys.readouterr().err
