"""Transcripts: parsing (.srt/.ass edge cases), the speech and lexicon channels, the transcript
rule for the per-role voice channels in extraction, and `featurestore transcripts`."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from featurestore.cli import main
from featurestore.extractors.transcript import (
    LEXICON_COLUMNS,
    SPEECH_COLUMNS,
    LexiconExtractor,
    SpeechExtractor,
)
from featurestore.sources.transcripts import (
    Cue,
    TranscriptError,
    parse_ass,
    parse_srt,
    read_transcript,
)
from featurestore.storage.store import Channel, SessionMeta, Store
from tests.featurestore.helpers import make_video


def spans(cues):
    return [(c.start_s, c.end_s, c.role, c.text) for c in cues]


# ----------------------------------------------------------------------------- parsing
def test_srt_bom_crlf_overlap_both_tags_and_untagged_lines(tmp_path):
    text = (
        "\ufeff1\r\n00:00:01,000 --> 00:00:03,500\r\n[S] Once upon a time\r\nthere was a <i>lovely</i> day.\r\n\r\n"
        "2\r\n00:00:03,000 --> 00:00:04,250\r\n[S] It was great.\r\n[L] wow\r\n\r\n"
        "3\r\n00:00:05.5 --> 00:00:06.000 X1:10 X2:20\r\nno tag at all\r\n\r\n"
        "4\r\n00:00:07,000 --> 00:00:08,000\r\n- [L] oh no [S] yes\r\n"
    )
    path = tmp_path / "transcribed_subject_1_story_1.srt"
    path.write_bytes(text.encode("utf-8"))
    cues = read_transcript(path)
    assert spans(cues) == [
        (
            1.0,
            3.5,
            "speaker",
            "Once upon a time there was a lovely day.",
        ),  # a wrapped line keeps the tag
        (3.0, 4.25, "speaker", "It was great."),  # overlaps the first cue: kept as is
        (3.0, 4.25, "listener", "wow"),  # both tags: one cue per role, same span
        (5.5, 6.0, None, "no tag at all"),  # no tag: no role, kept
        (7.0, 8.0, "listener", "oh no"),  # tags inside a line start new segments
        (7.0, 8.0, "speaker", "yes"),
    ]
    assert cues[0].line == 2 and cues[0].words[-1] == "day."


def test_srt_without_blank_lines_or_index_and_a_blank_line_inside_a_cue():
    cues = parse_srt(
        "00:00:01,000 --> 00:00:02,000\n[S] one\n00:00:02,000 --> 00:00:03,000\n[L] two\n\nthree\n"
    )
    assert spans(cues) == [(1.0, 2.0, "speaker", "one"), (2.0, 3.0, "listener", "two three")]


@pytest.mark.parametrize(
    ("body", "line", "what"),
    [
        (
            "1\n00:00:01,000 --> 00:00:02,000\n[S] a\n\n2\n00:00:0x,000 --> 00:00:03,000\n[S] b\n",
            6,
            "cannot read the cue times",
        ),
        ("1\n00:00:03,000 --> 00:00:02,000\n[S] a\n", 2, "ends before it starts"),
        ("1\n00:61:00,000 --> 00:62:00,000\n[S] a\n", 2, "minutes or seconds >= 60"),
        ("hello\n\n1\n00:00:01,000 --> 00:00:02,000\n[S] a\n", 1, "before the first cue time"),
    ],
)
def test_srt_errors_name_file_and_line(tmp_path, body, line, what):
    path = tmp_path / "Subject_1_Story_1.srt"
    path.write_text(body)
    with pytest.raises(TranscriptError, match=rf"{path}:{line}: .*{what}"):
        read_transcript(path)


def test_not_utf8_falls_back_to_cp1252(tmp_path):
    path = tmp_path / "Subject_1_Story_1.srt"
    path.write_bytes("1\n00:00:01,000 --> 00:00:02,000\n[S] caf\u00e9 \u2019s\n".encode("cp1252"))
    assert read_transcript(path)[0].text == "caf\u00e9 \u2019s"


ASS = """\ufeff[Script Info]
Title: demo
ScriptType: v4.00+

