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
    RUN_NAME_COLUMN,
    VIEW_TAG,
    ccc_view,
    experiment_tags,
    runs_url,
    track_metrics,
    ui_base_url,
)


def test_view_shows_the_track_and_its_ccc_per_split_first_sorted_by_validation():
    view = ccc_view()
    assert view["orderByKey"] == "metrics.`track_ccc.val`" and view["orderByAsc"] is False
    cols = [f"metrics.`{m}`" for m in CCC_METRICS]
    assert cols[:2] == ["metrics.`track_ccc.val`", "metrics.`track_ccc.test`"]
    assert view["columnOrder"][:2] == [RUN_NAME_COLUMN, "params.`track`"]
    assert view["selectedColumns"][1:5] == cols and view["columnOrder"][2:6] == cols
    assert set(view["columnWidths"]) <= set(view["columnOrder"])  # the UI sizes listed columns only
    json.dumps(view)  # the tag holds it as JSON


def test_track_metrics_give_the_tracks_ccc_and_the_other_averaging_only_where_it_differs():
    logged = {
        "val.ccc_personalized": 0.4,
        "val.ccc_generalized": 0.4 + 1e-12,  # a complete table: the same number
        "test.ccc_personalized": 0.3,
        "test.ccc_generalized": 0.2,
        "val_unseen.ccc_generalized": 0.1,  # not a split of the view
        "val.ccc_personalized.ci_low": 0.0,
    }
    assert track_metrics(logged, "generalized") == {
        "track_ccc.val": logged["val.ccc_generalized"],
        "track_ccc.test": 0.2,
        "other_avg_ccc.test": 0.3,
    }
    assert track_metrics(logged, "personalized")["track_ccc.test"] == 0.3
    assert (
        track_metrics(
            {"val.ccc_generalized": float("nan"), "val.ccc_personalized": 0.5}, "generalized"
        )["other_avg_ccc.val"]
        == 0.5
    )


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


def test_make_ui_helper_prints_a_link_for_every_experiment_of_the_package(tracking_dir, capsys):
    """A sweep in one experiment, `experiments agreement` (no configuration hash, the code
    fingerprint every run of the package logs) in a second: a link for each."""
    client = MlflowClient(tracking_uri=resolve_tracking_uri(tracking_dir))
    sweep_id = Tracker(tracking_dir, "ui-every-sweep").experiment_id
    client.create_run(sweep_id, tags={CONFIG_HASH_TAG: "abc", "code_fingerprint": "f"})
    agreement_id = Tracker(tracking_dir, "ui-every-agreement").experiment_id
    client.create_run(agreement_id, tags={"agreement": "true", "code_fingerprint": "f"})
    empty_id = Tracker(tracking_dir, "ui-every-empty").experiment_id  # no run: nothing to open
    assert main(["--tracking-uri", tracking_dir, "--url", "http://127.0.0.1:5056"]) == 0
    out = capsys.readouterr().out
    for name, eid in (("ui-every-sweep", sweep_id), ("ui-every-agreement", agreement_id)):
        assert f"{name}: {runs_url(eid, 'http://127.0.0.1:5056')}" in out
    assert "ui-every-empty" not in out and empty_id not in out.split("experiments/")
