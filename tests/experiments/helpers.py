"""A small synthetic feature store (no video) with a planted listener -> valence relation.

3 listeners x stories 1..4 (story 1 validation, 2 and 4 training, 3 test), 30 s each at
25 fps. Channels ``speaker/face_geom`` and ``listener/face_geom`` (5 fps, 5 columns, some
rows invalid and NaN), ``speaker/egemaps`` and ``listener/egemaps`` (100 Hz, 4 columns).
The self-rated valence is the listener's hidden signal delayed by 1 s plus a little noise;
the speaker channels are unrelated noise, so the listener feature set must win.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from experiments.config.loading import expand, from_dict
from featurestore.storage.store import Channel, SessionMeta, Store, session_name

os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"

FPS = 25.0
DURATION_S = 30.0
N_FRAMES = int(DURATION_S * FPS)
LISTENERS = (1, 2, 3)
STORIES = (1, 2, 3, 4)
SPLITS = {"train": [2, 4], "val": [1], "test": [3]}
SPLIT_OF = {s: name for name, stories in SPLITS.items() for s in stories}
DELAY_S = 1.0
ROOT = Path(__file__).resolve().parents[2]
#: the protocol metrics every sweep logs per configuration
METRICS = [
    "val.ccc_personalized",
    "val.ccc_generalized",
    "test.ccc_personalized",
    "test.ccc_generalized",
]


def _smooth_signal(rng: np.random.Generator, t: np.ndarray, n_waves: int = 6) -> np.ndarray:
    """A smooth random signal in about [-1, 1] (a sum of slow sines), evaluated at ``t`` seconds."""
    freqs = rng.uniform(0.03, 0.25, n_waves)
    phases = rng.uniform(0, 2 * np.pi, n_waves)
    amps = rng.uniform(0.3, 1.0, n_waves)
    x = sum(a * np.sin(2 * np.pi * f * t + p) for a, f, p in zip(amps, freqs, phases, strict=True))
    return x / amps.sum() * 1.5


def _channel(rng, t, signal, n_cols, noise, invalid_frac=0.0, key="") -> Channel:
    data = np.empty((len(t), n_cols), np.float32)
    data[:, 0] = signal + rng.normal(0, noise, len(t))
    for j in range(1, n_cols):
        data[:, j] = rng.normal(0, 1, len(t)) + (0.5 * signal if j == 1 else 0.0)
    valid = np.ones(len(t), bool)
    if invalid_frac:
        bad = rng.random(len(t)) < invalid_frac
        valid[bad] = False
        data[bad] = np.nan
    return Channel(
        data,
        t,
        valid,
        [f"c{j}" for j in range(n_cols)],
        extractor="synthetic",
        extractor_version="1",
        cache_key=key,
        lookahead_s=0.0,  # drawn at its time stamps: reads nothing later
    )


def build_store(
    root: Path,
    seed: int = 0,
    labels_override=None,
    speaker_share: float = 0.0,
    second_target: str | None = None,
) -> Store:
    """Write the synthetic store into ``root``; ``labels_override(listener, story, y) -> y``.

    ``speaker_share`` > 0: the speaker channels carry a second hidden signal, and the valence is
    ``(1 - share) * listener's + share * speaker's`` (both delayed by 1 s): with 0.5 each role
    carries half of it (the late-fusion tests).

    ``second_target``: a second label target of that name, planted on the speaker: the speaker
    channels carry a hidden signal of their own and the target is it delayed by 1 s plus a
    little noise, so the speaker feature set must win for it (the listener set for the valence).
    The valence and the listener channels are those of the store without it."""
    store = Store(root, mode="a")
    for listener in LISTENERS:
        for story in STORIES:
            rng = np.random.default_rng(seed * 1000 + listener * 10 + story)
            t_face = np.arange(0, DURATION_S, 0.2)
            t_audio = np.arange(0, DURATION_S, 0.01)
            t_label = np.arange(N_FRAMES) / FPS
            grid = np.arange(-2.0, DURATION_S + 1, 0.01)
            lsig = _smooth_signal(rng, grid)  # the listener's hidden state

            def hidden(t, grid=grid, lsig=lsig):
                return np.interp(t, grid, lsig)

            y = np.clip(hidden(t_label - DELAY_S) + rng.normal(0, 0.05, N_FRAMES), -1, 1)
            ssig = _smooth_signal(rng, t_face)
            ssig_a = _smooth_signal(rng, t_audio)
            if speaker_share:
                spk = _smooth_signal(rng, grid)  # the speaker's hidden part of the valence
                y = np.clip(
                    (1 - speaker_share) * hidden(t_label - DELAY_S)
                    + speaker_share * np.interp(t_label - DELAY_S, grid, spk)
                    + rng.normal(0, 0.05, N_FRAMES),
                    -1,
                    1,
                )
                ssig, ssig_a = np.interp(t_face, grid, spk), np.interp(t_audio, grid, spk)
            if labels_override is not None:
                y = labels_override(listener, story, y)
            extra = {}
            if second_target is not None:  # a generator of its own: the other draws stay
                srng = np.random.default_rng(10**6 + seed * 1000 + listener * 10 + story)
                spk = _smooth_signal(srng, grid)
                ssig, ssig_a = np.interp(t_face, grid, spk), np.interp(t_audio, grid, spk)
                second = np.interp(t_label - DELAY_S, grid, spk) + srng.normal(0, 0.05, N_FRAMES)
                extra[second_target] = np.clip(second, -1, 1).astype(np.float32)
            key = f"synthetic-{seed}-{listener}-{story}"  # stands for the content hash of a real cache key
            channels = {
                "listener/face_geom": _channel(
                    rng, t_face, hidden(t_face), 5, 0.1, invalid_frac=0.1, key=key
                ),
                "listener/egemaps": _channel(rng, t_audio, hidden(t_audio), 4, 0.3, key=key),
                "speaker/face_geom": _channel(rng, t_face, ssig, 5, 0.1, invalid_frac=0.1, key=key),
                "speaker/egemaps": _channel(rng, t_audio, ssig_a, 4, 0.3, key=key),
            }
            _write_planted(store, listener, story, channels, y, extra)
    return store


def _write_planted(
    store: Store, listener: int, story: int, channels: dict, y: np.ndarray, extra=None
) -> None:
    """One planted session's shard: the official split of ``story``, speaker ``(story + 1) // 2``."""
    meta = SessionMeta(
        session=session_name(listener, story),
        listener=listener,
        story=story,
        speaker=(story + 1) // 2,
        split=SPLIT_OF[story],
        n_frames=N_FRAMES,
    )
    store.write_session(
        meta, channels=channels, labels={"valence_self": y.astype(np.float32), **(extra or {})}
    )


