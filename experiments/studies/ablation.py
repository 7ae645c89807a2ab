"""Speaker vs. listener vs. both on both challenge tracks, the OMG-Empathy paper's Table IV for
this project's features: :func:`ablate`, a short sequence of steps (grid, selection, unseen
listeners, fusion, comparisons, importance, reports), each chosen and compared by the config's
``metric``. What each number means: docs/results.md, "The ablation in detail"; the columns of
its CSVs are a contract: docs/design.md#reports."""

from __future__ import annotations

import functools
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from featurestore import Store

from ..config.fusion import FUSED_SET
from ..config.metrics import DEFAULT_METRIC, MetricSpec, get_metric
from ..config.options import TRACKS
from ..config.schema import ExperimentConfig
from ..evaluation import markdown
from ..evaluation.fit_cache import FitCache
from ..evaluation.plots import plot_ablation
from ..evaluation.uncertainty import holm, paired_comparison
from ..tracking.summary import best_per_track, log_files
from ..tracking.tracker import Tracker
from .ablation_report import PAPER_TEST, SELECTION_SPLITS, ablation_markdown, importance_section
from .corpus_config import corpus_note
from .explain import Explanation, explain_choices, logged_scores
from .fusion import fusion_rows
from .parent_run import SweepOptions, SweepResult
from .sweep import run_sweep
from .unseen import nested_unseen, nested_unseen_mean


def columns(m: MetricSpec) -> list[str]:
    """The columns of ``ablation.csv`` for metric ``m``: the contract columns first
    (docs/design.md#reports; ``ccc_personalized`` for CCC, ``<metric>_personalized`` for
    another), then intervals, unseen listeners and chance."""
    unseen = m.column("unseen_listener")
    return [
        "feature_set",
        "split",
        *(m.column(t) for t in TRACKS),
        *(f"run_id_{t}" for t in TRACKS),
        *(m.column(f"{t}_ci_{end}") for t in TRACKS for end in ("low", "high")),
        unseen,
        f"{unseen}_ci_low",
        f"{unseen}_ci_high",
        # how the unseen-listener score's configuration was chosen (nested, fixed, chosen)
        "unseen_selection",
        *(f"chance_{t}_q95" for t in TRACKS),
        "split_role",
        "n_listeners",
        *(f"config_track_{t}" for t in TRACKS),
        # true/false: the choice reads no frame after the one it predicts
        *(f"causal_{t}" for t in TRACKS),
    ]


#: :func:`columns` of the default metric
COLUMNS = columns(get_metric(DEFAULT_METRIC))
#: the columns of ``ablation_comparisons.csv`` (test split only)
COMPARISON_COLUMNS = (
    "comparison track split mean_diff ci_low ci_high p_value p_holm p_min n_sessions n_listeners "
    "run_id_a run_id_b"
).split()
#: (name, feature set a, feature set b) of the paired comparisons between feature sets
SET_COMPARISONS = (
    ("listener vs speaker", "listener", "speaker"),
    ("both vs listener", "both", "listener"),
)
#: the report files of one target's ablation, logged to its parent run under ``ablation/``
REPORT_FILES = "ablation.csv ablation_comparisons.csv ablation.md ablation.png ablation_unseen.csv"


def ablate(
    cfg: ExperimentConfig,
    store: Store | str | os.PathLike = "features",
    out_dir: str | Path = "reports",
    options: SweepOptions | None = None,
) -> tuple[pd.DataFrame, SweepResult]:
    """Sweep every feature set of ``cfg`` (with ``options``) and write and log the ablation's reports into
    ``out_dir`` (docs/outputs.md); with several targets, :func:`ablate_targets`. Returns the
    table and the sweep."""
    options = options or SweepOptions()
    if len(cfg.all_targets()) > 1:
        return ablate_targets(cfg, store, out_dir, options)
    sets = list(cfg.feature_set) if cfg.feature_set else list(cfg.feature_sets)
    cfg = replace(cfg, feature_set=sets)
    uri = options.tracking_uri or cfg.tracking.uri
    sweep = sweep_feature_sets(cfg, store, options)
    m = get_metric(cfg.metric)
    df, nested = unseen_listeners(ablation_table(sweep, sets), sweep.table, cfg)
    cache = FitCache()  # the late fusion members' fits, kept for the importance of the same choices
    df, extra, seconds = with_late_fusion(cfg, sweep, df, store, uri, cache)
    tracker = Tracker(uri, cfg.tracking.experiment, cfg.tracking.artifacts)
    scores_of = run_scores(sweep, tracker)
    pairs = comparisons(df, scores_of, cfg.seed, extra, cfg.metric)
    out = write_tables(Path(out_dir), df, pairs, nested, m)
    t0 = time.perf_counter()
    explained = explain_choices(cfg, df, scores_of, store, tracker, out, cache)
    cache.clear()
    seconds["explain"] = time.perf_counter() - t0
    write_report(out, cfg, store, df, pairs, [e for e in explained if isinstance(e, Explanation)])
    files = {name: (out / name).read_bytes() for name in REPORT_FILES.split()}
    log_files(tracker, sweep.parent_run_id, files, "ablation")
    metrics = ablation_metrics(df, pairs, seconds, m.name)
    tracker.log(sweep.parent_run_id, metrics=metrics, tags={"ablation": "true"})
    return df, sweep


