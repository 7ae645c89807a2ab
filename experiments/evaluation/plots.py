"""Figures logged with runs. Every ``plot_*`` saves a PNG to a path or a binary file object (a
sweep's workers draw into memory: :func:`trial_figures`); scores are column ``metric``, named,
scaled and labelled as its :class:`~experiments.config.metrics.MetricSpec` says.
"""

from __future__ import annotations

import io
import os
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
import pandas as pd

from ..config.metrics import DEFAULT_METRIC, MetricSpec, get_metric
from ..config.options import CHOSEN_UNSEEN_MARK

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from .evaluate import TrialResult


def _wrap(text: str, width_in: float, fontsize: float) -> str:
    chars = max(20, int(0.8 * width_in * 72 / (0.62 * fontsize)))  # axes ~80 %, ~0.6 em a character
    return "\n".join(textwrap.wrap(text, chars)) if text else text


def _plt() -> Any:
    """matplotlib.pyplot, the Agg backend chosen unless a notebook or MPLBACKEND chose one."""
    import matplotlib  # heavy (a second with its fonts): loaded when a figure is drawn, not on import

    # headless processes draw with Agg; a notebook (pyplot or IPython loaded, MPLBACKEND set) keeps
    # its backend, or its own figures would stop showing after a sweep
    if not ({"matplotlib.pyplot", "IPython"} & set(sys.modules) or os.environ.get("MPLBACKEND")):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # (heavy, as above)

    return plt


