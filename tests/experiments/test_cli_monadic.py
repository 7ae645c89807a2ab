"""The monadic demo corpus through `experiments sweep`: feature sets in the corpus's words (the
person's channels only), splits from the manifest, reports in the corpus's words; a set naming
the partner refused before anything is trained."""

from __future__ import annotations

import json

import numpy as np
import pytest
from mlflow import MlflowClient

from experiments.cli import main
from experiments.tracking.tracker import resolve_tracking_uri
from featurestore.cli import main as featurestore_main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The monadic demo (3 persons x 4 tasks x 8 s) scanned from its own manifest (two raters
    per target, one in the 25 fps format and one as ``time,value`` at 10 Hz; a whole-session
    rating) and extracted."""
    out = tmp_path_factory.mktemp("monadic")
    corpus, store = out / "corpus", out / "store"
    assert (
        featurestore_main(["demo", "--layout", "monadic", "--out", str(corpus), "--persons", "3"])
        == 0
    )
    assert (
        featurestore_main(
            ["scan", "--manifest", str(corpus / "manifest.csv"), "--store", str(store)]
        )
        == 0
    )
    assert (
        featurestore_main(["extract", "--store", str(store), "--channels", "face_geom", "egemaps"])
        == 0
    )
    return store


def sweep_args(store, uri, *sets: str) -> list[str]:
    return [
        "sweep",
        "--config",
        "smoke",
        "--store",
        str(store),
        "--set",
        f"tracking.uri={uri}",
        "--set",
        "tracking.experiment=monadic",
        "--set",
        "target=valence",
        "--set",
        "splits=shard",
        "--set",
        "window.delay_s=[1]",
        "--set",  # the two raters' reaction lags differ by 1.5 s: align them, weight by agreement
        "gold_standard={method: ewe, align_lags: true}",
        *[a for s in sets for a in ("--set", s)],
    ]


def test_a_sweep_of_the_persons_channels_reports_in_the_corpus_words(store, tmp_path, capsys):
    uri = str(tmp_path / "mlruns")
    sets = "feature_sets={face: [person/face_geom], voice: [person/egemaps]}"
    assert main([*sweep_args(store, uri, sets), "--no-models"]) == 0
    client = MlflowClient(resolve_tracking_uri(uri))
    exp = client.get_experiment_by_name("monadic")
    runs = client.search_runs([exp.experiment_id], max_results=100)
    [parent] = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert parent.data.tags["layout"] == "manifest"
    assert json.loads(parent.data.tags["role_names"])["listener"] == "person"
    assert parent.data.params["feature_sets"] == "face,voice"
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert {r.data.params["features.channels"] for r in children} == {
        "listener/face_geom",
        "listener/egemaps",
    }
    md = open(client.download_artifacts(parent.info.run_id, "summary.md", str(tmp_path))).read()
    assert md.startswith("Corpus layout `manifest`: the rated person is the `person`")
    assert "mean per person (personalized) and per group (generalized)" in md
    assert " listener" not in md.split("\n\n", 1)[1] and "story" not in md
    # the face carries the planted valence: the personalized choice beats chance on test (its
    # 95th percentile; 3 listeners give no tighter claim: 0.19 [-0.47, 0.85], chance 0.10)
    metrics = parent.data.metrics
    personalized = metrics["best_personalized.test.ccc_personalized"]
    assert personalized > metrics["best_personalized.test.ccc_personalized.chance_q95"]


def test_a_set_naming_the_partner_is_refused_before_training(store, tmp_path, capsys):
    uri = str(tmp_path / "mlruns")
    sets = "feature_sets={face: [person/face_geom], dyad: [person/face_geom, partner/face_geom]}"
    assert main(sweep_args(store, uri, sets)) == 2
    err = capsys.readouterr().err
    assert "feature_sets.dyad: 'partner/face_geom':" in err and "is a monadic corpus" in err
    assert (
        not (tmp_path / "mlruns").exists()
        or MlflowClient(uri).get_experiment_by_name("monadic") is None
    )


def test_the_ablation_report_is_in_the_corpus_words(store, tmp_path):
    out = tmp_path / "reports"
    args = sweep_args(store, str(tmp_path / "mlruns"), "feature_sets={face: [person/face_geom]}")
    assert main(["ablate", *args[1:], "--out", str(out)]) == 0
    md = (out / "ablation.md").read_text()
    assert md.startswith("Corpus layout `manifest`")
    assert "95 % skewness-corrected t interval\nover persons, the test groups held fixed" in md
    assert "listener" not in md.replace("`listener`", "")


def test_the_manifest_raters_and_session_ratings_reach_the_store(store):
    """End to end through the manifest: each rater's trace is stored, the target's labels are
    their mean where both rated, and the whole-session rating is in every shard."""
    from featurestore.storage.store import Store

    st = Store(store)
    sessions = st.list_sessions()
    assert len(sessions) == 12
    for s in sessions:
        assert st.raters(s, "valence") == ["r1", "r2"]
        r1, r2 = (st.rater_labels(s, "valence", r).to_numpy() for r in ("r1", "r2"))
        y = st.labels(s, "valence").to_numpy()
        both = np.isfinite(r1) & np.isfinite(r2)
        assert both.mean() > 0.8
        np.testing.assert_allclose(y[both], (r1[both] + r2[both]) / 2, atol=1e-5)
        assert np.isfinite(st.session_label(s, "engagement"))
