"""Optuna search (experiments/studies/search.py): config validation, track restriction, objective on
validation only, resume of a killed study, parallel trials, and a categorical search equal to the grid."""

from __future__ import annotations

import numpy as np
import optuna
import pytest
import yaml
from mlflow import MlflowClient

from experiments.config.loading import ConfigError, Range, expand, from_dict, load_config
from experiments.config.search_space import sample_trial, search_space
from experiments.config.tracks import candidates
from experiments.studies.search import run_search, study_name, trial_sequence
from experiments.studies.sweep import SweepOptions, run_sweep
from experiments.tracking.tracker import CONFIG_HASH_TAG, resolve_tracking_uri
from tests.experiments.helpers import SPLITS, assert_same_metrics, build_store, config_dict

SEARCH = {"method": "optuna", "n_trials": 3, "track": "generalized", "startup_trials": 1}
RIDGE_RANGE = [{"name": "ridge", "alpha": {"low": 0.1, "high": 100, "log": True}}]


def search_dict(uri: str, experiment: str, **changes) -> dict:
    """:func:`config_dict` as a small search: ridge's alpha a log range, one feature set."""
    d = config_dict(
        uri, experiment, search=dict(SEARCH), models=RIDGE_RANGE, feature_set=["listener"]
    )
    d.update(changes)
    return d


# --------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"search": None, "models": RIDGE_RANGE},
            "models[0].alpha: a range {'low': 0.1, 'high': 100, 'log': True} is sampled by an "
            "Optuna search, but search.method is 'grid'",
        ),
        ({"search": None, "window": {"delay_s": {"low": 0, "high": 2}}}, "window.delay_s: a range"),
        (
            {"search": {"method": "optuna", "track": "generalised"}},
            "search.track: 'generalised' is not one of personalized, generalized; did you mean 'generalized'?",
        ),
        (
            {"search": {"method": "optuna", "n_trails": 3}},
            "search.n_trails: unknown key; did you mean 'n_trials'?",
        ),
        (
            {"search": {"method": "optuna", "n_trials": 0}},
            "search.n_trials: expected an integer >= 1, got 0",
        ),
        ({"search": {"method": "bayes"}}, "search.method: 'bayes' is not one of grid, optuna"),
        (
            {"models": [{"name": "ridge", "alpha": {"low": 0.1, "hi": 10}}]},
            "models[0].alpha.hi: unknown key of a range; did you mean 'high'?",
        ),
        (
            {"models": [{"name": "ridge", "alpha": {"low": 10, "high": 1}}]},
            "models[0].alpha: low 10 must be below high 1",
        ),
        (
            {"models": [{"name": "ridge", "alpha": {"low": 0, "high": 1, "log": True}}]},
            "models[0].alpha.low: a log range needs low > 0",
        ),
        (
            {
                "models": [
                    {"name": "ridge", "alpha": {"low": 0.1, "high": 1, "log": True, "step": 0.1}}
                ]
            },
            "a range takes log or step, not both",
        ),
        (
            {"models": [{"name": "xgboost", "max_depth": {"low": 2.5, "high": 6, "int": True}}]},
            "models[0].max_depth.low: an integer range (int: true) needs integers, got 2.5",
        ),
        ({"window": {"delay_s": {"low": -1, "high": 2}}}, "window.delay_s.low: -1 must be >= 0"),
        (
            {"search": {"method": "optuna", "sampler": "grid"}, "models": RIDGE_RANGE},
            "search.sampler: grid walks lists of values, but models[0].alpha is a range",
        ),
        (
            {"personalization": ["per_listener"]},
            "search.track: nothing to search on the generalized track: "
            "every configuration uses the listener's identity",
        ),
    ],
)
def test_search_config_errors_name_the_key_and_the_fix(changes, message):
    d = config_dict("unused", search={"method": "optuna", "track": "generalized"})
    d.update(changes)
    if d.get("search") is None:
        d.pop("search")
    with pytest.raises(ConfigError) as e:
        from_dict(d, source="search.yaml")
    assert str(e.value).startswith("search.yaml: ") and message in str(e.value), str(e.value)


def test_ranges_load_and_round_trip(tmp_path):
    grid = from_dict(config_dict("unused"))
    assert grid.to_dict()["search"]["method"] == "grid"
    cfg = load_config("search")
    assert cfg.search.method == "optuna" and cfg.search.track == "generalized"
    assert cfg.window.delay_s == Range(0.0, 4.0, step=0.5)
    assert cfg.models[2].params["max_depth"] == Range(2, 6, int=True)
    again = tmp_path / "again.yaml"
    again.write_text(cfg.to_yaml())
    assert load_config(again).hash() == cfg.hash()
    with pytest.raises(ConfigError, match="ranges"):
        expand(cfg)
    # method grid over lists runs the same lists as a grid; the search keys are then unused
    flat = from_dict(config_dict("unused", search={"method": "grid", "n_trials": 5}))
    assert expand(flat) == expand(grid)


