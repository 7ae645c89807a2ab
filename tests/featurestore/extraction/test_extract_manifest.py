"""`featurestore scan --manifest` then `extract`: shards named by the manifest's ids, with its layout,
from a shared video cut into crops or from media per role."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from scipy.io import wavfile

from featurestore.cli import main
from featurestore.demo import build_demo
from featurestore.storage.store import Store
from tests.featurestore.helpers import make_video
from tests.featurestore.sources.helpers import write_valence

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    build_demo(out, n_listeners=1, stories=(1,), duration_s=6, progress=False)
    return out


def test_extract_from_a_scanned_csv_manifest_with_a_shared_video(demo, tmp_path, capsys):
    corpus = tmp_path / "lab"
    (corpus / "rec").mkdir(parents=True)
    shutil.copy(demo / "Videos" / "Subject_1_Story_1.mp4", corpus / "rec" / "dyad_07.mp4")
    shutil.copy(demo / "Annotations" / "Subject_1_Story_1.csv", corpus / "rec" / "dyad_07_val.csv")
    (corpus / "sessions.csv").write_text(
        "session,person,group,partner,split,fold,video,label_valence\n"
        "dyad-07,anna,picnic,bo,test,3,rec/dyad_07.mp4,rec/dyad_07_val.csv\n"
    )
    store = tmp_path / "store"
    assert main(["scan", "--manifest", str(corpus / "sessions.csv"), "--store", str(store)]) == 0
    written = json.loads((store / "manifest.json").read_text())["sessions"]
    assert [(s["session"], s["layout"], s["person"]) for s in written] == [
        ("dyad-07", "manifest", "anna")
    ]
    # extract reads what scan wrote: no data folder, no manifest on its command line
    assert main(["extract", "--store", str(store), "--channels", "face_geom", "egemaps"]) == 0
    st = Store(store)
    assert st.list_sessions() == ["dyad-07"]
    meta = st.meta("dyad-07")
    assert (meta.layout, meta.person, meta.group, meta.partner, meta.fold, meta.split) == (
        "manifest",
        "anna",
        "picnic",
        "bo",
        "3",
        "test",
    )
    assert (meta.listener, meta.speaker, meta.story) == (1, 2, 1)  # anna, bo; the one group
    assert meta.n_frames == 150
    assert set(st.channel_keys("dyad-07")) == {
        "speaker/face_geom",
        "listener/face_geom",
        "scene/egemaps",
        "speaker/egemaps",
        "listener/egemaps",
    }
    assert st.label_targets("dyad-07") == ["valence"]
    assert st.read_channel("dyad-07", "listener/face_geom").valid.mean() > 0.5
    # a second run is current: nothing recomputed
    assert main(["extract", "--store", str(store), "--channels", "face_geom", "egemaps"]) == 0
    assert st.read_channel("dyad-07", "scene/egemaps").source["path"].endswith("dyad_07.mp4")
    assert main(["verify", "--store", str(store)]) == 0
    capsys.readouterr()
    assert main(["inspect", "dyad-07", "--store", str(store)]) == 0
    assert "dyad-07: person anna, group picnic, partner bo, split test" in (capsys.readouterr().out)


def test_a_row_with_an_empty_label_column_is_extracted_predict_only(demo, tmp_path, capsys):
    corpus = tmp_path / "lab"
    (corpus / "rec").mkdir(parents=True)
    shutil.copy(demo / "Videos" / "Subject_1_Story_1.mp4", corpus / "rec" / "dyad_07.mp4")
    shutil.copy(demo / "Annotations" / "Subject_1_Story_1.csv", corpus / "rec" / "dyad_07_val.csv")
    (corpus / "sessions.csv").write_text(
        "session,person,group,partner,split,video,label_valence\n"
        "dyad-07,anna,picnic,bo,train,rec/dyad_07.mp4,rec/dyad_07_val.csv\n"
        "dyad-08,bo,picnic,anna,test,rec/dyad_07.mp4,\n"  # a blind test's row: no rating
    )
    store = tmp_path / "store"
    assert main(["scan", "--manifest", str(corpus / "sessions.csv"), "--store", str(store)]) == 0
    assert "1 session(s) without labels: predict only (dyad-08)" in capsys.readouterr().out
    assert main(["extract", "--store", str(store), "--channels", "egemaps"]) == 0
    st = Store(store)
    assert st.label_targets("dyad-07") == ["valence"] and st.label_targets("dyad-08") == []
    assert "scene/egemaps" in st.channel_keys("dyad-08")
    assert st.meta("dyad-08").n_frames == st.meta("dyad-07").n_frames
    capsys.readouterr()
    assert main(["verify", "--store", str(store)]) == 0
    assert "predict only: 1 shard(s) without labels (dyad-08)" in capsys.readouterr().out


def test_extract_media_per_role_from_a_yaml_manifest(tmp_path):
    make_video(tmp_path / "anna.mp4", n_frames=75, audio=False)
    sr = 16000
    t = np.arange(3 * sr) / sr
    wavfile.write(tmp_path / "anna.wav", sr, (0.3 * np.sin(2 * np.pi * 200 * t)).astype(np.float32))
    wavfile.write(tmp_path / "bo.wav", sr, (0.1 * np.sin(2 * np.pi * 300 * t)).astype(np.float32))
    write_valence(tmp_path / "anna_arousal.csv", 75, header="arousal")
    (tmp_path / "corpus.yaml").write_text(
        "- session: s1\n"
        "  person: anna\n"
        "  partner: bo\n"
        "  group: interview\n"
        "  split: train\n"
        "  video_person: anna.mp4\n"
        "  audio_person: anna.wav\n"
        "  audio_partner: bo.wav\n"
        "  labels: {arousal: anna_arousal.csv}\n"
    )
    store = tmp_path / "store"
    args = ["extract", "--manifest", str(tmp_path / "corpus.yaml"), "--store", str(store)]
    assert main([*args, "--channels", "egemaps"]) == 0
    st = Store(store)
    assert sorted(st.channel_keys("s1")) == ["listener/egemaps", "speaker/egemaps"]
    anna = st.read_channel("s1", "listener/egemaps")
    bo = st.read_channel("s1", "speaker/egemaps")
    assert anna.source["path"].endswith("anna.wav") and bo.source["path"].endswith("bo.wav")
    assert anna.cache_key != bo.cache_key
    loud = anna.columns.index("Loudness_sma3")
    # each role's voice is its own file: the louder tone is the person's
    assert np.nanmean(anna.data[:, loud]) > np.nanmean(bo.data[:, loud])
    assert st.meta("s1").n_frames == 75 and st.label_targets("s1") == ["arousal"]


def test_extract_reports_a_bad_manifest_with_its_row_and_column(tmp_path, capsys):
    (tmp_path / "m.csv").write_text("session,person,group,video\ns1,anna,g,missing.mp4\n")
    code = main(["extract", "--manifest", str(tmp_path / "m.csv"), "--store", str(tmp_path / "s")])
    assert code == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'm.csv'}: row 1 (line 2), column 'video': no file" in err