[V4+ Styles]
Format: Name, Fontname, Fontsize
Style: Default,Arial,20
Style: Listener,Arial,20

[Events]
Format: Layer, Start, End, Style, Name, MarginL, MarginR, MarginV, Effect, Text
Dialogue: 0,0:00:01.00,0:00:03.50,Default,,0,0,0,,[S] It was {\\i1}so{\\i0} nice, really.\\N[L] mm-hm
Comment: 0,0:00:02.00,0:00:03.00,Default,,0,0,0,,[S] a note for the editor
Dialogue: 0,0:00:04.00,0:00:05.00,Listener,,0,0,0,,{\\pos(10,20)}wow\\hreally
Dialogue: 0,0:00:05.00,0:00:06.25,Default,S,0,0,0,,and then
Dialogue: 0,0:00:07.00,0:00:08.00,Default,,0,0,0,,untagged
"""


def test_ass_dialogue_styles_names_and_override_tags(tmp_path):
    path = tmp_path / "Subject_2_Story_3.ass"
    path.write_bytes(ASS.replace("\n", "\r\n").encode("utf-8"))
    assert spans(read_transcript(path)) == [
        (1.0, 3.5, "speaker", "It was so nice, really."),
        (1.0, 3.5, "listener", "mm-hm"),
        (4.0, 5.0, "listener", "wow really"),  # the style names the role
        (5.0, 6.25, "speaker", "and then"),  # the actor (Name) names the role
        (7.0, 8.0, None, "untagged"),
    ]


def test_ass_errors_name_the_line():
    bad = ASS.replace("0:00:04.00,0:00:05.00", "0:00:04.00,0:0x:05.00")
    with pytest.raises(TranscriptError, match=r"x\.ass:14: cannot read the time"):
        parse_ass(bad, "x.ass")
    with pytest.raises(TranscriptError, match=r"y\.ass:2: Dialogue line has 3 fields"):
        parse_ass("[Events]\nDialogue: 0,0:00:01.00,0:00:02.00\n", "y.ass")


# ----------------------------------------------------------------------------- speech
def test_speech_values_on_hand_made_cues():
    cues = [
        Cue(1.0, 3.0, "speaker", "one two three four"),  # 2 words/s
        Cue(2.0, 2.5, "speaker", "five six"),  # overlaps: 4 words/s more
        Cue(4.0, 4.5, "listener", "mm-hm"),
        Cue(6.0, 7.0, None, "who said this"),  # no role: only extends the coverage
    ]
    out = SpeechExtractor().process_cues(cues, n_frames=400, fps=25.0)
    spk = out["speaker"]
    assert spk.columns == SPEECH_COLUMNS and spk.data.shape == (400, 3)
    t = spk.time
    at = lambda x: int(round(x * 25))  # noqa: E731
    talking, wps, since = spk.data.T
    np.testing.assert_array_equal(talking, ((t >= 1.0) & (t < 3.0)).astype(np.float32))
    assert (
        wps[at(1.5)] == pytest.approx(2.0)
        and wps[at(2.2)] == pytest.approx(6.0)
        and wps[at(3.5)] == 0
    )
    assert (
        since[at(2.0)] == 0
        and since[at(3.0)] == pytest.approx(0.0)
        and since[at(5.0)] == pytest.approx(2.0)
    )
    assert since[at(0.5)] == 60.0  # not spoken yet: the cap
    lis = out["listener"].data
    assert (
        lis[at(4.2), 0] == 1
        and lis[at(4.2), 1] == pytest.approx(2.0)
        and lis[at(10.0), 2] == pytest.approx(5.5)
    )
    # valid while the transcript covers the session: to the last cue's end (7 s) + 5 s
    np.testing.assert_array_equal(spk.valid, t <= 12.0 + 1e-9)
    capped = (
        SpeechExtractor()
        .process_cues([Cue(0.0, 1.0, "speaker", "a")], 25 * 80, 25.0)["speaker"]
        .data[:, 2]
    )
    assert capped.max() == 60.0 and capped[at(30.0)] == pytest.approx(29.0)


def test_speech_without_cues_is_valid_nowhere():
    out = SpeechExtractor().process_cues([], 50, 25.0)
    assert not out["speaker"].valid.any() and np.all(out["speaker"].data[:, 2] == 60.0)


# ----------------------------------------------------------------------------- lexicon
def test_lexicon_sign_decay_coverage_and_roles():
    cues = [
        Cue(1.0, 3.0, "speaker", "What a wonderful, happy day."),
        Cue(10.0, 12.0, "speaker", "It was terrible and sad."),
        Cue(4.0, 4.5, "listener", "wow"),
        Cue(20.0, 21.0, None, "this is great"),  # untagged: no role's words
    ]
    out = LexiconExtractor().process_cues(cues, n_frames=25 * 30, fps=25.0)
    spk, lis = out["speaker"], out["listener"]
    assert spk.columns == LEXICON_COLUMNS
    col = {c: i for i, c in enumerate(LEXICON_COLUMNS)}
    at = lambda x: int(round(x * 25))  # noqa: E731
    d = spk.data
    assert d[at(0.5), col["words_recent"]] == 0 and d[at(0.5), col["vader_compound"]] == 0
    assert (
        d[at(2.9), col["vader_compound"]] > 0.5
        and d[at(2.9), col["vader_pos"]] > d[at(2.9), col["vader_neg"]]
    )
    assert d[at(2.9), col["words_recent"]] == 5
    # words are spoken over the cue: early in it only the first ones count
    assert (
        d[at(1.3), col["words_recent"]] == 1 and d[at(1.3), col["vader_compound"]] == 0
    )  # word 1 at 1.2 s
    # 2 of the 5 words are in VADER's lexicon (wonderful, happy)
    assert d[at(5.0), col["lexicon_coverage"]] == pytest.approx(0.4)
    # the cue still counts 4 s after its end, no longer after 5 s
    assert d[at(7.0), col["vader_compound"]] > 0.5 and d[at(8.2), col["words_recent"]] == 0
    assert d[at(11.9), col["vader_compound"]] < -0.5
    # the positive cue decays: just after the negative one starts, the mix is still positive-weighted
    assert d[at(12.5), col["vader_compound"]] < 0
    assert (
        lis.data[at(4.4), col["vader_compound"]] > 0 and lis.data[at(1.5), col["words_recent"]] == 0
    )
    assert np.all(lis.data[at(20.0) :, col["words_recent"]] == 0)  # the untagged cue is nobody's
    assert spk.valid[at(25.9)] and not spk.valid[at(26.1)]


# ----------------------------------------------------------------------------- extraction
SRT = "1\n00:00:00,200 --> 00:00:01,000\n[S] what a lovely day\n\n2\n00:00:01,200 --> 00:00:01,600\n[L] wow\n"


@pytest.fixture(scope="module")
def session_data(tmp_path_factory):
    data = tmp_path_factory.mktemp("data")
    (data / "Videos").mkdir()
    (data / "Annotations").mkdir()
    make_video(data / "Videos" / "Subject_1_Story_1.mp4", n_frames=50)
    (data / "Annotations" / "Subject_1_Story_1.csv").write_text("valence\n" + "0.1\n" * 50)
    return data


def test_extraction_with_a_transcript_uses_the_transcript_rule(session_data, tmp_path, capsys):
    data = tmp_path / "data"
    import shutil

    shutil.copytree(session_data, data)
    (data / "Transcripts").mkdir()
    srt = data / "Transcripts" / "transcribed_subject_1_story_1.srt"
    srt.write_text(SRT)
    store = tmp_path / "features"
    # no face channel: the face rule could not run, the transcript rule can
    assert (
        main(
            [
                "extract",
                str(data),
                "--store",
                str(store),
                "--channels",
                "egemaps",
                "speech",
                "lexicon",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert (
        "computed scene/egemaps, speaker/speech, listener/speech, speaker/lexicon, "
        "listener/lexicon, speaker/egemaps, listener/egemaps" in out
    )
    st = Store(store)
    s = "Subject_1_Story_1"
    scene = st.read_channel(s, "scene/egemaps")
    spk, lis = st.read_channel(s, "speaker/egemaps"), st.read_channel(s, "listener/egemaps")
    assert spk.extractor == "speaking_from_transcript" and spk.params == {
        "rule": "speaking_from_transcript"
    }
    assert (
        spk.source["rule"] == "transcript"
        and spk.source["path"] == str(srt)
        and "transcript=" in spk.source["upstream"]
    )
    np.testing.assert_array_equal(spk.valid, scene.valid & (scene.time >= 0.2) & (scene.time < 1.0))
    np.testing.assert_array_equal(lis.valid, scene.valid & (scene.time >= 1.2) & (scene.time < 1.6))
    with h5py.File(st.shard_path(s)) as f:
        assert (
            f["speaker/egemaps"].attrs["shared_with"] == "scene/egemaps"
        )  # rows stored once (hard links)
    speech = st.read_channel(s, "speaker/speech")
    assert (
        speech.data.shape == (50, 3)
        and speech.source["path"] == str(srt)
        and speech.params["n_frames"] == 50
    )
    assert st.read_channel(s, "speaker/lexicon").data[20, 0] > 0  # "lovely" at 0.8 s
    assert main(["verify", "--store", str(store)]) == 0
    # re-run: current; an edited transcript redoes the transcript channels and the per-role voice only
    keys = st.cache_keys(s)
    assert (
        main(
            [
                "extract",
                str(data),
                "--store",
                str(store),
                "--channels",
                "egemaps",
                "speech",
                "lexicon",
            ]
        )
        == 0
    )
    assert "0 extracted, 1 already current" in capsys.readouterr().out
    srt.write_text(SRT.replace("[L] wow", "[S] wow"))
    assert main(["verify", "--store", str(store)]) == 1  # the source changed since extraction
    capsys.readouterr()
    assert (
        main(
            [
                "extract",
                str(data),
                "--store",
                str(store),
                "--channels",
                "egemaps",
                "speech",
                "lexicon",
            ]
        )
        == 0
    )
    new = Store(store).cache_keys(s)
    assert new["scene/egemaps"] == keys["scene/egemaps"]
    assert all(
        new[k] != keys[k]
        for k in ("speaker/speech", "listener/lexicon", "speaker/egemaps", "listener/egemaps")
    )
    assert not Store(store).read_channel(s, "listener/egemaps").valid.any()
    # a broken transcript fails the session with the file and line; the stored channels stay
    srt.write_text("1\n00:00:00,200 --> 00:00:0x,000\n[S] what\n")
    capsys.readouterr()
    assert (
        main(
            [
                "extract",
                str(data),
                "--store",
                str(store),
                "--channels",
                "egemaps",
                "speech",
                "lexicon",
                "--force",
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert (
        f"{srt}:2: cannot read the cue times" in err
        and "speaker/listener egemaps not derived" in err
    )


def test_extraction_without_a_transcript_skips_with_a_note(session_data, tmp_path, capsys):
    store = tmp_path / "features"
    assert (
        main(
            [
                "extract",
                str(session_data),
                "--store",
                str(store),
                "--channels",
                "egemaps",
                "speech",
                "lexicon",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert (
        "note: no transcript: speech skipped" in out
        and "note: no transcript: lexicon skipped" in out
    )
    assert "speaker/listener egemaps need face_geom (mouth movement) or a transcript" in out
    assert Store(store).channel_keys("Subject_1_Story_1") == ["scene/egemaps"]


# ----------------------------------------------------------------------------- the verb
def _tiny_store(root, sessions=("Subject_1_Story_1", "Subject_1_Story_2")) -> Store:
    st = Store(root, mode="a")
    rng = np.random.default_rng(0)
    for s in sessions:
        story = int(s[-1])
        t = np.arange(0, 4.0, 0.01)
        scene = Channel(
            rng.normal(size=(len(t), 3)),
            t,
            np.ones(len(t), bool),
            ["a", "b", "c"],
            extractor="egemaps",
            extractor_version="1",
            cache_key=f"scene-{s}",
        )
        st.write_session(
            SessionMeta(s, 1, story, 1, "train", 100),
            channels={"scene/egemaps": scene},
            labels={"valence_self": np.zeros(100, np.float32)},
        )
    return st


def test_transcripts_verb_writes_channels_and_rederives_voice(tmp_path, capsys):
    st = _tiny_store(tmp_path / "features")
    tdir = tmp_path / "deep" / "Transcripts"
    tdir.mkdir(parents=True)
    (tdir / "transcribed_subject_1_story_1.srt").write_text(SRT)
    (tdir / "Subject_1_Story_2.ass").write_text(
        "[Events]\nFormat: Layer, Start, End, Style, Name, MarginL, MarginR, MarginV, Effect, Text\n"
        "Dialogue: 0,0:00:00.50,0:00:02.00,Default,,0,0,0,,[L] {\\i1}oh no{\\i0}\n"
    )
    (tdir / "Subject_3_Story_1.srt").write_text(SRT)  # no shard: fails alone
    (tdir / "notes.srt").write_text(SRT)  # no session in the name: skipped
    rc = main(["transcripts", str(tmp_path / "deep"), "--store", str(st.root)])
    out = capsys.readouterr()
    assert rc == 1
    assert (
        "ok     Subject_1_Story_1: computed listener/egemaps, listener/lexicon, listener/speech, speaker/egemaps"
        in out.out
    )
    assert "speaker 1 cues/4 words, listener 1 cues/1 words" in out.out
    assert (
        "FAILED Subject_3_Story_1: no shard for Subject_3_Story_1" in out.err
        and "featurestore extract" in out.err
    )
    assert "skipped" in out.out and "notes.srt" in out.out
    assert "transcripts: 2 session(s) written, 1 failed" in out.out
    lis = st.read_channel("Subject_1_Story_2", "listener/egemaps")
    assert lis.extractor == "speaking_from_transcript"
    np.testing.assert_array_equal(lis.valid, (lis.time >= 0.5) & (lis.time < 2.0))
    assert (
        st.read_channel("Subject_1_Story_2", "listener/lexicon").data[45, 0] < 0
    )  # "oh no" complete at 1.625 s
    assert st.read_channel("Subject_1_Story_1", "speaker/speech").data.shape == (100, 3)
    with h5py.File(st.shard_path("Subject_1_Story_1")) as f:
        assert json.loads(f["speaker/lexicon"].attrs["params"])["vader_version"]
    # re-run: everything current; a bad transcript leaves its shard untouched
    before = st.shard_path("Subject_1_Story_2").read_bytes()
    (tdir / "Subject_3_Story_1.srt").unlink()
    assert main(["transcripts", str(tdir), "--store", str(st.root)]) == 0
    assert "ok     Subject_1_Story_2: all current" in capsys.readouterr().out
    (tdir / "Subject_1_Story_2.ass").write_text(
        "[Events]\nDialogue: 0,0:00:00.50,0:00:0x.00,Default,,0,0,0,,[L] hm\n"
    )
    assert main(["transcripts", str(tdir), "--store", str(st.root)]) == 1
    assert "Subject_1_Story_2.ass:2: cannot read the time" in capsys.readouterr().err
    assert st.shard_path("Subject_1_Story_2").read_bytes() == before
    assert main(["transcripts", str(tmp_path / "missing"), "--store", str(st.root)]) == 2


def test_feature_sets_without_lexicon_name_the_transcripts_verb(tmp_path):
    from experiments.data.dataset import DatasetError, load_sessions

    st = _tiny_store(tmp_path / "features", sessions=("Subject_1_Story_1",))
    with pytest.raises(
        DatasetError, match=r"no channel speaker/lexicon .*featurestore transcripts TRANSCRIPT_DIR"
    ):
        load_sessions(st, ["scene/egemaps", "speaker/lexicon"])


def test_docstring_examples_run():
    import doctest

    import featurestore.extractors.transcript as extractors
    import featurestore.sources.transcripts as transcripts

    for module in (transcripts, extractors):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
