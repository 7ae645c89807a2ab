"""Self vs. observer agreement (`experiments agreement`) and per-target ablation on a small store."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from experiments.cli import main
from experiments.evaluation.metrics import ccc, protocol_means
from experiments.studies.agreement import COLUMNS, agreement_summary, agreement_table, target_pairs
from featurestore.storage.store import Store
from tests.experiments.helpers import SPLITS, build_store, config_dict

OBS_L, OBS_S = "valence_observer_listener", "valence_observer_speaker"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The planted store plus two observer targets: one that follows the self-rating (0.7 y +
    0.05 + noise) and one that is unrelated noise."""
    root = tmp_path_factory.mktemp("agreement_store")
    st = build_store(root)
    for s in st.list_sessions():
        meta = st.meta(s)
        rng = np.random.default_rng(meta.listener * 10 + meta.story)
        y = st.labels(s).to_numpy()
        obs_l = np.clip(0.7 * y + 0.05 + rng.normal(0, 0.05, len(y)), -1, 1)
        obs_s = np.clip(
            0.3 * np.sin(np.arange(len(y)) / 40.0 + meta.story) + rng.normal(0, 0.05, len(y)), -1, 1
        )
        st.write_session(
            meta, labels={OBS_L: obs_l.astype(np.float32), OBS_S: obs_s.astype(np.float32)}
        )
    return root


@pytest.fixture(scope="module")
def cfg_file(tmp_path_factory, tracking_dir):
    path = tmp_path_factory.mktemp("cfg") / "small.yaml"
    d = config_dict(
        tracking_dir,
        "agreement-test",
        personalization=["global"],
        postprocess={"smooth_s": [0], "smooth_method": ["moving_average"], "rescale": ["none"]},
    )
    path.write_text(yaml.safe_dump(d))
    return path


def test_pairs_table_and_protocols(store):
    pairs = target_pairs(store)
    assert pairs == [("valence_self", OBS_L), ("valence_self", OBS_S)]
    table = agreement_table(store, pairs, SPLITS)
    st = Store(store)
    assert len(table) == 2 * len(st.list_sessions())
    row = table[(table.session == "Subject_2_Story_3") & (table.target_b == OBS_L)].iloc[0]
    expect = ccc(
        st.labels("Subject_2_Story_3").to_numpy(), st.labels("Subject_2_Story_3", OBS_L).to_numpy()
    )
    assert row.ccc == pytest.approx(expect, abs=1e-12) and row.split == "test"
    summary = agreement_summary(table)
    overall = summary[(summary.target_b == OBS_L) & (summary.split == "all")].iloc[0]
    assert overall.ccc_personalized == pytest.approx(
        protocol_means(table[table.target_b == OBS_L])["personalized"]
    )
    assert overall.n_sessions == 12
    assert overall.ccc_personalized > 0.6  # planted: the observer follows the self-rating
    noise = summary[(summary.target_b == OBS_S) & (summary.split == "all")].iloc[0]
    assert abs(noise.ccc_personalized) < 0.2
    assert set(summary.split) == {"all", "train", "val", "test"}


def test_agreement_verb_writes_reports_and_logs_to_mlflow(
    store, cfg_file, tmp_path, tracking_dir, capsys
):
    out = tmp_path / "reports"
    rc = main(
        [
            "agreement",
            "--store",
            str(store),
            "--config",
            str(cfg_file),
            "--feature-set",
            "listener",
            "--out",
            str(out),
        ]
    )
    assert rc == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    df = pd.read_csv(out / "agreement.csv")
    assert (
        list(df.columns)
        == COLUMNS
        == ["session", "listener", "story", "target_a", "target_b", "ccc"]
    )
    assert len(df) == 24 and set(df.target_b) == {OBS_L, OBS_S}
    st = Store(store)
    r = df[(df.session == "Subject_1_Story_1") & (df.target_b == OBS_S)].iloc[0]
    assert r.ccc == pytest.approx(
        ccc(st.labels(r.session).to_numpy(), st.labels(r.session, OBS_S).to_numpy()), abs=1e-9
    )
    md = (out / "agreement.md").read_text()
    assert (
        "| valence_self | valence_observer_listener | 12 | all |" in md and "## Cross-target" in md
    )
    assert "feature set `listener`" in md and md in printed
    assert (out / "agreement.png").stat().st_size > 10_000
    # cross-target: a model trained on the self-rating predicts the observer who follows it,
    # not the unrelated one
    cross = {
        tuple(line.split(" | ")[:2]): line
        for line in md.splitlines()
        if line.startswith("| valence_")
    }
    assert ("| valence_self", "valence_observer_listener") in cross and (
        "| valence_observer_speaker",
        "valence_self",
    ) in cross

    from experiments.tracking.tracker import Tracker

    tracker = Tracker(tracking_dir, "agreement-test")
    runs = tracker.search("attributes.run_name = 'agreement'")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    m = runs[0].data.metrics
    assert m[f"agreement.valence_self.vs.{OBS_L}.all.ccc_personalized"] == pytest.approx(
        protocol_means(df[df.target_b == OBS_L])["personalized"], abs=1e-9
    )
    assert m[f"cross.valence_self.on.{OBS_L}.test.ccc_personalized"] > 0.3
    assert abs(m[f"cross.valence_self.on.{OBS_S}.test.ccc_personalized"]) < 0.25
    arts = {a.path for a in tracker.client.list_artifacts(runs[0].info.run_id, "agreement")}
    assert arts == {
        "agreement/agreement.csv",
        "agreement/agreement.md",
        "agreement/agreement.png",
        "agreement/config.yaml",
    }
    # the code and every resolved setting of the run, as on the sweeps' runs
    from experiments.tracking.provenance import code_version

    assert {k: runs[0].data.tags[k] for k in code_version().tags()} == code_version().tags()
    written = yaml.safe_load(
        open(
            tracker.client.download_artifacts(
                runs[0].info.run_id, "agreement/config.yaml", str(tmp_path)
            )
        )
    )
    assert (
        written["code"] == code_version().tags() and written["config"]["target"] == "valence_self"
    )
    assert "estimator__model__alpha" in written["cross"]["resolved"]


