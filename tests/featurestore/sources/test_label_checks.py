"""Rating files against what they rate: any scale unless one is declared (then checked at scan
time with the file, line and value), and times that miss the recording refused at scan and
extract time with the file's span and the recording's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from featurestore.cli import main
from featurestore.extraction.config import ConfigError, load_feature_config
from featurestore.sources.label_checks import coverage_problem, parse_targets
from featurestore.sources.manifest import SessionFiles, scan
from featurestore.sources.manifest_file import ManifestError
from featurestore.storage.store import Store
from tests.featurestore.helpers import make_video

pytestmark = pytest.mark.slow

FPS, SECONDS = 10, 18.0  # a 10 Hz clip of 18 s


def _timed(path, times, values, name="valence"):
    path.write_text(
        f"time,{name}\n" + "".join(f"{t:.3f},{v:g}\n" for t, v in zip(times, values, strict=True))
    )


@pytest.fixture
def corpus(tmp_path):
    """One recording (an 18 s clip at 10 Hz) rated on a 1-9 scale by two raters at 10 Hz."""
    make_video(tmp_path / "rec.mp4", n_frames=int(SECONDS * FPS), fps=FPS, width=64, height=48)
    t = np.arange(0, SECONDS, 0.1)
    _timed(tmp_path / "r1.csv", t, 5 + 3 * np.sin(t))
    _timed(tmp_path / "r2.csv", t, 5 + 3 * np.cos(t))
    (tmp_path / "m.csv").write_text(
        "session,person,group,video_person,label_valence@r1,label_valence@r2\n"
        "rec1,p01,talk,rec.mp4,r1.csv,r2.csv\n"
    )
    return tmp_path


def _scan(corpus, *extra):
    store = corpus / "store"
    return main(["scan", "--manifest", str(corpus / "m.csv"), "--store", str(store), *extra])


def test_ratings_on_their_own_scale_scan_and_extract(corpus, capsys):
    """1-9 ratings were refused by extract ("outside [-1.0, 1.0]"); they are stored as rated."""
    assert _scan(corpus) == 0
    assert main(["extract", "--store", str(corpus / "store"), "--channels", "egemaps"]) == 0
    y = Store(corpus / "store").rater_labels("rec1", "valence", "r1").to_numpy()
    assert np.nanmin(y) >= 2.0 - 1e-5 and np.nanmax(y) > 7.9  # 5 + 3 sin t, unscaled


def test_a_declared_scale_is_checked_at_scan_time_with_file_line_and_value(corpus, capsys):
    _timed(corpus / "r2.csv", [0, 6, 12, 17.9], [1, 7, 9.5, 2])
    (corpus / "fs.yaml").write_text("targets: {valence: {scale: [1, 9]}}\n")
    assert _scan(corpus, "--config", str(corpus / "fs.yaml")) == 1
    err = capsys.readouterr().err
    assert f"invalid: {corpus / 'r2.csv'}: rec1: line 4, column 2 ('valence') holds 9.5" in err
    assert "outside the declared scale [1, 9]" in err
    # extract (from what scan wrote) refuses the session too, naming the file
    store = str(corpus / "store")
    cfg = ["--config", str(corpus / "fs.yaml")]
    assert main(["extract", "--store", store, "--channels", "egemaps", *cfg]) == 1
    assert "r2.csv: line 4" in capsys.readouterr().err
    # the same declaration in a YAML manifest; contradicting it in featurestore.yaml is refused
    (corpus / "m.yaml").write_text(
        "targets: {valence: {scale: [1, 9]}}\nmin_coverage: 0.8\nsessions:\n"
        "  - {session: rec1, person: p01, group: talk, video_person: rec.mp4,\n"
        "     labels: {valence: {r1: r1.csv, r2: r2.csv}}}\n"
    )
    report = scan(None, manifest=corpus / "m.yaml")
    assert report.sessions[0].scales == {"valence": [1.0, 9.0]}
    assert report.sessions[0].min_coverage == 0.8
    (corpus / "fs.yaml").write_text("targets: {valence: {scale: [1, 7]}}\n")
    args = ["scan", "--manifest", str(corpus / "m.yaml"), "--store", store]
    assert main([*args, "--config", str(corpus / "fs.yaml")]) == 2
    err = capsys.readouterr().err
    assert "fs.yaml: targets.valence.scale [1.0, 7.0] contradicts the manifest's [1.0, 9.0]" in err


def test_a_rater_missing_the_recording_is_an_error_at_scan_and_extract(corpus, capsys):
    """Times 30-48 s on an 18 s recording were accepted and stored 100 % missing."""
    _timed(corpus / "r2.csv", np.arange(30, 48.05, 0.1), np.full(181, 5.0))
    assert _scan(corpus) == 1
    err = capsys.readouterr().err
    assert f"{corpus / 'r2.csv'}: rec1: its times span 30.00-48.00 s" in err
    assert f"the recording ({corpus / 'rec.mp4'}) spans 0-18.00 s, so 0% of it is rated" in err
    assert "min_coverage 0.5" in err
    issues = json.loads((corpus / "store" / "manifest.json").read_text())["issues"]
    assert [i["kind"] for i in issues] == ["invalid"]
    assert main(["extract", "--store", str(corpus / "store"), "--channels", "egemaps"]) == 1
    out = capsys.readouterr().err
    assert "valence@r2" in out and "its times span 30.00-48.00 s" in out
    assert not Store(corpus / "store").shard_path("rec1").exists()


def test_min_coverage_is_a_declared_share(corpus, capsys):
    _timed(corpus / "r2.csv", np.arange(0, 12, 0.1), np.full(120, 5.0))  # 0-11.9 of 18 s
    assert _scan(corpus) == 0
    (corpus / "fs.yaml").write_text("min_coverage: 0.9\n")
    assert _scan(corpus, "--config", str(corpus / "fs.yaml")) == 1
    assert "66% of it is rated, less than min_coverage 0.9" in capsys.readouterr().err
    (corpus / "fs.yaml").write_text("min_coverage: 0\n")  # 0 turns the check off
    assert _scan(corpus, "--config", str(corpus / "fs.yaml")) == 0


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("targets: {valence: [1, 9]}\n", r"targets.valence: expected \{scale: \[low, high\]\}"),
        (
            "targets: {valence: {scale: [9, 1]}}\n",
            "targets.valence.scale: low 9 is not below high 1",
        ),
        (
            "targets: {valence: {scale: [1, .inf]}}\n",
            r"targets.valence.scale: expected \[low, high\], two finite",
        ),
        ("min_coverage: 1.5\n", r"min_coverage: expected a share of the recording in \[0, 1\]"),
    ],
)
def test_bad_declarations_name_the_file_and_key(tmp_path, text, match):
    (tmp_path / "fs.yaml").write_text(text)
    with pytest.raises(ConfigError, match=f"fs.yaml: {match}"):
        load_feature_config(tmp_path / "fs.yaml")


def test_a_yaml_manifest_refuses_an_unknown_top_level_key(tmp_path):
    make_video(tmp_path / "v.mp4", n_frames=10, width=64, height=48, audio=False)
    (tmp_path / "m.yaml").write_text(
        "scales: {valence: [1, 9]}\nsessions:\n  - {session: s, person: p, group: g, video: v.mp4}\n"
    )
    with pytest.raises(ManifestError, match=r"unknown top-level key\(s\) \['scales'\]"):
        scan(None, manifest=tmp_path / "m.yaml")


def test_the_omg_layout_declares_its_valence_scale(tmp_path):
    """[-1, 1] is the OMG layout's declaration (a config may replace it), not a hidden limit."""
    (tmp_path / "Annotations").mkdir()
    (tmp_path / "Annotations" / "Subject_1_Story_1.csv").write_text("valence\n0.5\n1.5\n")
    make_video(tmp_path / "Subject_1_Story_1.mp4", n_frames=2, width=64, height=48, audio=False)
    report = scan(tmp_path)
    assert report.sessions[0].scales["valence_self"] == [-1.0, 1.0]
    from featurestore.sources.manifest import check_labels

    check_labels(report)
    assert [i.kind for i in report.issues] == ["invalid"]
    assert "line 3 holds 1.5, outside the declared scale [-1, 1]" in report.issues[0].reason


