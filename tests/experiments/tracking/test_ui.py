"""The MLflow UI's first view of this package's experiments: kind tag, CCC view, links (no browser here)."""

from __future__ import annotations

import json

from mlflow import MlflowClient

from experiments.tracking.tracker import CONFIG_HASH_TAG, Tracker, resolve_tracking_uri
from experiments.tracking.ui import main
from experiments.tracking.ui_view import (
    CCC_METRICS,
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    VIEW_TAG,
    ccc_view,
    experiment_tags,
    runs_url,
    ui_base_url,
)


def test_view_sorts_by_validation_ccc_and_shows_the_ccc_columns():
    view = ccc_view()
    assert view["orderByKey"] == "metrics.`val.ccc_personalized`" and view["orderByAsc"] is False
    cols = [f"metrics.`{m}`" for m in CCC_METRICS]
    assert view["selectedColumns"][:4] == cols and view["columnOrder"][1:5] == cols
    assert set(view["columnWidths"]) <= set(view["columnOrder"])  # the UI sizes listed columns only
    json.dumps(view)  # the tag holds it as JSON


def test_links_carry_the_view_and_the_model_training_switch():
    url = runs_url("7", "http://mlflow.lab.example:5001/")
    assert (
        url
        == "http://mlflow.lab.example:5001/#/experiments/7/runs?viewStateShareKey=ccc&workflowType=machine_learning"
    )
    assert "orderBy" not in url  # a sort or filter in the link makes the UI ignore the shared view
    assert ui_base_url("http://10.0.0.5:5001/") == "http://10.0.0.5:5001"
    assert ui_base_url("sqlite:///x/mlflow.db") == "http://127.0.0.1:5000"


def test_missing_tags_only():
    tags = experiment_tags()
    assert tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND and json.loads(tags[VIEW_TAG]) == ccc_view()
    assert experiment_tags(tags) == {}
    # a kind chosen in the UI stays; a stale view is replaced
    chosen = {EXPERIMENT_KIND_TAG: "genai_development", VIEW_TAG: "{}"}
    assert experiment_tags(chosen) == {VIEW_TAG: tags[VIEW_TAG]}


def test_tracker_tags_new_and_existing_experiments(tracking_dir):
    client = MlflowClient(tracking_uri=resolve_tracking_uri(tracking_dir))
    new = Tracker(tracking_dir, "ui-new")
    assert client.get_experiment(new.experiment_id).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    # an experiment made before this package tagged them (or by hand) gets the tags when a sweep opens it
    old_id = client.create_experiment("ui-old")
    assert EXPERIMENT_KIND_TAG not in client.get_experiment(old_id).tags
    assert Tracker(tracking_dir, "ui-old").experiment_id == old_id
    tags = client.get_experiment(old_id).tags
    assert tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND and json.loads(tags[VIEW_TAG]) == ccc_view()


def test_make_ui_helper_tags_sweeps_and_prints_their_links(tmp_path, tracking_dir, capsys):
    folder = tmp_path / "mlruns"
    assert main(["--tracking-uri", str(folder)]) == 0
    assert "no MLflow database" in capsys.readouterr().out and not (folder / "mlflow.db").exists()

    # the shared database (creating one takes seconds): these two experiments' names are their own
    client = MlflowClient(tracking_uri=resolve_tracking_uri(tracking_dir))
    sweep_id = client.create_experiment("ui-helper-old-sweep")  # untagged, as before tags were set
    client.create_run(sweep_id, tags={CONFIG_HASH_TAG: "abc"})
    other_id = client.create_experiment("ui-helper-someone-else")
    client.create_run(other_id)
    assert main(["--tracking-uri", tracking_dir, "--url", "http://127.0.0.1:5055"]) == 0
    out = capsys.readouterr().out
    assert f"ui-helper-old-sweep: {runs_url(sweep_id, 'http://127.0.0.1:5055')}" in out
    assert "ui-helper-someone-else" not in out
    assert client.get_experiment(sweep_id).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    assert EXPERIMENT_KIND_TAG not in client.get_experiment(other_id).tags  # not ours: left alone
