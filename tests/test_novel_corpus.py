"""A corpus in a layout the package has never seen, from scan to `experiments sessions`.

Built from the monadic demo's media and ratings, re-laid out as a lab of its own would: its
own recording ids and folders, the voice muxed into the camera clip for half the recordings
(no audio column) and a separate 44.1 kHz microphone file for the others, valence and arousal
from two raters as ``time,<target>`` files at 10 Hz on a 1-9 scale (one rater 1.5 s slower
than the other), a whole-recording engagement score, and OpenFace 2.x files named by recording
id imported afterwards. Nothing here uses the demo's or OMG's names or defaults.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient
from scipy.io import wavfile
from scipy.signal import resample_poly

from experiments.cli import main as experiments_main
from experiments.tracking.tracker import resolve_tracking_uri
from featurestore.cli import main as featurestore_main
from featurestore.storage.store import Store
from tests.featurestore.extraction.helpers import write_openface
from tests.featurestore.helpers import mux_audio

pytestmark = pytest.mark.slow

FPS = 25.0
RATE_HZ = 10.0


def _mux(video: Path, wav: Path, out: Path) -> None:
    """``video``'s frames (re-encoded) with ``wav`` as its AAC audio track, into ``out``."""
    import av

    sr, pcm = wavfile.read(str(wav))
    mono = (pcm.astype(np.float32) / 32768.0).reshape(len(pcm), -1)[:, 0]
    with av.open(str(video)) as src, av.open(str(out), "w") as dst:
        vin = src.streams.video[0]
        v = dst.add_stream("libx264", rate=int(round(float(vin.average_rate))))
        v.width, v.height, v.pix_fmt = vin.codec_context.width, vin.codec_context.height, "yuv420p"
        a = dst.add_stream("aac", rate=sr)
        a.layout = "mono"
        for frame in src.decode(vin):
            for p in v.encode(frame.reformat(format="yuv420p")):
                dst.mux(p)
        for p in v.encode():
            dst.mux(p)
        mux_audio(dst, a, mono, sr)


def _resample_wav(wav: Path, out: Path, rate: int = 44100) -> None:
    sr, pcm = wavfile.read(str(wav))
    up = resample_poly(pcm.astype(np.float64), rate, sr)
    wavfile.write(str(out), rate, np.clip(up, -32768, 32767).astype(np.int16))


def _rating_curve(path: Path, target: str) -> tuple[np.ndarray, np.ndarray]:
    """(times s, values in [-1, 1]) of one of the demo's rating files (either format)."""
    df = pd.read_csv(path)
    if "time" in df:
        return df["time"].to_numpy(float), df[target].to_numpy(float)
    return np.arange(len(df)) / FPS, df[target].to_numpy(float)


def _write_rating(src: Path, out: Path, target: str, duration_s: float) -> None:
    """``src``'s curve at 10 Hz as ``time,<target>`` on a 1-9 scale (5 + 4 v)."""
    t, v = _rating_curve(src, target)
    grid = np.arange(0.0, duration_s - 1e-9, 1.0 / RATE_HZ)
    scaled = 5.0 + 4.0 * np.interp(grid, t, v)
    pd.DataFrame({"time": grid.round(3), target: scaled.round(4)}).to_csv(out, index=False)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("novel")
    demo = root / "demo"
    args = ["demo", "--layout", "monadic", "--out", str(demo), "--persons", "3"]
    assert featurestore_main(args) == 0
    lab = root / "lab"
    for d in ("cams", "mics", "annotations", "openface"):
        (lab / d).mkdir(parents=True)
    src = pd.read_csv(demo / "manifest.csv")
    rows = []
    for i, r in enumerate(src.itertuples()):
        rec = f"rec-{i + 1:03d}"
        n = len(pd.read_csv(demo / src.loc[i, "label_valence@r1"]))  # one value per 25 fps frame
        duration_s = n / FPS
        cam = lab / "cams" / f"{rec}_cam.mp4"
        row = {
            "session": rec,
            "person": f"subj{r.person[1:]:0>2}",
            "group": r.group,
            "split": r.split,
        }
        if i % 2 == 0:  # the voice inside the camera clip, no audio column
            _mux(demo / r.video_person, demo / r.audio_person, cam)
            row["video_person"], row["audio_person"] = f"cams/{cam.name}", ""
        else:
            shutil.copy(demo / r.video_person, cam)
            _resample_wav(demo / r.audio_person, lab / "mics" / f"{rec}.wav")
            row["video_person"], row["audio_person"] = f"cams/{cam.name}", f"mics/{rec}.wav"
        for target in ("valence", "arousal"):
            for rater in ("r1", "r2"):
                name = f"{rec}_{target}_{rater}.csv"
                _write_rating(
                    demo / src.loc[i, f"label_{target}@{rater}"],
                    lab / "annotations" / name,
                    target,
                    duration_s,
                )
                row[f"label_{target}@{rater}"] = f"annotations/{name}"
        row["rating_engagement"] = r.rating_engagement
        write_openface(lab / "openface" / f"{rec}.csv", n=n, fps=FPS, seed=i)
        rows.append(row)
    pd.DataFrame(rows).to_csv(lab / "recordings.csv", index=False)
    (lab / "featurestore.yaml").write_text(
        "manifest: recordings.csv\n"
        "face_fps: 5.0\n"
        "targets:\n  valence: {scale: [1, 9]}\n  arousal: {scale: [1, 9]}\n"
        "extractors:\n  egemaps: {sampling_rate: 16000}\n"
    )
    return lab