def load_backend() -> None:
    """Load matplotlib and its fonts now (a tiny figure): workers forked afterwards inherit them
    instead of each spending most of a second on it."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(1, 1))
    ax.set_title("warm-up", fontsize=9)
    ax.plot([0, 1], label="x")
    ax.legend(fontsize=8)
    _save(fig, io.BytesIO())


def _save(fig: Figure, path: str | Path | BinaryIO) -> Path | BinaryIO:
    """Write ``fig`` as a 90 dpi PNG and close it, skipping the blank draw of ``tight_layout``'s
    placeholder engine (the same bytes; 15-20 % of a configuration's figures)."""
    from matplotlib.layout_engine import PlaceHolderLayoutEngine  # (heavy, as in _plt)

    plt = _plt()
    if isinstance(fig.get_layout_engine(), PlaceHolderLayoutEngine):
        fig.set_layout_engine(None)
    target = Path(path) if isinstance(path, str | Path) else path
    fig.savefig(target, dpi=90, format="png")
    plt.close(fig)
    return target


def plot_predictions(
    predictions: Mapping[str, np.ndarray],
    truth: Mapping[str, np.ndarray],
    scores: pd.DataFrame,
    path: str | Path | BinaryIO,
    fps: float = 25.0,
    max_sessions: int = 4,
    title: str = "",
    metric: str = DEFAULT_METRIC,
) -> Path | BinaryIO:
    """Predicted vs. self-rated valence over time for the best and the worst sessions by ``metric``."""
    plt, m = _plt(), get_metric(metric)
    df = scores.sort_values(metric, ascending=not m.higher_is_better)
    pick = list(df.session[: max_sessions // 2]) + list(
        df.session[::-1][: max_sessions - max_sessions // 2]
    )
    pick = list(dict.fromkeys(s for s in pick if s in predictions))[:max_sessions]
    fig, axes = plt.subplots(
        len(pick), 1, figsize=(9, 2.2 * max(1, len(pick))), squeeze=False, sharey=True
    )
    for ax, sid in zip(axes[:, 0], pick, strict=False):
        y, p = truth[sid], predictions[sid]
        t = np.arange(len(y)) / fps
        row = scores.set_index("session").loc[sid]
        ax.plot(t, y, color="black", lw=1.4, label="self-rated valence")
        ax.plot(t, p, color="tab:orange", lw=1.2, label="prediction")
        ax.set_title(f"{sid} ({row['split']}): {m.title} {row[metric]:.3f}", fontsize=9)
        ax.set(ylabel="valence (-1 to 1)", ylim=(-1.05, 1.05))
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("time (s)")
    axes[0, 0].legend(loc="upper right", fontsize=8)
    if title:
        fig.suptitle(_wrap(title, 9, 10), fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def plot_listener_scores(
    scores: pd.DataFrame, path: str | Path | BinaryIO, title: str = "", metric: str = DEFAULT_METRIC
) -> Path | BinaryIO:
    """Bar chart of each listener's mean score over their stories, one bar group per split."""
    plt, m = _plt(), get_metric(metric)
    table = scores.groupby(["listener", "split"])[metric].mean().unstack("split")
    width_in = max(5.5, 0.7 * len(table) + 2)
    fig, ax = plt.subplots(figsize=(width_in, 3.4))
    splits = list(table.columns)
    width = 0.8 / max(1, len(splits))
    x = np.arange(len(table))
    for i, split in enumerate(splits):
        ax.bar(x + i * width - 0.4 + width / 2, table[split].to_numpy(), width, label=split)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(x, [f"L{v}" for v in table.index])
    unit = "\n" + m.unit.lstrip() if m.unit else ""
    ax.set(xlabel="listener", ylabel=f"mean {m.title} over stories{unit}")
    ax.set_title(_wrap(title or f"{m.title} per listener", width_in, 9), fontsize=9)
    ax.legend(title="split", fontsize=8, title_fontsize=8, loc="best")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)


def plot_ablation(
    table: pd.DataFrame,
    path: str | Path | BinaryIO,
    reference: Mapping[str, Sequence[float]] | None = None,
    metric: str = DEFAULT_METRIC,
) -> Path | BinaryIO:
    """Each feature set's ``metric`` per split and track with intervals, unseen listeners and
    chance; beside it the published numbers ``reference`` (set -> (personalized, generalized))."""
    plt = _plt()
    fig, axes = plt.subplots(
        1,
        2 if reference else 1,
        figsize=(10.5 if reference else 7.5, 4.8),
        squeeze=False,
        gridspec_kw={"width_ratios": [3, 1]} if reference else None,
    )
    m = get_metric(metric)
    _ablation_panel(axes[0, 0], table, m)
    if reference:
        _reference_panel(axes[0, 1], reference, m)
    fig.tight_layout()
    return _save(fig, path)


def _errors(values: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    err = np.vstack([np.clip(values - low, 0, None), np.clip(high - values, 0, None)])
    return np.where(np.isfinite(err), err, 0)


def _ablation_panel(ax: Axes, table: pd.DataFrame, m: MetricSpec) -> None:
    sets = list(dict.fromkeys(table.feature_set))
    order = {"val": 0, "loso": 1, "cv": 1, "test": 2}
    splits = sorted(table.split.unique(), key=lambda v: order.get(v, 3))
    combos = [(s, p) for s in splits for p in ("personalized", "generalized")]
    last = splits[-1]
    unseen = m.column("unseen_listener")
    with_unseen = unseen in table and table[unseen].notna().any()
    width = 0.8 / (len(combos) + with_unseen)
    x = np.arange(len(sets))

    def column(split: str, name: str) -> np.ndarray:
        col = table[name] if name in table else pd.Series(np.nan, index=table.index)
        rows = [col[(table.feature_set == s) & (table.split == split)].mean() for s in sets]
        return np.array(rows, dtype=float)

    def bars(i: int, split: str, name: str, label: str, **style: Any) -> None:
        vals = column(split, name)
        err = _errors(vals, column(split, name + "_ci_low"), column(split, name + "_ci_high"))
        at = x + i * width - 0.4 + width / 2
        ax.bar(at, vals, width, label=label, yerr=err, capsize=2, error_kw={"lw": 0.8}, **style)

    colours = {"personalized": "tab:blue", "generalized": "tab:orange"}
    for i, (split, track) in enumerate(combos):
        selection = " (selection)" if split in ("val", "loso", "cv") else ""
        style = {"color": colours[track], "alpha": 0.4 if split != last else 1.0}
        bars(i, split, m.column(track), f"{split}{selection}, {track} track", **style)
    if with_unseen:
        chosen = "unseen_selection" in table and (table.unseen_selection == "chosen").any()
        label = f"{last}, unseen listeners (generalized)" + (
            f" {CHOSEN_UNSEEN_MARK}" if chosen else ""
        )
        bars(len(combos), last, unseen, label, color="tab:gray", hatch="//")
    chances = np.concatenate(
        [column(last, "chance_personalized_q95"), column(last, "chance_generalized_q95")]
    )
    if np.isfinite(chances).any():
        chance = float(np.nanmax(chances))
        ax.axhline(chance, color="tab:red", ls=":", lw=1.2, label=f"chance, {last} (95th pct.)")
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(x, sets, rotation=15 if max(len(s) for s in sets) > 10 else 0)
    ax.set(xlabel="feature set", ylabel=m.title + m.unit)
    ax.set_title(
        "Best configuration per set and track, chosen on validation\n(error bars: 95 % interval over listeners)",
        fontsize=9,
    )
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.24), frameon=False)
    ax.grid(axis="y", alpha=0.3)


def _reference_panel(ax: Axes, reference: Mapping[str, Sequence[float]], m: MetricSpec) -> None:
    names = list(reference)
    xr = np.arange(len(names))
    for shift, k, track, colour in (
        (-0.2, 0, "personalized", "tab:blue"),
        (0.2, 1, "generalized", "tab:orange"),
    ):
        ax.bar(xr + shift, [reference[n][k] for n in names], 0.4, label=track, color=colour)
    ax.set_xticks(xr, names)
    top = max(0.3, max(max(v) for v in reference.values()) * 1.2)
    ax.set(xlabel="feature set", ylabel=m.title + m.unit, ylim=(0, top))
    ax.set_title(
        "Published, real corpus (test)\nBarros et al. 2019, Table IV:\nreference only", fontsize=8
    )
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(axis="y", alpha=0.3)


def plot_agreement(
    table: pd.DataFrame,
    summary: pd.DataFrame,
    path: str | Path | BinaryIO,
    example: tuple[str, Mapping[str, np.ndarray]] | None = None,
    fps: float = 25.0,
) -> Path | BinaryIO:
    """Self vs. observer CCC per session and pair of targets, and one example session's ratings."""
    plt = _plt()
    pairs = list(dict.fromkeys(zip(table.target_a, table.target_b, strict=True)))
    sessions = table.sort_values(["listener", "story"]).session.drop_duplicates().tolist()
    ncols = 2 if example else 1
    fig, axes = plt.subplots(1, ncols, figsize=(6.5 * ncols, 4.2), squeeze=False)
    ax = axes[0, 0]
    width = 0.8 / max(1, len(pairs))
    x = np.arange(len(sessions))
    for i, (a, b) in enumerate(pairs):
        part = table[(table.target_a == a) & (table.target_b == b)].set_index("session")
        vals = [part.ccc.get(s, np.nan) for s in sessions]
        bars = ax.bar(x + i * width - 0.4 + width / 2, vals, width, label=f"{a} vs {b}")
        row = summary[(summary.target_a == a) & (summary.target_b == b) & (summary.split == "all")]
        if len(row):
            ax.axhline(
                float(row.ccc_personalized.iloc[0]),
                color=bars.patches[0].get_facecolor(),
                ls="--",
                lw=1,
            )
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(
        x,
        [s.replace("Subject_", "L").replace("_Story_", " S") for s in sessions],
        rotation=90,
        fontsize=7,
    )
    low = min(-0.1, float(np.nanmin(table.ccc)) - 0.05)
    ax.set(xlabel="session (listener, story)", ylabel="CCC", ylim=(low, 1.0))
    ax.set_title("CCC per session (dashed: personalized mean)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(axis="y", alpha=0.3)
    if example:
        session, series = example
        ax = axes[0, 1]
        for name, y in series.items():
            ax.plot(
                np.arange(len(y)) / fps, y, lw=1.2 if name == "valence_self" else 1.0, label=name
            )
        ax.set(xlabel="time (s)", ylabel="valence [-1, 1]")
        ax.set_title(f"ratings of {session}", fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle("Self-rating vs. observer ratings: concordance (CCC)", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def plot_importance(
    table: pd.DataFrame,
    path: str | Path | BinaryIO,
    top: int = 15,
    title: str = "",
    metric: str = DEFAULT_METRIC,
) -> Path | BinaryIO:
    """Permutation importance: per level, the ``top`` groups' drops with intervals (blue: above 0)."""
    plt = _plt()
    levels = list(dict.fromkeys(table.level))
    shown = [table[table.level == lv].nlargest(top, "importance")[::-1] for lv in levels]
    heights = [max(1.2, 0.28 * len(p) + 0.8) for p in shown]
    fig, axes = plt.subplots(
        len(levels),
        1,
        figsize=(8, sum(heights) + 0.6),
        squeeze=False,
        gridspec_kw={"height_ratios": heights},
    )
    for ax, level, part in zip(axes[:, 0], levels, shown, strict=True):
        vals = part.importance.to_numpy(dtype=float)
        lo, hi = part.ci_low.to_numpy(dtype=float), part.ci_high.to_numpy(dtype=float)
        y = np.arange(len(part))
        ax.barh(
            y,
            vals,
            xerr=_errors(vals, lo, hi),
            color=["tab:blue" if v > 0 else "tab:gray" for v in lo],
            capsize=2,
            error_kw={"lw": 0.8},
        )
        ax.set_yticks(y, list(part.group), fontsize=7)
        ax.axvline(0, color="black", lw=0.8)
        ax.set_title(
            f"{level} (top {len(part)} of {int((table.level == level).sum())})", fontsize=9
        )
        ax.grid(axis="x", alpha=0.3)
    from matplotlib.patches import Patch  # with matplotlib, loaded by _plt above

    axes[0, 0].legend(
        handles=[
            Patch(color="tab:blue", label="interval above 0"),
            Patch(color="tab:gray", label="interval reaches 0"),
        ],
        fontsize=7,
        loc="lower right",
    )
    axes[-1, 0].set_xlabel(
        f"drop in {get_metric(metric).title} when permuted in time (95 % interval over listeners)"
    )
    fig.suptitle(_wrap(title or "Permutation importance", 8, 10), fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def plot_session_scores(
    scores: pd.DataFrame, path: str | Path | BinaryIO, title: str = "", metric: str = DEFAULT_METRIC
) -> Path | BinaryIO:
    """Heat map of the score per listener x story (``*_unseen`` splits left out), listener means beside."""
    plt, spec = _plt(), get_metric(metric)
    own = scores[~scores.split.astype(str).str.endswith("_unseen")]
    m = own.pivot_table(index="listener", columns="story", values=metric, aggfunc="mean")
    split_of = own.drop_duplicates("story").set_index("story").split
    width_in = max(4.5, 0.9 * m.shape[1] + 2.5)
    fig, ax = plt.subplots(figsize=(width_in, 0.45 * m.shape[0] + 2.0))
    bounds = spec.bounds
    scale = {} if bounds is None else {"vmin": bounds[0], "vmax": bounds[1]}
    image = ax.imshow(m.to_numpy(dtype=float), cmap="RdBu", aspect="auto", **scale)
    for (i, j), v in np.ndenumerate(m.to_numpy(dtype=float)):
        if np.isfinite(v):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7)
    ax.set_xticks(np.arange(m.shape[1]), [f"S{s}\n{split_of[s]}" for s in m.columns], fontsize=8)
    means = m.mean(axis=1)
    ax.set_yticks(np.arange(m.shape[0]), [f"L{v} ({means[v]:.2f})" for v in m.index], fontsize=8)
    ax.set(xlabel="story (split)", ylabel="listener (mean over stories)")
    fig.colorbar(image, ax=ax, label=spec.title + spec.unit)
    fig.suptitle(_wrap(title or f"{spec.title} per listener x story", width_in, 9), fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


#: a sweep child run's figures: file name under the run's ``plots/`` artifact folder
PREDICTIONS_FIGURE = "predicted_vs_true.png"


def listener_figure(metric: str = DEFAULT_METRIC) -> str:
    """A child run's per-listener figure's file name (``ccc_per_listener.png``)."""
    return get_metric(metric).column("per_listener") + ".png"


def trial_figures(
    predictions: Mapping[str, np.ndarray],
    truth: Mapping[str, np.ndarray],
    scores: pd.DataFrame,
    label: str,
    fps: float = 25.0,
    metric: str = DEFAULT_METRIC,
) -> dict[str, bytes]:
    """A configuration's two figures as PNG bytes by file name (``label`` in the titles)."""
    # the time series are the configuration's own predictions; the bars show the unseen listeners too
    own = scores[~scores.split.astype(str).str.endswith("_unseen")]
    title = f"{get_metric(metric).title} per listener: {label}"
    listeners = listener_figure(metric)
    out = {PREDICTIONS_FIGURE: io.BytesIO(), listeners: io.BytesIO()}
    plot_predictions(
        predictions, truth, own, out[PREDICTIONS_FIGURE], fps, title=label, metric=metric
    )
    plot_listener_scores(scores, out[listeners], title, metric)
    return {name: buf.getvalue() for name, buf in out.items()}


def with_figures(result: TrialResult) -> TrialResult:
    """``result`` with its two figures drawn here (``result.figures``)."""
    t = result.trial
    result.figures = trial_figures(
        result.predictions, result.truth, result.scores, t.label(), metric=t.metric
    )
    return result
