"""``experiments ablate`` with ``fusion: {method: late}``: the late-fusion row, its comparisons and its run."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient

from experiments.cli import main
from experiments.config.fusion import FUSED_SET
from experiments.evaluation.metrics import ccc, protocol_means
from experiments.evaluation.uncertainty import holm
from experiments.studies.ablation import COLUMNS
from experiments.tracking.tracker import resolve_tracking_uri
from featurestore.storage.store import Store, session_name
from tests.experiments.helpers import SPLITS, build_store, config_dict, copy_tracking_db


@pytest.fixture(scope="module")
def fused_ablation(tmp_path_factory, tracking_dir):
    """The ablation of speaker, listener and both (early fusion) with late fusion of speaker and
    listener, on a store where each role carries half the valence."""
    tmp = tmp_path_factory.mktemp("fused_ablation")
    store = tmp / "store"
    build_store(store, speaker_share=0.5)
    uri = copy_tracking_db(tracking_dir, tmp / "mlruns")
    d = config_dict(uri, "fusion")
    d["feature_sets"]["both"] = d["feature_sets"]["speaker"] + d["feature_sets"]["listener"]
    d["postprocess"]["rescale"] = ["none", "train"]
    d["fusion"] = {"method": "late", "members": ["speaker", "listener"]}
    path = tmp / "ablation.yaml"
    path.write_text(yaml.safe_dump(d))
    out = tmp / "reports"
    code = main(["ablate", "--config", str(path), "--store", str(store), "--out", str(out)])
    assert code == 0
    return out, resolve_tracking_uri(uri), tmp


def test_late_fusion_row_beside_early_fusion(fused_ablation):
    out, _, _ = fused_ablation
    df = pd.read_csv(out / "ablation.csv")
    assert list(df.columns) == COLUMNS
    sets = list(dict.fromkeys(df.feature_set))
    assert sorted(sets[:-1]) == ["both", "listener", "speaker"] and sets[-1] == FUSED_SET
    t = df.set_index(["feature_set", "split"])
    for track in ("personalized", "generalized"):
        late = t.loc[(FUSED_SET, "test"), f"ccc_{track}"]
        for member in ("speaker", "listener"):
            assert late > t.loc[(member, "test"), f"ccc_{track}"] + 0.05, (track, member)
        lo, hi = (t.loc[(FUSED_SET, "test"), f"ccc_{track}_{e}"] for e in ("ci_low", "ci_high"))
        assert lo <= late <= hi  # an interval like every row's on test ...
        assert np.isnan(t.loc[(FUSED_SET, "val"), f"ccc_{track}_ci_low"])  # ... none on selection
        assert t.loc[(FUSED_SET, "test"), f"chance_{track}_q95"] < late
    assert t.loc[(FUSED_SET, "val"), "split_role"] == "selection"
    assert np.isnan(t.loc[(FUSED_SET, "test"), "ccc_unseen_listener"])
    md = (out / "ablation.md").read_text()
    assert f"| {FUSED_SET} |" in md and "- **late fusion**:" in md
    assert f"**{FUSED_SET}**, personalized: nnls blend of speaker `" in md


def test_late_fusion_compared_on_test_within_the_holm_family(fused_ablation):
    out, _, _ = fused_ablation
    pairs = pd.read_csv(out / "ablation_comparisons.csv")
    names = set(pairs.comparison)
    assert {"late fusion vs both", "late fusion vs speaker", "late fusion vs listener"} <= names
    assert set(pairs.split) == {"test"}
    assert np.allclose(pairs.p_holm, holm(pairs.p_value))  # one family, fusion rows included
    vs_speaker = pairs[pairs.comparison == "late fusion vs speaker"]
    assert (vs_speaker.mean_diff > 0).all()


def test_late_fusion_is_a_run_that_exports(fused_ablation):
    out, uri, tmp = fused_ablation
    df = pd.read_csv(out / "ablation.csv")
    row = df[(df.feature_set == FUSED_SET) & (df.split == "test")].iloc[0]
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(row.run_id_generalized)
    assert run.info.status == "FINISHED"
    assert run.data.params["features.set"] == FUSED_SET
    assert run.data.params["fusion.members"] == "speaker,listener"
    assert run.data.tags["track"] == row.config_track_generalized == "generalized"
    assert run.data.metrics["test.ccc_generalized"] == pytest.approx(row.ccc_generalized)
    weights = [run.data.metrics[f"fusion.weight.{m}"] for m in ("speaker", "listener")]
    assert min(weights) > 0
    parent = run.data.tags["mlflow.parentRunId"]
    assert client.get_run(parent).data.tags.get("ablation") == "true"
    members = run.data.params["fusion.member_runs"].split(",")
    chosen = df[df.split == "test"].set_index("feature_set").run_id_generalized
    assert members == [chosen["speaker"], chosen["listener"]]
    # experiments export + score give back the logged test CCC
    exported = tmp / "exported"
    code = main(
        ["export", row.run_id_generalized, "--split", "test", "--out", str(exported)]
        + ["--tracking-uri", uri]
    )
    assert code == 0
    files = sorted(p.name for p in exported.glob("*.csv"))
    assert files == sorted(
        f"Subject_{lst}_Story_{s}.csv" for lst in (1, 2, 3) for s in SPLITS["test"]
    )
    store = Store(tmp / "store")
    rows = []
    for listener in (1, 2, 3):
        for story in SPLITS["test"]:
            sid = session_name(listener, story)
            y = np.asarray(store.labels(sid, "valence_self"), dtype=float).ravel()
            p = pd.read_csv(exported / f"{sid}.csv")["valence_self"].to_numpy()
            rows.append({"listener": listener, "story": story, "ccc": ccc(y, p)})
    assert protocol_means(pd.DataFrame(rows))["generalized"] == pytest.approx(
        row.ccc_generalized, abs=1e-6
    )
