"""The demo corpus's transcripts and observer ratings: files, scan, the quirks the parser must
handle, and the planted relations (words -> valence, self vs. observer agreement)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from experiments.evaluation.metrics import ccc
from featurestore import demo
from featurestore.extractors.transcript import LexiconExtractor
from featurestore.sources.annotations import read_annotation
from featurestore.sources.manifest import scan
from featurestore.sources.transcripts import parse_srt, read_transcript


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo_text")
    info = demo.build_demo(out, n_listeners=1, stories=(1, 3), duration_s=8, progress=False)
    return out, info


def test_files_and_scan(built):
    out, info = built
    report = scan(out)
    assert report.issues == []
    for sf, transcript in zip(report.sessions, info.transcripts, strict=True):
        assert sf.transcript == transcript and transcript.name.startswith("transcribed_subject_")
        assert set(sf.annotations) == {
            "valence_self",
            "valence_observer_listener",
            "valence_observer_speaker",
        }
        n = len(read_annotation(sf.annotations["valence_self"]))
        assert n == info.n_frames[sf.session] == 200
        for target in ("valence_observer_listener", "valence_observer_speaker"):
            y = read_annotation(sf.annotations[target])
            assert len(y) == n and y.std() > 0.005
    for (target, paths), attr in zip(
        info.observer_annotations.items(), ("observer_listener", "observer_speaker"), strict=True
    ):
        for sid, path in zip(
            info.sessions, paths, strict=True
        ):  # the plan's ratings, to the CSV's 6 decimals
            listener, story = (int(v) for v in sid.split("_")[1::2])
            want = getattr(demo.plan_session(listener, story, duration_s=8), attr)
            np.testing.assert_allclose(
                read_annotation(path), want, atol=6e-7, err_msg=f"{target} {sid}"
            )
    raw = info.transcripts[0].read_bytes()
    assert (
        raw.startswith(b"\xef\xbb\xbf") and b"\r\n" in raw
    )  # BOM and CRLF, as subtitle editors write
    truth = json.loads((out / "demo_truth.json").read_text())
    assert truth["generator_version"] == demo.GENERATOR_VERSION == 3
    assert "text_term" in truth["label"] and "valence_observer_listener" in truth["observers"]
    assert "self vs observer of listener" in (out / "README.md").read_text()


def test_transcript_cues_match_the_plan_with_both_tags_and_an_overlap(built):
    out, info = built
    plan = demo.plan_session(1, 3, duration_s=8)
    cues = read_transcript(info.transcripts[1])
    speaker = [c for c in cues if c.role == "speaker"]
    listener = [c for c in cues if c.role == "listener"]
    # one cue carries both tags: the first backchannel and the phrase before it
    both = [
        (a, b) for a in speaker for b in listener if (a.start_s, a.end_s) == (b.start_s, b.end_s)
    ]
    assert len(both) == 1 and both[0][1].text == plan.words.backchannel_words[0]
    assert both[0][0].end_s == pytest.approx(plan.voices.backchannels[0][1], abs=1e-3)
    # one overlapping pair of speaker cues, inside one phrase
    overlaps = [(a, b) for a, b in zip(speaker, speaker[1:], strict=False) if b.start_s < a.end_s]
    assert len(overlaps) == 1
    a, b = overlaps[0]
    assert any(
        abs(a.start_s - p0) < 1e-3 and abs(b.end_s - p1) < 1e-3 for p0, p1 in plan.voices.phrases
    )
    # the speaker's words are the plan's
    words = " ".join(c.text for c in speaker).split()
    assert words == " ".join(plan.words.phrase_words).split()
    assert [c.text for c in listener] == plan.words.backchannel_words


def test_planted_text_and_observer_relations():
    plan = demo.plan_session(2, 2, duration_s=40)
    r = lambda x, y: float(np.corrcoef(x, y)[0, 1])  # noqa: E731
    # what the speaker says moves the valence, and the lexicon channel sees it; listener 2 feels
    # against the story, so the words move their valence the other way
    sign = demo.listener_params(2).story_sign
    assert sign == -1
    assert r(plan.valence, plan.text_term) > 0.2
    assert r(plan.valence, sign * plan.words.affect) > 0.2
    cues = demo.transcript_cues(plan)
    parsed = parse_srt(demo.transcript_srt(plan).decode("utf-8-sig"))
    assert len(parsed) == sum(
        len(lines) for _, _, lines in cues
    )  # one per tagged line; a merged cue has two
    lex = LexiconExtractor().process_cues(parsed, plan.n_frames, plan.fps)["speaker"].data[:, 0]
    assert r(lex, sign * plan.text_term) > 0.5
    # planted agreement: the observer of the listener agrees with the self-rating far better than
    # the observer of the speaker does
    self_vs_listener_obs = ccc(plan.valence, plan.observer_listener)
    self_vs_speaker_obs = ccc(plan.valence, plan.observer_speaker)
    assert 0.4 < self_vs_listener_obs < 0.95 and self_vs_speaker_obs < self_vs_listener_obs - 0.2
    assert r(plan.observer_speaker, plan.words.affect) > 0.6
