"""``experiments ablate`` on the planted store, and the PNG figures of runs and of the ablation."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient
from PIL import Image

from experiments.cli import main
from experiments.config.loading import from_dict
from experiments.config.options import CHOSEN_UNSEEN_MARK, CHOSEN_UNSEEN_NOTE
from experiments.config.tracks import candidates
from experiments.evaluation.plots import plot_ablation, plot_listener_scores, plot_predictions
from experiments.evaluation.uncertainty import holm
from experiments.studies.ablation import (
    COLUMNS,
    COMPARISON_COLUMNS,
    ablation_markdown,
    ablation_metrics,
    ablation_table,
    comparisons,
    sweep_feature_sets,
    unseen_listeners,
)
from experiments.studies.parent_run import SweepResult
from experiments.studies.sweep import SweepOptions
from experiments.tracking.child_runs import UNSEEN_OF_TAG
from experiments.tracking.tracker import CONFIG_HASH_TAG
from tests.experiments.helpers import config_dict


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
    path.write_text(
        yaml.safe_dump(
            config_dict(
                cfg.tracking.uri,
                cfg.tracking.experiment,
                unseen_listener={"selection": "chosen"},
                importance={"repeats": 2, "levels": ["channel"]},
            )
        )
    )
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
    assert md.startswith("# Speaker / listener / both (valence_self, protocol val)\n")
    ours, reference = md.split("## Reference", 1)
    # selection chosen: the column says its configuration was chosen with every listener, each
    # of its cells is marked, a note says why, and ablation.csv names the selection per number
    assert "| test unseen listeners (chosen) |" in ours and "not nested" in ours
    assert f"\n\n{CHOSEN_UNSEEN_NOTE}.\n" in ours
    unseen = df[df.ccc_unseen_listener.notna()]
    assert len(unseen) == 2 and (unseen.unseen_selection == "chosen").all()
    assert df[df.ccc_unseen_listener.isna()].unseen_selection.isna().all()
    by_split = df.set_index(["feature_set", "split"])
    for fs in ("speaker", "listener"):
        row = next(line for line in ours.splitlines() if line.startswith(f"| {fs} |"))
        # both tracks on both splits, then unseen listeners and chance: the numbers of
        # ablation.csv, not of the paper; intervals on test only (validation chose them)
        cells = [c.strip() for c in row.strip("| ").split(" | ")]
        assert len(cells) == 7 and all("[" in c for c in cells[3:6]), row
        assert not any("[" in c for c in cells[1:3]), row
        assert cells[5].endswith(f" {CHOSEN_UNSEEN_MARK}"), row
        want = [
            by_split.loc[(fs, s), f"ccc_{t}"]
            for s in ("val", "test")
            for t in ("personalized", "generalized")
        ]
        want.append(by_split.loc[(fs, "test"), "ccc_unseen_listener"])
        assert [float(c.split(" ")[0]) for c in cells[1:6]] == pytest.approx(want, abs=5e-4), row
    # the paper's numbers (Barros et al. 2019, Table IV, test set) stand apart, in their own table
    published = {
        line.split(" | ")[0][2:]: line.strip("| ").split(" | ")[1:]
        for line in reference.splitlines()
        if line.startswith("| ") and not line.startswith("| features")
    }
    assert published == {
        "speaker": ["0.11", "0.13"],
        "listener": ["0.19", "0.23"],
        "both": ["0.17", "0.19"],
    }
    assert "val (selection) personalized" in md and "Holm p" in md
    assert (df.split_role == df.split.map({"val": "selection", "test": "held-out"})).all()
    val = df[df.split == "val"]
    assert val.filter(like="_ci_").isna().all().all()  # no interval on the selection split
    assert df[df.split == "test"].ccc_personalized_ci_low.notna().all()
    pairs = pd.read_csv(out / "ablation_comparisons.csv")
    assert list(pairs.columns) == COMPARISON_COLUMNS
    # on test only, Holm-adjusted over the family, with the floor of the test beside it
    assert set(pairs.split) == {"test"}
    assert "listener vs speaker" in set(pairs.comparison)
    assert set(pairs.comparison) <= {
        "listener vs speaker",
        "personalized vs generalized (listener)",
        "personalized vs generalized (speaker)",
    }
    assert (pairs.p_holm >= pairs.p_value).all() and (pairs.p_holm <= 1).all()
    assert np.allclose(pairs.p_holm, holm(pairs.p_value))
    assert np.allclose(pairs.p_min, 2.0 / 2.0**pairs.n_listeners)
    assert_real_png(out / "ablation.png")
    # whether each chosen configuration reads future frames: its run's `causal` param
    runs = res.table.set_index("run_id")
    for r in df.itertuples():
        for track in ("personalized", "generalized"):
            run = getattr(r, f"run_id_{track}")
            assert bool(getattr(r, f"causal_{track}")) == (runs.at[run, "causal"] == "true")
            said = ", causal)" if runs.at[run, "causal"] == "true" else ", reads future frames)"
            own = getattr(r, f"config_track_{track}")
            note = (
                f", a {own} configuration"
                if own in ("personalized", "generalized") and own != track
                else ""
            )
            assert f"(run `{run}`{note}{said}" in md


def test_each_choice_has_its_importance_and_heat_map(ablation):
    out, res, uri = ablation
    df = pd.read_csv(out / "ablation.csv")
    client = MlflowClient(uri)
    runs = res.table.set_index("run_id")
    for fs in ("speaker", "listener"):
        row = df[(df.feature_set == fs) & (df.split == "test")].iloc[0]
        for track in ("personalized", "generalized"):
            assert_real_png(out / f"ccc_per_session_{fs}_{track}.png")
            run = row[f"run_id_{track}"]
            logged = {f.path for f in client.list_artifacts(run, "importance")}
            assert f"importance/ccc_per_session_{fs}_{track}.png" in logged
            if runs.at[run, "model.name"] in ("dummy", "position_prior"):
                continue  # a baseline reads no feature: a heat map only
            t = pd.read_csv(out / f"importance_{fs}_{track}.csv")
            assert set(t.level) == {"channel"} and set(t.track) == {track}
            assert t.repeats.eq(2).all() and t.ccc.iloc[0] == pytest.approx(row[f"ccc_{track}"])
            assert f"importance/importance_{fs}_{track}.csv" in logged
    listener = pd.read_csv(out / "importance_listener_generalized.csv").set_index("group")
    # the listener channels carry the planted signal
    assert listener.importance.max() > 0.1
    md = (out / "ablation.md").read_text()
    assert "## What the chosen configurations use (permutation importance)" in md
    exp = client.get_run(res.parent_run_id).info.experiment_id
    parent = client.search_runs(
        [exp], "tags.ablation = 'true'", order_by=["attributes.start_time DESC"]
    )[0]
    assert parent.data.metrics["ablation.explain_seconds"] > 0  # what the pictures took


def test_listener_row_beats_speaker_row(ablation):
    df = pd.read_csv(ablation[0] / "ablation.csv").set_index(["feature_set", "split"])
    for split in ("val", "test"):
        # unseen listeners on test only (no val_unseen: validation labels choose configurations)
        cols = ["ccc_personalized", "ccc_generalized"] + (
            ["ccc_unseen_listener"] if split == "test" else []
        )
        for col in cols:
            assert df.loc[("listener", split), col] > df.loc[("speaker", split), col] + 0.3, (
                split,
                col,
            )
    assert df.xs("val", level="split").ccc_unseen_listener.isna().all()
    # the planted listener signal is far above chance; the speaker noise is not
    assert (
        df.loc[("listener", "test"), "ccc_generalized_ci_low"]
        > df.loc[("listener", "test"), "chance_generalized_q95"]
    )
    assert (
        df.loc[("speaker", "test"), "ccc_generalized"]
        < df.loc[("speaker", "test"), "chance_generalized_q95"] + 0.1
    )
    pairs = pd.read_csv(ablation[0] / "ablation_comparisons.csv")
    listener_vs_speaker = pairs[
        (pairs.comparison == "listener vs speaker") & (pairs.split == "test")
    ]
    assert len(listener_vs_speaker) == 2  # one per track
    assert (listener_vs_speaker.mean_diff > 0.3).all() and (listener_vs_speaker.ci_low > 0).all()
    # 3 listeners: the exact sign-flip test cannot go below 2 / 2^3
    assert listener_vs_speaker.p_value.tolist() == pytest.approx([0.25, 0.25])


def test_ablation_run_ids_are_each_tracks_best_mlflow_child(ablation):
    out, res, uri = ablation
    client = MlflowClient(tracking_uri=uri)
    df = pd.read_csv(out / "ablation.csv")
    for fs, part in df.groupby("feature_set"):
        for track in ("personalized", "generalized"):
            assert part[f"run_id_{track}"].nunique() == 1
            run = client.get_run(part[f"run_id_{track}"].iloc[0])
            assert run.info.status == "FINISHED" and run.data.params["features.set"] == fs
            # the tracks nest: the personalized track may choose a generalized configuration,
            # which keeps its own track
            own = run.data.params["track"]
            assert own in candidates(track) and run.data.tags["track"] == own
            assert (part[f"config_track_{track}"] == own).all()
            for r in part.itertuples():
                assert run.data.metrics[f"{r.split}.ccc_{track}"] == pytest.approx(
                    getattr(r, f"ccc_{track}")
                )
            same = res.table[
                (res.table["features.set"] == fs) & res.table["track"].isin(candidates(track))
            ]
            # a constant baseline is never chosen (its 0.000 can top the speaker set's models)
            same = same[~(same.filter(like="constant_predictions") == 1).any(axis=1)]
            assert run.data.metrics[f"val.ccc_{track}"] == pytest.approx(
                same[f"val.ccc_{track}"].max()
            )
        generalized = client.get_run(part.run_id_generalized.iloc[0])
        test = part.set_index("split").loc["test"]
        assert generalized.data.metrics["test_unseen.ccc_generalized"] == pytest.approx(
            test.ccc_unseen_listener
        )
    # the ablation's parent carries the table
    parents = client.search_runs([res.experiment_id], "tags.ablation = 'true'")
    assert len(parents) == 1
    names = {a.path for a in client.list_artifacts(parents[0].info.run_id, "ablation")}
    assert names == {
        "ablation/ablation.csv",
        "ablation/ablation_comparisons.csv",
        "ablation/ablation.md",
        "ablation/ablation.png",
        "ablation/ablation_unseen.csv",  # empty here: unseen_listener true is not nested
    }
    table = df.set_index(["feature_set", "split"])
    for track in ("personalized", "generalized"):
        assert parents[0].data.metrics[f"ablation.listener.test.ccc_{track}"] == pytest.approx(
            table.loc[("listener", "test"), f"ccc_{track}"]
        )


def test_ablation_markdown_handles_a_set_without_results():
    def row(fs, split, value, run):
        d = dict.fromkeys(COLUMNS, np.nan)
        d.update(
            feature_set=fs,
            split=split,
            ccc_personalized=value,
            ccc_generalized=value,
            run_id_personalized=run,
            run_id_generalized=run,
            label_personalized="ridge",
            label_generalized="ridge",
        )
        return d

    df = pd.DataFrame(
        [
            row("listener", "val", 0.4, "abcdef0123"),
            row("listener", "test", 0.2, "abcdef0123"),
            row("speaker", "val", np.nan, ""),
            row("speaker", "test", np.nan, ""),
        ]
    )
    md = ablation_markdown(df)
    speaker = next(line for line in md.splitlines() if line.startswith("| speaker |"))
    assert speaker.count("n/a") == 6
    # the chosen configurations: one line per track of the set that has runs, none for the other
    chosen = md.split("## Chosen configurations")[1].split("## Reference")[0].strip().splitlines()
    assert chosen == [
        f"- **listener**, {track}: ridge (run `abcdef0123`)"
        for track in ("personalized", "generalized")
    ]
    # a generalized configuration chosen by the personalized track (they nest) says so
    nested = df.assign(
        config_track_personalized="generalized", config_track_generalized="generalized"
    )
    chosen = ablation_markdown(nested).split("## Chosen configurations")[1].splitlines()
    assert (
        "- **listener**, personalized: ridge (run `abcdef0123`, a generalized configuration)"
        in chosen
    )
    assert "- **listener**, generalized: ridge (run `abcdef0123`)" in chosen


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
        [
            {
                "session": s,
                "listener": int(s.split("_")[1]),
                "story": int(s.split("_")[3]),
                "split": "val" if s.endswith("1") else "test",
                "ccc": rng.uniform(-0.2, 0.8),
            }
            for s in sessions
        ]
    )
    assert_real_png(plot_predictions(preds, truth, scores, tmp_path / "p.png", title="t"))
    assert_real_png(plot_listener_scores(scores, tmp_path / "l.png"))
    table = pd.DataFrame(
        [
            {
                "feature_set": fs,
                "split": sp,
                "ccc_personalized": v,
                "ccc_generalized": v / 2,
                "run_id": "x",
                "ccc_personalized_ci_low": v - 0.1,
                "ccc_personalized_ci_high": v + 0.1,
                "ccc_unseen_listener": v / 3,
                "chance_personalized_q95": 0.05,
                "chance_generalized_q95": 0.06,
            }
            for fs, v in (("speaker", 0.05), ("listener", 0.4), ("both", 0.35))
            for sp in ("loso", "test")
        ]
    )
    assert_real_png(plot_ablation(table, tmp_path / "a.png", reference={"speaker": (0.11, 0.13)}))
    # a single session still gives one panel
    one = scores.iloc[:1]
    assert_real_png(plot_predictions(preds, truth, one, tmp_path / "one.png"), min_side=150)


def test_ablate_under_loso_reports_loso_and_test(planted_store, tracking_dir, tmp_path):
    from experiments.config.loading import from_dict
    from experiments.studies.ablation import ablate

    cfg = from_dict(
        config_dict(
            tracking_dir,
            "ablation-loso",
            protocol="loso",
            models=[{"name": "ridge", "alpha": [10]}],
            personalization=["global"],
            postprocess={"smooth_s": [0], "rescale": ["none"]},
            unseen_listener={"selection": "chosen"},
        )
    )
    df, sweep = ablate(
        cfg, store=planted_store, out_dir=tmp_path / "reports", options=SweepOptions(progress=False)
    )
    assert sweep.selection_metrics == {
        "personalized": "loso.ccc_personalized",
        "generalized": "loso.ccc_generalized",
    }
    # global models without per-listener rescaling: both tracks choose among them (they nest),
    # and choose the same configuration on a complete table: the grid's run for the
    # personalized track, its unseen-listener twin for the generalized track
    assert sweep.selection_metric == "loso.ccc_personalized"
    runs = sweep.table.set_index("run_id")
    pers, gen = (runs.loc[sweep.best_run_ids[t]] for t in ("personalized", "generalized"))
    assert gen[UNSEEN_OF_TAG] == pers[CONFIG_HASH_TAG] and pd.isna(pers[UNSEEN_OF_TAG])
    # the baseline is added; each set's chosen generalized configuration runs again on unseen listeners
    grid = sweep.table[sweep.table.unseen_of.isna()]
    assert (
        sorted(grid["model.name"]) == ["dummy", "ridge", "ridge"]
        and sweep.table.unseen_of.notna().sum() == 2
    )
    csv = pd.read_csv(tmp_path / "reports" / "ablation.csv").set_index(["feature_set", "split"])
    assert sorted(csv.index) == sorted(
        (fs, sp) for fs in ("speaker", "listener") for sp in ("loso", "test")
    )
    assert (
        csv.loc[("listener", "loso"), "ccc_generalized"]
        > csv.loc[("speaker", "loso"), "ccc_generalized"] + 0.3
    )
    for r in csv.itertuples():
        assert (
            runs.loc[r.run_id_generalized, UNSEEN_OF_TAG]
            == runs.loc[r.run_id_personalized, CONFIG_HASH_TAG]
        )
    assert (csv.config_track_personalized == "generalized").all()
    assert csv.xs("loso", level="split").filter(like="_ci_").isna().all().all()
    # under LOSO the unseen-listener protocol scores the test stories
    assert csv.ccc_unseen_listener.notna().tolist() == [False, True, False, True]
    md = (tmp_path / "reports" / "ablation.md").read_text()
    assert "loso (selection) personalized" in md
    # both tracks chose the same configuration: nothing to compare between them
    pairs = pd.read_csv(tmp_path / "reports" / "ablation_comparisons.csv")
    assert not pairs.comparison.str.startswith("personalized vs generalized").any()


def test_ablate_two_targets_reports_each_and_their_mean(tracking_dir, tmp_path):
    from experiments.tracking.tracker import resolve_tracking_uri
    from tests.experiments.helpers import build_store

    store = tmp_path / "store"
    build_store(store, second_target="arousal_self")
    d = config_dict(
        tracking_dir,
        "ablation-targets",
        target=["valence_self", "arousal_self"],
        models=[{"name": "ridge", "alpha": [10]}],
        personalization=["global"],
        postprocess={"smooth_s": [0], "rescale": ["none"]},
    )
    path = tmp_path / "targets.yaml"
    path.write_text(yaml.safe_dump(d))
    out = tmp_path / "reports"
    code = main(["ablate", "--config", str(path), "--store", str(store), "--out", str(out)])
    assert code == 0
    table = pd.read_csv(out / "ablation.csv").set_index(["target", "feature_set", "split"])
    for target in ("valence_self", "arousal_self"):  # each target's own report, as one target's
        own = pd.read_csv(out / target / "ablation.csv").set_index(["feature_set", "split"])
        for (fs, split), r in own.iterrows():
            assert table.loc[(target, fs, split), "ccc_generalized"] == pytest.approx(
                r.ccc_generalized
            )
    # planted: the valence follows the listener, the second target the speaker
    v, a = table.loc["valence_self"], table.loc["arousal_self"]
    assert (
        v.loc[("listener", "test"), "ccc_generalized"]
        > v.loc[("speaker", "test"), "ccc_generalized"] + 0.3
    )
    assert (
        a.loc[("speaker", "test"), "ccc_generalized"]
        > a.loc[("listener", "test"), "ccc_generalized"] + 0.3
    )
    for fs in ("listener", "speaker"):
        for split in ("val", "test"):
            for name in ("ccc_personalized", "ccc_generalized"):
                mean = (v.loc[(fs, split), name] + a.loc[(fs, split), name]) / 2
                assert table.loc[("combined", fs, split), name] == pytest.approx(mean)
    assert "combined" in (out / "ablation.md").read_text()
    client = MlflowClient(tracking_uri=resolve_tracking_uri(tracking_dir))
    experiment = client.get_experiment_by_name("ablation-targets")
    parents = client.search_runs([experiment.experiment_id], "tags.ablation = 'true'")
    assert sorted(p.data.params["target"] for p in parents) == ["arousal_self", "valence_self"]
    for p in parents:
        assert p.data.metrics["ablation.combined.listener.test.ccc_generalized"] == pytest.approx(
            table.loc[("combined", "listener", "test"), "ccc_generalized"]
        )


# ------------------------------------------------------------------ the steps of ablate, alone
def _sweep(table: pd.DataFrame) -> SweepResult:
    return SweepResult(table, "parent", None, "0", "val.ccc_personalized")


def _runs() -> pd.DataFrame:
    """A swept table: listener's per-listener run a beats its global run b on validation; the
    speaker has one global run c; b and c were scored on unseen listeners."""
    nan = np.nan
    return pd.DataFrame(
        {
            "run_id": ["a", "b", "c"],
            "status": "done",
            "label": ["la", "lb", "lc"],
            "features.set": ["listener", "listener", "speaker"],
            "track": ["personalized", "generalized", "generalized"],
            "causal": ["true", "false", "true"],
            "val.ccc_personalized": [0.6, 0.5, 0.1],
            "val.ccc_generalized": [0.55, 0.52, 0.12],
            "val.n_listeners": 6.0,
            "test.ccc_personalized": [0.4, 0.35, 0.05],
            "test.ccc_personalized.ci_low": [0.3, 0.2, -0.1],
            "test.ccc_personalized.ci_high": [0.5, 0.45, 0.2],
            "test.ccc_personalized.chance_q95": [0.1, 0.1, 0.2],
            "test.ccc_generalized": [0.38, 0.36, 0.04],
            "test.ccc_generalized.ci_low": [0.3, 0.25, -0.1],
            "test.ccc_generalized.ci_high": [0.45, 0.42, 0.2],
            "test.n_listeners": 6.0,
            "test_unseen.ccc_generalized": [nan, 0.3, 0.02],
            "test_unseen.ccc_generalized.ci_low": [nan, 0.2, -0.1],
            "test_unseen.ccc_generalized.ci_high": [nan, 0.4, 0.1],
            # nested selection: each left-out listener's choice among the generalized runs
            "val_without_listener_1.ccc_generalized": [nan, 0.5, 0.1],
            "val_without_listener_2.ccc_generalized": [nan, 0.4, 0.2],
            "test_unseen.ccc_listener_1": [nan, 0.6, 0.1],
            "test_unseen.ccc_listener_2": [nan, 0.2, 0.3],
        }
    )


def test_the_grid_step_refuses_an_unknown_backend():
    cfg = from_dict(config_dict("unused"))
    with pytest.raises(ValueError, match="unknown backend 'slurm'; valid: serial, processes, dask"):
        sweep_feature_sets(cfg, "unused", SweepOptions(backend="slurm"))


def test_the_selection_step_takes_each_tracks_best_run_of_each_set():
    df = ablation_table(_sweep(_runs()), ["listener", "speaker", "both"]).set_index(
        ["feature_set", "split"]
    )
    assert list(df.index) == [
        (fs, s) for fs in ("listener", "speaker", "both") for s in ("val", "test")
    ]
    listener, speaker = df.loc[("listener", "test")], df.loc[("speaker", "test")]
    assert (listener.run_id_personalized, listener.run_id_generalized) == ("a", "b")
    # the tracks nest: the speaker's only (global) run is both tracks' choice, and says so
    assert (speaker.run_id_personalized, speaker.config_track_personalized) == ("c", "generalized")
    assert listener.ccc_personalized == 0.4 and listener.ccc_generalized_ci_low == 0.25
    assert listener.ccc_unseen_listener == 0.3 and listener.causal_generalized == "false"
    assert (listener.label_personalized, listener.chance_personalized_q95) == ("la", 0.1)
    val = df.xs("val", level="split")
    assert (val.split_role == "selection").all() and val.filter(like="_ci_").isna().all().all()
    assert val.loc["listener", "ccc_personalized"] == 0.6
    both = df.loc[("both", "test")]
    assert both.run_id_personalized == "" and np.isnan(both.ccc_generalized)


def test_the_unseen_listener_step_follows_the_selection():
    cfg = from_dict(config_dict("unused"))
    table = _runs()
    sets = ["listener", "speaker"]
    chosen, nested_rows = unseen_listeners(
        ablation_table(_sweep(table), sets),
        table,
        replace(cfg, unseen_listener=True, unseen_selection="chosen"),
    )
    test = chosen.set_index(["feature_set", "split"]).xs("test", level="split")
    assert test.ccc_unseen_listener.tolist() == [0.3, 0.02] and nested_rows.empty
    assert (test.unseen_selection == "chosen").all()
    nested, rows = unseen_listeners(
        ablation_table(_sweep(table), sets), table, replace(cfg, unseen_listener=True)
    )
    # each left-out listener's own choice: listener 1 b (0.5 > nothing else), 2 b; speaker c
    by = nested.set_index(["feature_set", "split"])
    assert by.loc[("listener", "test"), "ccc_unseen_listener"] == pytest.approx((0.6 + 0.2) / 2)
    assert by.loc[("speaker", "test"), "ccc_unseen_listener"] == pytest.approx((0.1 + 0.3) / 2)
    assert by.filter(like="ccc_unseen_listener_ci").isna().all().all()
    assert by.xs("val", level="split").unseen_selection.tolist() == ["", ""]
    assert sorted(zip(rows.feature_set, rows.listener, strict=True)) == [
        ("listener", 1),
        ("listener", 2),
        ("speaker", 1),
        ("speaker", 2),
    ]


def test_the_comparisons_step_tests_on_test_only_within_one_holm_family():
    df = ablation_table(_sweep(_runs()), ["listener", "speaker"])
    rng = np.random.default_rng(0)

    def scores(base: float, noise: float) -> pd.DataFrame:
        rows = [(L, s, split) for L in range(1, 7) for s, split in ((1, "val"), (3, "test"))]
        frame = pd.DataFrame(rows, columns=["listener", "story", "split"])
        return frame.assign(ccc=base + rng.normal(0, noise, len(frame)))

    runs = {"a": scores(0.6, 0.05), "b": scores(0.5, 0.05), "c": scores(0.05, 0.05)}
    calls: list[str] = []

    def scores_of(run: str) -> pd.DataFrame | None:
        calls.append(run)
        return runs.get(run)

    pairs = comparisons(df, scores_of)
    assert list(pairs.columns) == COMPARISON_COLUMNS and set(pairs.split) == {"test"}
    # the speaker's tracks chose one run: nothing to compare; no `both` set: no both vs listener
    assert pairs.comparison.tolist() == [
        "listener vs speaker",
        "listener vs speaker",
        "personalized vs generalized (listener)",
    ]
    assert (pairs.mean_diff[:2] > 0.4).all() and (pairs.n_listeners == 6).all()
    assert np.allclose(pairs.p_holm, holm(pairs.p_value))


def test_the_metrics_step_names_each_number_and_leaves_nan_out():
    df = ablation_table(_sweep(_runs()), ["listener", "speaker"])
    df.loc[len(df)] = df.iloc[1].copy()
    df.loc[len(df) - 1, "feature_set"] = "late fusion"
    pairs = pd.DataFrame(
        [{"comparison": "personalized vs generalized (late fusion)", "track": "both"}]
    ).assign(split="test", mean_diff=0.1, p_value=0.5, p_holm=np.nan)
    metrics = ablation_metrics(df, pairs, {"explain": 2.5})
    assert metrics["ablation.late_fusion.test.ccc_personalized"] == 0.4
    assert metrics["ablation.listener.test.ccc_generalized_ci_high"] == 0.42
    assert metrics["ablation.listener.test.ccc_unseen_listener_ci_high"] == 0.4
    key = "ablation.compare.personalized_vs_generalized_late_fusion.both.test"
    assert metrics[f"{key}.p_value"] == 0.5 and f"{key}.p_holm" not in metrics
    assert "ablation.listener.val.ccc_personalized_ci_low" not in metrics  # NaN: not logged
    assert metrics["ablation.explain_seconds"] == 2.5


def test_the_report_step_puts_the_importance_section_before_the_reference():
    df = ablation_table(_sweep(_runs()), ["listener", "speaker"])
    md = ablation_markdown(df, importance=["", "## What the chosen configurations use", "", "x"])
    chosen = md.index("## Chosen configurations")
    importance = md.index("## What the chosen configurations use")
    assert chosen < importance < md.index("## Reference")
    assert "## What the chosen" not in ablation_markdown(df)