#: listeners of :func:`build_planted_column_store` (five: intervals over listeners need a few)
PLANTED_LISTENERS = (1, 2, 3, 4, 5)


def build_planted_column_store(root: Path, seed: int = 0) -> Store:
    """A store where one column carries the signal: ``listener/face_geom`` has 4 columns at
    25 fps, ``c0`` the listener's hidden signal plus a little noise, ``c1``-``c3`` pure noise;
    ``speaker/face_geom`` (3 columns) is unrelated noise. 5 listeners x stories 1..4 (splits as
    :data:`SPLITS`), 30 s each; the label is the hidden signal delayed by 1 s."""
    store = Store(root, mode="a")
    t = np.arange(N_FRAMES) / FPS
    for listener in PLANTED_LISTENERS:
        for story in STORIES:
            rng = np.random.default_rng(seed * 1000 + listener * 10 + story)
            grid = np.arange(-2.0, DURATION_S + 1, 0.01)
            hidden = _smooth_signal(rng, grid)
            y = np.clip(np.interp(t - DELAY_S, grid, hidden) + rng.normal(0, 0.05, N_FRAMES), -1, 1)
            listen = rng.normal(0, 1, (N_FRAMES, 4)).astype(np.float32)
            listen[:, 0] = np.interp(t, grid, hidden) + rng.normal(0, 0.05, N_FRAMES)
            speak = rng.normal(0, 1, (N_FRAMES, 3)).astype(np.float32)
            key = f"planted-{seed}-{listener}-{story}"
            channels = {
                f"{role}/face_geom": Channel(
                    data,
                    t,
                    np.ones(N_FRAMES, bool),
                    [f"c{j}" for j in range(data.shape[1])],
                    extractor="synthetic",
                    extractor_version="1",
                    cache_key=key,
                    lookahead_s=0.0,
                )
                for role, data in (("listener", listen), ("speaker", speak))
            }
            _write_planted(store, listener, story, channels, y)
    return store


def config_dict(uri: str, experiment: str = "test", **changes) -> dict:
    """A small grid on the synthetic store: 2 feature sets x (dummy + ridge x 2 personalizations x 2 smoothings)."""
    d = {
        "target": "valence_self",
        "splits": {k: list(v) for k, v in SPLITS.items()},
        "protocol": "val",
        "feature_sets": {
            "speaker": ["speaker/face_geom", "speaker/egemaps"],
            "listener": ["listener/face_geom", "listener/egemaps"],
        },
        "window": {
            "lengths_s": [[2]],
            "delay_s": [1],
            "align": "centred",
            "stats": ["mean", "std"],
            "train_hop_s": 0.4,
        },
        "models": [
            {"name": "dummy", "only": {"personalization": ["global"], "postprocess.smooth_s": [0]}},
            {"name": "ridge", "alpha": [10]},
        ],
        "personalization": ["global", "per_listener"],
        "postprocess": {
            "smooth_s": [0, 2],
            "smooth_method": ["moving_average"],
            "rescale": ["none"],
        },
        "tracking": {"uri": uri, "experiment": experiment},
        "seed": 0,
        # the chosen generalized configurations' unseen-listener runs: on where a test looks at them
        "unseen_listener": False,
    }
    d.update(changes)
    return d


