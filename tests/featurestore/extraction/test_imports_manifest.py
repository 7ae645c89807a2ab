"""A manifest's import_<role>_<channel> columns: OpenFace, py-feat and plain per-frame tables
stored in their recording's shard by `extract`, checked by `scan`, re-read only when they change."""

from __future__ import annotations

import numpy as np
import pytest

from featurestore.cli import main
from featurestore.sources.manifest_file import ManifestError, read_manifest
from featurestore.storage.store import Store
from tests.featurestore.extraction.helpers import write_openface, write_pyfeat
from tests.featurestore.helpers import make_video
from tests.featurestore.sources.helpers import write_valence

pytestmark = pytest.mark.slow

HEADER = "session,person,group,split,video_person,label_valence,"
HEADER += "import_person_openface,import_person_pyfeat,import_scene_mic\n"


def _corpus(tmp_path, mic_rows: int = 30):
    """One recording (3 s camera clip with sound, valence) and three tables computed elsewhere."""
    make_video(tmp_path / "rec01_cam.mp4", n_frames=75)
    write_valence(tmp_path / "rec01_val.csv", 75)
    (tmp_path / "tools").mkdir()
    write_openface(tmp_path / "tools" / "rec01_openface.csv", n=75)
    write_pyfeat(tmp_path / "tools" / "rec01_pyfeat.csv")
    t = np.arange(mic_rows) / 10  # a generic table: a time column in seconds, at 10 Hz
    rows = "\n".join(f"{s:.1f},{0.5 + 0.1 * np.sin(s):.4f}" for s in t)
    (tmp_path / "tools" / "rec01_mic.csv").write_text("time,energy\n" + rows + "\n")
    (tmp_path / "sessions.csv").write_text(
        HEADER + "rec01,p01,talk,train,rec01_cam.mp4,rec01_val.csv,tools/rec01_openface.csv,"
        "tools/rec01_pyfeat.csv,tools/rec01_mic.csv\n"
    )
    return tmp_path / "sessions.csv"


def test_extract_stores_the_tables_a_manifest_names_in_their_recording(tmp_path, capsys):
    manifest = _corpus(tmp_path)
    store = tmp_path / "store"
    args = ["extract", "--manifest", str(manifest), "--store", str(store), "--channels", "egemaps"]
    assert main(args) == 0
    st = Store(store)
    assert st.list_sessions() == ["rec01"]
    assert sorted(st.channel_keys("rec01")) == [
        "listener/egemaps",  # the camera clip's own sound
        "listener/openface",
        "listener/pyfeat",
        "scene/mic",
    ]
    face = st.read_channel("rec01", "listener/openface")
    assert face.extractor == "import:openface" and face.source["path"].endswith(
        "rec01_openface.csv"
    )
    assert "AU01_r" in face.columns and len(face.time) == 75
    assert st.read_channel("rec01", "listener/pyfeat").extractor == "import:pyfeat"
    mic = st.read_channel("rec01", "scene/mic")
    assert mic.columns == ["energy"] and mic.time[1] == pytest.approx(0.1)
    capsys.readouterr()
    assert main(args) == 0  # nothing changed: every table is current
    assert "computed" not in capsys.readouterr().out
    assert main(["verify", "--store", str(store)]) == 0


def test_a_table_past_the_recording_fails_its_channel_only(tmp_path, capsys):
    manifest = _corpus(tmp_path, mic_rows=60)  # 6 s of table on a 3 s recording
    store = tmp_path / "store"
    args = ["extract", "--manifest", str(manifest), "--store", str(store), "--channels", "egemaps"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "scene/mic not stored" in err and "rec01_mic.csv runs to 5.90 s" in err
    assert "listener/openface" in Store(store).channel_keys("rec01")


def test_scan_checks_the_import_columns(tmp_path):
    (tmp_path / "v.mp4").write_bytes(b"x")
    (tmp_path / "m.csv").write_text(
        "session,person,group,video_person,import_person_openface,import_face_x,"
        "import_partner_of\ns1,p1,g,v.mp4,gone.csv,v.mp4,v.mp4\n"
    )
    with pytest.raises(ManifestError) as e:
        read_manifest(tmp_path / "m.csv")
    text = str(e.value)
    assert "column 'import_person_openface': no file" in text
    assert "column 'import_face_x': expected import_<role>_<channel>" in text
    assert "column 'partner': empty but import_partner_of is given" in text
