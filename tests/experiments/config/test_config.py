import itertools
from pathlib import Path

import pytest
import yaml

from experiments.config.loading import (
    CONFIG_DIR,
    ConfigError,
    ExperimentConfig,
    config_hash,
    expand,
    from_dict,
    load_config,
)
from experiments.config.options import ConfigWarning


def write(tmp_path, text, name="exp.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_packaged_configs_load_and_are_sized_for_their_job():
    default = load_config()
    assert default.source.endswith("default.yaml")
    n_default = len(expand(default))
    assert 30 <= n_default <= 80
    assert {t.model for t in expand(default)} == {
        "ridge",
        "linear_svr",
        "svr",
        "xgboost",
        "hist_gb",
        "dummy",
        "position_prior",
    }
    assert default.tracking.experiment == "omg-default" and default.tracking.uri == "mlruns"
    ablation = load_config(CONFIG_DIR / "ablation.yaml")
    trials = expand(ablation)
    assert {t.feature_set for t in trials} == {
        "speaker",
        "listener",
        "both",
        "speaker_text",
        "speaker_with_text",
        "both_with_text",
    }
    assert ablation.tracking.experiment == "omg-ablation"
    # both challenge tracks in both packaged sweeps: for the ablation, in every feature set
    assert {t.track for t in expand(default)} == {"personalized", "generalized"}
    for fs in ablation.feature_set:
        part = [t for t in trials if t.feature_set == fs]
        assert {t.track for t in part} == {"personalized", "generalized"} and len(part) <= 15, fs
    assert default.unseen_listener and ablation.unseen_listener
    assert default.postprocess.fit_on == ablation.postprocess.fit_on == "out_of_fold"
    # the position prior beside the dummy baseline, in both tracks of the main sweeps
    for trials_ in (expand(default), trials):
        prior = [t for t in trials_ if t.model == "position_prior"]
        assert {t.track for t in prior} == {"personalized", "generalized"}
    smoke = load_config("smoke")
    assert len(expand(smoke)) <= 6 and len({t.window_key() for t in expand(smoke)}) == 1
    assert smoke.tracking.experiment == "omg-smoke"
    # the live configuration: only options that read no later frame, both tracks per set; its
    # windows and smoothing end a second early at least (the channels' own reads are counted
    # on a store: tests/experiments/data/test_lookahead.py)
    causal = expand(load_config("causal"))
    assert causal and all(t.window_lookahead_s <= -1.0 for t in causal)
    assert not any(t.causal for t in causal)  # not counted on a store yet: not known to be causal
    assert {t.align for t in causal} == {"causal"}
    for fs in load_config("causal").feature_set:
        part = [t for t in causal if t.feature_set == fs]
        assert {t.track for t in part} == {"personalized", "generalized"} and len(part) <= 25, fs
    # and the other packaged sweeps read later frames through their windows or smoothing alone
    assert all(t.window_lookahead_s > 0 for t in expand(default))


def test_defaults_fill_a_minimal_config(tmp_path):
    cfg = load_config(write(tmp_path, "target: valence_observer_listener\n"))
    assert cfg.target == "valence_observer_listener"
    assert cfg.splits == {"train": [2, 4, 5, 8], "val": [1], "test": [3, 6, 7]}
    assert cfg.feature_set == ["speaker", "listener", "both"]
    assert cfg.feature_sets["both"] == [
        "speaker/face_geom",
        "speaker/egemaps",
        "listener/face_geom",
        "listener/egemaps",
    ]
    assert cfg.window.lengths_s == [[4.0], [2.0, 8.0]] and cfg.window.align == ["centred"]
    assert cfg.postprocess.smooth_method == ["moving_average"]
    assert cfg.jobs is None and cfg.seed == 0
    assert from_dict({}).to_dict() == ExperimentConfig().to_dict()  # an empty file is refused


def test_overrides(tmp_path):
    cfg = load_config(
        "smoke",
        overrides=[
            "window.delay_s=[2]",
            "window.align=causal",
            "models.1.alpha=[1, 100]",
            "feature_sets.mine=[listener/egemaps]",
            "feature_set=mine",
            "jobs=2",
        ],
    )
    assert cfg.window.delay_s == [2.0] and cfg.window.align == ["causal"]
    assert cfg.models[1].params == {"alpha": [1, 100]}
    assert cfg.feature_set == ["mine"] and cfg.jobs == 2
    assert {t.feature_set for t in expand(cfg)} == {"mine"}
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        load_config("smoke", overrides=["window.delay_s"])
    with pytest.raises(
        ConfigError, match=r"--set window\.delay_s=\[2: the value is not valid YAML"
    ):
        load_config("smoke", overrides=["window.delay_s=[2"])
    with pytest.raises(ConfigError, match=r"index '5' is not in a list of 2"):
        load_config("smoke", overrides=["models.5.alpha=1"])


@pytest.mark.parametrize(
    "text, pattern",
    [
        (
            "window: {algin: causal}",
            r"exp\.yaml:1: window\.algin: unknown key; did you mean 'align'\?",
        ),
        (
            "window: {align: centered}",
            r"exp\.yaml:1: window\.align: 'centered' is not one of centred, causal; did you mean 'centred'\?",
        ),
        (
            "personalisation: [global]",
            r"personalisation: unknown key; did you mean 'personalization'\?",
        ),
        (
            "personalization: [per_listner]",
            r"personalization: 'per_listner' .*did you mean 'per_listener'\?",
        ),
        ("window: {stats: [mean, slop]}", r"window\.stats: 'slop' .*did you mean 'slope'\?"),
        ("postprocess: {smooth_method: [median, butterwort]}", r"did you mean 'butterworth'\?"),
        (
            "postprocess: {rescale: [trian]}",
            r"postprocess\.rescale: 'trian' .*did you mean 'train'\?",
        ),
        ("protocol: los", r"protocol: 'los' .*did you mean 'loso'\?"),
        (
            "models: [{name: xgbost}]",
            r"models\[0\]\.name: unknown model 'xgbost'; did you mean 'xgboost'\?",
        ),
        (
            "models: [{name: ridge, alhpa: [1]}]",
            r"models\[0\]\.alhpa: unknown hyperparameter of ridge; did you mean 'alpha'\?",
        ),
        ("window: {lengths_s: [2, 8]}", r"window\.lengths_s: .*ambiguous.*\[\[2\], \[8\]\]"),
        ("window: {delay_s: [-1]}", r"window\.delay_s: -1 must be >= 0"),
        ("window: {train_hop_s: 0}", r"window\.train_hop_s: 0 must be > 0"),
        ("splits: {train: [1, 2], val: [2]}", r"splits\.val: story 2 is also in splits\.train"),
        ("splits: {train: [1], valid: [2]}", r"splits\.valid: unknown key; did you mean 'val'\?"),
        ("feature_sets: {a: [listner/egemaps]}", r"feature_sets\.a: .*did you mean 'listener'\?"),
        ("feature_set: [bothh]", r"feature_set: 'bothh' is not defined .*did you mean 'both'\?"),
        ("seed: 1.5", r"seed: expected an integer"),
        ("importance: {levels: [colum]}", r"importance\.levels: 'colum' .*did you mean 'column'\?"),
        ("importance: {repeats: 0}", r"importance\.repeats: expected an integer >= 1, got 0"),
        ("importance: {repeat: 5}", r"importance\.repeat: unknown key; did you mean 'repeats'\?"),
        (
            "models: [{name: svr, only: {window.delay_s: [-4]}}]",
            r"models\[0\]\.only\.window\.delay_s: -4 must be >= 0",
        ),
        (
            "models: [{name: svr, only: {personalization: [per_listner]}}]",
            r"only\.personalization: .*'per_listener'",
        ),
        (
            "models: [{name: svr, only: {personalisation: [global]}}]",
            r"only\.personalisation: not a grid axis.*'personalization'",
        ),
    ],
)
def test_validation_errors_name_file_key_and_suggestion(tmp_path, text, pattern):
    with pytest.raises(ConfigError, match=pattern) as err:
        load_config(write(tmp_path, text))
    assert str(err.value).startswith(
        f"{tmp_path / 'exp.yaml'}:1: "
    )  # the file and the line of the key


def test_validation_errors_name_the_line_of_the_key(tmp_path):
    text = (
        "target: valence_self\nwindow:\n  delay_s: [0, 2]\n  align: [causal,\n    middle]\n"
        "models:\n  - {name: ridge, alpha: [1]}\n  - name: svr\n    C: [1]\n    gama: [0.1]\n"
    )
    cases = [
        (
            text,
            r"exp\.yaml:4: window\.align: 'middle' is not one of",
        ),  # a value: the line of its key
        (
            text.replace("middle", "causal"),
            r"exp\.yaml:10: models\[1\]\.gama: unknown hyperparameter of svr; did you mean 'gamma'\?",
        ),
        (
            "window:\n  delay_s: [0]\nsplits:\n  train: [1]\n",
            r"exp\.yaml:3: splits\.val: protocol val needs validation stories",
        ),  # missing: the line of its parent
    ]
    for body, pattern in cases:
        with pytest.raises(ConfigError, match=pattern):
            load_config(write(tmp_path, body))
    # a mapping given in code has no lines: its source alone
    with pytest.raises(ConfigError, match=r"^<dict>: window\.align: 'middle'"):
        from_dict({"window": {"align": "middle"}})


def test_errors_from_set_name_the_option(tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"^--set window\.align=middle \(on .*smoke\.yaml\): window\.align: 'middle'",
    ):
        load_config("smoke", overrides=["window.align=middle"])
    with pytest.raises(
        ConfigError, match=r"--set models\.0\.aplha=1 .*models\[0\]\.aplha: unknown hyperparameter"
    ):
        load_config("smoke", overrides=["models.0.aplha=1"])


def test_malformed_yaml_names_file_and_line(tmp_path):
    p = write(
        tmp_path, "target: valence_self\nwindow:\n  lengths_s: [[4], [2, 8]\n  delay_s: [0]\n"
    )
    with pytest.raises(ConfigError, match=r"exp\.yaml:\d+: malformed YAML"):
        load_config(p)
    with pytest.raises(ConfigError, match="does not exist.*default, search, smoke"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="top level"):
        load_config(write(tmp_path, "- a\n- b\n", "list.yaml"))


def test_to_dict_round_trips_and_hash_is_stable():
    cfg = load_config("default")
    d = cfg.to_dict()
    again = from_dict(yaml.safe_load(yaml.safe_dump(d)))
    assert again == cfg and again.to_dict() == d
    assert yaml.safe_load(cfg.to_yaml()) == d
    shuffled = dict(reversed(list(d.items())))
    assert config_hash(shuffled) == config_hash(d) == cfg.hash()
    assert len(cfg.hash()) == 12
    assert from_dict(d, overrides=["seed=1"]).hash() != cfg.hash()


def test_importance_key_is_off_unless_given():
    from experiments.config.schema import ImportanceConfig

    cfg = load_config("default")
    assert cfg.importance is None and cfg.to_dict()["importance"] is None
    on = from_dict(cfg.to_dict(), overrides=["importance={repeats: 3, levels: [column, stat]}"])
    assert on.importance == ImportanceConfig(3, ["column", "stat"], "test")
    assert from_dict(on.to_dict()) == on and on.hash() != cfg.hash()
    assert from_dict(cfg.to_dict(), overrides=["importance=true"]).importance == ImportanceConfig()
    assert from_dict(cfg.to_dict(), overrides=["importance=false"]).importance is None
    assert load_config("ablation").importance == ImportanceConfig(5, ["channel"], "test")


def test_a_run_s_params_give_back_its_configuration():
    """``experiments explain`` rebuilds a child run's configuration from its params."""
    from dataclasses import replace

    from experiments.config.grid import trial_from_params

    trials = expand(load_config("ablation")) + expand(load_config("default"))
    generalized = next(t for t in trials if t.track == "generalized")
    nested = replace(generalized, unseen_listener=True, unseen_nested=True)
    for t in [
        *trials,
        replace(trials[-1], unseen_listener=True),
        nested,
        replace(nested, splits=()),
    ]:
        back = trial_from_params(t.params())
        assert back.hash() == t.hash() and back.hyperparams == pytest.approx(t.hyperparams)
    with pytest.raises(KeyError, match="run params lack 'model.name'"):
        trial_from_params({k: v for k, v in t.params().items() if k != "model.name"})


def test_expand_crosses_every_axis_without_only():
    cfg = from_dict(
        {
            "window": {"lengths_s": [[4], [2, 8]], "delay_s": [0, 2], "stats": ["mean", "std"]},
            "feature_set": ["listener", "both"],
            "models": [
                {"name": "ridge", "alpha": [1, 10, 100]},
                {"name": "linear_svr", "C": 0.1, "epsilon": [0, 0.1]},
            ],
            "personalization": ["global", "per_listener"],
            "postprocess": {
                "smooth_s": [0, 4],
                "smooth_method": ["moving_average", "median"],
                "rescale": ["none", "train"],
            },
        }
    )
    trials = expand(cfg)
    # smoothing 0 keeps one method: (0, ma), (4, ma), (4, median) = 3 smoothing settings
    per_model_hp = 2 * 3 * 2  # personalization x smoothing x rescale
    windows = 2 * 2 * 2  # feature sets x lengths x delays
    assert len(trials) == windows * (3 + 2) * per_model_hp
    assert len({t.hash() for t in trials}) == len(trials)
    assert len({t.window_key() for t in trials}) == windows
    # trials are grouped by window key, so features can be computed once per key
    keys = [t.window_key() for t in trials]
    assert sum(1 for _ in itertools.groupby(keys)) == windows


def test_only_narrows_a_models_grid():
    cfg = from_dict(
        {
            "feature_set": ["both"],
            "window": {"lengths_s": [[4], [2, 8]], "delay_s": [0, 2]},
            "models": [
                {
                    "name": "dummy",
                    "only": {
                        "window": {"lengths_s": [[4]], "delay_s": 0},
                        "personalization": "global",
                    },
                },
                {"name": "ridge", "alpha": [1]},
            ],
            "personalization": ["global", "per_listener"],
            "postprocess": {"smooth_s": [0], "rescale": ["none"]},
        }
    )
    trials = expand(cfg)
    dummy = [t for t in trials if t.model == "dummy"]
    assert len(dummy) == 1 and dummy[0].lengths_s == (4.0,) and dummy[0].personalization == "global"
    assert len([t for t in trials if t.model == "ridge"]) == 2 * 2 * 2
    assert cfg.models[0].to_dict()["only"] == {
        "window.lengths_s": [[4.0]],
        "window.delay_s": [0.0],
        "personalization": ["global"],
    }
    # an override that leaves none of a model's values in the grid: the model follows the grid
    moved = expand(from_dict(cfg.to_dict(), overrides=["window.delay_s=[2]"]))
    dummy = [t for t in moved if t.model == "dummy"]
    assert [(t.lengths_s, t.delay_s, t.personalization) for t in dummy] == [((4.0,), 2.0, "global")]


def test_trial_params_are_flat_dotted_text():
    cfg = load_config("default")
    trials = expand(cfg)
    t = next(t for t in trials if t.model == "xgboost" and t.lengths_s == (2.0, 8.0))
    p = t.params()
    assert p["features.set"] == "both" and p["window.lengths_s"] == "2,8"
    assert (
        p["model.name"] == "xgboost"
        and p["model.learning_rate"] == "0.05"
        and p["model.n_estimators"] == "200"
    )
    assert p["window.stats"] == "mean,std,slope" and p["window.align"] == "centred"
    assert p["target"] == "valence_self" and p["protocol"] == "val"
    assert {
        "personalization",
        "postprocess.smooth_s",
        "postprocess.smooth_method",
        "postprocess.rescale",
    } <= set(p)
    assert all(isinstance(v, str) for v in p.values()) and all(" " not in k for k in p)
    ridge = next(t for t in trials if t.model == "ridge")
    assert ridge.params()["model.alpha"] == "10" and ridge.hyperparams == {"alpha": 10}
    # the hash follows the params: stable across loads, different for another delay
    again = expand(load_config("default"))
    assert [x.hash() for x in again] == [x.hash() for x in trials]
    other = expand(load_config("default", overrides=["window.delay_s=[0, 3]"]))
    assert {x.hash() for x in other} != {x.hash() for x in trials}
    assert t.window_key() == (t.feature_set, t.channels, t.lengths_s, t.delay_s, t.align, t.stats)
    assert "xgboost" in t.label()


def test_every_option_is_in_the_config_reference():
    """The option lists are defined once (experiments/config/options.py); the table of docs/config.md follows them."""
    from experiments.config import options

    reference = (Path(__file__).resolve().parents[3] / "docs" / "config.md").read_text()
    table = reference.split("Options, each defined once in `experiments/config/options.py`:")[
        1
    ].split("\n\n")[1]
    for name in (
        "PERSONALIZATIONS",
        "RESCALES",
        "SMOOTH_METHODS",
        "FIT_ON",
        "STATS",
        "FUSION_METHODS",
        "BLENDS",
    ):
        for value in getattr(options, name):
            assert f"`{value}`" in table, (name, value)
    # and the code that implements them agrees
    from experiments.models.personalization import PERSONALIZATION_STRATEGIES
    from experiments.models.postprocess import RESCALES, SMOOTH_METHODS, rescaler_for
    from experiments.windowing.stats import STATS

    assert PERSONALIZATION_STRATEGIES is options.PERSONALIZATIONS and STATS is options.STATS
    assert RESCALES is options.RESCALES and SMOOTH_METHODS is options.SMOOTH_METHODS
    for rescale in options.RESCALES:
        _, per_listener = rescaler_for(rescale)
        assert per_listener == (rescale in options.IDENTITY_RESCALES)


def test_unseen_listener_selection(tmp_path):
    """``unseen_listener``: absent or true is ``nested`` (never the choice made with every
    listener); ``{selection: chosen|nested|fixed}`` as written; each round-trips, the selection
    spelt out."""
    nested = load_config(write(tmp_path, "unseen_listener: {selection: nested}\n"))
    assert nested.unseen_listener and nested.unseen_selection == "nested"
    assert from_dict(nested.to_dict()).unseen_selection == "nested"
    fixed = load_config(
        write(tmp_path, "unseen_listener: {selection: fixed, configuration: abc123}\n")
    )
    assert (fixed.unseen_selection, fixed.unseen_configuration) == ("fixed", "abc123")
    for text in ("unseen_listener: true\n", "seed: 0\n"):  # true, and no key at all
        plain = load_config(write(tmp_path, text))
        assert plain.unseen_listener and plain.unseen_selection == "nested"
        assert plain.to_dict()["unseen_listener"] == {"selection": "nested", "configuration": ""}
    chosen = load_config(write(tmp_path, "unseen_listener: {selection: chosen}\n"))
    assert chosen.unseen_selection == "chosen" and chosen.hash() != plain.hash()
    assert from_dict(chosen.to_dict()).unseen_selection == "chosen"
    assert (
        load_config(write(tmp_path, "unseen_listener: false\n")).to_dict()["unseen_listener"]
        is False
    )
    with pytest.raises(ConfigError, match=r"unseen_listener\.configuration: selection fixed needs"):
        load_config(write(tmp_path, "unseen_listener: {selection: fixed}\n"))
    with pytest.raises(ConfigError, match=r"unseen_listener\.selection: 'nestd' is not one of"):
        load_config(write(tmp_path, "unseen_listener: {selection: nestd}\n"))


def test_a_search_never_defaults_to_a_choice_that_read_the_held_out_listener(tmp_path):
    """An Optuna search cannot nest: without the key it scores no unseen listener (and says
    so); a selection it cannot make is refused; ``chosen`` only when written."""
    search = "search: {method: optuna, n_trials: 3}\n"
    with pytest.warns(
        ConfigWarning, match="unseen listeners off: selection nested is not possible"
    ):
        quiet = load_config(write(tmp_path, search))
    assert not quiet.unseen_listener
    for text in ("unseen_listener: true\n", "unseen_listener: {selection: nested}\n"):
        with pytest.raises(ConfigError, match=r"unseen_listener: selection nested is not possible"):
            load_config(write(tmp_path, search + text))
    chosen = load_config(write(tmp_path, search + "unseen_listener: {selection: chosen}\n"))
    assert chosen.unseen_listener and chosen.unseen_selection == "chosen"


@pytest.mark.parametrize(
    "fusion, message",
    [
        ({"method": "late", "members": ["speaker", "listner"]}, "did you mean 'listener'"),
        ({"method": "late", "members": ["speaker"]}, "at least two feature sets"),
        ({"method": "late", "members": ["speaker", "speaker"]}, "listed twice"),
        ({"method": "early", "members": ["speaker", "listener"]}, "early fusion is a feature set"),
        (
            {"method": "late", "members": ["speaker", "listener"], "blend": "nnl"},
            "did you mean 'nnls'",
        ),
        (
            {"method": "late", "members": ["speaker", "listener"], "blnd": "nnls"},
            "fusion.blnd: unknown key",
        ),
        ({"method": "late", "members": ["speaker", "listener"], "alpha": -1}, "fusion.alpha"),
    ],
)
def test_fusion_config_errors_name_the_key(tmp_path, fusion, message):
    path = write(tmp_path, yaml.safe_dump({"fusion": fusion}))
    with pytest.raises(ConfigError, match=message) as e:
        load_config(path)
    assert str(e.value).startswith(f"{path}:")


def test_fusion_config_round_trips(tmp_path):
    cfg = from_dict({"fusion": {"members": ["speaker", "listener"]}})
    assert (cfg.fusion.method, cfg.fusion.members, cfg.fusion.blend) == (
        "late",
        ["speaker", "listener"],
        "nnls",
    )
    assert from_dict(cfg.to_dict()).fusion == cfg.fusion
    # off by default, however it is written
    assert from_dict({}).to_dict()["fusion"]["method"] == "none"
    assert from_dict({"fusion": {"method": "none"}}).hash() == from_dict({}).hash()
    assert (
        from_dict({"fusion": False}).hash()
        == from_dict({"fusion": None}).hash()
        == from_dict({}).hash()
    )
    # a member that is no feature set fails; one that is not swept, or a protocol without
    # out-of-fold training predictions, turns fusion off and says why
    with pytest.raises(ConfigError, match="'speakr' is not a feature set.*did you mean 'speaker'"):
        from_dict({"fusion": {"members": ["speakr", "listener"]}})
    with pytest.warns(ConfigWarning, match="late fusion off: member 'speaker' is not swept"):
        narrowed = from_dict(
            {"feature_set": ["listener"], "fusion": {"members": ["speaker", "listener"]}}
        )
    assert not narrowed.fusion.enabled
    with pytest.warns(ConfigWarning, match="late fusion off: protocol loso.*needs protocol val"):
        assert not from_dict(
            {"protocol": "loso", "fusion": {"members": ["speaker", "listener"]}}
        ).fusion.enabled


def test_gold_standard_key(tmp_path):
    from experiments.data.gold_standard import GoldStandard

    base = load_config(write(tmp_path, "models: [{name: ridge}]\n", "a.yaml"))
    assert base.gold_standard == GoldStandard()
    assert base.to_dict()["gold_standard"] == GoldStandard().to_dict()
    cfg = load_config(
        write(
            tmp_path,
            "models: [{name: ridge}]\ngold_standard: {method: ewe, align_lags: true, max_lag_s: 2}\n",
            "b.yaml",
        )
    )
    assert cfg.gold_standard == GoldStandard("ewe", True, 2.0)
    assert cfg.to_dict()["gold_standard"]["method"] == "ewe"
    assert config_hash(cfg) != config_hash(base)
    with pytest.raises(ConfigError, match=r"gold_standard\.method.*'median' is not one of"):
        load_config(write(tmp_path, "gold_standard: {method: median}\n", "c.yaml"))
    with pytest.raises(ConfigError, match=r"gold_standard\.max_lag_s.*seconds >= 0"):
        load_config(write(tmp_path, "gold_standard: {method: mean, max_lag_s: -1}\n", "d.yaml"))


@pytest.mark.parametrize("text", ["", "# only a comment\n", "{}\n"])
def test_an_empty_config_is_refused_pointing_to_a_packaged_one(tmp_path, text):
    """An empty file once swept the 720 configurations of the built-in defaults."""
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}: the config is empty (no settings)")
    assert str(CONFIG_DIR / "smoke.yaml") in msg and "--config smoke" in msg
