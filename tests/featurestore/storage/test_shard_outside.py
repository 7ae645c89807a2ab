"""Shards read only themselves: a dataset with external storage, an external link, a soft link
out of the file through one and a virtual dataset are refused by every read, every write and
`featurestore verify`, naming the shard and the dataset, before anything outside is opened.

Each crafted shard points at a file of this test holding :data:`SENTINEL` rows with a correct
checksum (the author was consistent), so a reader that followed it would serve them as labels.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from featurestore.cli import main
from featurestore.storage import checksums
from featurestore.storage.store import Channel, SessionMeta, Store, StoreError

ROOT = Path(__file__).resolve().parents[3]
META = SessionMeta("Subject_1_Story_1", 1, 1, 1, "val", n_frames=100)
SENTINEL = np.full(META.n_frames, 0.875, dtype=np.float32)  # inspect would print "mean +0.875"
LABELS = "labels/valence_self"
#: kind of crafted shard -> what its refusal says about it
KINDS = {
    "external storage": f"dataset {LABELS} keeps its rows in external files",
    "external link": f"{LABELS} is an external link to",
    "soft link": f"{LABELS} is a soft link to '/elsewhere/rows', out of the file through elsewhere",
    "virtual dataset": f"dataset {LABELS} is virtual, its rows mapped from",
}


def craft(root, kind):
    """A store whose one shard's labels are read from files beside it (its own rows are fine)."""
    store = Store(root / "store", mode="a")
    face = Channel(np.ones((20, 2), np.float32), np.arange(20) * 0.2, np.ones(20, bool), ["a", "b"])
    store.write_session(META, {"listener/face_geom": face}, {"valence_self": np.zeros(100)})
    raw, other = root / "outside.bin", root / "outside.h5"
    raw.write_bytes(SENTINEL.tobytes())
    with h5py.File(other, "w") as f:
        checksums.create(f, "rows", SENTINEL)
    with h5py.File(store.shard_path(META.session), "a") as f:
        del f[LABELS]
        if kind == "external storage":
            ds = f.create_dataset(LABELS, (100,), "f4", external=[(str(raw), 0, SENTINEL.nbytes)])
            checksums.stamp(ds, SENTINEL)
        elif kind == "external link":
            f[LABELS] = h5py.ExternalLink(str(other), "/rows")
        elif kind == "soft link":
            f["elsewhere"] = h5py.ExternalLink(str(other), "/")
            f[LABELS] = h5py.SoftLink("/elsewhere/rows")
        else:
            layout = h5py.VirtualLayout((100,), "f4")
            layout[:] = h5py.VirtualSource(str(other), "rows", (100,))
            checksums.stamp(f.create_virtual_dataset(LABELS, layout), SENTINEL)
    with h5py.File(store.shard_path(META.session)) as f:  # the craft works: h5py serves them
        assert np.array_equal(f[LABELS][()], SENTINEL) and not checksums.problem(f[LABELS])
    return store


@pytest.mark.parametrize("kind", KINDS)
def test_every_read_write_and_verify_refuses_a_shard_that_reads_another_file(
    tmp_path, kind, capsys
):
    store = craft(tmp_path, kind)
    shard = store.shard_path(META.session)
    said = f"{shard}: {KINDS[kind]}"
    for read in (
        lambda: store.labels(META.session, "valence_self"),
        lambda: store.read_session(META.session, ["listener/face_geom"]),  # not the labels
        lambda: store.meta(META.session),
    ):
        with pytest.raises(StoreError, match="nothing of it was read") as e:
            read()
        assert str(e.value).startswith(said)
    before = shard.read_bytes()
    with pytest.raises(StoreError, match=KINDS[kind]):
        store.write_session(META, labels={"valence_self": np.zeros(100)})
    assert shard.read_bytes() == before

    problems = [str(p) for p in store.verify()]
    assert len(problems) == (2 if kind == "soft link" else 1)  # the soft link and its way out
    assert f"Subject_1_Story_1: Subject_1_Story_1.h5: {KINDS[kind]}" in problems[0]
    capsys.readouterr()
    assert main(["verify", "--store", str(store.root)]) == 1
    assert main(["inspect", META.session, "--store", str(store.root)]) == 1
    out, err = capsys.readouterr()
    assert (
        err.count("\n") == len(problems) + 2 and "Traceback" not in err
    )  # verify's lines, inspect's one
    assert "0.875" not in out + err and str(tmp_path / "outside") in err


def test_soft_links_inside_the_shard_and_hard_links_still_read(tmp_path):
    store = craft(tmp_path, "soft link")
    with h5py.File(store.shard_path(META.session), "a") as f:
        del f["elsewhere"], f[LABELS]
        checksums.create(f, "labels/kept", np.zeros(100, np.float32))
        f[LABELS] = h5py.SoftLink("/labels/kept")
        assert checksums.outside_parts(f) == []
    assert np.array_equal(store.labels(META.session, "valence_self"), np.zeros(100))


#: runs `featurestore verify` and `inspect` on each store given, printing their exit codes
RUN_CLIS = """
import sys
from featurestore.cli import main
for store in sys.argv[1:]:
    codes = main(["verify", "--store", store]), main(["inspect", "Subject_1_Story_1", "--store", store])
    print("exit codes", *codes)
"""


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_verify_and_inspect_open_no_file_outside_the_store(tmp_path):
    """strace on the command lines, in one process: no crafted shard's outside file is opened."""
    stores = [craft(tmp_path / kind.replace(" ", "_"), kind) for kind in KINDS]
    log = tmp_path / "strace.log"
    run = subprocess.run(
        ["strace", "-f", "-qq", "-e", "trace=open,openat,openat2", "-o", str(log)]
        + [sys.executable, "-c", RUN_CLIS, *(str(st.root) for st in stores)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    if not log.exists() or "Operation not permitted" in run.stderr:
        pytest.skip(f"strace cannot trace here: {run.stderr.strip()[:200]}")
    codes = [line for line in run.stdout.splitlines() if line.startswith("exit codes")]
    assert codes == ["exit codes 1 1"] * len(KINDS), run.stderr
    opened = log.read_text()
    assert all(str(st.shard_path(META.session)) in opened for st in stores)  # strace saw them
    assert "outside." not in opened
