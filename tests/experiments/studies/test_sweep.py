"""run_sweep against a real MLflow SQLite store: nesting, params, metrics, tags, artifacts, resume, jobs
(the forked schedule of the processes backend is tested in engine/test_forked.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient

from experiments.config.loading import expand, from_dict
from experiments.config.options import CHOSEN_UNSEEN_MARK, CHOSEN_UNSEEN_NOTE
from experiments.config.tracks import candidates
from experiments.studies.parent_run import store_fingerprint
from experiments.studies.sweep import SweepOptions, run_sweep
from experiments.tracking.child_runs import write_prediction_csv
from experiments.tracking.tracker import CONFIG_HASH_TAG, resolve_tracking_uri
from featurestore.parallel import Backend, register_backend
from featurestore.parallel.base import call
from featurestore.storage.store import Store
from tests.experiments.helpers import (
    LISTENERS,
    N_FRAMES,
    SPLITS,
    assert_same_metrics,
    build_store,
    config_dict,
)


def children(client, experiment_id, parent_id=None):
    runs = client.search_runs([experiment_id], max_results=1000)
    kids = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    if parent_id is not None:
        kids = [r for r in kids if r.data.tags["mlflow.parentRunId"] == parent_id]
    return kids


@pytest.fixture(scope="module")
def shared(sweep_once):
    cfg, res, uri = sweep_once
    client = MlflowClient(tracking_uri=uri)
    return cfg, res, uri, client


def swept(cfg, res) -> list:
    """Every configuration a sweep of ``cfg`` runs: the grid, then each feature set's chosen
    generalized configuration again with the unseen-listener protocol."""
    grid = expand(cfg)
    chosen = set(res.table.get("unseen_of", pd.Series(dtype=str)).dropna())
    return grid + [replace(t, unseen_listener=True) for t in grid if t.hash() in chosen]


def test_children_nested_under_parent_dummy_first(shared):
    cfg, res, uri, client = shared
    n = len(swept(cfg, res))
    assert (
        n == len(expand(cfg)) + len(cfg.feature_set) == 12
    )  # one unseen-listener run per feature set
    kids = children(client, res.experiment_id, res.parent_run_id)
    assert len(kids) == n
    assert all(k.info.status == "FINISHED" for k in kids)
    assert (res.table.status == "done").sum() == n and res.n_failed == 0
    first = min(kids, key=lambda r: (r.info.start_time, r.info.end_time))
    assert first.data.params["model.name"] == "dummy"
    parent = client.get_run(res.parent_run_id)
    assert parent.info.status == "FINISHED"
    assert "mlflow.parentRunId" not in parent.data.tags
    assert client.get_experiment(res.experiment_id).name == cfg.tracking.experiment


def test_params_metrics_and_tags(shared, planted_store):
    cfg, res, uri, client = shared
    fingerprint, backend = store_fingerprint(planted_store)
    hashes = {t.hash() for t in swept(cfg, res)}
    seen = set()
    for run in children(client, res.experiment_id, res.parent_run_id):
        p, m, tags = run.data.params, run.data.metrics, run.data.tags
        for key in (
            "model.name",
            "features.set",
            "window.lengths_s",
            "window.delay_s",
            "personalization",
            "postprocess.smooth_s",
        ):
            assert key in p, key
        assert p["window.lengths_s"] == "2" and p["window.delay_s"] == "1"
        assert p["features.set"] in ("speaker", "listener")
        if p["model.name"] == "ridge":
            assert p["model.alpha"] == "10"
        for split in ("val", "test"):
            for prot in ("personalized", "generalized"):
                assert np.isfinite(m[f"{split}.ccc_{prot}"])
            for listener in LISTENERS:
                assert f"{split}.ccc_listener_{listener}" in m
            for story in SPLITS[split]:
                assert f"{split}.ccc_story_{story}" in m
        assert tags[CONFIG_HASH_TAG] in hashes
        seen.add(tags[CONFIG_HASH_TAG])
        assert tags["store_fingerprint"] == fingerprint
        assert tags["face_backend"] == backend
        assert tags["git_commit"] and tags["git_commit"] != "unknown"
    assert seen == hashes


def test_child_artifacts(shared, tmp_path):
    cfg, res, uri, client = shared
    kids = children(client, res.experiment_id, res.parent_run_id)
    best = next(k for k in kids if k.info.run_id == res.best_run_id)
    for run in (best, min(kids, key=lambda r: r.info.start_time)):
        rid = run.info.run_id
        top = {a.path for a in client.list_artifacts(rid)}
        assert {"config.yaml", "ccc_matrix.csv", "predictions", "plots"} <= top
        plots = {a.path for a in client.list_artifacts(rid, "plots")}
        assert {"plots/predicted_vs_true.png", "plots/ccc_per_listener.png"} <= plots
        local = tmp_path / rid
        client.download_artifacts(rid, "", str(local))
        matrix = pd.read_csv(local / "ccc_matrix.csv")
        assert {"session", "listener", "story", "split", "ccc"} <= set(matrix.columns)
        own = matrix[~matrix.split.str.endswith("_unseen")]
        assert len(own) == len(LISTENERS) * 2
        # a generalized-track configuration is also scored on listeners left out of training
        # on test only: no val_unseen (the validation labels choose configurations)
        unseen = run.data.params["unseen_listener"] == "true"
        n_test = len(LISTENERS) * len(SPLITS["test"])
        assert len(matrix) - len(own) == (n_test if unseen else 0)
        assert sorted(set(matrix.split)) == sorted(
            {"val", "test"} | ({"test_unseen"} if unseen else set())
        )
        for split in ("val", "test"):
            files = sorted((local / "predictions" / split).glob("*.csv"))
            assert [f.stem for f in files] == sorted(
                f"Subject_{L}_Story_{S}" for L in LISTENERS for S in SPLITS[split]
            )
            for f in files:
                lines = f.read_text().splitlines()
                assert lines[0] == "valence_self"  # the target
                assert len(lines) == N_FRAMES + 1
                assert np.all(np.isfinite(np.array(lines[1:], dtype=float)))
        logged = yaml.safe_load((local / "config.yaml").read_text())
        assert run.data.tags[CONFIG_HASH_TAG] in {t.hash() for t in expand(cfg)}
        # what exactly ran: the run's params, every estimator parameter, the code and the whole config
        assert logged["trial"] == run.data.params and logged["config"] == cfg.to_dict()
        assert logged["code"]["code_fingerprint"] == run.data.tags["code_fingerprint"]
        model = run.data.params["model.name"]
        if model in ("ridge", "linear_svr"):
            hp = "alpha" if model == "ridge" else "C"
            estimator = next(k for k in logged["resolved"] if k.endswith(f"model__{hp}"))
            assert float(logged["resolved"][estimator]) == float(run.data.params[f"model.{hp}"])


def test_parent_best_run_and_summary(shared, tmp_path):
    cfg, res, uri, client = shared
    parent = client.get_run(res.parent_run_id)
    kids = {k.info.run_id: k for k in children(client, res.experiment_id, res.parent_run_id)}
    assert parent.data.tags["best_run_id"] == res.best_run_id == res.best_run_ids["personalized"]
    for track in ("personalized", "generalized"):
        best_id = parent.data.tags[f"best_run_id_{track}"]
        assert best_id == res.best_run_ids[track] and best_id in kids
        # chosen by its own averaging on validation, among the configurations it may use:
        # every one for the personalized track, the generalized ones for the generalized track
        same_track = [k for k in kids.values() if k.data.params["track"] in candidates(track)]
        assert kids[best_id].data.params["track"] in candidates(track)
        best_val = kids[best_id].data.metrics[f"val.ccc_{track}"]
        assert best_val == max(k.data.metrics[f"val.ccc_{track}"] for k in same_track)
        assert kids[best_id].data.params["features.set"] == "listener"
        assert parent.data.metrics[f"best_{track}.val.ccc_{track}"] == pytest.approx(best_val)
        assert parent.data.metrics[f"best_{track}.test.ccc_{track}"] == pytest.approx(
            kids[best_id].data.metrics[f"test.ccc_{track}"]
        )
        low, high = (
            parent.data.metrics[f"best_{track}.test.ccc_{track}.ci_{end}"]
            for end in ("low", "high")
        )
        assert low <= parent.data.metrics[f"best_{track}.test.ccc_{track}"] <= high
    assert "best_generalized.test_unseen.ccc_generalized" in parent.data.metrics
    # selection chosen (written): the all-listener choice's twin, tagged and marked as such
    assert parent.data.tags["unseen_selection"] == res.unseen_selection == "chosen"
    twin = kids[parent.data.tags["best_run_id_generalized"]]
    assert parent.data.metrics["best_generalized.test_unseen.ccc_generalized"] == pytest.approx(
        twin.data.metrics["test_unseen.ccc_generalized"]
    )
    assert not [k for k in parent.data.metrics if "val_unseen" in k]
    # per_listener configurations are personalized, global ones without per-listener rescaling generalized
    assert {k.data.params["personalization"]: k.data.params["track"] for k in kids.values()} == {
        "global": "generalized",
        "per_listener": "personalized",
    }
    # and whether it reads future frames: the centred 2 s windows and the 1 s delay cancel out,
    # but each frame reads its channels beyond it (the 5 fps faces are interpolated from their
    # next sample), and a 2 s moving average reads 1 s more: no configuration is causal
    for k in kids.values():
        p = k.data.params
        assert p["causal"] == k.data.tags["causal"] == "false", p
        channels = float(p["features.lookahead_s"])
        assert 0.16 <= channels <= 0.5, p  # resampling; the planted channels' extraction is 0
        smoothing = 1.0 if p["postprocess.smooth_s"] == "2" else 0.0
        assert float(p["lookahead_s"]) == pytest.approx(smoothing + channels, abs=1e-6)
    summary = pd.read_csv(
        client.download_artifacts(res.parent_run_id, "summary.csv", str(tmp_path))
    )
    assert len(summary) == len(kids) and set(summary.run_id) == set(kids)
    assert summary["val.ccc_personalized"].is_monotonic_decreasing
    # test numbers only where earned: not in the per-configuration listing
    assert not [c for c in summary.columns if c.startswith(("test", "val_unseen"))]
    assert not [c for c in summary.columns if c.endswith((".ci_low", ".ci_high"))]
    tracks = pd.read_csv(client.download_artifacts(res.parent_run_id, "tracks.csv", str(tmp_path)))
    assert dict(zip(tracks.track, tracks.run_id, strict=True)) == res.best_run_ids
    md = open(client.download_artifacts(res.parent_run_id, "summary.md", str(tmp_path))).read()
    assert "## personalized track" in md and "## generalized track" in md and "test_unseen" in md
    assert "selection `chosen`: the generalized choice, made with every listener" in md
    unseen_row = next(line for line in md.splitlines() if line.startswith("| test_unseen |"))
    assert f" {CHOSEN_UNSEEN_MARK} |" in unseen_row and f"\n{CHOSEN_UNSEEN_NOTE}.\n" in md
    assert CHOSEN_UNSEEN_MARK not in md.replace(unseen_row, "").replace(CHOSEN_UNSEEN_NOTE, "")
    assert tracks.set_index("track").at["generalized", "unseen_selection"] == "chosen"
    # every configuration listed with its selection-split CCC, and no test number
    listing = md.split("# Every configuration (selection split only)")[1]
    rows = [line for line in listing.splitlines() if line.startswith("| ") and "run_id" not in line]
    assert len(rows) == len(kids) and "test" not in listing.split("\n\n", 2)[2]
    head = next(line for line in listing.splitlines() if line.startswith("| run_id"))
    assert "val.ccc_personalized" in head and "val.ccc_generalized" in head
    # each track's choice carries its test number with an interval, its validation one none
    chosen = md.split("# Every configuration")[0]
    assert "| test | " in chosen and "selection split: none" in chosen


def test_rerun_of_same_config_reuses_every_run(shared, planted_store):
    cfg, res, uri, client = shared
    before = len(children(client, res.experiment_id))
    again = run_sweep(cfg, store=planted_store, options=SweepOptions(progress=False))
    assert set(again.table.status) == {"reused"} and len(again.table) == len(swept(cfg, res))
    assert len(children(client, res.experiment_id)) == before
    assert children(client, res.experiment_id, again.parent_run_id) == []
    assert set(again.table.run_id) == set(res.table.run_id)
    assert again.best_run_id == res.best_run_id
    assert client.get_run(again.parent_run_id).info.status == "FINISHED"


def test_changed_config_runs_only_new_configurations(shared, planted_store):
    cfg, res, uri, client = shared
    raw = config_dict(cfg.tracking.uri, cfg.tracking.experiment)
    raw["feature_set"] = ["listener"]
    raw["postprocess"]["smooth_s"] = [0, 2, 4]
    changed = from_dict(raw)
    old = set(res.table[CONFIG_HASH_TAG])
    new = {t.hash() for t in expand(changed)} - old
    assert len(new) == 2  # ridge x (global, per_listener) with 4 s smoothing
    before = len(children(client, res.experiment_id))
    out = run_sweep(
        changed, store=planted_store, options=SweepOptions(progress=False, log_artifacts=False)
    )
    done = out.table[out.table.status == "done"]
    assert set(done[CONFIG_HASH_TAG]) == new
    assert set(out.table[out.table.status == "reused"][CONFIG_HASH_TAG]) <= old
    assert len(out.table) == len(expand(changed))
    assert len(children(client, res.experiment_id)) == before + len(new)


def test_changed_store_runs_everything_again(shared, planted_store, tmp_path):
    """A store with other features (a re-extraction, another corpus) must not reuse old runs."""
    cfg, res, uri, client = shared
    other = tmp_path / "other_store"
    build_store(other, seed=7)
    assert store_fingerprint(other)[0] != store_fingerprint(planted_store)[0]
    one = from_dict(
        config_dict(
            cfg.tracking.uri,
            cfg.tracking.experiment,
            feature_set=["listener"],
            models=[{"name": "dummy"}],
            personalization=["global"],
            postprocess={"smooth_s": [0], "rescale": ["none"]},
        )
    )
    assert {t.hash() for t in expand(one)} <= set(res.table[CONFIG_HASH_TAG])
    out = run_sweep(one, store=other, options=SweepOptions(progress=False, log_artifacts=False))
    assert list(out.table.status) == ["done"]
    run = client.get_run(out.table.run_id.iloc[0])
    assert run.data.tags["store_fingerprint"] == store_fingerprint(other)[0]


def test_parallel_jobs_match_serial_metrics(shared, planted_store):
    cfg, res, uri, client = shared
    par_cfg = from_dict(
        config_dict(cfg.tracking.uri, "jobs2", jobs=2)
    )  # the config's jobs, no argument
    out = run_sweep(
        par_cfg, store=planted_store, options=SweepOptions(progress=False, log_artifacts=False)
    )
    assert set(out.table.status) == {"done"} and out.n_failed == 0
    assert client.get_run(out.parent_run_id).data.params["jobs"] == "2"
    kids = children(client, out.experiment_id, out.parent_run_id)
    assert len(kids) == len(expand(par_cfg)) == len({k.data.tags[CONFIG_HASH_TAG] for k in kids})
    assert min(kids, key=lambda r: r.info.start_time).data.params["model.name"] == "dummy"
    serial = {r[CONFIG_HASH_TAG]: r for r in res.table.to_dict("records")}
    for k in kids:
        ref = serial[k.data.tags[CONFIG_HASH_TAG]]
        for name, value in k.data.metrics.items():
            if name.startswith(("val.", "test.")):
                assert value == pytest.approx(ref[name], abs=1e-12), name


def test_store_fingerprint_follows_label_content(planted_store, tmp_path):
    relabelled = tmp_path / "relabelled"
    build_store(relabelled, labels_override=lambda listener, story, y: -y if story == 2 else y)
    same = tmp_path / "same"
    build_store(same)
    assert store_fingerprint(same) == store_fingerprint(planted_store)
    assert store_fingerprint(relabelled)[0] != store_fingerprint(planted_store)[0]


def test_parallel_sweep_logs_the_serial_sweeps_artifacts(shared, planted_store, tmp_path):
    cfg, res, uri, client = shared
    par = from_dict(
        config_dict(cfg.tracking.uri, "jobs2-artifacts", jobs=2, feature_set=["listener"])
    )
    out = run_sweep(par, store=planted_store, options=SweepOptions(progress=False))
    assert out.n_failed == 0 and set(out.table.status) == {"done"}
    serial = dict(zip(res.table[CONFIG_HASH_TAG], res.table.run_id, strict=True))
    for h, rid in zip(out.table[CONFIG_HASH_TAG], out.table.run_id, strict=True):
        files = {}
        for name, run_id in (("parallel", rid), ("serial", serial[h])):
            local = tmp_path / name / h
            client.download_artifacts(run_id, "", str(local))
            # importance/: what `experiments ablate` or `explain` added to the shared sweep's
            # chosen runs afterwards (tests/experiments/studies/test_ablation.py), not the sweep's
            files[name] = {
                str(p.relative_to(local)): p.read_bytes()
                for p in local.rglob("*")
                if p.is_file() and p.relative_to(local).parts[0] != "importance"
            }
        assert {
            "plots/predicted_vs_true.png",
            "plots/ccc_per_listener.png",
            "config.yaml",
            "ccc_matrix.csv",
        } <= set(files["serial"])
        assert files["parallel"].keys() == files["serial"].keys()
        for name in files["serial"]:
            if name != "config.yaml":  # it names the experiment and jobs
                assert files["parallel"][name] == files["serial"][name], name


def test_children_left_running_by_a_lost_writer_are_killed_and_resumed(planted_store, tracking_dir):
    """A worker logging through a server (another host) dies with its child run RUNNING: when the
    sweep ends, or its backend raises, the driver marks that run KILLED; resume runs it again."""
    from experiments.tracking.tracker import WORKER_LOST_TAG, Tracker
    from featurestore.parallel.serial import SerialBackend

    cfg = from_dict(
        config_dict(
            tracking_dir,
            "lost-writer",
            feature_set=["listener"],
            personalization=["global"],
            postprocess={"smooth_s": [0], "rescale": ["none"]},  # a fit group per configuration
        )
    )
    trials = expand(cfg)
    tracker = Tracker(tracking_dir, cfg.tracking.experiment)
    remote = {"host": "worker-host-that-died", "pid": "999999"}
    orphans: list[str] = []

    class LosingAWorker(SerialBackend):
        """The serial backend, plus what a remote worker killed mid-upload leaves: a RUNNING child
        of the last configuration; then the backend raises, as when the cluster goes away."""

        def map(self, fn, tasks, raises=()):
            yield from super().map(fn, tasks[:-1], raises)
            [last] = tasks[-1].trials
            [parent] = tracker.search("tags.sweep = 'parent' and attributes.status = 'RUNNING'")
            orphans.append(
                tracker.start_run(
                    last.label(),
                    parent_id=parent.info.run_id,
                    tags={CONFIG_HASH_TAG: last.hash(), **remote},
                )
            )
            raise OSError("connection to the scheduler lost")

    with pytest.raises(OSError, match="scheduler lost"):
        run_sweep(
            cfg,
            store=planted_store,
            options=SweepOptions(progress=False, log_artifacts=False, backend=LosingAWorker()),
        )
    client = tracker.client
    (orphan,) = orphans
    run = client.get_run(orphan)
    assert run.info.status == "KILLED"
    assert (
        "worker-host-that-died" in run.data.tags[WORKER_LOST_TAG]
        and "runs this configuration again" in run.data.tags[WORKER_LOST_TAG]
    )
    parent = client.get_run(run.data.tags["mlflow.parentRunId"])
    assert parent.info.status == "FAILED" and parent.data.tags["lost_runs"] == orphan

    # resume: only the configuration without a finished run is run again, and nothing is left RUNNING
    seen: list[dict] = []

    def leave_orphan(row):  # a worker elsewhere, lost while the sweep still runs
        if not seen:
            orphans.append(
                tracker.start_run(
                    "lost mid-sweep",
                    parent_id=client.get_run(row["run_id"]).data.tags["mlflow.parentRunId"],
                    tags={CONFIG_HASH_TAG: row[CONFIG_HASH_TAG], **remote},
                )
            )
        seen.append(row)

    again = run_sweep(
        cfg,
        store=planted_store,
        options=SweepOptions(progress=False, log_artifacts=False, on_result=leave_orphan),
    )
    assert list(again.table.status).count("done") == 1 and len(again.table) == len(trials)
    redone = again.table[again.table.status == "done"].iloc[0]
    assert redone[CONFIG_HASH_TAG] == trials[-1].hash() == run.data.tags[CONFIG_HASH_TAG]
    late = client.get_run(orphans[1])
    assert (
        late.info.status == "KILLED"
        and f"finished in run {redone.run_id}" in late.data.tags[WORKER_LOST_TAG]
    )
    assert not client.search_runs([again.experiment_id], "attributes.status = 'RUNNING'")


# ---------------------------------------------------------------- several targets
TARGETS = ["valence_self", "arousal_self"]


@pytest.fixture(scope="module")
def two_targets(tmp_path_factory, tracking_dir):
    """A sweep of two targets on a store where the valence follows the listener and the second
    target the speaker: (cfg, SweepResult, client, store)."""
    from experiments.tracking.tracker import resolve_tracking_uri

    root = tmp_path_factory.mktemp("two_targets") / "store"
    build_store(root, second_target="arousal_self")
    cfg = from_dict(config_dict(tracking_dir, "two-targets", target=TARGETS), store=root)
    res = run_sweep(cfg, store=root, options=SweepOptions(progress=False, log_artifacts=False))
    return cfg, res, MlflowClient(tracking_uri=resolve_tracking_uri(tracking_dir)), root


def test_two_targets_each_run_the_grid_with_its_own_choice(two_targets):
    cfg, res, client, _ = two_targets
    one = len(expand(cfg.for_target("valence_self")))
    assert len(expand(cfg)) == 2 * one and res.n_failed == 0
    assert res.table.groupby("target").size().to_dict() == dict.fromkeys(TARGETS, one)
    for kid in children(client, res.experiment_id, res.parent_run_id):
        target = kid.data.params["target"]
        assert kid.data.tags["target"] == target
        assert kid.data.tags["mlflow.runName"].endswith(f" target={target}")
    # planted: the valence follows the listener, the second target the speaker
    chosen = {
        target: {
            track: res.table.set_index("run_id").loc[run, "features.set"]
            for track, run in ids.items()
        }
        for target, ids in res.best_run_ids_by_target.items()
    }
    assert chosen == {
        "valence_self": {"personalized": "listener", "generalized": "listener"},
        "arousal_self": {"personalized": "speaker", "generalized": "speaker"},
    }
    # each target chosen among its own runs on its own validation score
    for target in TARGETS:
        part = res.table[(res.table.target == target) & (res.table.status != "failed")]
        best = part.loc[part["val.ccc_generalized"].idxmax(), "run_id"]
        assert res.best_run_ids_by_target[target]["generalized"] == best
    assert res.best_run_ids == res.best_run_ids_by_target["valence_self"]


def test_two_targets_parent_metrics_per_target_and_combined(two_targets, tmp_path):
    cfg, res, client, _ = two_targets
    parent = client.get_run(res.parent_run_id).data
    assert parent.params["target"] == "valence_self,arousal_self"
    runs = res.table.set_index("run_id")
    for track in ("personalized", "generalized"):
        for split in ("val", "test"):
            name = f"{split}.ccc_{track}"
            each = []
            for target in TARGETS:
                run = res.best_run_ids_by_target[target][track]
                assert parent.tags[f"{target}.best_run_id_{track}"] == run
                assert parent.metrics[f"{target}.{name}"] == pytest.approx(runs.loc[run, name])
                each.append(runs.loc[run, name])
            assert parent.metrics[f"combined.{name}"] == pytest.approx(np.mean(each))
    # tracks.csv: a row per target and track, then the combined rows
    path = client.download_artifacts(res.parent_run_id, "tracks.csv", str(tmp_path))
    tracks = pd.read_csv(path).set_index(["target", "track"])
    for track in ("personalized", "generalized"):
        name = f"test.ccc_{track}"
        assert tracks.loc[("combined", track), name] == pytest.approx(
            np.mean([tracks.loc[(t, track), name] for t in TARGETS])
        )
    assert "# Combined over targets" in (
        Path(client.download_artifacts(res.parent_run_id, "summary.md", str(tmp_path))).read_text()
    )
    # the one-target names are not mixed across targets
    assert not any(k.startswith("best_personalized.") for k in parent.metrics)
    assert parent.metrics["combined.test.ccc_personalized"] > 0.8  # both targets are planted


def test_two_targets_resume_is_keyed_by_target(two_targets, tracking_dir):
    cfg, res, client, root = two_targets
    again = run_sweep(cfg, store=root, options=SweepOptions(progress=False, log_artifacts=False))
    assert set(again.table.status) == {"reused"}
    # a one-target sweep of the second target reuses exactly that target's runs
    alone = run_sweep(
        cfg.for_target("arousal_self"),
        store=root,
        options=SweepOptions(progress=False, log_artifacts=False),
    )
    assert set(alone.table.status) == {"reused"}
    mine = set(res.table[res.table.target == "arousal_self"].run_id)
    assert set(alone.table.run_id) == mine
    # and reports under the one-target names
    parent = client.get_run(alone.parent_run_id).data
    assert "best_personalized.test.ccc_personalized" in parent.metrics
    assert not any(k.startswith("arousal_self.") for k in parent.metrics)


@register_backend
class Backwards(Backend):
    """A backend registered from this module alone: every task here, the last first, and the
    results put back in order (another way to run, the same numbers)."""

    name = "backwards"

    def map(self, fn, tasks, raises=()):
        done = {i: call(fn, tasks[i], raises) for i in reversed(range(len(tasks)))}
        yield from (done[i] for i in range(len(tasks)))


@pytest.mark.integration
def test_a_backend_registered_here_runs_the_sweep_its_config_names(
    planted_store, tracking_dir, local_reference
):
    cfg = from_dict({**config_dict(tracking_dir, "backend-by-name"), "backend": Backwards.name})
    res = run_sweep(cfg, planted_store, SweepOptions(progress=False, log_artifacts=False))
    assert res.n_failed == 0 and sorted(res.table[CONFIG_HASH_TAG]) == sorted(local_reference.index)
    assert_same_metrics(res.table, local_reference)
    parent = MlflowClient(resolve_tracking_uri(tracking_dir)).get_run(res.parent_run_id)
    assert parent.data.tags["backend"] == Backwards.name


def test_sessions_without_labels_are_left_out_and_change_no_validation_score(
    planted_store, tracking_dir, tmp_path, capsys
):
    """A blind test (the test story's labels withheld): the smoke sweep leaves those sessions out,
    says which, and its validation scores are those of the sweep on the full store."""
    from experiments.cli import main

    src, blind = Store(planted_store), Store(tmp_path / "blind", mode="a")
    for s in src.list_sessions():
        meta = src.meta(s)
        channels = {k: src.read_channel(s, k) for k in src.channel_keys(s)}
        labels = {} if meta.story in SPLITS["test"] else {"valence_self": src.labels(s).to_numpy()}
        blind.write_session(meta, channels=channels, labels=labels)
    left_out = [f"Subject_{listener}_Story_3" for listener in LISTENERS]
    client, parents = MlflowClient(tracking_uri=resolve_tracking_uri(tracking_dir)), {}
    for name, store in (("full", planted_store), ("blind", blind.root)):
        args = ["sweep", "--config", "smoke", "--store", str(store), "--tracking-uri", tracking_dir]
        args += ["--set", f"splits={SPLITS}", "--set", f"tracking.experiment=smoke-{name}"]
        assert main(args) == 0
        out = capsys.readouterr().out
        exp = client.get_experiment_by_name(f"smoke-{name}").experiment_id
        [parents[name]] = [
            r for r in client.search_runs([exp]) if "mlflow.parentRunId" not in r.data.tags
        ]
        assert ("left out 3 sessions without labels" in out) == (name == "blind")
    assert (
        f"left out 3 sessions without labels of valence_self: {', '.join(left_out)} (predict only)"
        in out
    )
    tags = parents["blind"].data.tags
    assert tags["sessions_without_labels"] == "3"
    assert tags["sessions_without_labels_names"] == ", ".join(left_out)
    assert "sessions_without_labels" not in parents["full"].data.tags
    kids = {
        name: {
            k.data.tags[CONFIG_HASH_TAG]: k.data.metrics
            for k in children(client, p.info.experiment_id, p.info.run_id)
        }
        for name, p in parents.items()
    }
    assert kids["blind"].keys() == kids["full"].keys() and len(kids["full"]) == 5
    for h, metrics in kids["full"].items():
        val = {m: v for m, v in metrics.items() if m.startswith("val.")}
        assert val and {m: kids["blind"][h][m] for m in val} == val, h
        assert not any(m.startswith("test.") for m in kids["blind"][h])  # nothing to score
    for track in ("personalized", "generalized"):  # the same choice
        best = {n: client.get_run(p.data.tags[f"best_run_id_{track}"]) for n, p in parents.items()}
        assert len({r.data.tags[CONFIG_HASH_TAG] for r in best.values()}) == 1, track
        # the blind sweep's registered choice predicts the test sessions; scored against the
        # withheld labels they give the full sweep's test CCC
        truth, predicted = tmp_path / f"truth_{track}", tmp_path / f"predicted_{track}"
        truth.mkdir()
        for sid in left_out:
            write_prediction_csv(truth / f"{sid}.csv", src.labels(sid).to_numpy(), "valence")
        model = f"models:/smoke-blind-{track}@chosen"
        args = ["--store", str(blind.root), "--tracking-uri", tracking_dir, "--sessions", *left_out]
        assert main(["predict", model, *args, "--out", str(predicted)]) == 0
        assert main(["score", str(truth), str(predicted), "--csv", str(tmp_path / "s.csv")]) == 0
        scored = pd.read_csv(tmp_path / "s.csv").ccc.mean()  # one test story: the sessions' mean
        logged = best["full"].data.metrics[f"test.ccc_{track}"]
        assert abs(scored - logged) < 1e-9, (track, scored, logged)
