"""A manifest cannot make the tools read files outside its folder (unless
--allow-outside-paths), and no error quotes the text of a file it could not read as its kind."""

from __future__ import annotations

import pytest

from featurestore.cli import main
from featurestore.sources.annotations import AnnotationError, read_annotation, read_label_file
from featurestore.sources.manifest_file import ManifestError, read_manifest

SECRET = "root:x:0:0:secret-line:/root:/bin/bash"


@pytest.fixture
def corpus(tmp_path):
    """corpus/manifest.csv whose label reaches ../../private/passwd (a passwd-like file)."""
    private = tmp_path / "private"
    private.mkdir()
    (private / "passwd").write_text(f"{SECRET}\ndaemon:x:1:1:secret-too:/usr/sbin\n")
    root = tmp_path / "data" / "corpus"
    (root / "video").mkdir(parents=True)
    (root / "video" / "s1.mp4").write_text("x")
    (root / "manifest.csv").write_text(
        "session,person,group,video,label_valence\ns1,p1,g1,video/s1.mp4,../../private/passwd\n"
    )
    return root


def test_manifest_files_outside_its_folder_are_refused(corpus):
    with pytest.raises(ManifestError) as e:
        read_manifest(corpus / "manifest.csv")
    text = str(e.value)
    assert "line 2" in text and "label_valence" in text and "outside the manifest's folder" in text
    assert "--allow-outside-paths" in text and "secret" not in text
    [row] = read_manifest(corpus / "manifest.csv", allow_outside=True)
    assert row.labels["valence"].name == "passwd"


def test_a_symbolic_link_out_of_the_folder_is_outside_too(corpus):
    (corpus / "ratings.csv").symlink_to(corpus.parent.parent / "private" / "passwd")
    (corpus / "manifest.csv").write_text(
        "session,person,group,video,label_valence\ns1,p1,g1,video/s1.mp4,ratings.csv\n"
    )
    with pytest.raises(ManifestError, match="outside the manifest's folder"):
        read_manifest(corpus / "manifest.csv")


@pytest.mark.parametrize("allow", [False, True])
def test_scan_refuses_outside_paths_unless_allowed(corpus, tmp_path, capsys, allow):
    args = ["scan", "--manifest", str(corpus / "manifest.csv"), "--store", str(tmp_path / "st")]
    if allow:  # read, then refused as a rating file at scan time, without quoting it
        assert main([*args, "--allow-outside-paths"]) == 1
        err = capsys.readouterr().err
        assert "passwd: s1: line 2 is not a number" in err and "secret" not in err
        return
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "outside the manifest's folder" in err and "secret" not in err


def test_a_config_manifest_outside_the_config_folder_is_refused(corpus, tmp_path, capsys):
    config = tmp_path / "cfg" / "featurestore.yaml"
    config.parent.mkdir()
    config.write_text("manifest: ../data/corpus/manifest.csv\n")
    args = ["scan", "--config", str(config), "--store", str(tmp_path / "st")]
    assert main(args) == 2
    assert "outside the config's folder" in capsys.readouterr().err
    assert main([*args, "--allow-outside-paths"]) == 1  # read: its rating file is no rating file
    assert "passwd: s1: line 2 is not a number" in capsys.readouterr().err


def test_errors_about_a_file_of_another_kind_do_not_quote_it(tmp_path):
    passwd = tmp_path / "passwd"
    passwd.write_text(f"valence\n{SECRET}\n")
    with pytest.raises(AnnotationError, match="line 2 is not a number") as e:
        read_annotation(passwd)
    assert "secret" not in str(e.value)
    for body in (
        f"{SECRET},x,y\n0.1\n",
        f"time,valence\n{SECRET},1\n0,1\n",
        "time,valence\n0,1,2\n",
    ):
        passwd.write_text(body)
        with pytest.raises(AnnotationError) as e:
            read_label_file(passwd)
        assert "secret" not in str(e.value) and "0,1,2" not in str(e.value), str(e.value)
    manifest = tmp_path / "m.yaml"
    manifest.write_text(f"- session: s1\n  person: [{SECRET}\n")
    with pytest.raises(ManifestError, match="line") as e:
        read_manifest(manifest)
    assert "secret" not in str(e.value)