# --------------------------------------------------------------------------- track restriction
@pytest.mark.parametrize("track", ["generalized", "personalized"])
def test_a_search_proposes_the_configurations_its_track_chooses_among(track):
    """A generalized search never proposes a configuration that knows who is listening; a
    personalized search proposes any (the tracks nest)."""
    cfg = from_dict(
        config_dict(
            "unused",
            search={"method": "optuna", "track": track},
            personalization=["global", "per_listener", "global_calibrated", "listener_onehot"],
            postprocess={
                "smooth_s": [0, 2],
                "rescale": ["none", "train", "bias", "listener", "listener_bias"],
            },
            models=[
                {"name": "dummy", "only": {"personalization": ["global", "per_listener"]}},
                RIDGE_RANGE[0],
            ],
        )
    )
    space = search_space(cfg)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen = set()
    for _ in range(300):
        ot = study.ask()
        t = sample_trial(space, cfg, ot)
        study.tell(ot, 0.0)
        assert t.track in candidates(track), t.label()
        seen.add((t.model, t.personalization, t.rescale))
    if track == "generalized":
        assert {(p, r) for _, p, r in seen} == {
            (p, r) for p in ["global"] for r in ["none", "train", "bias"]
        }
    else:  # every pair, global models without per-listener rescaling among them
        assert ("ridge", "global", "listener") in seen and ("dummy", "per_listener", "none") in seen
        assert ("ridge", "global", "none") in seen
        assert len({(p, r) for _, p, r in seen}) == 4 * 5


# --------------------------------------------------------------------------- runs
def children(uri: str, experiment_id: str) -> list:
    return [
        r
        for r in MlflowClient(tracking_uri=uri).search_runs([experiment_id], max_results=1000)
        if "mlflow.parentRunId" in r.data.tags
    ]


@pytest.fixture(scope="module")
def poisoned_store(tmp_path_factory):
    """The planted store with the test story's labels replaced by noise."""
    rng = np.random.default_rng(7)
    root = tmp_path_factory.mktemp("poisoned_search_store")
    build_store(
        root,
        labels_override=lambda listener, story, y: (
            rng.uniform(-1, 1, len(y)) if story in SPLITS["test"] else y
        ),
    )
    return root


def test_objective_is_the_validation_ccc_of_the_track_never_test(
    planted_store, poisoned_store, tracking_dir
):
    out = {}
    for name, store in (("clean", planted_store), ("poisoned", poisoned_store)):
        cfg = from_dict(
            search_dict(
                tracking_dir,
                f"search-objective-{name}",
                search={**SEARCH, "n_trials": 6, "startup_trials": 2},
                feature_set=["speaker", "listener"],
                postprocess={
                    "smooth_s": {"low": 0, "high": 4, "step": 1},
                    "rescale": ["none", "train"],
                },
            )
        )
        res = run_search(
            cfg, store=store, options=SweepOptions(progress=False, log_artifacts=False)
        )
        study = optuna.load_study(study_name=res.study_name, storage=res.storage)
        rows = res.table.set_index("run_id")
        for t in study.trials:  # each trial's value is its child run's val.ccc_generalized
            assert t.value == rows.at[t.user_attrs["mlflow_run_id"], "val.ccc_generalized"]
        out[name] = (trial_sequence(study), rows)
    assert out["clean"][0] == out["poisoned"][0]  # TPE proposed the same configurations
    clean, poisoned = out["clean"][1], out["poisoned"][1]
    assert sorted(clean["val.ccc_generalized"]) == sorted(poisoned["val.ccc_generalized"])
    assert not np.allclose(
        sorted(clean["test.ccc_generalized"]), sorted(poisoned["test.ccc_generalized"])
    )


