"""An extractor whose code changed without a version bump is caught (see extractor_fingerprints.py)."""

from __future__ import annotations

import ast
import copy
import json
from pathlib import Path

from tests.featurestore.extractors import extractor_fingerprints as fp

FACE_GEOM = "featurestore/extractors/face_geom.py"


def test_recorded_fingerprints_match_the_code():
    found = fp.problems(fp.current(), fp.recorded())
    assert not found, (
        "extractor code and versions are out of step with tests/featurestore/extractors/extractor_fingerprints.json:\n"
        + "\n".join(found)
    )


def test_comments_docstrings_and_formatting_do_not_count_but_code_does():
    src = (fp.ROOT / FACE_GEOM).read_text(encoding="utf-8")
    base = fp.source_fingerprint(src)
    assert fp.source_fingerprint(ast.unparse(ast.parse(src))) == base  # reformatted, comments gone
    commented = src.replace("def head_pose(", "# a comment\n\n\ndef head_pose(", 1)
    assert commented != src and fp.source_fingerprint(commented) == base
    redoc = src.replace(
        '"""(n, 3) yaw, pitch, roll in degrees', '"""Yaw, pitch and roll in degrees', 1
    )
    assert redoc != src and fp.source_fingerprint(redoc) == base
    changed = src.replace("blink_threshold: float = 0.2", "blink_threshold: float = 0.25", 1)
    assert changed != src and fp.source_fingerprint(changed) != base
    swapped = src.replace("gap / (2.0 * np.linalg.norm", "gap / (3.0 * np.linalg.norm", 1)
    assert swapped != src and fp.source_fingerprint(swapped) != base


def test_an_extractor_covers_the_modules_it_computes_with():
    assert fp.code_modules("featurestore.extractors.face_geom") == [
        "featurestore.extractors.face_geom",
        "featurestore.extractors.landmarks",
    ]
    speech = fp.code_modules("featurestore.extractors.transcript")
    assert (
        "featurestore.sources.speaking" in speech and "featurestore.sources.transcripts" in speech
    )
    assert not {"featurestore.storage.store", "featurestore.extractors.base"} & set(speech)
    assert {"face_geom", "face_au", "egemaps", "speech", "lexicon", "speaking_from_faces"} <= set(
        fp.current()
    )


def test_code_changed_without_a_version_bump_fails_and_says_what_to_do():
    now = fp.current()
    record = copy.deepcopy(now)
    record["face_geom"]["modules"][FACE_GEOM] = "0" * 64  # as if face_geom.py had changed since
    [msg] = fp.problems(now, record)
    assert msg.startswith(
        "face_geom: the code it computes with changed (featurestore/extractors/face_geom.py)"
    )
    assert "bump `version` of FaceGeomExtractor in featurestore/extractors/face_geom.py" in msg
    assert (
        f"`{fp.UPDATE_COMMAND}`" in msg and f"`{fp.UPDATE_COMMAND} --same-output face_geom`" in msg
    )
    # bumping the version turns it into "record the new code"
    bumped = copy.deepcopy(now)
    old = now["face_geom"]["version"]
    bumped["face_geom"]["version"] = new = f"{old}.1"
    [msg] = fp.problems(bumped, record)
    assert f"version {old} -> {new}" in msg and fp.UPDATE_COMMAND in msg
    # a new extractor without a record, and a record without an extractor
    del record["egemaps"]
    record["old_one"] = now["speech"]
    found = fp.problems(now, record)
    assert any(p.startswith("egemaps: no recorded fingerprint") for p in found)
    assert any(p.startswith("old_one: recorded but no longer exists") for p in found)


def test_update_refuses_a_silent_change_unless_declared_same_output(tmp_path: Path):
    record = tmp_path / "fingerprints.json"
    stale = fp.current()
    stale["face_geom"]["modules"][FACE_GEOM] = "0" * 64
    record.write_text(json.dumps(stale))
    refused = fp.update(set(), record)
    assert len(refused) == 1 and refused[0].startswith("face_geom:")
    assert json.loads(record.read_text()) == stale  # nothing written
    assert fp.update({"face_geom"}, record) == []
    assert fp.problems(fp.current(), fp.recorded(record)) == []