def test_coverage_counts_only_the_rated_part_inside_the_recording():
    assert coverage_problem("r.csv", (0.0, 9.0), 18.0, 0.5, "v") is None
    assert "44%" in coverage_problem("r.csv", (-10.0, 8.0), 18.0, 0.5, "v")
    assert parse_targets(None, "x") == {}
    assert SessionFiles("s", 1, 1, 0, "train").min_coverage is None


def test_the_monadic_demo_rated_on_1_to_9_extracts(tmp_path):
    """The demo's valence mapped to 1-9 (5 + 4 v) was refused for every session; now it is
    stored as rated, each rater's trace the mapped one."""
    from featurestore.demo.monadic import build_monadic_demo

    out = tmp_path / "demo"
    build_monadic_demo(out, n_persons=1, tasks=(1,), duration_s=4, progress=False)
    originals = {}
    for path in sorted((out / "ratings").glob("*valence*.csv")):
        header, *rows = path.read_text().splitlines()
        originals[path.name] = rows
        if "," in header:  # time,valence
            mapped = [f"{r.split(',')[0]},{5 + 4 * float(r.split(',')[1]):.6f}" for r in rows]
        else:
            mapped = [f"{5 + 4 * float(r):.6f}" for r in rows]
        path.write_text("\n".join([header, *mapped]) + "\n")
    assert len(originals) == 2  # r1 per frame, r2 time,valence at 10 Hz
    (out / "fs.yaml").write_text("targets: {valence: {scale: [1, 9]}}\n")
    store = str(tmp_path / "store")
    cfg = ["--config", str(out / "fs.yaml")]
    assert main(["scan", "--manifest", str(out / "manifest.csv"), "--store", store, *cfg]) == 0
    assert main(["extract", "--store", store, "--channels", "egemaps", *cfg]) == 0
    st = Store(store)
    (sid,) = st.list_sessions()
    r1 = st.rater_labels(sid, "valence", "r1").to_numpy()
    want = 5 + 4 * np.array([float(v) for v in originals[next(n for n in originals if "r1" in n)]])
    np.testing.assert_allclose(r1, want, atol=1e-5)
    assert 1.0 <= np.nanmin(st.labels(sid, "valence").to_numpy()) <= 9.0
