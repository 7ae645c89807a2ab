"""A real full disk during ``featurestore extract``: the store is a tmpfs with room for about one
and a half shards, mounted in a user namespace (``unshare -rm``, no root needed; skipped where
the kernel does not allow one). Checked: exit 1, one message naming the session, the space and
what to do, no traceback or HDF5 error stack, no crash, and the shard stored before is
byte-identical (injected failures of each write step: tests/featurestore/storage/test_store_disk_full.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from featurestore.cli import main
from featurestore.storage.store import Store

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

#: runs in the namespace: mounts the tmpfs, runs the extractions, copies the store out after each
HARNESS = """
import json, shutil, subprocess, sys
from pathlib import Path

store, out, size, corpus, first = sys.argv[1:6]
subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", store], check=True)
CLI = "import sys; from featurestore.cli import main; sys.exit(main(sys.argv[1:]))"
NO_CHECK = "import featurestore.storage.store as s; s._free_bytes = lambda folder: -1; "
runs = {
    "first": ([], ["--sessions", first]),  # fits
    "all": ([], []),  # the second session finds too little space: refused before writing
    "force": ([], ["--force", "--sessions", first]),  # the rewrite of the first does too
    "unchecked": ([NO_CHECK], []),  # no free-space check: the kernel's ENOSPC at the write
}
for name, (pre, args) in runs.items():
    p = subprocess.run([sys.executable, "-c", "".join(pre) + CLI, "extract", corpus, "--store", store,
                        "--channels", "face_geom", "egemaps", *args], capture_output=True, text=True)
    shutil.copytree(store, Path(out) / name)
    (Path(out) / f"{name}.json").write_text(json.dumps({"code": p.returncode, "err": p.stderr}))
"""


def _namespaces_work() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = ["unshare", "-rm", "true"]
    return subprocess.run(probe, capture_output=True).returncode == 0


@pytest.mark.skipif(not _namespaces_work(), reason="no user namespaces (unshare -rm) here")
def test_full_disk_during_extract_ends_with_one_message_and_keeps_what_was_stored(
    tiny_demo, tmp_path
):
    corpus, first = tiny_demo[0], "Subject_1_Story_1"
    probe = tmp_path / "probe"  # one shard's size, on an ordinary folder
    channels = ["--channels", "face_geom", "egemaps"]
    assert (
        main(["extract", str(corpus), "--store", str(probe), "--sessions", first, *channels]) == 0
    )
    size = (probe / f"{first}.h5").stat().st_size
    store, out = tmp_path / "features", tmp_path / "out"
    store.mkdir()
    out.mkdir()
    (tmp_path / "harness.py").write_text(HARNESS)
    room = (size * 3 // 2 // 4096 + 1) * 4096
    cmd = [sys.executable, str(tmp_path / "harness.py"), str(store), str(out), str(room)]
    done = subprocess.run(["unshare", "-rm", *cmd, str(corpus), first], cwd=ROOT, timeout=600)
    assert done.returncode == 0
    names = ("first", "all", "force", "unchecked")
    runs = {n: json.loads((out / f"{n}.json").read_text()) for n in names}
    assert runs["first"]["code"] == 0, runs["first"]["err"][-2000:]
    kept = (out / "first" / f"{first}.h5").read_bytes()
    for name in names[1:]:
        code, err = runs[name]["code"], runs[name]["err"]
        assert code == 1, (name, code, err[-2000:])  # not 139: no crash
        errors = [line for line in err.splitlines() if "error" in line.lower()]
        assert len(errors) == 1 and errors[0].startswith("error: Subject_"), (name, errors)
        message = errors[0]
        assert (
            ": disk full: writing " in message and "extraction stopped at this session" in message
        )
        assert "free disk space there" in message and "MB" in message
        for noise in ("Traceback", "HDF5", "errno = 28", "Exception ignored"):
            assert noise not in err, (name, noise)
        stored = Store(out / name)
        assert stored.list_sessions() == [first] and stored.temp_files() == []
        assert (out / name / f"{first}.h5").read_bytes() == kept, name
    assert main(["verify", "--store", str(out / "unchecked"), "--no-sources"]) == 0
