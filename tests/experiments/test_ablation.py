"""``experiments ablate`` on the planted store, and the PNG figures of runs and of the ablation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient
from PIL import Image

from experiments.ablation import COLUMNS, ablation_markdown
from experiments.cli import main
from experiments.plots import plot_ablation, plot_listener_ccc, plot_predictions

from .conftest import config_dict


def assert_real_png(path, min_side=200):
    """The file opens as a PNG of a sensible size and is not a blank canvas."""
    with Image.open(path) as im:
        assert im.format == "PNG"
        w, h = im.size
        assert min_side <= w <= 4000 and min_side <= h <= 4000, (path, im.size)
        pixels = np.asarray(im.convert("L"), dtype=float)
    assert pixels.std() > 10, f"{path} looks blank (pixel std {pixels.std():.1f})"
    assert (pixels < 128).mean() > 0.005, f"{path} has almost no dark pixels (no lines or text)"


@pytest.fixture(scope="module")
def ablation(sweep_once, planted_store, tmp_path_factory):
    """``experiments ablate`` with the shared sweep's config: its runs are reused, then tabled."""
    cfg, res, uri = sweep_once
    tmp = tmp_path_factory.mktemp("ablation")
    path = tmp / "ablation.yaml"
    path.write_text(yaml.safe_dump(config_dict(cfg.tracking.uri, cfg.tracking.experiment)))
    out = tmp / "reports"
    code = main(["ablate", "--config", str(path), "--store", str(planted_store), "--out", str(out)])
    assert code == 0
    return out, res, uri


def test_ablation_reports_written(ablation):
    out, res, uri = ablation
    df = pd.read_csv(out / "ablation.csv")
    assert list(df.columns) == COLUMNS
    assert sorted(zip(df.feature_set, df.split, strict=True)) == sorted(
        (fs, split) for fs in ("speaker", "listener") for split in ("val", "test")
    )
    md = (out / "ablation.md").read_text()
    assert md.startswith("# ")
    for fs in ("speaker", "listener"):
        assert any(line.startswith(f"| {fs} |") for line in md.splitlines())
    assert "0.19" in md and "0.11" in md  # the paper's test numbers beside ours
    assert_real_png(out / "ablation.png")


def test_listener_row_beats_speaker_row(ablation):
    df = pd.read_csv(ablation[0] / "ablation.csv").set_index(["feature_set", "split"])
    for split in ("val", "test"):
        for col in ("ccc_personalized", "ccc_generalized"):
            assert df.loc[("listener", split), col] > df.loc[("speaker", split), col] + 0.3, (split, col)


def test_ablation_run_ids_are_the_best_mlflow_children(ablation):
    out, res, uri = ablation
    client = MlflowClient(tracking_uri=uri)
    df = pd.read_csv(out / "ablation.csv")
    for fs, part in df.groupby("feature_set"):
        assert part.run_id.nunique() == 1
        run = client.get_run(part.run_id.iloc[0])
        assert run.info.status == "FINISHED" and run.data.params["features.set"] == fs
        for r in part.itertuples():
            assert run.data.metrics[f"{r.split}.ccc_personalized"] == pytest.approx(r.ccc_personalized)
            assert run.data.metrics[f"{r.split}.ccc_generalized"] == pytest.approx(r.ccc_generalized)
        same_set = res.table[res.table["features.set"] == fs]
        assert run.data.metrics["val.ccc_personalized"] == pytest.approx(same_set["val.ccc_personalized"].max())
    # the ablation's parent carries the table
    parents = client.search_runs([res.experiment_id], "tags.ablation = 'true'")
    assert len(parents) == 1
    names = {a.path for a in client.list_artifacts(parents[0].info.run_id, "ablation")}
    assert names == {"ablation/ablation.csv", "ablation/ablation.md", "ablation/ablation.png"}
    assert parents[0].data.metrics["ablation.listener.test.ccc_personalized"] == pytest.approx(
        df.set_index(["feature_set", "split"]).loc[("listener", "test"), "ccc_personalized"]
    )