@pytest.fixture(scope="module")
def store(corpus, tmp_path_factory) -> Path:
    st = tmp_path_factory.mktemp("novel_store") / "store"
    assert featurestore_main(["scan", str(corpus), "--store", str(st)]) == 0
    assert featurestore_main(["extract", str(corpus), "--store", str(st)]) == 0
    imports = ["import", str(corpus / "openface"), "--role", "person", "--channel", "openface"]
    assert featurestore_main([*imports, "--store", str(st)]) == 0  # files named by recording id
    assert featurestore_main(["verify", "--store", str(st)]) == 0
    return st


def test_every_recording_is_stored_under_its_own_id_with_its_voice_and_imports(corpus, store):
    st = Store(store)
    recordings = pd.read_csv(corpus / "recordings.csv")
    assert st.list_sessions() == sorted(recordings["session"])
    for rec in recordings["session"]:
        keys = st.channel_keys(rec)
        # the voice: from the muxed track or the separate microphone file, never skipped
        assert {"listener/face_geom", "listener/egemaps", "listener/openface"} <= set(keys), rec
        voice = st.read_channel(rec, "listener/egemaps")
        assert voice.valid.mean() > 0.5, rec
        assert st.meta(rec).person.startswith("subj")
    muxed = recordings[recordings["audio_person"].isna()]["session"].iloc[0]
    assert st.read_channel(muxed, "listener/egemaps").source["path"].endswith("_cam.mp4")


def test_ratings_keep_their_1_to_9_scale(store):
    st = Store(store)
    for rec in st.list_sessions():
        v = st.labels(rec, "valence").dropna()
        assert 1.0 <= v.min() and v.max() <= 9.0 and v.std() > 0.05


def test_agreement_finds_the_raters_lags_without_an_omg_config(store, tmp_path):
    out = tmp_path / "reports"
    args = ["agreement", "--store", str(store), "--no-cross", "--out", str(out)]
    args += ["--tracking-uri", str(tmp_path / "mlruns")]
    assert experiments_main(args) == 0
    # the demo's raters react 1 s and 2.5 s late: r2's lag relative to r1 is found, per target
    lags = pd.read_csv(out / "inter_rater_lags.csv").set_index(["target", "rater"])["lag_s"]
    for target in ("valence", "arousal"):
        assert lags[(target, "r1")] == 0.0 and 1.2 <= lags[(target, "r2")] <= 1.8
    icc = pd.read_csv(out / "inter_rater.csv")
    pooled = icc[icc["session"] == "pooled"].set_index(["target", "aligned"])["ICC(2,1)"]
    for target in ("valence", "arousal"):
        assert pooled[(target, True)] > pooled[(target, False)]  # aligning the lag helps
    assert set(icc["session"]) >= {"rec-001", "rec-012"}  # the recordings' own ids
    client = MlflowClient(resolve_tracking_uri(str(tmp_path / "mlruns")))
    assert client.get_experiment_by_name("agreement-store") is not None  # not the OMG config's


def test_a_two_target_sweep_and_the_whole_recording_study(store, tmp_path):
    uri = str(tmp_path / "mlruns")
    sweep = ["sweep", "--config", "smoke", "--store", str(store)]
    for s in (
        f"tracking.uri={uri}",
        "tracking.experiment=lab",
        "target=[valence, arousal]",
        "splits=shard",
        "window.delay_s=[1]",
        "feature_sets={face: [person/face_geom], voice: [person/egemaps]}",
        "gold_standard={method: ewe, align_lags: true}",
    ):
        sweep += ["--set", s]
    assert experiments_main(sweep) == 0
    cfg = tmp_path / "sessions.yaml"
    cfg.write_text(
        "target: engagement\nchannels: [person/egemaps, person/face_geom]\n"
        "protocol: lopo\nmodels:\n  - {name: dummy}\n  - {name: ridge, alpha: [10.0]}\n"
        f"tracking_uri: {uri}\nexperiment: lab-sessions\n"
    )
    args = ["sessions", str(cfg), "--store", str(store), "--out", str(tmp_path / "reports")]
    assert experiments_main(args) == 0
    text = (tmp_path / "reports" / "summary_sessions.md").read_text()
    assert "12 sessions of 3 persons" in text and "person/egemaps" in text
    client = MlflowClient(resolve_tracking_uri(uri))
    runs = client.search_runs([client.get_experiment_by_name("lab").experiment_id])
    [parent] = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    metrics = parent.data.metrics
    for part in ("valence", "arousal", "combined"):  # each target scored, and the combined score
        for track in ("personalized", "generalized"):
            assert np.isfinite(metrics[f"{part}.test.ccc_{track}"]), (part, track)
    assert parent.data.tags["layout"] == "manifest"
    # each target's and track's choice registered; predicted files named by recording id
    tracking = resolve_tracking_uri(uri)
    registry = MlflowClient(tracking, registry_uri=tracking)
    for target in ("valence", "arousal"):
        for track in ("personalized", "generalized"):
            assert registry.get_model_version_by_alias(f"lab-{target}-{track}", "chosen").run_id
    out = tmp_path / "predicted"
    predict = ["predict", "models:/lab-arousal-generalized@chosen", "--store", str(store)]
    assert experiments_main([*predict, "--tracking-uri", uri, "--out", str(out)]) == 0
    files = sorted(p.stem for p in out.glob("*.csv"))
    assert files == sorted(Store(store).list_sessions())
    assert (out / f"{files[0]}.csv").read_text().startswith("arousal\n")
