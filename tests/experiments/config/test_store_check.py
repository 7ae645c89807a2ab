"""A config checked against a feature store at load time, and every problem of a file at once."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from experiments.cli import main
from experiments.config.loading import ConfigError, load_config
from experiments.config.store_check import store_names
from experiments.studies.parent_run import without_labels
from featurestore.storage.store import Store
from tests.experiments.helpers import N_FRAMES, build_session_rating_store, build_store


def write(tmp_path, text: str, name: str = "exp.yaml") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


SETS = """feature_sets:
  listener: [listener/face_geom, listener/egemaps]
  speaker: [speaker/face_geom, speaker/egemaps]
splits: {train: [2, 4], val: [1], test: [3]}
"""


def test_misspelt_target_and_channel_are_refused_with_the_nearest_store_name(
    tmp_path, planted_store
):
    text = "target: valence_slef\n" + SETS.replace("listener/face_geom", "listener/face_gem")
    path = write(tmp_path, text)
    load_config(path)  # without a store nothing is checked
    with pytest.raises(ConfigError) as err:
        load_config(path, store=planted_store)
    problems = err.value.problems
    assert [p.key for p in problems] == ["target", "feature_sets.listener"]
    assert str(problems[0]).startswith(f"{path}:1: target: 'valence_slef' is not a label target")
    assert "did you mean 'valence_self'?" in str(problems[0])
    assert str(problems[1]).startswith(f"{path}:3: feature_sets.listener: 'listener/face_gem'")
    assert "did you mean 'listener/face_geom'?" in str(problems[1])
    # a name the store lacks, close to none it has: the command that adds it
    with pytest.raises(ConfigError, match=r"featurestore labels ANNOTATION_DIR --target arousal"):
        load_config(
            path,
            overrides=["target=arousal", "feature_sets.listener=[listener/egemaps]"],
            store=planted_store,
        )
    # the right names pass, and only the swept sets are checked
    ok = load_config(
        path,
        overrides=["target=valence_self", "feature_set=[speaker]"],
        store=planted_store,
    )
    assert ok.feature_set == ["speaker"]


def test_names_some_sessions_lack(tmp_path):
    root = tmp_path / "store"
    build_store(root)
    st = Store(root, mode="a")
    meta = st.meta("Subject_1_Story_1")
    st.write_session(meta, labels={"valence_observer_listener": np.zeros(N_FRAMES, np.float32)})
    st.write_session(st.meta("Subject_2_Story_2"), drop=["speaker/egemaps"])
    path = write(tmp_path, "target: valence_observer_listener\n" + SETS)
    with pytest.raises(ConfigError) as err:
        load_config(path, store=root)
    # the sessions without the target are a blind test's (a sweep leaves them out): no problem
    speaker = str(err.value)
    assert "target" not in speaker and "labels" not in speaker
    assert (
        "'speaker/egemaps': 1 of the 12 sessions of the splits lack it (Subject_2_Story_2)"
        in speaker
    )
    assert "or leave 'speaker' out of feature_set" in speaker
    # a sweep needs labelled training sessions: here only the validation story has them
    cfg = load_config(path, overrides=["feature_set=[listener]"], store=root)
    with pytest.raises(
        ConfigError, match=r"none of the 6 sessions of split train in .* has labels"
    ):
        without_labels(cfg, st)
    assert without_labels(replace(cfg, target="valence_self"), st) == {}
    # sessions outside the splits do not count; agreement takes the sets the sessions have
    load_config(
        path, overrides=["target=valence_self", "splits={train: [1], val: [3]}"], store=root
    )
    names = store_names(root, require_channels=False)
    load_config(path, overrides=["target=valence_self"], store=names)


def test_every_problem_of_a_file_is_reported_at_once_in_line_order(tmp_path):
    text = (
        "target: valence_self\n"
        "window: {algin: causal, delay_s: [-1]}\n"
        "personalisation: [global]\n"
        "splits: {train: [1], valid: [2]}\n"  # the missing val follows from the misspelling
        "models: [{name: ridge, alpah: [1]}, {name: xgbost}]\n"
    )
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    lines = str(err.value).splitlines()
    assert lines[0] == f"6 problems in {path}:"
    assert [line.split(": ", 2)[1] for line in lines[1:]] == [
        "window.algin",
        "window.delay_s",
        "personalisation",
        "splits.valid",
        "models[0].alpah",
        "models[1].name",
    ]
    assert "did you mean 'xgboost'?" in lines[-1] and f"{path}:5:" in lines[-1]


def test_cli_checks_the_store_with_print_config(tmp_path, planted_store, capsys):
    args = ["sweep", "--config", "smoke", "--set", "target=valence_slef", "--print-config"]
    assert main(args) == 0  # no --store: the config alone
    capsys.readouterr()
    assert main([*args, "--store", str(planted_store)]) == 2
    assert "did you mean 'valence_self'?" in capsys.readouterr().err
    assert main([*args, "--store", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "no such folder" in err and "make features" in err


def test_an_unextracted_channel_is_no_typo(tmp_path, planted_store):
    cfg = (
        "feature_sets: {text: [speaker/lexicon], au: [listener/face_au], typo: [speaker/egemap]}\n"
    )
    path = write(tmp_path, cfg + "splits: {train: [2, 4], val: [1], test: [3]}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, store=planted_store)
    text_p, au_p, typo_p = (str(p) for p in err.value.problems)
    assert "featurestore transcripts TRANSCRIPT_DIR" in text_p and "did you mean" not in text_p
    assert "with face_au in its channels" in au_p and "did you mean" not in au_p
    assert "did you mean 'speaker/egemaps'?" in typo_p
    # experiments agreement takes the sets the sessions have: only the misspelt name is an error
    with pytest.raises(ConfigError) as err:
        load_config(path, store=store_names(planted_store, require_channels=False))
    assert str(err.value).endswith("did you mean 'speaker/egemaps'?")


def test_a_list_of_targets_is_checked_name_by_name(tmp_path):
    root = tmp_path / "store"
    build_store(root, second_target="arousal_self")
    path = write(tmp_path, "target: [valence_self, arousal_slef]\n" + SETS)
    with pytest.raises(ConfigError) as err:
        load_config(path, store=root)
    problem = str(err.value)
    assert problem.startswith(f"{path}:1: target: 'arousal_slef' is not a label target")
    assert "did you mean 'arousal_self'?" in str(problem)
    cfg = load_config(path, overrides=["target=[valence_self, arousal_self]"], store=root)
    assert cfg.all_targets() == ["valence_self", "arousal_self"] and cfg.target == "valence_self"
    assert cfg.to_dict()["target"] == ["valence_self", "arousal_self"]
    # one target: a string, as the config writes it
    one = load_config(path, overrides=["target=valence_self"], store=root)
    assert one.to_dict()["target"] == "valence_self" and one.all_targets() == ["valence_self"]
    # a name twice, and the verbs that take one target, are refused
    with pytest.raises(ConfigError, match="valence_self listed twice"):
        load_config(path, overrides=["target=[valence_self, valence_self]"])
    with pytest.raises(ConfigError, match="search takes one target"):
        load_config(
            path,
            overrides=["target=[valence_self, arousal_self]", "search.method=optuna"],
        )


# ------------------------------------------------------------------ a monadic corpus's words
def monadic_store(root) -> Store:
    """Four sessions of a manifest corpus with no partner: two persons x two groups, channels
    of the person only."""
    from featurestore.storage.shard import Channel, SessionMeta

    store = Store(root, mode="a")
    rng = np.random.default_rng(0)
    t = np.arange(0, 10, 0.2)
    for i, (person, group, split) in enumerate(
        [
            ("p1", "picture", "train"),
            ("p1", "plan", "val"),
            ("p2", "picture", "train"),
            ("p2", "plan", "test"),
        ]  # fmt: skip
    ):
        meta = SessionMeta(
            f"{person}_{group}", int(person[1]), 1 + (group == "plan"), 0, split, 250,
            layout="manifest", person=person, group=group,
        )  # fmt: skip
        face = Channel(rng.normal(size=(len(t), 3)), t, np.ones(len(t), bool), ["a", "b", "c"])
        store.write_session(
            meta,
            channels={"listener/face_geom": face},
            labels={"valence": rng.uniform(-1, 1, 250).astype(np.float32)},
        )
        assert i == len(store.list_sessions()) - 1
    return store


def test_members_in_the_corpus_words_resolve_to_the_store_roles(tmp_path):
    store = monadic_store(tmp_path / "store")
    path = write(
        tmp_path,
        "target: valence\nsplits: shard\nfeature_sets:\n  face: [person/face_geom]\n"
        "  same: [listener/face_geom, person/face_geom]\n",
    )
    cfg = load_config(path, store=store_names(store.root))
    assert cfg.feature_sets == {"face": ["listener/face_geom"], "same": ["listener/face_geom"]}
    with pytest.raises(ConfigError, match=r"role 'persn' is not one of .*did you mean 'person'"):
        load_config(write(tmp_path, "feature_sets: {f: [persn/x]}\n", "typo.yaml"))


def test_a_partner_member_on_a_monadic_store_is_refused_in_the_corpus_words(tmp_path):
    store = monadic_store(tmp_path / "store")
    path = write(
        tmp_path,
        "target: valence\nsplits: shard\nfeature_sets:\n  face: [person/face_geom]\n"
        "  both: [person/face_geom, partner/egemaps]\n",
    )
    with pytest.raises(ConfigError) as err:
        load_config(path, store=store_names(store.root))
    assert err.value.key == "feature_sets.both"
    message = str(err.value)
    assert (
        f"'partner/egemaps': {store.root} is a monadic corpus (no session has a partner)" in message
    )
    assert "only person/... and scene/... channels" in message and "speaker" not in message
    # the person's sets alone load; so does an agreement's lenient check (still an error there)
    assert load_config(path, ["feature_set=[face]"], store=store_names(store.root)).feature_set == [
        "face"
    ]
    with pytest.raises(ConfigError, match="monadic corpus"):
        load_config(path, store=store_names(store.root, require_channels=False))


def test_a_misspelt_channel_is_named_in_the_corpus_words(tmp_path):
    store = monadic_store(tmp_path / "store")
    path = write(tmp_path, "target: valence\nsplits: shard\nfeature_sets: {f: [person/face_gem]}\n")
    with pytest.raises(
        ConfigError, match=r"'person/face_gem' is in no session .*'person/face_geom'"
    ):
        load_config(path, store=store_names(store.root))


def test_a_whole_session_rating_as_a_sweep_target_points_to_experiments_sessions(tmp_path):
    store = build_session_rating_store(tmp_path / "store")
    path = write(tmp_path, "target: empathy\n" + SETS)
    with pytest.raises(ConfigError) as err:
        load_config(path, store=store_names(store.root))
    message = str(err.value)
    assert "'empathy' is a whole-session rating" in message
    assert "experiments sessions CONFIG" in message


def test_a_split_of_stories_no_session_has_is_refused_before_anything_runs(tmp_path, capsys):
    """`splits.val: [99]` once swept to "best child None" and exit 0."""
    store = build_store(tmp_path / "store")  # stories 1-4
    path = write(tmp_path, SETS.replace("val: [1]", "val: [99]"))
    with pytest.raises(ConfigError) as err:
        load_config(path, store=store_names(store.root))
    assert str(err.value) == (
        f"{path}:4: splits.val: no session of {store.root} has story 99 (its stories: 1, 2, 3, "
        "4); list stories the store holds, or extract those sessions first"
    )
    # from the command line: exit 2 before any run is logged
    mlruns = tmp_path / "mlruns"
    code = main(
        [
            "sweep",
            "--no-models",
            "--config",
            path,
            "--store",
            str(store.root),
            "--tracking-uri",
            str(mlruns),
        ]
    )
    assert code == 2 and "splits.val: no session" in capsys.readouterr().err
    assert not mlruns.exists()
    # a split some of whose stories the store lacks runs on the others, with a note
    partial = write(tmp_path, SETS.replace("test: [3]", "test: [3, 7]"), "partial.yaml")
    with pytest.warns(UserWarning, match=r"splits.test: no session of .* has story 7"):
        assert load_config(partial, store=store_names(store.root)).splits["test"] == [3, 7]


def test_a_delay_that_leaves_a_session_without_rows_is_refused(tmp_path, planted_store, capsys):
    """`window.delay_s=[40]` on 30 s sessions once swept every configuration to CCC 0.000 and
    called one of them best."""
    path = write(tmp_path, SETS)
    with pytest.raises(ConfigError) as err:
        load_config(path, overrides=["window.delay_s=[0, 40]"], store=planted_store)
    problem = str(err.value)
    assert err.value.key == "window.delay_s" and problem.startswith(
        f"--set window.delay_s=[0, 40] (on {path}): window.delay_s: "
    )
    assert "a delay of 40 s (centred windows of at most 8 s) reads nothing inside 12 of the 12" in (
        problem
    )
    assert "the shortest lasts 30.00 s" in problem
    # a causal window reaches no later than its delay; a centred one half a window later
    causal = ["window.delay_s=[30.1]", "window.align=[causal]"]
    with pytest.raises(ConfigError, match="a delay of 30.1 s .causal"):
        load_config(path, overrides=causal, store=planted_store)
    load_config(path, overrides=["window.delay_s=[30.1]"], store=planted_store)  # centred 8 s
    load_config(
        path, overrides=["window.delay_s=[29.9]", "window.align=[causal]"], store=planted_store
    )
    mlruns = tmp_path / "mlruns"
    args = [
        "sweep",
        "--no-models",
        "--config",
        path,
        "--store",
        str(planted_store),
        "--tracking-uri",
        str(mlruns),
    ]
    assert main([*args, "--set", "window.delay_s=[40]"]) == 2
    assert "window.delay_s: a delay of 40 s" in capsys.readouterr().err
    assert not mlruns.exists()