def test_ablation_markdown_handles_a_set_without_results():
    df = pd.DataFrame(
        [
            {"feature_set": "listener", "split": "val", "ccc_personalized": 0.4, "ccc_generalized": 0.3, "run_id": "abcdef0123"},
            {"feature_set": "listener", "split": "test", "ccc_personalized": 0.2, "ccc_generalized": 0.1, "run_id": "abcdef0123"},
            {"feature_set": "speaker", "split": "val", "ccc_personalized": np.nan, "ccc_generalized": np.nan, "run_id": ""},
            {"feature_set": "speaker", "split": "test", "ccc_personalized": np.nan, "ccc_generalized": np.nan, "run_id": ""},
        ]
    )
    md = ablation_markdown(df)
    speaker = next(line for line in md.splitlines() if line.startswith("| speaker |"))
    assert speaker.count("n/a") == 4
    assert "`abcdef01`" in md


# ------------------------------------------------------------------ run figures
def test_run_plots_are_real_images(sweep_once, tmp_path):
    _, res, uri = sweep_once
    client = MlflowClient(tracking_uri=uri)
    local = client.download_artifacts(res.best_run_id, "plots", str(tmp_path))
    for name in ("predicted_vs_true.png", "ccc_per_listener.png"):
        assert_real_png(f"{local}/{name}")


def test_plot_functions_on_their_own(tmp_path):
    rng = np.random.default_rng(0)
    sessions = [f"Subject_{L}_Story_{S}" for L in (1, 2, 3) for S in (1, 3)]
    truth = {s: np.clip(np.cumsum(rng.normal(size=500)) / 30, -1, 1) for s in sessions}
    preds = {s: 0.5 * y + rng.normal(0, 0.1, len(y)) for s, y in truth.items()}
    scores = pd.DataFrame(
        [{"session": s, "listener": int(s.split("_")[1]), "story": int(s.split("_")[3]),
          "split": "val" if s.endswith("1") else "test", "ccc": rng.uniform(-0.2, 0.8)} for s in sessions]
    )
    assert_real_png(plot_predictions(preds, truth, scores, tmp_path / "p.png", title="t"))
    assert_real_png(plot_listener_ccc(scores, tmp_path / "l.png"))
    table = pd.DataFrame(
        [{"feature_set": fs, "split": sp, "ccc_personalized": v, "ccc_generalized": v / 2, "run_id": "x"}
         for fs, v in (("speaker", 0.05), ("listener", 0.4), ("both", 0.35)) for sp in ("loso", "test")]
    )
    assert_real_png(plot_ablation(table, tmp_path / "a.png", reference={"speaker": (0.11, 0.13)}))
    # a single session still gives one panel
    one = scores.iloc[:1]
    assert_real_png(plot_predictions(preds, truth, one, tmp_path / "one.png"), min_side=150)



def test_ablate_under_loso_reports_loso_and_test(planted_store, tracking_dir, tmp_path):
    from experiments.ablation import ablate
    from experiments.config import from_dict

    cfg = from_dict(config_dict(
        tracking_dir, "ablation-loso", protocol="loso", models=[{"name": "ridge", "alpha": [10]}],
        personalization=["global"], postprocess={"smooth_s": [0], "rescale": ["none"]},
    ))
    df, sweep = ablate(cfg, store=planted_store, out_dir=tmp_path / "reports", progress=False)
    assert sweep.selection_metric == "loso.ccc_personalized"
    assert sorted(sweep.table["model.name"]) == ["dummy", "ridge", "ridge"]  # the baseline is added
    csv = pd.read_csv(tmp_path / "reports" / "ablation.csv").set_index(["feature_set", "split"])
    assert sorted(csv.index) == sorted((fs, sp) for fs in ("speaker", "listener") for sp in ("loso", "test"))
    assert csv.loc[("listener", "loso"), "ccc_personalized"] > csv.loc[("speaker", "loso"), "ccc_personalized"] + 0.3
    assert "loso pers." in (tmp_path / "reports" / "ablation.md").read_text()
