"""Fault injection and bad input for ``featurestore``: real kills, a real full disk, broken files.

Each case checks three things: the command names what is wrong (which file, what, what to
do) with a non-zero exit code, nothing already stored is lost (shard bytes compared before
and after), and a re-run does only what is missing. The kills are real SIGKILLs of a
``featurestore extract`` subprocess; a tiny wrapper script (:data:`FAULTY`) only slows the
real decoding or shard writing down and says, through a file, when it is there, so the kill
lands at a chosen point.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from featurestore.cli import main
from featurestore.demo import build_demo
from featurestore.storage.store import Store
from tests.featurestore.helpers import make_video

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SESSIONS = ["Subject_1_Story_1", "Subject_1_Story_2", "Subject_1_Story_3"]
#: channels every demo shard has at least (the default extraction may add more)
CORE = {
    "listener/egemaps",
    "listener/face_geom",
    "scene/egemaps",
    "speaker/egemaps",
    "speaker/face_geom",
}

#: runs ``featurestore`` with the real decoder or shard writer slowed down at one point
FAULTY = """
import os, sys, time
from pathlib import Path

import featurestore.sources.media as media
import featurestore.storage.store as store

signal_file, at, delay = Path(os.environ["FAULT_SIGNAL"]), os.environ["FAULT_AT"], float(os.environ["FAULT_DELAY"])


def say(text):
    with open(signal_file, "a") as f:
        f.write(text + "\\n")


if at == "decode":
    real_iter_frames = media.iter_frames

    def iter_frames(path, *args, **kwargs):
        for i, item in enumerate(real_iter_frames(path, *args, **kwargs)):
            if i == 1:
                say(f"decoding {Path(path).stem}")
            time.sleep(delay)
            yield item

    media.iter_frames = iter_frames
elif at == "write":
    real_write_image = store._write_image

    def write_image(tmp, image, final):
        real_write_image(tmp, image, final)
        say(f"writing {tmp}")  # the temporary file, written, before its rename
        time.sleep(delay)

    store._write_image = write_image

from featurestore.cli import main

sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    build_demo(out, n_listeners=1, stories=(1, 2, 3), duration_s=4, progress=False)
    return out


@pytest.fixture(scope="module")
def extracted(corpus, tmp_path_factory):
    store = tmp_path_factory.mktemp("store") / "features"
    assert main(["extract", str(corpus), "--store", str(store)]) == 0
    return store


def snapshot(store: Path) -> dict[str, bytes]:
    """Every file of a store folder (hidden ones included) -> its bytes."""
    return {p.name: p.read_bytes() for p in sorted(store.iterdir()) if p.is_file()}


def assert_complete(store: Path, sessions: list[str], reference: Path) -> None:
    """Exactly these shards; each opens and has the channels and labels of an uninterrupted run."""
    st, ref = Store(store), Store(reference)
    assert st.list_sessions() == sessions
    for s in sessions:
        keys = sorted(st.channel_keys(s))
        assert keys == sorted(ref.channel_keys(s)) and CORE <= set(keys), s
        assert st.label_targets(s) == ref.label_targets(s) and "valence_self" in st.label_targets(s)
        assert len(st.labels(s, "valence_self")) == st.meta(s).n_frames == 100
        for key in keys:
            ch = st.read_channel(s, key)
            assert len(ch.data) == len(ch.time) == len(ch.valid)


