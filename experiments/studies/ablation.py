"""Speaker vs. listener vs. both on both tracks (the OMG-Empathy paper's Table IV): :func:`ablate`.
What each number means: docs/results.md, "The ablation in detail"; the CSV columns: docs/design.md#reports."""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

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
from .explain import Explanation, ScoresOf, explain_choices, logged_scores
from .fusion import fusion_rows
from .inter_rater import StoreLike
from .parent_run import SweepOptions, SweepResult
from .sweep import run_sweep
from .unseen import nested_unseen, nested_unseen_mean


def columns(m: MetricSpec) -> list[str]:
    """The columns of ``ablation.csv`` for metric ``m`` (docs/design.md#reports)."""
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
    store: StoreLike = "features",
    out_dir: str | Path = "reports",
    options: SweepOptions | None = None,
) -> tuple[pd.DataFrame, SweepResult]:
    """Sweep every feature set of ``cfg`` and write and log the ablation's reports into
    ``out_dir`` (docs/outputs.md; several targets: each in ``out_dir/<target>/``, then the
    ``combined`` rows). Returns the table and the (first target's) sweep."""
    options = options or SweepOptions()
    if len(cfg.all_targets()) > 1:
        return _ablate_targets(cfg, store, Path(out_dir), options)
    sets = list(cfg.feature_set) if cfg.feature_set else list(cfg.feature_sets)
    cfg = replace(cfg, feature_set=sets)
    uri = options.tracking_uri or cfg.tracking.uri
    sweep = sweep_feature_sets(cfg, store, options)
    m = get_metric(cfg.metric)
    df, nested = unseen_listeners(ablation_table(sweep, sets), sweep.table, cfg)
    cache = FitCache()  # the late fusion members' fits, kept for the importance of the same choices
    t0 = time.perf_counter()
    fused, _ = fusion_rows(cfg, sweep, df, store, uri, cache)
    extra: tuple[tuple[str, str, str], ...] = ()
    seconds: dict[str, float] = {}
    if len(fused):
        seconds["late_fusion"] = time.perf_counter() - t0
        extra = fusion_comparisons(cfg.fusion.members, list(df.feature_set.unique()))
        df = pd.concat([df, fused], ignore_index=True)
    tracker = Tracker(uri, cfg.tracking.experiment, cfg.tracking.artifacts)
    scores_of = run_scores(sweep, tracker)
    pairs = comparisons(df, scores_of, cfg.seed, extra, cfg.metric)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    df[columns(m)].to_csv(out / "ablation.csv", index=False)
    pairs.to_csv(out / "ablation_comparisons.csv", index=False)
    nested.to_csv(out / "ablation_unseen.csv", index=False)
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
    cfg: ExperimentConfig, store: StoreLike, options: SweepOptions
) -> SweepResult:
    """The grid: one sweep (parent run ``ablation``) over every feature set of ``cfg``."""
    return run_sweep(cfg, store, replace(options, run_name="ablation"))


def _get(row: pd.Series | None, name: str) -> float:
    """``row[name]`` as a float, NaN when there is none."""
    return float("nan") if row is None or pd.isna(row.get(name, np.nan)) else float(row[name])


def ablation_table(sweep: SweepResult, feature_sets: list[str]) -> pd.DataFrame:
    """Rows (feature set, split): each track's best configuration of the set on the selection split."""
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
    """``df`` with the unseen-listener column (nested: the mean of each left-out listener's own
    choice, no interval) and ``unseen_selection``; and the nested choices (``ablation_unseen.csv``)."""
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


def fusion_comparisons(members: list[str], sets: list[str]) -> tuple[tuple[str, str, str], ...]:
    """The late-fusion row's comparisons: against early fusion (``both``, when swept) and each member.

    >>> fusion_comparisons(["speaker", "listener"], ["speaker", "listener", "both"])[0]
    ('late fusion vs both', 'late fusion', 'both')
    """
    early = [("late fusion vs both", FUSED_SET, "both")] if "both" in sets else []
    return tuple(early + [(f"late fusion vs {m}", FUSED_SET, m) for m in members])


def run_scores(sweep: SweepResult, tracker: Tracker) -> ScoresOf:
    """run id -> its per-session scores (from ``sweep``, else logged; None without), each read once."""

    @functools.cache
    def scores(run_id: str) -> pd.DataFrame | None:
        if run_id in sweep.scores:
            return sweep.scores[run_id]
        return logged_scores(tracker, run_id, sweep.metric) if run_id else None

    return scores


def comparisons(
    df: pd.DataFrame,
    scores_of: ScoresOf,
    seed: int = 0,
    extra: tuple[tuple[str, str, str], ...] = (),
    metric: str = DEFAULT_METRIC,
) -> pd.DataFrame:
    """Paired comparisons of the chosen runs' per-session ``metric`` off the selection split, Holm
    over the whole table (docs/results.md, Paired comparisons); ``extra``: more (name, set a, set b)."""
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
    scores_of: ScoresOf, split: str, run_a: str, run_b: str, seed: int, metric: str
) -> dict[str, float] | None:
    """:func:`paired_comparison` of two runs on ``split``; None when there is nothing to test."""
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


def write_report(
    out: Path,
    cfg: ExperimentConfig,
    store: StoreLike,
    df: pd.DataFrame,
    pairs: pd.DataFrame,
    explained: list[Explanation],
) -> None:
    """``ablation.md`` (in the corpus's words; the paper's numbers for OMG-Empathy only) and
    ``ablation.png`` into ``out``."""
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
    """The columns of ``ablation.csv`` for several targets, metric ``m``."""
    tracks = [m.column(t) for t in TRACKS] + [f"run_id_{t}" for t in TRACKS]
    return ["target", "feature_set", "split", "split_role", *tracks]


#: :func:`target_columns` of the default metric
TARGET_COLUMNS = target_columns(get_metric(DEFAULT_METRIC))


def combined_ablation(
    per_target: pd.DataFrame, targets: list[str], metric: str = DEFAULT_METRIC
) -> pd.DataFrame:
    """Rows ``combined``: per feature set, split and track, the mean over ``targets`` (NaN unless each has one)."""
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


def _ablate_targets(
    cfg: ExperimentConfig, store: StoreLike, out: Path, options: SweepOptions
) -> tuple[pd.DataFrame, SweepResult]:
    """:func:`ablate` of each target, then ``out/ablation.{md,csv}`` of every target's rows and
    the ``combined`` ones, logged to each parent run (docs/outputs.md, "Several targets")."""
    targets = cfg.all_targets()
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
    uri = options.tracking_uri or cfg.tracking.uri
    tracker = Tracker(uri, cfg.tracking.experiment, cfg.tracking.artifacts)
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