def sweep_feature_sets(
    cfg: ExperimentConfig, store: Store | str | os.PathLike, options: SweepOptions
) -> SweepResult:
    """The grid: one sweep (parent run ``ablation``) over every feature set of ``cfg``."""
    return run_sweep(cfg, store, replace(options, run_name="ablation"))


def _get(row: pd.Series | None, name: str) -> float:
    """``row[name]`` as a float, NaN when there is none."""
    return float("nan") if row is None or pd.isna(row.get(name, np.nan)) else float(row[name])


def ablation_table(sweep: SweepResult, feature_sets: list[str]) -> pd.DataFrame:
    """The selection: rows (feature set, split), each track's best configuration of the set by
    the sweep's metric on the selection split (:func:`~experiments.tracking.summary.best_per_track`),
    with the unseen-listener score, chance, and intervals off the selection split."""
    table, m = sweep.table, get_metric(sweep.metric)
    protocol = sweep.selection_metric.split(".", 1)[0]  # the selection split: val, loso or cv
    rows = []
    for fs in feature_sets:
        has_sets = not table.empty and "features.set" in table
        part = table[table["features.set"] == fs] if has_sets else table.iloc[0:0]
        best = best_per_track(part, protocol, m.name)
        rows += [_table_row(fs, split, best, m) for split in (protocol, "test")]
    return pd.DataFrame(rows, columns=[*columns(m), "label_personalized", "label_generalized"])


def _table_row(fs: str, split: str, best: dict[str, pd.Series], m: MetricSpec) -> dict[str, object]:
    """One row of :func:`ablation_table`: ``best``, each track's chosen run, on ``split``."""
    pers, gen = best.get("personalized"), best.get("generalized")
    selection = split in SELECTION_SPLITS
    row: dict[str, object] = {"feature_set": fs, "split": split}
    row["split_role"] = "selection" if selection else "held-out"
    row["n_listeners"] = _get(pers if pers is not None else gen, f"{split}.n_listeners")
    for track, chosen in (("personalized", pers), ("generalized", gen)):
        name = m.key(split, track)
        row[m.column(track)] = _get(chosen, name)
        row[f"run_id_{track}"] = "" if chosen is None else str(chosen.run_id)
        for end in ("ci_low", "ci_high"):
            ci = float("nan") if selection else _get(chosen, f"{name}.{end}")
            row[m.column(f"{track}_{end}")] = ci
        row[f"chance_{track}_q95"] = _get(chosen, f"{name}.chance_q95")
        row[f"config_track_{track}"] = "" if chosen is None else str(chosen.get("track", track))
        row[f"causal_{track}"] = "" if chosen is None else str(chosen.get("causal", ""))
        row[f"label_{track}"] = "" if chosen is None else str(chosen.label)
    unseen, column = m.key(f"{split}_unseen", "generalized"), m.column("unseen_listener")
    row[column] = _get(gen, unseen)
    for end in ("ci_low", "ci_high"):
        row[f"{column}_{end}"] = float("nan") if selection else _get(gen, f"{unseen}.{end}")
    return row