def slow_group_trials() -> tuple:
    """(config, configurations) of a gradient-boosting fit group with out-of-fold rescaling and
    unseen-listener fits (split into parts by the forked and the Dask schedules) beside ridge
    groups (evaluated whole), on one window key."""
    cfg = from_dict(
        config_dict(
            "mlruns",
            feature_set=["listener"],
            personalization=["global"],
            models=[{"name": "hist_gb", "max_iter": [15]}, {"name": "ridge"}],
            postprocess={"smooth_s": [2], "rescale": ["none", "train"]},
        )
    )
    return cfg, [replace(t, unseen_listener=True) for t in expand(cfg)]


def assert_same_result(result, ref, label: str) -> None:
    """One trial's result equals the reference run's: metrics, warnings, every prediction."""
    assert result.metrics == ref.metrics and result.warnings == ref.warnings, label
    for sid in ref.predictions:
        np.testing.assert_array_equal(result.predictions[sid], ref.predictions[sid])
    for sid in ref.unseen_predictions:
        np.testing.assert_array_equal(result.unseen_predictions[sid], ref.unseen_predictions[sid])


def loopback_server_args(port: int) -> list[str]:
    """An MLflow server's address options: 127.0.0.1 only, one worker."""
    return ["--host", "127.0.0.1", "--port", str(port), "--workers", "1"]


def cli_env() -> dict:
    """Environment for ``python -m experiments.cli`` subprocesses: the project importable, no telemetry."""
    env = dict(os.environ)
    env["MLFLOW_DISABLE_TELEMETRY"] = "true"
    env["PYTHONPATH"] = str(ROOT) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    return env


def cli_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "experiments.cli", *args]


def smoke_sweep_args(store, *more: str) -> list[str]:
    """``experiments sweep``'s arguments for the smoke config on ``store``, no models saved."""
    return ["sweep", "--no-models", "--config", "smoke", "--store", str(store), *more]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(
    url: str, proc: subprocess.Popen, timeout_s: float = 90.0, log: Path | None = None
) -> None:
    """Wait until the MLflow server ``proc`` answers ``{url}/health``; fail the test (with the
    tail of ``log``, its output, when given) if it exits or stays silent for ``timeout_s`` s."""

    def tail() -> str:
        return f": {log.read_text()[-2000:]}" if log is not None and log.exists() else ""

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"mlflow server exited with {proc.returncode}{tail()}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"mlflow server at {url} not healthy after {timeout_s} s{tail()}")


def copy_tracking_db(tracking_dir: str, folder: Path) -> str:
    """Copy the shared test tracking database into ``folder`` (``folder/mlflow.db``, the tables
    made already: creating them takes seconds); returns its ``sqlite:///`` URI."""
    import sqlite3

    from experiments.tracking.tracker import resolve_tracking_uri

    folder.mkdir(parents=True, exist_ok=True)
    src = sqlite3.connect(resolve_tracking_uri(tracking_dir)[len("sqlite:///") :])
    dst = sqlite3.connect(folder / "mlflow.db")
    with dst:
        src.backup(dst)
    src.close()
    dst.close()
    return f"sqlite:///{folder / 'mlflow.db'}"


@contextlib.contextmanager
def process_group(
    cmd: list[str], log: Path, env: dict | None = None, cwd: Path | None = None
) -> Iterator[subprocess.Popen]:
    """Run ``cmd`` in a process group of its own (stdout discarded, stderr to ``log``); at exit
    SIGKILL that group and nothing else (e.g. a server and the workers it started)."""
    with open(log, "w") as err:
        proc = subprocess.Popen(
            cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
        )
        try:
            yield proc
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextlib.contextmanager
def dask_cluster(n_workers: int = 2, allowed_failures: int | None = None):
    """A local Dask cluster of ``n_workers`` single-threaded worker processes (restarted by their
    nannies when they die). ``allowed_failures``: how many lost workers a task survives before
    it fails with ``KilledWorker`` (Dask's default: 3)."""
    import dask
    from distributed import LocalCluster

    settings = (
        {}
        if allowed_failures is None
        else {"distributed.scheduler.allowed-failures": allowed_failures}
    )
    with dask.config.set(settings):
        c = LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
        )
    try:
        yield c
    finally:
        c.close()


