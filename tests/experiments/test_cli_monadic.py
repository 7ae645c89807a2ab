"""The monadic demo corpus through `experiments sweep`: feature sets in the corpus's words (the
person's channels only), splits from the manifest, reports in the corpus's words; a set naming
the partner refused before anything is trained."""

from __future__ import annotations

import csv
import json

import pytest
from mlflow import MlflowClient

from experiments.cli import main
from experiments.tracking.tracker import resolve_tracking_uri
from featurestore.cli import main as featurestore_main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The monadic demo (3 persons x 4 tasks x 8 s) scanned and extracted. This branch reads
    one rating file per target: rater r1's, given as ``label_<target>``."""
    out = tmp_path_factory.mktemp("monadic")
    corpus, store = out / "corpus", out / "store"
    assert (
        featurestore_main(["demo", "--layout", "monadic", "--out", str(corpus), "--persons", "3"])
        == 0
    )
    rows = list(csv.DictReader(open(corpus / "manifest.csv", newline="")))
    for r in rows:
        r["label_valence"] = r["label_valence@r1"]
    with open(corpus / "manifest_r1.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert (
        featurestore_main(
            ["scan", "--manifest", str(corpus / "manifest_r1.csv"), "--store", str(store)]
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
        *[a for s in sets for a in ("--set", s)],
    ]


def test_a_sweep_of_the_persons_channels_reports_in_the_corpus_words(store, tmp_path, capsys):
    uri = str(tmp_path / "mlruns")
    sets = "feature_sets={face: [person/face_geom], voice: [person/egemaps]}"
    assert main(sweep_args(store, uri, sets)) == 0
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
    # the face carries the planted valence: the personalized choice beats chance on test
    personalized = parent.data.metrics["best_personalized.test.ccc_personalized"]
    assert personalized > 0.2


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
    assert "95 % t interval over\npersons, the test groups held fixed" in md
    assert "listener" not in md.replace("`listener`", "")