def test_one_pair_and_errors(store, cfg_file, tmp_path, capsys):
    out = tmp_path / "reports"
    assert (
        main(
            [
                "agreement",
                "--store",
                str(store),
                "--config",
                str(cfg_file),
                "--targets",
                OBS_L,
                "valence_self",
                "--no-cross",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    df = pd.read_csv(out / "agreement.csv")
    assert set(zip(df.target_a, df.target_b, strict=True)) == {(OBS_L, "valence_self")}
    assert "Not computed (--no-cross)" in (out / "agreement.md").read_text()
    capsys.readouterr()
    assert (
        main(
            [
                "agreement",
                "--store",
                str(store),
                "--config",
                str(cfg_file),
                "--targets",
                "valence_self",
                "nope",
                "--out",
                str(out),
            ]
        )
        == 1
    )
    assert "no session of the store has labels 'nope'" in capsys.readouterr().err
    only_self = build_store(tmp_path / "self_only")
    assert (
        main(
            [
                "agreement",
                "--store",
                str(only_self.root),
                "--config",
                str(cfg_file),
                "--out",
                str(out),
            ]
        )
        == 1
    )
    assert "featurestore labels DIR --target valence_observer_listener" in capsys.readouterr().err


def test_ablation_per_target(store, cfg_file, tmp_path, tracking_dir, capsys):
    out = tmp_path / "reports"
    rc = main(
        [
            "ablate",
            "--store",
            str(store),
            "--config",
            str(cfg_file),
            "--set",
            f"target={OBS_L}",
            "--set",
            "feature_set=[listener]",
            "--set",
            "models=[{name: ridge, alpha: [10]}]",
            "--out",
            str(out),
        ]
    )
    assert rc == 0, capsys.readouterr().err
    assert f"({OBS_L}, protocol val)" in (out / "ablation.md").read_text()
    table = pd.read_csv(out / "ablation.csv")
    # global ridge without per-listener rescaling: the generalized track
    assert (
        list(table.feature_set) == ["listener", "listener"] and table.ccc_generalized.iloc[1] > 0.3
    )

    from experiments.tracking.tracker import Tracker

    run = Tracker(tracking_dir, "agreement-test").client.get_run(table.run_id_generalized.iloc[0])
    assert run.data.params["target"] == OBS_L


def test_the_cross_target_configuration_is_no_baseline():
    # the packaged ablation config lists dummy and position_prior first: neither reads a
    # feature, so neither can tell how a model of one target scores on the other
    from experiments.config.loading import load_config
    from experiments.config.models import model_spec
    from experiments.studies.agreement import cross_target_trial

    cfg = load_config("ablation")
    assert [m.name for m in cfg.models][:2] == ["dummy", "position_prior"]
    assert not model_spec(cross_target_trial(cfg, "both_with_text").model).baseline


def test_inter_rater_agreement_with_lags(tmp_path, cfg_file):
    """Two raters of the self-rating, the second 10 frames late and noisier: the lag is found,
    aligning raises the agreement, and a store whose only target has raters gets that part alone."""
    from experiments.config import load_config
    from experiments.studies.agreement import agreement

    st = build_store(tmp_path / "store")
    for s in st.list_sessions():
        y = st.labels(s).to_numpy().astype(np.float64)
        rng = np.random.default_rng(len(s))
        late = np.concatenate([np.full(10, y[0]), y[:-10]]) + rng.normal(0, 0.05, len(y))
        st.write_session(
            st.meta(s), labels={"valence_self@a": y, "valence_self@b": np.clip(late, -1, 1)}
        )
    res = agreement(load_config(cfg_file), st, out_dir=tmp_path / "out", cross=False)
    lags = pd.read_csv(tmp_path / "out" / "inter_rater_lags.csv")
    assert dict(zip(lags.rater, lags.lag_frames, strict=True)) == {"a": 0, "b": 10}
    rows = pd.read_csv(tmp_path / "out" / "inter_rater.csv")
    pooled = rows[rows.session == "pooled"].set_index("aligned")
    assert pooled.loc[True, "ICC(2,1)"] > pooled.loc[False, "ICC(2,1)"]
    assert pooled.loc[True, "mean_pairwise_ccc"] > 0.9
    assert len(rows) == 2 * (len(st.list_sessions()) + 1)
    assert "## Inter-rater agreement" in (tmp_path / "out" / "agreement.md").read_text()
    assert res.run_id