def run_until(tmp_path: Path, args: list[str], at: str, wanted: str, delay: float) -> str:
    """Run ``featurestore ARGS`` slowed at ``at``; SIGKILL it once a signal line starts with ``wanted``."""
    script = tmp_path / "faulty_featurestore.py"
    script.write_text(FAULTY)
    signal_file = tmp_path / f"signal-{at}.txt"
    env = {
        **os.environ,
        "FAULT_SIGNAL": str(signal_file),
        "FAULT_AT": at,
        "FAULT_DELAY": str(delay),
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    proc = subprocess.Popen(
        [sys.executable, str(script), *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 90
        hit = ""
        while not hit and time.monotonic() < deadline and proc.poll() is None:
            lines = signal_file.read_text().splitlines() if signal_file.exists() else []
            hit = next((line for line in lines if line.startswith(wanted)), "")
            time.sleep(0.02)
        assert hit, f"never reached {wanted!r}; exit {proc.poll()}: " + (
            proc.stderr.read().decode()[-2000:] if proc.poll() is not None else ""
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    return hit


# ------------------------------------------------------------------ SIGKILL
def test_sigkill_while_decoding_keeps_finished_shards_and_resumes(
    corpus, extracted, tmp_path, capsys
):
    store = tmp_path / "features"
    run_until(
        tmp_path,
        ["extract", str(corpus), "--store", str(store)],
        "decode",
        wanted=f"decoding {SESSIONS[1]}",
        delay=0.05,
    )
    # killed while the second session was decoding: the first is whole, nothing else is there
    assert_complete(store, SESSIONS[:1], extracted)
    assert Store(store).temp_files() == []
    before = snapshot(store)
    assert main(["verify", "--store", str(store)]) == 0
    capsys.readouterr()
    assert main(["extract", str(corpus), "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "2 extracted, 1 already current, 0 failed" in out
    assert f"{SESSIONS[0]}: computed" not in out
    assert f"{SESSIONS[1]}: computed" in out and f"{SESSIONS[2]}: computed" in out
    assert (store / f"{SESSIONS[0]}.h5").read_bytes() == before[f"{SESSIONS[0]}.h5"]
    assert_complete(store, SESSIONS, extracted)
    assert main(["verify", "--store", str(store)]) == 0


def test_sigkill_while_writing_a_new_shard_leaves_no_partial_shard(
    corpus, extracted, tmp_path, capsys
):
    store = tmp_path / "features"
    hit = run_until(
        tmp_path,
        ["extract", str(corpus), "--store", str(store)],
        "write",
        wanted=f"writing {store}/.{SESSIONS[1]}.h5.tmp-",
        delay=0.15,
    )
    tmp_file = Path(hit.split(" ", 1)[1])
    # the kill landed after the temporary file existed and before its rename
    assert tmp_file.exists() and not (store / f"{SESSIONS[1]}.h5").exists()
    assert_complete(store, SESSIONS[:1], extracted)
    assert main(["verify", "--store", str(store)]) == 0
    assert "temporary file left by a killed writer" in capsys.readouterr().out
    kept = (store / f"{SESSIONS[0]}.h5").read_bytes()
    assert main(["extract", str(corpus), "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert (
        "2 extracted, 1 already current, 0 failed" in out and f"{SESSIONS[0]}: computed" not in out
    )
    assert not tmp_file.exists() and Store(store).temp_files() == []
    assert (store / f"{SESSIONS[0]}.h5").read_bytes() == kept
    assert_complete(store, SESSIONS, extracted)
    assert main(["verify", "--store", str(store)]) == 0


def test_sigkill_while_replacing_a_shard_keeps_the_old_one(corpus, extracted, tmp_path, capsys):
    store = tmp_path / "features"
    shutil.copytree(extracted, store)
    before = snapshot(store)
    hit = run_until(
        tmp_path,
        ["extract", str(corpus), "--store", str(store), "--force", "--sessions", SESSIONS[0]],
        "write",
        wanted=f"writing {store}/.{SESSIONS[0]}.h5.tmp-",
        delay=0.15,
    )
    assert Path(hit.split(" ", 1)[1]).exists()
    after = snapshot(store)
    assert {
        k: v for k, v in after.items() if ".tmp-" not in k
    } == before  # the old shard, byte for byte
    assert main(["verify", "--store", str(store)]) == 0
    capsys.readouterr()
    assert main(["extract", str(corpus), "--store", str(store)]) == 0
    assert "0 extracted, 3 already current, 0 failed" in capsys.readouterr().out
    assert snapshot(store) == before  # the leftover temporary file is gone, nothing was rewritten


# ------------------------------------------------------------------ full disk / read-only folder
@contextlib.contextmanager
def unwritable(store: Path, monkeypatch):
    """Make ``store`` refuse new files for real where this machine allows it; yields how.

    Not root: a read-only folder (chmod 555). Root ignores permissions, so the folder becomes a
    tmpfs just big enough for what it holds (a real full disk). Only when neither can be done
    (root without the right to mount) is ENOSPC simulated, by making ``os.replace`` into the
    store fail: a failure this machine cannot cause for real.
    """
    if os.geteuid() != 0:
        store.chmod(0o555)
        try:
            yield "read-only folder"
        finally:
            store.chmod(0o755)
        return
    held = store.with_name(store.name + "-held")
    shutil.move(store, held)
    store.mkdir()
    need = sum(-(-p.stat().st_size // 4096) * 4096 for p in held.iterdir()) + 16384
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={need}", "tmpfs", str(store)], capture_output=True
        ).returncode
        == 0
    )
    for p in held.iterdir():  # the shards and the folder of their lock files
        (shutil.copytree if p.is_dir() else shutil.copy2)(p, store / p.name)
    shutil.rmtree(held)
    if mounted:
        try:
            yield "full disk (tmpfs)"
        finally:
            kept = store.with_name(store.name + "-kept")
            shutil.copytree(store, kept)
            if subprocess.run(["umount", str(store)], capture_output=True).returncode:
                subprocess.run(["umount", "-l", str(store)], capture_output=True)
            shutil.rmtree(store)
            kept.rename(store)
        return
    real_replace = os.replace

    def full_disk_replace(src, dst, *args, **kwargs):
        if Path(dst).parent == store:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", full_disk_replace)
    yield "simulated ENOSPC"


def test_write_error_keeps_the_previous_shard_and_no_temporary_file(
    corpus, extracted, tmp_path, capsys, monkeypatch
):
    store = tmp_path / "features"
    shutil.copytree(extracted, store)
    before = snapshot(store)
    with unwritable(store, monkeypatch) as how:
        code = main(
            ["extract", str(corpus), "--store", str(store), "--force", "--sessions", SESSIONS[0]]
        )
        captured = capsys.readouterr()
        after = snapshot(store)
    assert code == 1, how
    assert after == before, f"{how}: the store changed"
    err = captured.err
    if how == "read-only folder":
        assert f"FAILED {SESSIONS[0]}" in err and f"cannot write {store / SESSIONS[0]}.h5" in err
        assert "Permission denied" in err and "make" in err and "previous shard" in err, err
    else:  # a full disk ends the extraction with one message (tests/featurestore/test_faults_disk_full.py)
        assert f"error: {SESSIONS[0]}: disk full: writing {store / SESSIONS[0]}.h5" in err, err
        assert "the shard is unchanged" in err and "extraction stopped" in err
    assert main(["verify", "--store", str(store)]) == 0


# ------------------------------------------------------------------ bad input
def write_black_video(path: Path, n_frames: int = 100, width: int = 320, height: int = 96) -> Path:
    """An all-black H.264 video (no face anywhere) with a swelling tone on its audio track."""
    return make_video(
        path, n_frames, width, height, image=np.zeros((height, width, 3), np.uint8), tremolo_hz=0.5
    )


def test_all_black_video_fails_its_face_channels_but_stores_the_audio(tmp_path, capsys):
    data = tmp_path / "data"
    (data / "Videos").mkdir(parents=True)
    (data / "Annotations").mkdir()
    video = write_black_video(data / "Videos" / "Subject_1_Story_1.mp4")
    (data / "Annotations" / "Subject_1_Story_1.csv").write_text("valence\n" + "0.1\n" * 100)
    store = tmp_path / "features"
    channels = ["--channels", "face_geom", "egemaps"]
    assert main(["extract", str(data), "--store", str(store), *channels]) == 1
    captured = capsys.readouterr()
    for role, x in (("speaker", "0-135"), ("listener", "135-320")):
        assert (
            f"{role}/face_geom not stored: no face found in the {role} region (x {x})"
            in captured.err
        )
    assert str(video) in captured.err and "--split-x" in captured.err
    assert "computed scene/egemaps, labels/valence_self" in captured.out
    st = Store(store)
    assert st.channel_keys("Subject_1_Story_1") == ["scene/egemaps"]
    assert st.read_channel("Subject_1_Story_1", "scene/egemaps").valid.mean() > 0.5
    assert len(st.labels("Subject_1_Story_1")) == 100
    before = snapshot(store)
    # a re-run fails the faces again, keeps the stored audio and labels as they are
    assert main(["extract", str(data), "--store", str(store), *channels]) == 1
    assert "no face found in the speaker region" in capsys.readouterr().err
    assert snapshot(store) == before


def test_annotation_shorter_than_video_is_named_and_keeps_the_old_shard(
    corpus, extracted, tmp_path, capsys
):
    data = tmp_path / "data"
    shutil.copytree(corpus, data)
    store = tmp_path / "features"
    shutil.copytree(extracted, store)
    before = snapshot(store)
    ann = data / "Annotations" / f"{SESSIONS[1]}.csv"
    for path in data.rglob(f"{SESSIONS[1]}.csv"):  # the self-ratings and any observer ratings
        rows = path.read_text().splitlines()
        path.write_text("\n".join(rows[:51]) + "\n")  # 50 frames = 2 s for a 4 s video
    assert main(["extract", str(data), "--store", str(store)]) == 1
    captured = capsys.readouterr()
    assert f"FAILED {SESSIONS[1]}" in captured.err and str(ann) in captured.err
    assert "50 rows = 2.00 s" in captured.err and "lasts 4.00 s" in captured.err
    assert "0 extracted, 2 already current, 1 failed" in captured.out
    assert snapshot(store) == before


def test_import_of_non_numeric_nan_and_inf_columns(extracted, tmp_path, capsys):
    store = tmp_path / "features"
    shutil.copytree(extracted, store)
    before = snapshot(store)
    tables = tmp_path / "tables"
    tables.mkdir()
    t = np.arange(100) / 25
    good = "time,energy\n" + "".join(f"{v:.2f},{np.sin(v):.4f}\n" for v in t)
    (tables / f"{SESSIONS[0]}.csv").write_text(good)
    (tables / f"{SESSIONS[1]}.csv").write_text(
        "time,energy,mood\n" + "".join(f"{v:.2f},0.5,calm\n" for v in t)
    )
    lines = good.splitlines()
    lines[7] = lines[7].split(",")[0] + ",nan"
    (tables / f"{SESSIONS[2]}.csv").write_text("\n".join(lines) + "\n")
    lines = good.splitlines()
    lines[3] = lines[3].split(",")[0] + ",inf"
    (tables / "Subject_2_Story_1.csv").write_text("\n".join(lines) + "\n")
    code = main(
        ["import", str(tables), "--role", "listener", "--channel", "energy", "--store", str(store)]
    )
    assert code == 1
    captured = capsys.readouterr()
    assert f"ok     {SESSIONS[0]}" in captured.out
    assert "1 session(s) written, 3 failed" in captured.out
    err = captured.err
    assert (
        f"FAILED {SESSIONS[1]}" in err
        and f"{SESSIONS[1]}.csv" in err
        and "'mood'" in err
        and "row 1" in err
    )
    assert (
        f"FAILED {SESSIONS[2]}" in err
        and f"{SESSIONS[2]}.csv" in err
        and "['energy']" in err
        and "row 7" in err
    )
    assert "FAILED Subject_2_Story_1" in err and "row 3" in err
    after = snapshot(store)
    assert after[f"{SESSIONS[1]}.h5"] == before[f"{SESSIONS[1]}.h5"]
    assert after[f"{SESSIONS[2]}.h5"] == before[f"{SESSIONS[2]}.h5"]
    assert "Subject_2_Story_1.h5" not in after and not [k for k in after if ".tmp-" in k]
    assert sorted(Store(store).channel_keys(SESSIONS[0])) == sorted(
        [*Store(extracted).channel_keys(SESSIONS[0]), "listener/energy"]
    )


def test_malformed_featurestore_config_exits_2_naming_file_and_line(corpus, tmp_path, capsys):
    cfg = tmp_path / "featurestore.yaml"
    cfg.write_text("face_fps: 5\nsplits: {train: [2, 4}\nchannels: [face_geom]\n")
    store = tmp_path / "features"
    for verb in (["extract", str(corpus)], ["scan", str(corpus)]):
        assert main([*verb, "--store", str(store), "--config", str(cfg)]) == 2
        err = capsys.readouterr().err
        assert (
            f"{cfg}:2: malformed YAML" in err and "fix the syntax" in err and "Traceback" not in err
        )
    assert not store.exists()


def test_empty_store_is_named_by_verify_ls_and_inspect(tmp_path, capsys):
    empty = tmp_path / "features"
    empty.mkdir()
    assert main(["verify", "--store", str(empty)]) == 1
    err = capsys.readouterr().err
    assert f"{empty}: no shards found" in err and "featurestore extract" in err
    assert main(["ls", "--store", str(empty)]) == 1
    assert f"no shards in {empty}" in capsys.readouterr().err
    assert main(["inspect", "Subject_1_Story_1", "--store", str(empty)]) == 1
    assert "no shard for Subject_1_Story_1" in capsys.readouterr().err
    missing = tmp_path / "missing"
    for verb in (["verify"], ["ls"], ["inspect", "Subject_1_Story_1"]):
        assert main([*verb, "--store", str(missing)]) == 1
        err = capsys.readouterr().err
        assert f"feature store {missing}: no such folder" in err and "make features" in err
    assert list(empty.iterdir()) == [] and not (tmp_path / "missing").exists()


def test_shard_of_an_older_schema_is_named_and_never_overwritten(
    corpus, extracted, tmp_path, capsys
):
    store = tmp_path / "features"
    shutil.copytree(extracted, store)
    old = store / f"{SESSIONS[0]}.h5"
    with h5py.File(old, "a") as f:
        f.attrs["schema_version"] = 0
    before = snapshot(store)
    assert main(["verify", "--store", str(store)]) == 1
    err = capsys.readouterr().err
    assert f"{SESSIONS[0]}: schema version 0, expected 2 (move" in err
    for extra in ([], ["--force", "--sessions", SESSIONS[0]]):
        assert main(["extract", str(corpus), "--store", str(store), *extra]) == 1
        captured = capsys.readouterr()
        assert f"FAILED {SESSIONS[0]}: {old} has schema version 0" in captured.err
        assert "move it aside" in captured.err and "Traceback" not in captured.err
        assert snapshot(store) == before


# ------------------------------------------------------------------ exit codes of every verb
def test_exit_codes_of_every_verb(corpus, extracted, tmp_path, capsys):
    """0 all good, 1 some sessions failed (or nothing found), 2 usage error; never a traceback."""
    store = tmp_path / "features"
    shutil.copytree(extracted, store)
    data = tmp_path / "data"
    shutil.copytree(corpus, data)
    (data / "Videos" / f"{SESSIONS[2]}.mp4").write_bytes(
        b"\x00" * 2048
    )  # corrupt: changed source, fails
    tables, ann = tmp_path / "tables", tmp_path / "ann"
    tables.mkdir()
    ann.mkdir()
    (tables / f"{SESSIONS[0]}.csv").write_text(
        "frame,x\n" + "".join(f"{i},{i % 7}\n" for i in range(100))
    )
    (ann / f"{SESSIONS[0]}.csv").write_text(
        (corpus / "Annotations" / f"{SESSIONS[0]}.csv").read_text()
    )
    bad_tables, bad_ann = tmp_path / "bad_tables", tmp_path / "bad_ann"
    shutil.copytree(tables, bad_tables)
    shutil.copytree(ann, bad_ann)
    (bad_tables / f"{SESSIONS[1]}.csv").write_text("time,x\n0,1\n0.04,oops\n")
    (bad_ann / f"{SESSIONS[1]}.csv").write_text("valence\n0.1\n7\n")
    dup = tmp_path / "dup"
    shutil.copytree(corpus, dup)
    shutil.copy(dup / "Videos" / f"{SESSIONS[0]}.mp4", dup / f"{SESSIONS[0]}.mkv")
    broken = tmp_path / "broken"
    shutil.copytree(extracted, broken)
    (broken / "Subject_9_Story_9.h5").write_bytes(b"not hdf5")
    empty = tmp_path / "empty"
    empty.mkdir()
    s = ["--store", str(store)]
    cases = {
        "scan": (
            [["scan", str(tmp_path / "nowhere"), *s]],
            [["scan", str(dup), "--store", str(tmp_path / "d")]],
            [["scan", str(corpus), "--store", str(tmp_path / "m")]],
        ),
        "extract": (
            [
                ["extract", str(corpus), *s, "--config", str(tmp_path / "none.yaml")],
                ["extract", *s, "--jobs", "two"],
            ],
            [["extract", str(data), *s]],
            [["extract", str(corpus), *s]],
        ),
        "import": (
            [
                ["import", str(tables), "--role", "observer", "--channel", "x", *s],
                ["import", str(tables), "--role", "listener", "--channel", "a/b", *s],
            ],
            [
                ["import", str(bad_tables), "--role", "listener", "--channel", "x", *s],
                ["import", str(empty), "--role", "listener", "--channel", "x", *s],
            ],
            [["import", str(tables), "--role", "listener", "--channel", "x", *s]],
        ),
        "labels": (
            [
                ["labels", str(ann), "--target", "valence_self", "--fps", "0", *s],
                ["labels", str(ann), *s],
            ],
            [["labels", str(bad_ann), "--target", "valence_self", *s]],
            [["labels", str(ann), "--target", "valence_self", *s]],
        ),
        "verify": (
            [["verify", *s, "--bogus"]],
            [["verify", "--store", str(broken)], ["verify", "--store", str(empty)]],
            [["verify", *s]],
        ),
        "ls": ([["ls", *s, "-x"]], [["ls", "--store", str(empty)]], [["ls", *s]]),
        "inspect": (
            [["inspect", *s]],
            [["inspect", "Subject_9_Story_9", *s]],
            [["inspect", SESSIONS[0], *s], ["inspect", SESSIONS[0].lower(), *s]],
        ),
        "demo": (
            [["demo", "--out", str(tmp_path / "demo"), "--duration", "1"]],
            [],
            [
                [
                    "demo",
                    "--out",
                    str(tmp_path / "demo"),
                    "--listeners",
                    "1",
                    "--stories",
                    "1",
                    "--duration",
                    "2",
                ]
            ],
        ),
    }
    got = {}
    for usage, partial, success in cases.values():
        for expected, runs in ((2, usage), (1, partial), (0, success)):
            for argv in runs:
                got[" ".join(argv)] = (main(argv), expected)
                captured = capsys.readouterr()
                assert "Traceback" not in captured.err, argv
                if expected:
                    assert captured.err.strip(), (
                        f"{argv}: exit {expected} without a message on stderr"
                    )
    wrong = {k: v for k, v in got.items() if v[0] != v[1]}
    assert not wrong, wrong