def test_a_killed_search_resumes_its_study_and_logs_each_configuration_once(
    planted_store, tracking_dir
):
    uri = resolve_tracking_uri(tracking_dir)
    cfg = from_dict(search_dict(tracking_dir, "search-resume"))

    def kill_after_first_trial(row):
        if row["model.name"] != "dummy":
            raise KeyboardInterrupt

    with pytest.raises(
        KeyboardInterrupt
    ):  # jobs=2: the second trial of the batch is asked, never told
        run_search(
            cfg,
            store=planted_store,
            options=SweepOptions(
                progress=False, log_artifacts=False, jobs=2, on_result=kill_after_first_trial
            ),
        )
    storage = uri.replace("mlflow.db", "optuna.db")
    name = study_name(cfg, *_fingerprints(planted_store))
    states = [t.state.name for t in optuna.load_study(study_name=name, storage=storage).trials]
    assert states == ["COMPLETE", "RUNNING"]
    asked = trial_sequence(optuna.load_study(study_name=name, storage=storage))

    res = run_search(
        cfg, store=planted_store, options=SweepOptions(progress=False, log_artifacts=False, jobs=2)
    )
    assert res.study_name == name
    study = optuna.load_study(study_name=name, storage=storage)
    assert [t.state.name for t in study.trials] == [
        "COMPLETE"
    ] * 3  # n_trials in all, the killed one told
    assert trial_sequence(study)[:2] == asked  # with the parameters it was given before the kill
    # a larger n_trials continues the same study
    more = from_dict(search_dict(tracking_dir, "search-resume", search={**SEARCH, "n_trials": 5}))
    res = run_search(
        more, store=planted_store, options=SweepOptions(progress=False, log_artifacts=False, jobs=2)
    )
    assert res.study_name == name and len(res.trials) == 5 and res.n_failed == 0
    kids = children(uri, res.experiment_id)
    assert all(k.info.status in ("FINISHED", "KILLED") for k in kids)
    finished = [k.data.tags[CONFIG_HASH_TAG] for k in kids if k.info.status == "FINISHED"]
    assert len(finished) == len(
        set(finished)
    )  # every configuration logged once over the three runs
    assert set(study.trials_dataframe()["user_attrs_config_hash"]) <= set(finished)
    assert all(
        k.data.tags.get("optuna_study") == name
        for k in kids
        if k.data.params["model.name"] != "dummy"
    )


def _fingerprints(store):
    from experiments.studies.parent_run import store_fingerprint
    from experiments.tracking.provenance import code_version

    return store_fingerprint(store)[0], code_version().fingerprint


def test_experiments_sweep_runs_the_search_with_two_jobs(
    planted_store, tracking_dir, tmp_path, capsys
):
    from experiments.cli import main

    uri = resolve_tracking_uri(tracking_dir)
    d = search_dict(
        tracking_dir,
        "search-cli",
        search={**SEARCH, "n_trials": 4},
        feature_set=["speaker", "listener"],
    )
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(d))
    assert (
        main(
            [
                "sweep",
                "--no-models",
                "--config",
                str(path),
                "--store",
                str(planted_store),
                "--jobs",
                "2",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "optuna study search-cli." in out and "generalized track" in out
    client = MlflowClient(tracking_uri=uri)
    parent = client.search_runs(
        [client.get_experiment_by_name("search-cli").experiment_id], "tags.sweep = 'parent'"
    )[0]
    assert parent.data.tags["search"] == "optuna" and parent.data.tags["optuna_study"].startswith(
        "search-cli."
    )
    assert (
        parent.data.metrics["n_trials_complete"] == 4
        and parent.data.tags["best_run_id_generalized"]
    )
    kids = children(uri, parent.info.experiment_id)
    assert kids and all(k.info.status == "FINISHED" and "error" not in k.data.tags for k in kids)
    assert {k.data.params["track"] for k in kids} == {"generalized"}


def test_a_grid_as_a_categorical_search_equals_the_grid(planted_store, tracking_dir):
    grid = dict(
        models=[{"name": "ridge", "alpha": [1, 100]}],
        personalization=["global"],
        postprocess={"smooth_s": [0, 2], "rescale": ["none"]},
    )
    swept = run_sweep(
        from_dict(config_dict(tracking_dir, "grid-as-grid", **grid)),
        store=planted_store,
        options=SweepOptions(progress=False, log_artifacts=False),
    )
    n = len(expand(from_dict(config_dict("unused", **grid))))
    assert n == 8
    search = {
        "method": "optuna",
        "sampler": "grid",
        "n_trials": n,
        "track": "generalized",
        "seed": 3,
    }
    found = run_search(
        from_dict(config_dict(tracking_dir, "grid-as-search", search=search, **grid)),
        store=planted_store,
        options=SweepOptions(progress=False, log_artifacts=False),
    )
    assert len(found.trials) == n and (found.table.status == "done").all()
    assert_same_metrics(
        found.table, swept.table.set_index(CONFIG_HASH_TAG)
    )  # same configurations, same numbers
    # in the grid's own experiment, the search reuses the grid's runs (same code, same store)
    again = run_search(
        from_dict(config_dict(tracking_dir, "grid-as-grid", search=search, **grid)),
        store=planted_store,
        options=SweepOptions(progress=False, log_artifacts=False),
    )
    assert (again.table.status == "reused").all() and len(again.table) == n + 1
