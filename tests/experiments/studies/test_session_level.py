"""Whole-session ratings: summaries, person-wise CV, r / CCC / MAE, MLflow runs, the CLI verb."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.cli import main
from experiments.studies.session_config import load_session_config
from experiments.studies.session_level import (
    model_grid,
    person_folds,
    run_sessions,
    score,
    session_table,
    summarise_channel,
)
from featurestore import Store
from featurestore.errors import ConfigError
from tests.experiments.helpers import (
    SESSION_PERSONS,
    SESSIONS_PER_PERSON,
    build_session_rating_store,
)

N_SESSIONS = len(SESSION_PERSONS) * SESSIONS_PER_PERSON
GRID = [
    {"name": "dummy"},
    {"name": "ridge", "alpha": [1.0, 100.0]},
    {"name": "svr", "C": [1.0]},
    {"name": "random_forest", "n_estimators": [50], "max_depth": [3]},
]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    return build_session_rating_store(tmp_path_factory.mktemp("sessions_planted"), planted=True)


@pytest.fixture(scope="module")
def noise(tmp_path_factory):
    return build_session_rating_store(tmp_path_factory.mktemp("sessions_noise"), planted=False)


def _cfg(**changes):
    return load_session_config(
        {"target": "empathy", "channels": ["listener/face_geom"], "models": GRID, **changes}
    )


def test_summaries_ignore_invalid_rows_and_nan():
    d = np.array([[1.0, np.nan], [3.0, np.nan], [50.0, 7.0]])
    got = summarise_channel(d, np.array([True, True, False]), ["mean", "p10", "p90"])
    assert got[[0, 2, 4]].tolist() == pytest.approx([2.0, 1.2, 2.8])
    assert np.isnan(got[[1, 3, 5]]).all()  # a column without a valid value: NaN, no warning
    none = summarise_channel(d, np.zeros(3, bool), ["mean"])
    assert np.isnan(none).all() and none.shape == (2,)


def test_session_table_has_a_row_per_session_and_named_columns(planted):
    sessions = planted.list_sessions()[:3]
    x = session_table(planted, sessions, ["listener/face_geom"], ["mean", "std"])
    assert list(x.index) == sessions
    assert list(x.columns[:2]) == ["listener/face_geom/c0:mean", "listener/face_geom/c1:mean"]
    assert x.shape == (3, 8)
    c = planted.read_channel(sessions[0], "listener/face_geom")
    assert x.iloc[0, 0] == pytest.approx(float(c.data[c.valid, 0].mean()), rel=1e-6)
    every = session_table(planted, sessions, "all", ["mean"])
    assert every.shape == (3, 7)  # listener 4 + speaker 3 columns


@pytest.mark.parametrize(("protocol", "folds"), [("lopo", 8), ("kfold_person", 3)])
def test_folds_never_split_a_person(protocol, folds):
    persons = [p for p in SESSION_PERSONS for _ in range(SESSIONS_PER_PERSON)]
    held = person_folds(persons, protocol, 3)
    assert len(held) == folds
    assert sorted(np.concatenate(held).tolist()) == list(range(len(persons)))
    for h in held:
        test = {persons[i] for i in h}
        train = {persons[i] for i in range(len(persons)) if i not in set(h.tolist())}
        assert not test & train


def test_planted_rating_is_found_with_r_near_one(planted, tmp_path):
    res = run_sessions(
        _cfg(), planted, out_dir=tmp_path, tracking_uri=str(tmp_path / "mlruns"), progress=False
    )
    t = res.table.set_index("config")
    assert (res.n_sessions, res.n_persons) == (N_SESSIONS, len(SESSION_PERSONS))
    assert t.loc["ridge alpha=1.0", "r"] > 0.95
    assert t.loc["ridge alpha=1.0", "ccc"] > 0.9
    assert t.loc["ridge alpha=1.0", "mae"] < 0.5 * t.loc["dummy", "mae"]
    assert (
        t.loc["ridge alpha=1.0", "r_ci_low"]
        < t.loc["ridge alpha=1.0", "r"]
        < t.loc["ridge alpha=1.0", "r_ci_high"]
    )
    assert res.table.iloc[0]["model"] != "dummy"
    # every session has one out-of-fold prediction, made without its person in training
    oof = res.predictions["ridge alpha=1.0"]
    assert len(oof) == N_SESSIONS and oof["prediction"].notna().all()
    text = res.files[1].read_text()
    assert f"{N_SESSIONS} sessions of {len(SESSION_PERSONS)} persons" in text
    # the nested selection chooses within the training persons of each fold, and finds it too
    assert res.nested["r"] > 0.95 and len(res.nested_choices) == len(SESSION_PERSONS)
    assert all(c.startswith(("ridge", "random_forest", "svr")) for c in res.nested_choices)
    assert "**Nested selection**" in text


def test_noise_rating_gives_r_near_zero(noise, tmp_path):
    res = run_sessions(
        _cfg(models=[{"name": "ridge", "alpha": [100.0]}], nested=False),
        noise,
        out_dir=tmp_path,
        tracking_uri=str(tmp_path / "mlruns"),
        progress=False,
    )
    row = res.table.iloc[0]
    assert abs(row["r"]) < 0.35 and row["ccc"] < 0.3
    assert row["r_ci_low"] < 0 < row["r_ci_high"]  # an interval that does not claim a relation
    assert res.nested == {} and "Nested" not in res.files[1].read_text()


def test_every_model_of_the_grid_fits_and_predicts(planted):
    rated = planted.session_labels("empathy")
    x = session_table(planted, list(rated["session"]), ["listener/face_geom"], ["mean"]).to_numpy(
        copy=True
    )
    y = rated["value"].to_numpy()
    x[0, 0] = np.nan  # a missing summary is imputed
    grid = model_grid(
        [
            {"name": "dummy"},
            {"name": "ridge", "alpha": [1.0]},
            {"name": "svr", "C": [1.0]},
            {"name": "random_forest", "n_estimators": [20], "max_depth": [2]},
            {"name": "xgboost", "n_estimators": [20], "max_depth": [2], "learning_rate": [0.3]},
        ]
    )
    for spec in grid:
        pred = spec.build(0).fit(x[:30], y[:30]).predict(x[30:])
        assert pred.shape == (len(y) - 30,) and np.isfinite(pred).all(), spec.label
        if spec.name != "dummy":
            assert np.corrcoef(pred, y[30:])[0, 1] > 0.8, spec.label


def test_runs_are_logged_as_a_parent_with_a_child_per_configuration(planted, tmp_path):
    from experiments.tracking.tracker import Tracker

    uri = str(tmp_path / "mlruns")
    res = run_sessions(
        _cfg(experiment="sess-log"), planted, out_dir=tmp_path, tracking_uri=uri, progress=False
    )
    tracker = Tracker(uri, "sess-log")
    parent = tracker.client.get_run(res.parent_run_id)
    assert parent.info.status == "FINISHED" and parent.info.run_name == "sessions-empathy"
    assert parent.data.metrics["n_sessions"] == N_SESSIONS
    assert parent.data.tags["best_run_id"] == res.table.iloc[0]["run_id"]
    children = tracker.search(f"tags.mlflow.parentRunId = '{res.parent_run_id}'")
    assert len(children) == len(model_grid(GRID)) == len(res.child_run_ids)
    for c in children:
        assert {"r", "ccc", "mae", "n_persons"} <= set(c.data.metrics)
        row = res.table.set_index("run_id").loc[c.info.run_id]
        assert c.data.metrics["ccc"] == pytest.approx(row["ccc"])
        assert [a.path for a in tracker.client.list_artifacts(c.info.run_id)] == ["oof.csv"]
    arts = {a.path for a in tracker.client.list_artifacts(res.parent_run_id)}
    assert arts == {"summary.csv", "summary.md", "nested_oof.csv"}
    assert parent.data.metrics["nested_ccc"] == pytest.approx(res.nested["ccc"])


def test_score_without_spread_is_zero_r_and_nan_intervals_below_three_persons():
    s = score(np.array([1.0, 2.0, 3.0, 4.0]), np.full(4, 2.5), [1, 1, 2, 2])
    assert s["r"] == 0.0 and s["ccc"] == pytest.approx(0.0) and s["mae"] == pytest.approx(1.0)
    assert np.isnan(s["mae_ci_low"])


def test_a_missing_rating_is_a_clear_error(planted, tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"no session .* rating 'arousal' \(ratings there: empathy\).*rating_arousal",
    ):
        run_sessions(
            _cfg(target="arousal"),
            planted,
            out_dir=tmp_path,
            tracking_uri=str(tmp_path / "m"),
            progress=False,
        )
    with pytest.raises(ConfigError, match=r"has no channel\(s\) listener/voice"):
        run_sessions(
            _cfg(channels=["listener/voice"]),
            planted,
            out_dir=tmp_path,
            tracking_uri=str(tmp_path / "m"),
            progress=False,
        )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"modles": []}, r"modles: unknown key; did you mean 'models'\?"),
        ({"target": ""}, r"target: missing"),
        ({"protocol": "loso"}, r"protocol: 'loso': a session-level study holds persons out"),
        ({"stats": ["mean", "p50"]}, r"stats: expected a list of"),
        ({"models": [{"name": "ridge", "alpha": 1}]}, r"models.0.alpha: expected a list"),
        ({"models": [{"name": "ridge", "C": [1]}]}, r"models.0.C: not a parameter of ridge"),
        ({"models": [{"name": "lasso"}]}, r"models.0: expected"),
        ({"nested": "yes"}, r"nested: expected true or false"),
    ],
)
def test_config_errors_name_the_key(changes, message):
    with pytest.raises(ConfigError, match=message):
        load_session_config({"target": "empathy", **changes})


def test_config_file_errors_name_the_file(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("target: empathy\nfolds: 1\n")
    with pytest.raises(ConfigError, match=rf"{p}: folds: expected an integer >= 2"):
        load_session_config(p)


def test_cli_runs_a_config_and_reports_sessions_and_persons(planted, tmp_path, capsys):
    cfg = tmp_path / "sessions.yaml"
    cfg.write_text(
        "target: empathy\nchannels: [listener/face_geom]\nprotocol: kfold_person\nfolds: 4\n"
        "models:\n  - {name: dummy}\n  - {name: ridge, alpha: [1]}\n"
    )
    code = main(
        [
            "sessions",
            str(cfg),
            "--store",
            str(planted.root),
            "--out",
            str(tmp_path / "rep"),
            "--tracking-uri",
            str(tmp_path / "mlruns"),
            "--set",
            "experiment=cli-sessions",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"{N_SESSIONS} sessions of {len(SESSION_PERSONS)} persons" in out
    assert "protocol `kfold_person` (4 folds" in out
    assert (tmp_path / "rep" / "summary_sessions.csv").is_file()
    bad = main(["sessions", str(cfg), "--store", str(planted.root), "--set", "target=arousal"])
    assert bad == 2
    assert "no session" in capsys.readouterr().err


def test_store_without_the_rating_lists_what_it_has(tmp_path):
    empty = Store(tmp_path / "store", mode="a")
    build_session_rating_store(tmp_path / "store")
    assert empty.session_labels("arousal").empty
