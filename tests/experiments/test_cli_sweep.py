"""The ``experiments sweep`` / ``export`` verbs: config handling, kill and resume, concurrent
sweeps, export -> score."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import sklearn
import xgboost
import yaml
from mlflow import MlflowClient

from experiments.cli import main
from experiments.config.loading import expand, from_dict
from experiments.evaluation.metrics import protocol_means
from experiments.studies.parent_run import SweepResult
from experiments.studies.sweep import SweepOptions, run_sweep
from experiments.studies.sweep_cli import print_sweep
from experiments.tracking.child_runs import UNSEEN_OF_TAG
from experiments.tracking.tracker import _UNSEEN_OF, CONFIG_HASH_TAG, resolve_tracking_uri
from featurestore.storage.store import Store
from tests.experiments.helpers import (
    LISTENERS,
    N_FRAMES,
    SPLITS,
    STORIES,
    cli_cmd,
    cli_env,
    config_dict,
    smoke_sweep_args,
)

ROOT = Path(__file__).resolve().parents[2]


def write_config(path, raw) -> str:
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return str(path)


def runs_of(client, experiment):
    exp = client.get_experiment_by_name(experiment)
    return [] if exp is None else client.search_runs([exp.experiment_id], max_results=1000)


def is_child(run) -> bool:
    return "mlflow.parentRunId" in run.data.tags


# ------------------------------------------------------------------ config handling
def test_print_config_prints_yaml_and_exits_0(tmp_path, capsys):
    uri = str(tmp_path / "mlruns")
    code = main(
        [
            "sweep",
            "--no-models",
            "--config",
            "smoke",
            "--set",
            f"tracking.uri={uri}",
            "--set",
            "window.delay_s=[1, 2]",
            "--print-config",
        ]
    )
    assert code == 0
    cfg = yaml.safe_load(capsys.readouterr().out)
    assert cfg["tracking"]["uri"] == uri and cfg["window"]["delay_s"] == [1.0, 2.0]
    assert cfg["feature_sets"]["both"] and cfg["models"][0]["name"] == "dummy"
    assert not (tmp_path / "mlruns").exists()  # printing the config touches no tracking store


@pytest.mark.parametrize(
    "override, expected",
    [
        ("windw.delay_s=[1]", "did you mean 'window'"),
        ("window.dealy_s=[1]", "did you mean 'delay_s'"),
        ("models.1.alpah=[1]", "did you mean 'alpha'"),
    ],
)
def test_unknown_config_key_exits_2_with_a_suggestion(tmp_path, capsys, override, expected):
    code = main(
        [
            "sweep",
            "--no-models",
            "--config",
            "smoke",
            "--set",
            f"tracking.uri={tmp_path / 'mlruns'}",
            "--set",
            override,
            "--store",
            str(tmp_path),
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert expected in err and f"--set {override}" in err


def test_empty_store_exits_2_naming_make_features(tmp_path, capsys):
    empty = tmp_path / "features"
    empty.mkdir()
    for store in (empty, tmp_path / "missing"):
        code = main(
            [
                "sweep",
                "--no-models",
                "--config",
                "smoke",
                "--store",
                str(store),
                "--tracking-uri",
                str(tmp_path / "mlruns"),
            ]
        )
        assert code == 2
        err = capsys.readouterr().err
        assert "make features" in err and str(store) in err
    assert not (tmp_path / "mlruns").exists()


def test_sweep_printout_shows_test_only_for_each_tracks_choice(capsys):
    """The per-configuration listing printed by ``experiments sweep`` shows validation only; test
    numbers appear for each track's chosen configuration, and the personalized track lists every
    configuration (the tracks nest)."""
    table = pd.DataFrame(
        {
            "run_id": ["r1", "r2", "r3"],
            "status": "done",
            "label": ["per listener", "global a", "global b"],
            "track": ["personalized", "generalized", "generalized"],
            "val.ccc_personalized": [0.30, 0.45, 0.20],
            "val.ccc_generalized": [0.31, 0.44, 0.21],
            "test.ccc_personalized": [0.111, 0.222, 0.333],
            "test.ccc_generalized": [0.444, 0.555, 0.666],
            "test.ccc_personalized.ci_low": [0.0, 0.1, 0.2],
            "test.ccc_personalized.ci_high": [0.3, 0.4, 0.5],
            "test.n_listeners": 6.0,
        }
    )
    res = SweepResult(
        table,
        "parent",
        "r2",
        "0",
        "val.ccc_personalized",
        best_run_ids={"personalized": "r2", "generalized": "r2"},
        selection_metrics={
            "personalized": "val.ccc_personalized",
            "generalized": "val.ccc_generalized",
        },
    )
    assert print_sweep(res) == 0
    out = capsys.readouterr().out
    listing, chosen = out.split("# Best configuration of each track")
    # the listing: every configuration's validation CCC, no test number
    assert "per listener" in listing.split("generalized track")[0]  # nested: all configurations
    for value in ("0.111", "0.333", "0.444", "0.666"):
        assert value not in out  # unchosen configurations' test CCC: nowhere
    assert "0.222" not in listing and "0.555" not in listing
    # the choice: its test number, with its interval; validation without one
    assert "| test | 0.222 | [0.100, 0.400]" in chosen and "| test | 0.555 |" in chosen
    assert "| val | 0.450 | selection split: none" in chosen


# ------------------------------------------------------------------ kill and resume
def child_pids(pid: int) -> list[int]:
    """Live forked sweep workers whose parent is ``pid`` (Linux /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            state, ppid = stat.rsplit(")", 1)[1].split()[:2]
            if (
                int(ppid) == pid
                and state != "Z"
                and b"experiments.cli" in (entry / "cmdline").read_bytes()
            ):
                out.append(int(entry.name))
    return out


def alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="needs Linux /proc to find the worker processes"
)
@pytest.mark.integration
def test_killed_sweep_is_reaped_and_resumed_without_duplicates(
    planted_store, tracking_dir, tmp_path
):
    raw = config_dict(tracking_dir, "kill-resume")
    raw["models"][1]["alpha"] = [1, 10]
    cfg = from_dict(raw)
    n = len(expand(cfg))
    assert n == 18
    path = write_config(tmp_path / "kill.yaml", raw)
    client = MlflowClient(tracking_uri=resolve_tracking_uri(tracking_dir))
    proc = subprocess.Popen(
        cli_cmd(
            "sweep", "--no-models", "--config", path, "--store", str(planted_store), "--jobs", "2"
        ),
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if any(
                is_child(r) and r.info.status == "FINISHED" for r in runs_of(client, "kill-resume")
            ):
                break
            time.sleep(0.1)
        assert proc.poll() is None, (
            "the sweep ended before it could be killed: " + proc.stderr.read().decode()[-2000:]
        )
        # between two window keys no pool may be forked yet (the next key is being windowed):
        # wait for a pool's workers, so that the kill finds some to orphan
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            workers = child_pids(proc.pid)
            if len(workers) >= 2:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        # the pools' workers notice they are orphaned and leave (within about a second, or when
        # the compiled call they are in returns: a fit under a loaded machine's full test suite
        # took over 15 s); the next window group's pool may already be forked, so 2 to 4 of them
        assert 2 <= len(workers) <= 4
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(alive(w) for w in workers):
            time.sleep(0.2)
        assert not [w for w in workers if alive(w)], "orphaned sweep workers still running"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
        for w in workers:  # only the killed sweep's own workers, if the assertion above failed
            if alive(w):
                os.kill(w, signal.SIGKILL)
    at_kill = runs_of(client, "kill-resume")
    finished_before = {
        r.data.tags[CONFIG_HASH_TAG]: r.info.run_id
        for r in at_kill
        if is_child(r) and r.info.status == "FINISHED"
    }
    running_at_kill = [r.info.run_id for r in at_kill if r.info.status == "RUNNING"]
    killed_parent = [
        r for r in at_kill if not is_child(r) and r.data.tags.get("pid") == str(proc.pid)
    ]
    assert len(killed_parent) == 1 and killed_parent[0].info.run_id in running_at_kill
    assert 1 <= len(finished_before) < n

    res = run_sweep(
        cfg, store=planted_store, options=SweepOptions(progress=False, log_artifacts=False)
    )

    after = runs_of(client, "kill-resume")
    assert not [r for r in after if r.info.status == "RUNNING"]
    status = {r.info.run_id: r.info.status for r in after}
    assert all(status[rid] == "KILLED" for rid in running_at_kill)
    assert set(client.get_run(res.parent_run_id).data.tags["reaped_runs"].split(",")) == set(
        running_at_kill
    )
    finished = [r for r in after if is_child(r) and r.info.status == "FINISHED"]
    hashes = [r.data.tags[CONFIG_HASH_TAG] for r in finished]
    assert sorted(hashes) == sorted(
        t.hash() for t in expand(cfg)
    )  # each configuration exactly once
    table = res.table.set_index(CONFIG_HASH_TAG)
    assert (table.status == "reused").sum() == len(finished_before)
    assert (table.status == "done").sum() == n - len(finished_before)
    for h, rid in finished_before.items():
        assert table.loc[h, "status"] == "reused" and table.loc[h, "run_id"] == rid
    new_children = [r for r in after if r.data.tags.get("mlflow.parentRunId") == res.parent_run_id]
    assert len(new_children) == n - len(finished_before)


# ------------------------------------------------------------------ concurrent sweeps
@pytest.mark.integration
def test_two_sweeps_at_once_on_a_new_tracking_store(planted_store, tmp_path):
    """Two processes create and fill one brand-new SQLite store (one experiment) at the same time."""
    folder = str(tmp_path / "mlruns")
    procs, cfgs = [], []
    for fs in ("speaker", "listener"):
        raw = config_dict(folder, "concurrent", feature_set=[fs])
        cfgs.append(from_dict(raw))
        path = write_config(tmp_path / f"{fs}.yaml", raw)
        procs.append(
            subprocess.Popen(
                cli_cmd("sweep", "--no-models", "--config", path, "--store", str(planted_store)),
                cwd=tmp_path,
                env=cli_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err.decode()[-3000:]
        assert b"database is locked" not in err and b"Traceback" not in err
    client = MlflowClient(tracking_uri=resolve_tracking_uri(folder))
    runs = runs_of(client, "concurrent")
    parents = [r for r in runs if not is_child(r)]
    assert len(parents) == 2 and all(r.info.status == "FINISHED" for r in runs)
    expected = sorted(t.hash() for cfg in cfgs for t in expand(cfg))
    assert len(expected) == 10
    assert sorted(r.data.tags[CONFIG_HASH_TAG] for r in runs if is_child(r)) == expected
    for parent in parents:
        kids = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
        assert len(kids) == 5 and len({r.data.params["features.set"] for r in kids}) == 1


# ------------------------------------------------------------------ export -> score
def write_ground_truth(store_dir, folder, stories):
    folder.mkdir()
    store = Store(store_dir)
    for listener in LISTENERS:
        for story in stories:
            sid = f"Subject_{listener}_Story_{story}"
            np.savetxt(
                folder / f"{sid}.csv",
                store.labels(sid).to_numpy(),
                fmt="%.9g",
                header="valence",
                comments="",
            )


@pytest.mark.parametrize("split", ["test", "val"])
def test_export_then_score_reproduces_the_logged_metrics(
    sweep_once, planted_store, tracking_dir, tmp_path, capsys, split
):
    cfg, res, uri = sweep_once
    run = MlflowClient(tracking_uri=uri).get_run(res.best_run_id)
    out = tmp_path / "export"
    assert (
        main(
            [
                "export",
                res.best_run_id,
                "--split",
                split,
                "--out",
                str(out),
                "--tracking-uri",
                tracking_dir,
            ]
        )
        == 0
    )
    files = sorted(out.glob("*.csv"))
    assert [f.stem for f in files] == sorted(
        f"Subject_{L}_Story_{S}" for L in LISTENERS for S in SPLITS[split]
    )
    for f in files:
        lines = f.read_text().splitlines()
        assert lines[0] == "valence_self" and len(lines) == N_FRAMES + 1
    gt = tmp_path / "gt"  # the annotation folder holds every story, as the corpus's does
    write_ground_truth(planted_store, gt, STORIES)
    capsys.readouterr()
    assert main(["score", str(gt), str(out), "--csv", str(tmp_path / "ccc.csv")]) == 0
    printed = capsys.readouterr().out
    others = len(LISTENERS) * (len(STORIES) - len(SPLITS[split]))
    assert (
        f"scored the stories with predictions ({', '.join(map(str, SPLITS[split]))}); skipped {others} sessions"
        in printed
    )
    protocols = protocol_means(pd.read_csv(tmp_path / "ccc.csv"))
    for prot in ("personalized", "generalized"):
        logged = run.data.metrics[f"{split}.ccc_{prot}"]
        assert protocols[prot] == pytest.approx(logged, abs=1e-8)
        assert f"{prot:<12}  {logged:.4f}" in printed


def test_export_errors_name_the_run(sweep_once, tracking_dir, tmp_path, capsys):
    _, res, _ = sweep_once
    assert (
        main(
            [
                "export",
                "0" * 32,
                "--split",
                "test",
                "--out",
                str(tmp_path / "a"),
                "--tracking-uri",
                tracking_dir,
            ]
        )
        == 1
    )
    assert "0" * 32 in capsys.readouterr().err
    assert (
        main(
            [
                "export",
                res.best_run_id,
                "--split",
                "loso",
                "--out",
                str(tmp_path / "b"),
                "--tracking-uri",
                tracking_dir,
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert res.best_run_id in err and "loso" in err
    # the left-out listeners' predictions are in the sibling run, which the message names
    t = res.table
    assert UNSEEN_OF_TAG == _UNSEEN_OF and UNSEEN_OF_TAG in t
    unseen = t[t[UNSEEN_OF_TAG].notna()].iloc[0]
    ordinary = t[t[CONFIG_HASH_TAG] == unseen[UNSEEN_OF_TAG]].iloc[0]
    args = ["--out", str(tmp_path / "c"), "--tracking-uri", tracking_dir]
    assert main(["export", ordinary.run_id, "--split", "test_unseen", *args]) == 1
    err = capsys.readouterr().err
    assert f"experiments export {unseen.run_id} --split test_unseen" in err
    assert main(["export", unseen.run_id, "--split", "test_unseen", *args]) == 0


def test_feature_set_missing_from_the_store_exits_2_naming_the_channel(
    planted_store, tracking_dir, capsys
):
    code = main(
        smoke_sweep_args(
            planted_store,
            "--tracking-uri",
            tracking_dir,
            "--set",
            "tracking.experiment=missing-channel",
            "--set",
            "feature_sets.both=[listener/face_au]",
        )
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "listener/face_au" in err and "featurestore extract" in err and "Traceback" not in err


def _stack_at_first_fit(run: Callable[[], object]) -> list[traceback.FrameSummary]:
    """The stack (outermost first) at the first call of a scikit-learn or XGBoost ``fit`` while
    ``run()`` runs in this process."""
    libraries = [str(Path(m.__file__).parent) for m in (sklearn, xgboost)]
    seen: list[list[traceback.FrameSummary]] = []

    def profile(frame, event, arg):
        code = frame.f_code
        if (
            not seen
            and event == "call"
            and code.co_name == "fit"
            and code.co_filename.startswith(tuple(libraries))
        ):
            seen.append(traceback.extract_stack(frame))

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    assert seen, "no estimator was fitted"
    return seen[0]


@pytest.mark.integration
def test_the_walk_from_the_sweep_command_to_a_fit_is_short(planted_store, tmp_path):
    """At the first estimator fit of a one-process smoke sweep (serial backend), the package's
    own frames from the sweep command on are at most 10 calls in at most 6 files."""
    packages = tuple(str(ROOT / p) + os.sep for p in ("experiments", "featurestore"))
    args = smoke_sweep_args(planted_store, "--backend", "serial")
    args += ["--jobs", "1", "--tracking-uri", str(tmp_path / "mlruns")]
    args += ["--set", f"splits={json.dumps(SPLITS)}"]
    stack = _stack_at_first_fit(lambda: main(args))
    names = [f.name for f in stack]
    ours = [f for f in stack[names.index("cmd_sweep") :] if f.filename.startswith(packages)]
    walk = " -> ".join(f"{Path(f.filename).name}:{f.name}" for f in ours)
    assert len(ours) <= 10, walk
    assert len({f.filename for f in ours}) <= 6, walk