def running_children(client, experiment: str) -> list:
    """The child runs of ``experiment`` that are RUNNING on ``client``'s server (none yet when
    the experiment does not exist)."""
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    return client.search_runs(
        [exp.experiment_id], "attributes.status = 'RUNNING' and tags.mlflow.parentRunId != ''"
    )


def assert_same_metrics(table, reference) -> None:
    """Every val./test. metric of ``reference`` (indexed by config hash) equals ``table``'s, per configuration."""
    import numpy as np

    from experiments.tracking.tracker import CONFIG_HASH_TAG

    t = table.set_index(CONFIG_HASH_TAG)
    assert sorted(t.index) == sorted(reference.index)
    cols = [c for c in reference.columns if c.startswith(("val.", "test.")) and c in t.columns]
    assert set(METRICS) <= set(cols)
    for h in t.index:
        for c in cols:
            a, b = t.at[h, c], reference.at[h, c]
            assert (np.isnan(a) and np.isnan(b)) or a == b, (t.at[h, "label"], c, a, b)


# --------------------------------------------------------------- configurations and tables
CHANNELS = ["listener/egemaps", "listener/face_geom", "speaker/egemaps", "speaker/face_geom"]


def trials_for(**changes):
    """Every configuration of :func:`config_dict` with ``changes``."""
    return expand(from_dict(config_dict("unused", **changes)))


def pick(
    trials, feature_set, model="ridge", personalization="global", smooth_s=0.0, rescale="none"
):
    """The configuration of ``trials`` with these settings."""
    for t in trials:
        if (t.feature_set, t.model, t.personalization, t.smooth_s, t.rescale) == (
            feature_set,
            model,
            personalization,
            smooth_s,
            rescale,
        ):
            return t
    raise LookupError((feature_set, model, personalization, smooth_s, rescale))


#: persons x sessions of :func:`build_session_rating_store`
SESSION_PERSONS = tuple(range(1, 9))
SESSIONS_PER_PERSON = 5


def build_session_rating_store(root: Path, planted: bool = True, seed: int = 0) -> Store:
    """A store of whole-session ratings ``empathy``: 8 persons x 5 sessions, 20 s each, a
    channel ``listener/face_geom`` (5 fps, columns ``c0``-``c3``, a few rows invalid) and
    ``speaker/face_geom`` (noise). ``planted``: the rating is ``1 + 2 * mean(c0)`` plus a little
    noise (each session's ``c0`` is centred on its own level); else it is noise, unrelated to
    every channel. Frame labels are left out: the study reads ``/session_labels`` only."""
    store = Store(root, mode="a")
    n = 100
    t = np.arange(n) / 5.0
    for person in SESSION_PERSONS:
        for k in range(1, SESSIONS_PER_PERSON + 1):
            rng = np.random.default_rng(seed * 10_000 + person * 100 + k)
            level = rng.normal(0, 1)
            listen = rng.normal(0, 1, (n, 4)).astype(np.float32)
            listen[:, 0] += level
            valid = rng.random(n) > 0.05
            speak = rng.normal(0, 1, (n, 3)).astype(np.float32)
            channels = {
                f"{role}/face_geom": Channel(
                    data,
                    t,
                    valid,
                    [f"c{j}" for j in range(data.shape[1])],
                    extractor="synthetic",
                    extractor_version="1",
                    cache_key=f"s{person}-{k}",
                    lookahead_s=0.0,
                )
                for role, data in (("listener", listen), ("speaker", speak))
            }
            meta = SessionMeta(
                session=f"p{person}_s{k}",
                listener=person,
                story=k,
                speaker=0,
                split="train",
                n_frames=n * 5,
                layout="manifest",
                person=f"p{person}",
                group=f"s{k}",
            )
            store.write_session(meta, channels=channels)
            mean_c0 = float(listen[valid, 0].mean())
            rating = 1 + 2 * mean_c0 + rng.normal(0, 0.05) if planted else rng.normal(3, 1)
            store.write_session_labels(meta.session, {"empathy": {"": rating}}, {"kind": "test"})
    return store


def counted_fits(monkeypatch) -> list[str]:
    """The models :func:`experiments.evaluation.fitting._fit` fits from now on (their names),
    each fit still made."""
    from experiments.evaluation import fitting

    fits: list[str] = []
    real = fitting._fit

    def counting(trial, train, personalization, predicted):
        fits.append(trial.model)
        return real(trial, train, personalization, predicted)

    monkeypatch.setattr(fitting, "_fit", counting)
    return fits
