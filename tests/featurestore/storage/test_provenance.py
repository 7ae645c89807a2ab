"""The code fingerprint: its scope is what the caller passes, files named relative to a root."""

from __future__ import annotations

import shutil

from featurestore.storage.provenance import ABSENT, code_fingerprint, library_versions


def _one() -> int:
    return 1


def _two() -> int:
    return 2


def test_code_fingerprint_follows_its_sources_and_libraries(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 2\n")
    files = [tmp_path / "a.py", tmp_path / "b.py"]
    first = code_fingerprint(files, [("numpy", "2.0")], root=tmp_path)
    assert first == code_fingerprint(files, [("numpy", "2.0")], root=tmp_path)
    assert first != code_fingerprint(files, [("numpy", "2.1")], root=tmp_path)
    assert first != code_fingerprint(files, [("numpy", "2.0")], root=tmp_path, salt="0.2.0")
    # a file outside the scope does not count; one inside does
    assert code_fingerprint(files[:1], root=tmp_path) == code_fingerprint(files[:1], root=tmp_path)
    (tmp_path / "b.py").write_text("y = 3\n")
    assert first != code_fingerprint(files, [("numpy", "2.0")], root=tmp_path)
    # functions by their source
    assert code_fingerprint([_one]) != code_fingerprint([_two])


def test_a_copied_tree_keeps_its_fingerprint(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_text("z = 0\n")
    shutil.copytree(tmp_path / "src", tmp_path / "copy")
    here = code_fingerprint([tmp_path / "src" / "m.py"], root=tmp_path / "src")
    assert here == code_fingerprint([tmp_path / "copy" / "m.py"], root=tmp_path / "copy")


def test_library_versions_reads_metadata():
    versions = dict(library_versions(["numpy", "no-such-distribution-here"]))
    assert versions["numpy"].split(".")[0].isdigit()
    assert versions["no-such-distribution-here"] == ABSENT
