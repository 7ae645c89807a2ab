import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import yaml

from experiments import cli
from experiments.cli import main, verb


def write_csv(path, values):
    path.write_text("valence\n" + "\n".join(f"{v:.6f}" for v in values) + "\n")


def independent_ccc(a, b):
    cov = np.cov(a, b, bias=True)
    return 2 * cov[0, 1] / (cov[0, 0] + cov[1, 1] + (a.mean() - b.mean()) ** 2)


@pytest.fixture
def folders(tmp_path):
    """Ground truth and predictions for listeners 1, 2 x stories 1, 3 (story 3 is shorter)."""
    rng = np.random.default_rng(0)
    gt, pred = tmp_path / "gt", tmp_path / "pred"
    gt.mkdir()
    pred.mkdir()
    expected = {}
    for listener in (1, 2):
        for story, n in ((1, 300), (3, 200)):
            y = np.round(np.clip(np.cumsum(rng.normal(size=n)) / 20, -1, 1), 6)
            p = np.round(0.6 * y + rng.normal(scale=0.3, size=n), 6)
            write_csv(gt / f"Subject_{listener}_Story_{story}.csv", y)
            write_csv(pred / f"Subject_{listener}_Story_{story}.csv", p)
            expected[(listener, story)] = independent_ccc(y, p)
    (gt / "notes.txt").write_text("not a session")
    return gt, pred, expected


def test_score_prints_matrix_and_both_protocols(folders, capsys, tmp_path):
    gt, pred, expected = folders
    out_csv = tmp_path / "out" / "ccc.csv"
    assert main(["score", str(gt), str(pred), "--csv", str(out_csv)]) == 0
    out = capsys.readouterr().out
    assert "4 sessions" in out
    per_listener = {L: np.mean([expected[(L, S)] for S in (1, 3)]) for L in (1, 2)}
    per_story = {S: np.mean([expected[(L, S)] for L in (1, 2)]) for S in (1, 3)}
    assert f"personalized  {np.mean(list(per_listener.values())):.4f}" in out
    assert f"generalized   {np.mean(list(per_story.values())):.4f}" in out
    assert f"{expected[(2, 3)]:.4f}" in out
    table = pd.read_csv(out_csv)
    metrics = ["ccc", "pearson", "rmse", "mae"]
    assert list(table.columns) == ["session", "listener", "story", *metrics] and len(table) == 4
    got = {(r.listener, r.story): r.ccc for r in table.itertuples()}
    # read_annotation returns float32; the official scorer reads float64: equal to ~1e-8
    assert got == pytest.approx(expected, abs=1e-6)
    for r in table.itertuples():  # the other metrics against their textbook formulas
        name = f"Subject_{r.listener}_Story_{r.story}.csv"
        y, p = (np.loadtxt(folder / name, skiprows=1) for folder in (gt, pred))
        assert r.pearson == pytest.approx(np.corrcoef(y, p)[0, 1], abs=1e-6)
        assert r.rmse == pytest.approx(np.sqrt(np.mean((y - p) ** 2)), abs=1e-6)
        assert r.mae == pytest.approx(np.mean(np.abs(y - p)), abs=1e-6)
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  ")}
    for metric, title in (("rmse", "RMSE"), ("mae", "MAE")):
        by_listener = table.groupby("listener")[metric].mean().mean()
        by_story = table.groupby("story")[metric].mean().mean()
        assert lines[title][1:3] == [f"{by_listener:.4f}", f"{by_story:.4f}"]
        assert lines[title][3:] == ["lower", "is", "better"]
    assert lines["CCC"][1] == f"{np.mean(list(per_listener.values())):.4f}"


def test_missing_and_extra_files_are_named(folders, capsys):
    gt, pred, _ = folders
    (pred / "Subject_2_Story_1.csv").unlink()
    write_csv(pred / "Subject_9_Story_1.csv", [0.1, 0.2])
    assert main(["score", str(gt), str(pred)]) == 1
    err = capsys.readouterr().err
    assert "missing" in err and "Subject_2_Story_1.csv" in err
    assert "no ground truth" in err and "Subject_9_Story_1.csv" in err


def test_length_mismatch_is_an_error(folders, capsys):
    gt, pred, _ = folders
    write_csv(pred / "Subject_1_Story_3.csv", np.zeros(150))
    assert main(["score", str(gt), str(pred)]) == 1
    err = capsys.readouterr().err
    assert "Subject_1_Story_3: ground truth has 200 frames" in err and "prediction has 150" in err


def test_unreadable_prediction_is_an_error(folders, capsys):
    gt, pred, _ = folders
    (pred / "Subject_1_Story_1.csv").write_text("valence\n0.1\nabc\n")
    assert main(["score", str(gt), str(pred)]) == 1
    assert "Subject_1_Story_1.csv" in capsys.readouterr().err


def test_usage_errors_exit_2(tmp_path, capsys):
    assert main(["score", str(tmp_path / "nope"), str(tmp_path)]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert main([]) == 2
    assert main(["frobnicate"]) == 2
    assert main(["--help"]) == 0


def test_config_options_for_verbs_that_take_a_config(monkeypatch, capsys):
    seen = {}

    def cmd_fake(args):
        return seen.setdefault("cfg", args.cfg) and 0

    monkeypatch.setattr(cli, "VERBS", [*cli.VERBS, verb(cmd_fake, "fake", config="default")])
    assert (
        main(
            [
                "fake",
                "--config",
                "smoke",
                "--set",
                "window.delay_s=[2]",
                "--set",
                "seed=3",
                "--print-config",
            ]
        )
        == 0
    )
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["window"]["delay_s"] == [2.0] and printed["seed"] == 3
    assert "cfg" not in seen  # --print-config exits before the verb runs
    assert main(["fake", "--config", "smoke", "--set", "window.align=middle"]) == 2
    err = capsys.readouterr().err
    assert "window.align" in err and "centred" in err
    assert main(["fake", "--config", "smoke"]) == 0
    assert seen["cfg"].tracking.experiment == "omg-smoke"


@pytest.mark.integration
def test_module_entry_point_exit_code(folders):
    gt, pred, _ = folders
    (pred / "Subject_1_Story_1.csv").unlink()
    r = subprocess.run(
        [sys.executable, "-m", "experiments.cli", "score", str(gt), str(pred)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1 and "Subject_1_Story_1.csv" in r.stderr


def test_only_the_predicted_stories_are_scored_and_the_rest_is_named(folders, capsys):
    """An export of one split scored against a ground-truth folder that holds every split."""
    gt, pred, expected = folders
    for listener in (1, 2):
        (pred / f"Subject_{listener}_Story_1.csv").unlink()
    assert main(["score", str(gt), str(pred)]) == 0
    out = capsys.readouterr().out
    assert "scored the stories with predictions (3); skipped 2 sessions of stories 1" in out
    assert "2 sessions" in out
    story3 = np.mean([expected[(L, 3)] for L in (1, 2)])
    assert f"generalized   {story3:.4f}" in out
    # --split names the stories: the official test split holds story 3 of these
    assert main(["score", str(gt), str(pred), "--split", "test"]) == 0
    assert (
        "scored --split test (3, 6, 7); skipped 2 sessions of stories 1" in capsys.readouterr().out
    )
    # and every session of the split's stories must have its prediction
    assert main(["score", str(gt), str(pred), "--split", "val"]) == 1
    err = capsys.readouterr().err
    assert (
        "2 predictions missing" in err and "(--split val)" in err and "Subject_1_Story_1.csv" in err
    )
