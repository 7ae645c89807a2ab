"""Rating files are read a row at a time, and one over MAX_LABEL_MIB is refused before it is
read, naming its size and the limit."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from featurestore.sources.annotations import (
    MAX_LABEL_MIB,
    AnnotationError,
    read_annotation,
    read_label_file,
)

#: peak memory of `featurestore scan` refusing an oversized rating file (a child's ru_maxrss,
#: MiB): about 140 at rest; reading the same 64 MiB file whole took over 2 GiB before
MAX_PEAK_MIB = 400

PEAK = """
import sys
from featurestore.cli import main
rc = main(sys.argv[1:])
# VmHWM is this process image's own peak; ru_maxrss would also count the forking parent's
hwm = next(l for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print("peak", int(hwm.split()[1]) // 1024)
sys.exit(rc)
"""


def test_rows_are_read_one_at_a_time_with_the_same_errors(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("valence\n0.5\n-0.5\n\n\n")  # trailing blank lines are no rows
    assert np.array_equal(read_annotation(path), np.array([0.5, -0.5], dtype=np.float32))
    path.write_text("valence\n0.5\n\n0.25\n")  # a blank line before a value is one
    with pytest.raises(AnnotationError, match="line 3 has 0 fields"):
        read_label_file(path)
    path.write_text("time,valence\n0,1\n0.1,2\n0.1,3\n")
    with pytest.raises(AnnotationError, match="line 4, column 1 .* not after the line before"):
        read_label_file(path)
    path.write_text("time,valence\n0,1\n0.1,2\n")
    rating = read_label_file(path)
    assert list(rating.time) == [0.0, 0.1] and list(rating.values) == [1.0, 2.0]


@pytest.mark.integration
@pytest.mark.skipif(
    not os.path.exists("/proc/self/status"), reason="reads VmHWM from Linux's /proc"
)
def test_an_oversized_rating_file_is_refused_at_scan_without_reading_it(tmp_path):
    data = tmp_path / "data"
    (data / "Annotations").mkdir(parents=True)
    (data / "Videos").mkdir()
    (data / "Videos" / "Subject_1_Story_1.mp4").write_bytes(b"")
    big = data / "Annotations" / "Subject_1_Story_1.csv"
    rows = (MAX_LABEL_MIB + 1) * 2**20 // 9  # 1 MiB over the limit, 9 bytes a row
    big.write_bytes(b"valence\n" + b"0.123456\n" * rows)
    args = ["scan", str(data), "--store", str(tmp_path / "store")]
    done = subprocess.run(
        [sys.executable, "-c", PEAK, *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done.stderr
    assert (
        f"{MAX_LABEL_MIB + 1}.0 MiB, over the {MAX_LABEL_MIB} MiB a rating file may hold"
        in done.stderr
    )
    assert str(big) in done.stderr and "Traceback" not in done.stderr
    peak = int(done.stdout.split("peak")[-1])
    assert peak < MAX_PEAK_MIB, f"scan peaked at {peak} MiB"
