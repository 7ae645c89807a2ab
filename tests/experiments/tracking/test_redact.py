"""Passwords in URIs are masked in everything shown or stored (config.yaml, --print-config,
params, tags, error messages)."""

from __future__ import annotations

import pytest
import yaml

from experiments.cli import main
from experiments.config.loading import from_dict
from experiments.tracking.redact import mask_all, mask_uri
from experiments.tracking.tracker import Tracker
from tests.experiments.helpers import config_dict

SECRET = "s3cr3t-pw"
URI = f"postgresql://mlflow:{SECRET}@db.lab.example:5432/mlflow"


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (URI, "postgresql://mlflow:***@db.lab.example:5432/mlflow"),
        (f"in postgresql+psycopg://u:{SECRET}@h/db.", "in postgresql+psycopg://u:***@h/db."),
        (f"'mysql://:{SECRET}@h'", "'mysql://:***@h'"),
        ("postgresql://mlflow@h/db", "postgresql://mlflow@h/db"),  # no password: unchanged
        ("http://127.0.0.1:5000/#/experiments", "http://127.0.0.1:5000/#/experiments"),
    ],
)
def test_mask_uri(text, masked):
    assert mask_uri(text) == masked


def test_config_yaml_and_print_config_mask_the_password(capsys):
    cfg = from_dict(config_dict(URI, "masked", search={"storage": URI}))
    assert cfg.tracking.uri == URI and cfg.to_dict()["tracking"]["uri"] == URI  # MLflow's
    shown = mask_all(cfg.to_dict())  # what the runs' config.yaml artifacts hold
    assert SECRET not in yaml.safe_dump(shown) and shown["tracking"]["uri"] == mask_uri(URI)
    assert shown["search"]["storage"] == mask_uri(URI) and shown["seed"] == cfg.seed
    args = ["sweep", "--config", "smoke", "--set", f"tracking.uri={URI}", "--print-config"]
    assert main(args) == 0
    out = capsys.readouterr()
    assert "mlflow:***@db.lab.example" in out.out and SECRET not in out.out + out.err


def test_params_and_tags_mask_the_password(tmp_path):
    tracker = Tracker(str(tmp_path / "mlruns"), "masked")
    run = tracker.start_run("r", tags={"source": URI})
    tracker.log(run, params={"storage": URI}, tags={"note": f"logged to {URI}"})
    data = tracker.client.get_run(run).data
    shown = str(data.params) + str(data.tags)
    assert SECRET not in shown and "mlflow:***@db.lab.example" in shown
