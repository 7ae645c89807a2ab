"""Speaker vs. listener vs. both, on both challenge tracks: the OMG-Empathy paper's Table IV
for this project's features.

The config's grid is swept once for every feature set (one MLflow parent run covering all
of them). For each feature set and each track (:mod:`experiments.config.tracks`) the best
configuration is chosen on validation (or LOSO) under the track's own averaging, and
reported once on validation and test:

* ``ccc_personalized``: the personalized track's choice (it may use who is listening),
  averaged per listener;
* ``ccc_generalized``: the generalized track's choice (it does not know who is listening),
  averaged per story;
* ``ccc_unseen_listener``: on test, the generalized track scored on listeners left out of
  training: with ``unseen_listener`` ``nested`` (the default) the mean over listeners of each
  one's configuration chosen without them (``reports/ablation_unseen.csv``), else the
  configuration named in the config (``fixed``) or, only when written, the one chosen with
  every listener (``chosen``, marked in ``ablation.md`` and ``ablation.png``), refitted without
  each listener; ``ablation.md`` names the selection, ``ablation.csv`` too (``unseen_selection``);

each with the chance level (:mod:`experiments.evaluation.uncertainty`) and, on test, a 95 %
skewness-corrected t interval over listeners (the split's stories fixed). The selection split's numbers are
labelled as such (``split_role``) and carry no interval: each is the maximum over the grid.
The personalized track chooses among every configuration, the generalized track among those
that do not know who is listening (:func:`experiments.config.tracks.candidates`); ``config_track_*``
names the track of the chosen configuration's model. Paired comparisons (listener vs.
speaker, both vs. listener, personalized vs. generalized track) are made **on test only**:
the mean over listeners of each listener's mean difference, its interval, a sign-flip
p-value with listeners as the unit, the smallest p that test can give with that many
listeners, and Holm's adjustment over the whole family of comparisons.
With ``fusion: {method: late, members: [...]}`` in the config the table gains a
``late fusion`` row (:mod:`experiments.studies.fusion`): each track's member choices blended by
weights fitted on the training stories' out-of-fold predictions, compared with early fusion
(``both``) and with each member in the same Holm family. The paper's published
numbers come as a separate reference: they were measured on the real corpus and are not
comparable with a demo or synthetic store.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from featurestore.storage.roles import in_corpus_words, roles_note

from ..config.fusion import FUSED_SET
from ..config.schema import ExperimentConfig
from ..config.store_check import corpus_roles
from ..evaluation import markdown
from ..evaluation.fit_cache import FitCache
from ..evaluation.plots import plot_ablation
from ..evaluation.uncertainty import holm, paired_comparison
from ..executors.memory import release_free_memory
from ..tracking.summary import best_per_track
from ..tracking.tracker import Tracker, resolve_tracking_uri
from .ablation_report import PAPER_TEST_CCC, SELECTION_SPLITS, ablation_markdown, cell
from .explain import Explanation, explain_choices, importance_markdown
from .fusion import fusion_rows
from .parent_run import SweepResult
from .sweep import run_sweep
from .unseen import nested_unseen, nested_unseen_mean

#: the contract columns first (DESIGN.md), then intervals, unseen listeners and chance
COLUMNS = [
    "feature_set",
    "split",
    "ccc_personalized",
    "ccc_generalized",
    "run_id_personalized",
    "run_id_generalized",
    "run_id",  # alias of run_id_personalized, kept for one release
    "ccc_personalized_ci_low",
    "ccc_personalized_ci_high",
    "ccc_generalized_ci_low",
    "ccc_generalized_ci_high",
    "ccc_unseen_listener",
    "ccc_unseen_listener_ci_low",
    "ccc_unseen_listener_ci_high",
    # how the unseen-listener score's configuration was chosen (nested, fixed, chosen), where
    # there is one: `chosen` read the left-out listener's validation labels
    "unseen_selection",
    "chance_personalized_q95",
    "chance_generalized_q95",
    "split_role",
    "n_listeners",
    "config_track_personalized",
    "config_track_generalized",
    "causal_personalized",  # true/false: the choice reads no frame after the one it predicts
    "causal_generalized",
]
#: splits that chose the configurations: reported without intervals
COMPARISON_COLUMNS = [
    "comparison",
    "track",
    "split",
    "mean_diff",
    "ci_low",
    "ci_high",
    "p_value",
    "p_holm",
    "p_min",
    "n_sessions",
    "n_listeners",
    "run_id_a",
    "run_id_b",
]
#: (name, feature set a, feature set b) of the paired comparisons between feature sets
SET_COMPARISONS = (
    ("listener vs speaker", "listener", "speaker"),
    ("both vs listener", "both", "listener"),
)


def _get(row: pd.Series | None, name: str) -> float:
    if row is None or name not in row or pd.isna(row[name]):
        return float("nan")
    return float(row[name])


def ablation_table(sweep: SweepResult, feature_sets: list[str]) -> pd.DataFrame:
    """Rows (feature set, split): each track's best configuration of the set, chosen on validation
    (or LOSO) under the track's own averaging (the personalized track among every configuration),
    with the unseen-listener score, chance, and intervals on test only (the selection split's
    numbers are maxima over the grid: ``split_role`` says ``selection`` and the intervals are NaN)."""
    table = sweep.table
    protocol = sweep.selection_metric.split(".", 1)[0]  # the selection split: val, loso or cv
    splits = (protocol, "test")
    rows = []
    for fs in feature_sets:
        part = (
            table[table["features.set"] == fs]
            if not table.empty and "features.set" in table
            else table.iloc[0:0]
        )
        best = best_per_track(part, protocol)
        pers, gen = best.get("personalized"), best.get("generalized")
        for split in splits:
            row = {
                "feature_set": fs,
                "split": split,
                "ccc_personalized": _get(pers, f"{split}.ccc_personalized"),
                "ccc_generalized": _get(gen, f"{split}.ccc_generalized"),
                "run_id_personalized": "" if pers is None else str(pers.run_id),
                "run_id_generalized": "" if gen is None else str(gen.run_id),
            }
            row["run_id"] = row["run_id_personalized"]
            selection = split in SELECTION_SPLITS
            row["split_role"] = "selection" if selection else "held-out"
            row["n_listeners"] = _get(pers if pers is not None else gen, f"{split}.n_listeners")
            for track, chosen in (("personalized", pers), ("generalized", gen)):
                for end in ("ci_low", "ci_high"):
                    row[f"ccc_{track}_{end}"] = (
                        float("nan") if selection else _get(chosen, f"{split}.ccc_{track}.{end}")
                    )
                row[f"chance_{track}_q95"] = _get(chosen, f"{split}.ccc_{track}.chance_q95")
                row[f"config_track_{track}"] = (
                    "" if chosen is None else str(chosen.get("track", track))
                )
                row[f"causal_{track}"] = "" if chosen is None else str(chosen.get("causal", ""))
            unseen = f"{split}_unseen.ccc_generalized"
            row["ccc_unseen_listener"] = _get(gen, unseen)
            for end in ("ci_low", "ci_high"):
                row[f"ccc_unseen_listener_{end}"] = (
                    float("nan") if selection else _get(gen, f"{unseen}.{end}")
                )
            row["label_personalized"] = "" if pers is None else str(pers.label)
            row["label_generalized"] = "" if gen is None else str(gen.label)
            rows.append(row)
    return pd.DataFrame(rows, columns=[*COLUMNS, "label_personalized", "label_generalized"])


def run_scores(sweep: SweepResult, run_id: str, tracking_uri: str | None) -> pd.DataFrame | None:
    """Per-session CCC of a child run: from this sweep, else the run's ``ccc_matrix.csv`` artifact
    (None when the run logged no artifacts)."""
    if not run_id:
        return None
    if run_id in sweep.scores:
        return sweep.scores[run_id]
    from mlflow import MlflowClient  # heavy: loaded only when an earlier sweep's run is read back

    client = MlflowClient(tracking_uri=resolve_tracking_uri(tracking_uri))
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = client.download_artifacts(run_id, "ccc_matrix.csv", tmp)
        except Exception:  # noqa: BLE001 - a run logged without artifacts has no matrix
            return None
        return pd.read_csv(path)


def fusion_comparisons(members: list[str], sets: list[str]) -> tuple[tuple[str, str, str], ...]:
    """The paired comparisons of the late-fusion row: against early fusion (``both``, when swept)
    and against each member.

    >>> fusion_comparisons(["speaker", "listener"], ["speaker", "listener", "both"])[0]
    ('late fusion vs both', 'late fusion', 'both')
    """
    early = [("late fusion vs both", FUSED_SET, "both")] if "both" in sets else []
    return tuple(early + [(f"late fusion vs {m}", FUSED_SET, m) for m in members])


def comparisons(
    sweep: SweepResult,
    df: pd.DataFrame,
    tracking_uri: str | None = None,
    seed: int = 0,
    extra: tuple[tuple[str, str, str], ...] = (),
) -> pd.DataFrame:
    """Paired comparisons of the chosen configurations on the test split (see the module docstring).

    Only the held-out split: on the selection split each side is a maximum over the grid, and a
    test there would double dip. ``p_holm`` is Holm's adjustment over every comparison of the
    table (the family); ``p_min`` the smallest p the sign-flip test can give with
    ``n_listeners`` listeners. A positive ``mean_diff`` favours the first named
    (``listener vs speaker``: the listener set). When both tracks chose the same configuration
    (the same run, or a run and its unseen-listener twin: the same scores) the comparison is
    left out: there is nothing to test. ``extra``: more (name, feature set a, feature set b)
    comparisons beside :data:`SET_COMPARISONS` (the late-fusion row's, :func:`fusion_comparisons`).
    """
    out = []
    cache: dict[str, pd.DataFrame | None] = {}

    def scores(run_id: str, split: str) -> pd.DataFrame | None:
        if run_id not in cache:
            cache[run_id] = run_scores(sweep, run_id, tracking_uri)
        s = cache[run_id]
        return None if s is None else s[s.split == split]

    def add(name: str, track: str, split: str, run_a: str, run_b: str) -> None:
        if run_a == run_b:
            return
        a, b = scores(run_a, split), scores(run_b, split)
        if a is None or b is None or a.empty or b.empty:
            return
        shared = a.merge(b, on=["listener", "story"])
        if len(shared) and np.array_equal(shared.ccc_x, shared.ccc_y):
            return  # the same configuration (a run and its unseen-listener twin): nothing to test
        try:
            r = paired_comparison(a, b, seed=seed)
        except ValueError:  # no shared session
            return
        out.append(
            {
                "comparison": name,
                "track": track,
                "split": split,
                **r,
                "run_id_a": run_a,
                "run_id_b": run_b,
            }
        )

    by = df.set_index(["feature_set", "split"])
    for split in [s for s in dict.fromkeys(df.split) if s not in SELECTION_SPLITS]:
        for track in ("personalized", "generalized"):
            for name, fa, fb in (*SET_COMPARISONS, *extra):
                if (fa, split) in by.index and (fb, split) in by.index:
                    add(
                        name,
                        track,
                        split,
                        by.loc[(fa, split), f"run_id_{track}"],
                        by.loc[(fb, split), f"run_id_{track}"],
                    )
        for fs in dict.fromkeys(df.feature_set):
            row = by.loc[(fs, split)]
            add(
                f"personalized vs generalized ({fs})",
                "both",
                split,
                row.run_id_personalized,
                row.run_id_generalized,
            )
    table = pd.DataFrame(out, columns=COMPARISON_COLUMNS)
    table["p_holm"] = holm(table["p_value"].to_numpy(dtype=float)) if len(table) else []
    return table


def ablate(
    cfg: ExperimentConfig,
    store="features",
    tracking_uri: str | None = None,
    jobs: int | None = None,
    out_dir: str | Path = "reports",
    progress: bool = True,
    executor: str | None = None,
    scheduler: str | None = None,
    resume: bool = True,
) -> tuple[pd.DataFrame, SweepResult]:
    """Sweep every feature set of ``cfg``, write ``reports/ablation.{md,csv,png}`` and
    ``reports/ablation_comparisons.csv``, and log them to MLflow; for each chosen configuration,
    ``reports/ccc_per_session_<feature_set>_<track>.png`` and, with ``cfg.importance``,
    ``reports/importance_<feature_set>_<track>.{csv,png}`` (:mod:`experiments.studies.explain`;
    the parent run's metric ``ablation.explain_seconds`` is what they took).
    With several targets, :func:`ablate_targets`.

    ``executor`` and ``scheduler``: where the configurations run
    (:func:`experiments.studies.sweep.run_sweep`; default: the config's ``executor``).
    """
    if len(cfg.all_targets()) > 1:
        return ablate_targets(
            cfg, store, tracking_uri, jobs, out_dir, progress, executor, scheduler, resume
        )
    sets = list(cfg.feature_set) if cfg.feature_set else list(cfg.feature_sets)
    cfg = replace(cfg, feature_set=sets)
    sweep = run_sweep(
        cfg,
        store=store,
        executor=executor,
        scheduler=scheduler,
        tracking_uri=tracking_uri,
        jobs=jobs,
        progress=progress,
        run_name="ablation",
        resume=resume,
    )
    df = ablation_table(sweep, sets)
    is_nested = cfg.unseen_listener and cfg.unseen_selection == "nested"
    nested = nested_unseen(sweep.table if is_nested else sweep.table.iloc[0:0], cfg.protocol)
    if is_nested:
        # the unseen-listener column: each left-out listener's configuration chosen without them
        means = nested_unseen_mean(nested)
        test = (df.split == "test") & df.feature_set.isin(list(means))
        # as floats: mapping no row gives an empty column of the feature sets' (string) dtype
        df.loc[test, "ccc_unseen_listener"] = df.loc[test, "feature_set"].map(means).astype(float)
        df.loc[df.split != "test", "ccc_unseen_listener"] = np.nan
        df.loc[:, ["ccc_unseen_listener_ci_low", "ccc_unseen_listener_ci_high"]] = np.nan
    # the members' fits kept for the importance of the same choices (explain_choices)
    cache = FitCache()
    t0 = time.perf_counter()
    fused, _ = fusion_rows(cfg, sweep, df, store, tracking_uri, cache)
    fusion_seconds = time.perf_counter() - t0
    release_free_memory()  # the members' frames and features: GBs the heap would keep
    if len(fused):
        df = pd.concat([df, fused], ignore_index=True)
    df["unseen_selection"] = np.where(
        df["ccc_unseen_listener"].notna() & cfg.unseen_listener, cfg.unseen_selection, ""
    )
    extra = fusion_comparisons(cfg.fusion.members, sets) if len(fused) else ()
    pairs = comparisons(sweep, df, tracking_uri or cfg.tracking.uri, seed=cfg.seed, extra=extra)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    df[COLUMNS].to_csv(out / "ablation.csv", index=False)
    pairs.to_csv(out / "ablation_comparisons.csv", index=False)
    nested.to_csv(out / "ablation_unseen.csv", index=False)
    tracker = Tracker(tracking_uri or cfg.tracking.uri, cfg.tracking.experiment)
    t0 = time.perf_counter()
    # each chosen configuration's CCC per listener x story, and its importance if configured
    explained = explain_choices(
        cfg,
        df,
        lambda run: run_scores(sweep, run, tracking_uri or cfg.tracking.uri),
        store,
        tracker,
        out,
        cache,
    )
    cache.clear()
    explain_seconds = time.perf_counter() - t0
    md = ablation_markdown(
        df,
        title=f"Speaker / listener / both ({cfg.target}, protocol {cfg.protocol})",
        pairs=pairs,
        unseen_selection=cfg.unseen_selection,
    )
    # before the published reference, which closes the report
    section = importance_markdown([e for e in explained if isinstance(e, Explanation)])
    md = md.replace("\n## Reference", section + "\n## Reference", 1)
    layout, _ = corpus_roles(store)  # a manifest corpus's report in its words (person, group)
    md = roles_note(layout) + in_corpus_words(md, layout, keep=list(cfg.feature_sets))
    (out / "ablation.md").write_text(md)
    plot_ablation(df, out / "ablation.png", reference=PAPER_TEST_CCC)
    with tempfile.TemporaryDirectory() as tmp:
        for name in (
            "ablation.csv",
            "ablation_comparisons.csv",
            "ablation.md",
            "ablation.png",
            "ablation_unseen.csv",
        ):
            (Path(tmp) / name).write_bytes((out / name).read_bytes())
        tracker.log_artifacts(sweep.parent_run_id, tmp, "ablation")
    metrics = {}
    for r in df.to_dict("records"):
        for name in ("ccc_personalized", "ccc_generalized", "ccc_unseen_listener"):
            for suffix in ("", "_ci_low", "_ci_high"):
                v = r[name + suffix]
                if pd.notna(v):
                    fs = str(r["feature_set"]).replace(" ", "_")
                    metrics[f"ablation.{fs}.{r['split']}.{name}{suffix}"] = float(v)
    for r in pairs.to_dict("records"):
        comparison = r["comparison"].replace(" ", "_").replace("(", "").replace(")", "")
        key = f"ablation.compare.{comparison}.{r['track']}.{r['split']}"
        metrics[f"{key}.mean_diff"], metrics[f"{key}.p_value"] = (
            float(r["mean_diff"]),
            float(r["p_value"]),
        )
        metrics[f"{key}.p_holm"] = float(r["p_holm"])
    if len(fused):  # what the late-fusion row cost: loading, windowing, member refits, blends
        metrics["ablation.late_fusion_seconds"] = fusion_seconds
    metrics["ablation.explain_seconds"] = explain_seconds
    tracker.log(
        sweep.parent_run_id,
        metrics={k: v for k, v in metrics.items() if np.isfinite(v)},
        tags={"ablation": "true"},
    )
    return df, sweep


#: the columns of ``ablation.csv`` for several targets (:func:`ablate_targets`)
TARGET_COLUMNS = [
    "target",
    "feature_set",
    "split",
    "split_role",
    "ccc_personalized",
    "ccc_generalized",
    "run_id_personalized",
    "run_id_generalized",
]


def combined_ablation(per_target: pd.DataFrame, targets: list[str]) -> pd.DataFrame:
    """Rows ``target`` ``combined``: per feature set and split, the mean over ``targets`` of
    each target's chosen configuration's CCC per track (NaN unless every target has one)."""
    rows = []
    for (fs, split), part in per_target.groupby(["feature_set", "split"], sort=False):
        row = {"target": "combined", "feature_set": fs, "split": split}
        row["split_role"] = str(part["split_role"].iloc[0])
        for name in ("ccc_personalized", "ccc_generalized"):
            values = part.set_index("target")[name].reindex(targets)
            row[name] = float(values.mean()) if values.notna().all() else float("nan")
        row["run_id_personalized"] = row["run_id_generalized"] = ""
        rows.append(row)
    return pd.DataFrame(rows, columns=TARGET_COLUMNS)


def ablate_targets(
    cfg: ExperimentConfig,
    store: Any = "features",
    tracking_uri: str | None = None,
    jobs: int | None = None,
    out_dir: str | Path = "reports",
    progress: bool = True,
    executor: str | None = None,
    scheduler: str | None = None,
    resume: bool = True,
) -> tuple[pd.DataFrame, SweepResult]:
    """:func:`ablate` for a config of several targets: the ablation of each target on its own
    (a parent run each; reports in ``out_dir/<target>/``), then ``out_dir/ablation.{md,csv}``:
    every target's rows (column ``target``) and the combined rows (``target`` ``combined``: the
    mean over targets of each target's chosen configuration's CCC, per feature set, split and
    track), logged to each target's parent run (artifacts under ``ablation``, metrics
    ``ablation.combined.<feature set>.<split>.ccc_<track>``).

    Returns the table of every target's and the combined rows, and the first target's sweep.
    """
    targets = cfg.all_targets()
    out = Path(out_dir)
    parts, sweeps = [], []
    for target in targets:
        df, sweep = ablate(
            cfg.for_target(target),
            store=store,
            tracking_uri=tracking_uri,
            jobs=jobs,
            out_dir=out / target,
            progress=progress,
            executor=executor,
            scheduler=scheduler,
            resume=resume,
        )
        parts.append(df.assign(target=target))
        sweeps.append(sweep)
    per_target = pd.concat(parts, ignore_index=True)[TARGET_COLUMNS]
    table = pd.concat([per_target, combined_ablation(per_target, targets)], ignore_index=True)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "ablation.csv", index=False)
    cells = [
        [
            str(r.target),
            str(r.feature_set),
            str(r.split),
            cell(r.ccc_personalized),
            cell(r.ccc_generalized),
        ]
        for r in table.itertuples()
    ]
    md = [
        f"# Speaker / listener / both, several targets (protocol {cfg.protocol})",
        "",
        f"Targets: {', '.join(f'`{t}`' for t in targets)}; each target's full report is in its own "
        "folder (`<target>/ablation.md`). Each track's configuration is chosen per target and feature "
        "set on that target's selection split; `combined`: the mean over targets of those choices' CCC.",
        "",
        *markdown.table(["target", "feature set", "split", "CCC pers.", "CCC gen."], cells),
        "",
    ]
    (out / "ablation.md").write_text("\n".join(md))
    metrics = {
        f"ablation.combined.{str(r['feature_set']).replace(' ', '_')}.{r['split']}.{name}": float(
            r[name]
        )
        for r in table[table["target"] == "combined"].to_dict("records")
        for name in ("ccc_personalized", "ccc_generalized")
        if pd.notna(r[name])
    }
    tracker = Tracker(tracking_uri or cfg.tracking.uri, cfg.tracking.experiment)
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("ablation.csv", "ablation.md"):
            (Path(tmp) / f"targets_{name}").write_bytes((out / name).read_bytes())
        for sweep in sweeps:
            tracker.log_artifacts(sweep.parent_run_id, tmp, "ablation")
            tracker.log(sweep.parent_run_id, metrics=metrics, tags={"targets": ",".join(targets)})
    return table, sweeps[0]