def unseen_listeners(
    df: pd.DataFrame, table: pd.DataFrame, cfg: ExperimentConfig
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The unseen-listener column: under nested selection each left-out listener's own choice
    (the mean over listeners, no interval), and ``unseen_selection``; returns ``df`` so completed
    and the nested choices (``ablation_unseen.csv``, empty unless nested)."""
    is_nested = cfg.unseen_listener and cfg.unseen_selection == "nested"
    nested = nested_unseen(table if is_nested else table.iloc[0:0], cfg.protocol, metric=cfg.metric)
    column = get_metric(cfg.metric).column("unseen_listener")
    if is_nested:
        means = nested_unseen_mean(nested, cfg.metric)
        test = (df.split == "test") & df.feature_set.isin(list(means))
        # as floats: mapping no row gives an empty column of the feature sets' (string) dtype
        df.loc[test, column] = df.loc[test, "feature_set"].map(means).astype(float)
        df.loc[df.split != "test", column] = np.nan
        df.loc[:, [f"{column}_ci_low", f"{column}_ci_high"]] = np.nan
    df["unseen_selection"] = np.where(
        df[column].notna() & cfg.unseen_listener, cfg.unseen_selection, ""
    )
    return df, nested


def with_late_fusion(
    cfg: ExperimentConfig,
    sweep: SweepResult,
    df: pd.DataFrame,
    store: Store | str | os.PathLike,
    tracking_uri: str,
    cache: FitCache,
) -> tuple[pd.DataFrame, tuple[tuple[str, str, str], ...], dict[str, float]]:
    """The fusion step: ``df`` with the late-fusion rows (:func:`~.fusion.fusion_rows`, the
    members' fits kept in ``cache``), their comparisons and the seconds it took; ``df`` as it is
    without ``cfg.fusion``."""
    t0 = time.perf_counter()
    fused, _ = fusion_rows(cfg, sweep, df, store, tracking_uri, cache)
    if not len(fused):
        return df, (), {}
    seconds = {"late_fusion": time.perf_counter() - t0}
    extra = fusion_comparisons(cfg.fusion.members, list(df.feature_set.unique()))
    return pd.concat([df, fused], ignore_index=True), extra, seconds


def fusion_comparisons(members: list[str], sets: list[str]) -> tuple[tuple[str, str, str], ...]:
    """The late-fusion row's comparisons: against early fusion (``both``, when swept) and each member.

    >>> fusion_comparisons(["speaker", "listener"], ["speaker", "listener", "both"])[0]
    ('late fusion vs both', 'late fusion', 'both')
    """
    early = [("late fusion vs both", FUSED_SET, "both")] if "both" in sets else []
    return tuple(early + [(f"late fusion vs {m}", FUSED_SET, m) for m in members])


def run_scores(sweep: SweepResult, tracker: Tracker) -> Callable[[str], pd.DataFrame | None]:
    """run id -> its per-session scores: from ``sweep``, else its logged score matrix (None for
    no run, or a run without artifacts); each run read once."""

    @functools.cache
    def scores(run_id: str) -> pd.DataFrame | None:
        if not run_id:
            return None
        if run_id in sweep.scores:
            return sweep.scores[run_id]
        return logged_scores(tracker, run_id, sweep.metric)

    return scores


def comparisons(
    df: pd.DataFrame,
    scores_of: Callable[[str], pd.DataFrame | None],
    seed: int = 0,
    extra: tuple[tuple[str, str, str], ...] = (),
    metric: str = DEFAULT_METRIC,
) -> pd.DataFrame:
    """Paired comparisons of the chosen configurations' per-session ``metric`` (``scores_of``)
    off the selection split, with Holm's adjustment over the whole table; a pair of one
    configuration is left out; ``extra``: more (name, set a, set b) beside
    :data:`SET_COMPARISONS`. Columns :data:`COMPARISON_COLUMNS`: docs/results.md, Paired comparisons."""
    out = []
    for split in [s for s in dict.fromkeys(df.split) if s not in SELECTION_SPLITS]:
        for name, track, run_a, run_b in _pairs(df, split, extra):
            r = _paired(scores_of, split, run_a, run_b, seed, metric)
            if r is not None:
                out.append({"comparison": name, "track": track, "split": split, **r})
                out[-1].update(run_id_a=run_a, run_id_b=run_b)
    table = pd.DataFrame(out, columns=COMPARISON_COLUMNS)
    table["p_holm"] = holm(table["p_value"].to_numpy(dtype=float)) if len(table) else []
    return table


def _pairs(
    df: pd.DataFrame, split: str, extra: tuple[tuple[str, str, str], ...]
) -> Iterator[tuple[str, str, str, str]]:
    """(name, track, run a, run b) of every comparison on ``split``, in the table's order."""
    by = df.set_index(["feature_set", "split"])
    for track in TRACKS:
        for name, fa, fb in (*SET_COMPARISONS, *extra):
            if (fa, split) in by.index and (fb, split) in by.index:
                run_a, run_b = (str(by.loc[(f, split), f"run_id_{track}"]) for f in (fa, fb))
                yield name, track, run_a, run_b
    for fs in dict.fromkeys(df.feature_set):
        row = by.loc[(fs, split)]
        pair = str(row.run_id_personalized), str(row.run_id_generalized)
        yield f"personalized vs generalized ({fs})", "both", *pair


def _paired(
    scores_of: Callable[[str], pd.DataFrame | None],
    split: str,
    run_a: str,
    run_b: str,
    seed: int,
    metric: str,
) -> dict[str, float] | None:
    """:func:`~experiments.evaluation.uncertainty.paired_comparison` of two runs on ``split``;
    None when there is nothing to test (one configuration, or no shared session)."""
    a, b = (None, None) if run_a == run_b else (scores_of(run_a), scores_of(run_b))
    if a is None or b is None:
        return None
    a, b = a[a.split == split], b[b.split == split]
    shared = a.merge(b, on=["listener", "story"])
    same = len(shared) and np.array_equal(shared[f"{metric}_x"], shared[f"{metric}_y"])
    if a.empty or b.empty or same:
        return None  # the same configuration (a run and its unseen-listener twin): nothing to test
    try:
        return paired_comparison(a, b, seed=seed, metric=metric)
    except ValueError:  # no shared session
        return None


def write_tables(
    out: Path, df: pd.DataFrame, pairs: pd.DataFrame, nested: pd.DataFrame, m: MetricSpec
) -> Path:
    """``ablation.csv`` (:func:`columns` of ``m``), ``ablation_comparisons.csv`` and
    ``ablation_unseen.csv`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    df[columns(m)].to_csv(out / "ablation.csv", index=False)
    pairs.to_csv(out / "ablation_comparisons.csv", index=False)
    nested.to_csv(out / "ablation_unseen.csv", index=False)
    return out


def write_report(
    out: Path,
    cfg: ExperimentConfig,
    store: Store | str | os.PathLike,
    df: pd.DataFrame,
    pairs: pd.DataFrame,
    explained: list[Explanation],
) -> None:
    """``ablation.md`` (in the store's corpus words: another corpus's report is titled by the
    feature sets it compares, without the OMG-Empathy paper's numbers) and ``ablation.png``
    into ``out``."""
    layout, note = corpus_note(store)  # a manifest corpus's report in its words (person, group)
    omg = layout.native  # the OMG-Empathy paper's numbers apply
    compared = "Speaker / listener / both" if omg else " / ".join(dict.fromkeys(df.feature_set))
    md = ablation_markdown(
        df,
        title=f"{compared} ({cfg.target}, protocol {cfg.protocol})",
        pairs=pairs,
        unseen_selection=cfg.unseen_selection,
        importance=importance_section(explained, metric=cfg.metric),
        metric=cfg.metric,
        averaging=cfg.averaging,
        reference=omg,
    )
    md = note + layout.in_words(md, keep=list(cfg.feature_sets))
    (out / "ablation.md").write_text(md)
    reference = PAPER_TEST.get(cfg.metric) if omg else None
    plot_ablation(df, out / "ablation.png", reference=reference, metric=cfg.metric)


def _metric_name(text: str) -> str:
    """A feature set's or a comparison's name as a part of an MLflow metric name."""
    return re.sub(r"[()]", "", str(text).replace(" ", "_"))


def ablation_metrics(
    df: pd.DataFrame, pairs: pd.DataFrame, seconds: dict[str, float], metric: str = DEFAULT_METRIC
) -> dict[str, float]:
    """The parent run's metrics (docs/design.md#mlflow-runs), NaN left out."""
    metrics, m = {}, get_metric(metric)
    for r in df.to_dict("records"):
        for name in (*(m.column(t) for t in TRACKS), m.column("unseen_listener")):
            for suffix in ("", "_ci_low", "_ci_high"):
                fs = _metric_name(r["feature_set"])
                metrics[f"ablation.{fs}.{r['split']}.{name}{suffix}"] = float(r[name + suffix])
    for r in pairs.to_dict("records"):
        key = f"ablation.compare.{_metric_name(r['comparison'])}.{r['track']}.{r['split']}"
        for name in ("mean_diff", "p_value", "p_holm"):
            metrics[f"{key}.{name}"] = float(r[name])
    metrics.update({f"ablation.{step}_seconds": v for step, v in seconds.items()})
    return {k: v for k, v in metrics.items() if np.isfinite(v)}


def target_columns(m: MetricSpec) -> list[str]:
    """The columns of ``ablation.csv`` for several targets (:func:`ablate_targets`), metric ``m``."""
    return [
        "target",
        "feature_set",
        "split",
        "split_role",
        *(m.column(t) for t in TRACKS),
        *(f"run_id_{t}" for t in TRACKS),
    ]


#: :func:`target_columns` of the default metric
TARGET_COLUMNS = target_columns(get_metric(DEFAULT_METRIC))


def combined_ablation(
    per_target: pd.DataFrame, targets: list[str], metric: str = DEFAULT_METRIC
) -> pd.DataFrame:
    """Rows ``target`` ``combined``: per feature set and split, the mean over ``targets`` of each
    target's choices' values per track (NaN unless every target has one)."""
    rows, m = [], get_metric(metric)
    for (fs, split), part in per_target.groupby(["feature_set", "split"], sort=False):
        row = {"target": "combined", "feature_set": fs, "split": split}
        row["split_role"] = str(part["split_role"].iloc[0])
        for name in (m.column(t) for t in TRACKS):
            values = part.set_index("target")[name].reindex(targets)
            row[name] = float(values.mean()) if values.notna().all() else float("nan")
        row["run_id_personalized"] = row["run_id_generalized"] = ""
        rows.append(row)
    return pd.DataFrame(rows, columns=target_columns(m))


def ablate_targets(
    cfg: ExperimentConfig,
    store: Store | str | os.PathLike = "features",
    out_dir: str | Path = "reports",
    options: SweepOptions | None = None,
) -> tuple[pd.DataFrame, SweepResult]:
    """:func:`ablate` for several targets: each target's ablation on its own (reports in
    ``out_dir/<target>/``), then ``out_dir/ablation.{md,csv}`` with every target's rows and the
    ``combined`` ones, logged to each target's parent run (docs/outputs.md, "Several targets").
    Returns that table and the first target's sweep."""
    targets = cfg.all_targets()
    out = Path(out_dir)
    parts, sweeps = [], []
    for target in targets:
        df, sweep = ablate(cfg.for_target(target), store, out / target, options)
        parts.append(df.assign(target=target))
        sweeps.append(sweep)
    m = get_metric(cfg.metric)
    per_target = pd.concat(parts, ignore_index=True)[target_columns(m)]
    combined = combined_ablation(per_target, targets, m.name)
    table = pd.concat([per_target, combined], ignore_index=True)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "ablation.csv", index=False)
    (out / "ablation.md").write_text(targets_markdown(table, targets, cfg.protocol, m.name))
    metrics = {
        f"ablation.combined.{_metric_name(r['feature_set'])}.{r['split']}.{name}": float(r[name])
        for r in table[table["target"] == "combined"].to_dict("records")
        for name in (m.column(t) for t in TRACKS)
        if pd.notna(r[name])
    }
    tracker = Tracker(
        (options.tracking_uri if options else None) or cfg.tracking.uri,
        cfg.tracking.experiment,
        cfg.tracking.artifacts,
    )
    files = {f"targets_{n}": (out / n).read_bytes() for n in ("ablation.csv", "ablation.md")}
    for sweep in sweeps:
        log_files(tracker, sweep.parent_run_id, files, "ablation")
        tracker.log(sweep.parent_run_id, metrics=metrics, tags={"targets": ",".join(targets)})
    return table, sweeps[0]


def targets_markdown(
    table: pd.DataFrame, targets: list[str], protocol: str, metric: str = DEFAULT_METRIC
) -> str:
    """``ablation.md`` of several targets: every target's rows, then the combined ones."""
    m = get_metric(metric)
    rows = (
        [r["target"], r["feature_set"], r["split"]]
        + [markdown.interval(r[m.column(t)]) for t in TRACKS]
        for r in table.to_dict("records")
    )
    lines = [
        f"# Speaker / listener / both, several targets (protocol {protocol})",
        "",
        f"Targets: {', '.join(f'`{t}`' for t in targets)}; each target's full report is in its own "
        "folder (`<target>/ablation.md`). Each track's configuration is chosen per target and feature "
        f"set on that target's selection split; `combined`: the mean over targets of those choices' {m.title}.",
        "",
        *markdown.table(
            ["target", "feature set", "split", f"{m.title} pers.", f"{m.title} gen."], rows
        ),
        "",
    ]
    return "\n".join(lines)
