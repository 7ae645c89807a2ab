"""Figures logged with runs: predicted vs. true valence, per-listener CCC, the ablation table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_predictions(
    predictions: Mapping[str, np.ndarray],
    truth: Mapping[str, np.ndarray],
    scores: pd.DataFrame,
    path: str | Path,
    fps: float = 25.0,
    max_sessions: int = 4,
    title: str = "",
) -> Path:
    """Predicted vs. self-rated valence over time for a few sessions (best and worst CCC first)."""
    plt = _plt()
    df = scores.sort_values("ccc", ascending=False)
    pick = list(df.session[: max_sessions // 2]) + list(df.session[::-1][: max_sessions - max_sessions // 2])
    pick = list(dict.fromkeys(s for s in pick if s in predictions))[:max_sessions]
    fig, axes = plt.subplots(len(pick), 1, figsize=(9, 2.2 * max(1, len(pick))), squeeze=False, sharey=True)
    for ax, sid in zip(axes[:, 0], pick, strict=False):
        y, p = truth[sid], predictions[sid]
        t = np.arange(len(y)) / fps
        row = scores.set_index("session").loc[sid]
        ax.plot(t, y, color="black", lw=1.4, label="self-rated valence")
        ax.plot(t, p, color="tab:orange", lw=1.2, label="prediction")
        ax.set_title(f"{sid} ({row['split']}): CCC {row['ccc']:.3f}", fontsize=9)
        ax.set_ylabel("valence [-1, 1]")
        ax.set_ylim(-1.05, 1.05)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("time (s)")
    axes[0, 0].legend(loc="upper right", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_listener_ccc(scores: pd.DataFrame, path: str | Path, title: str = "") -> Path:
    """Bar chart of each listener's mean CCC over their stories, one bar group per split."""
    plt = _plt()
    table = scores.groupby(["listener", "split"])["ccc"].mean().unstack("split")
    fig, ax = plt.subplots(figsize=(max(4.5, 0.7 * len(table) + 2), 3.2))
    splits = list(table.columns)
    width = 0.8 / max(1, len(splits))
    x = np.arange(len(table))
    for i, split in enumerate(splits):
        ax.bar(x + i * width - 0.4 + width / 2, table[split].to_numpy(), width, label=split)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(x, [f"L{v}" for v in table.index])
    ax.set_xlabel("listener")
    ax.set_ylabel("mean CCC over stories")
    ax.set_title(title or "CCC per listener", fontsize=10)
    ax.legend(title="split", fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_ablation(table: pd.DataFrame, path: str | Path, reference: Mapping[str, Sequence[float]] | None = None) -> Path:
    """Grouped bars: feature set x (split, protocol), with published test numbers as markers."""
    plt = _plt()
    sets = list(dict.fromkeys(table.feature_set))
    combos = [(s, p) for s in sorted(table.split.unique(), key=lambda v: {"val": 0, "loso": 1, "test": 2}.get(v, 3)) for p in ("personalized", "generalized")]
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    width = 0.8 / len(combos)
    x = np.arange(len(sets))
    for i, (split, prot) in enumerate(combos):
        vals = [table[(table.feature_set == s) & (table.split == split)][f"ccc_{prot}"].mean() for s in sets]
        ax.bar(x + i * width - 0.4 + width / 2, vals, width, label=f"{split} {prot}")
    if reference:
        for j, s in enumerate(sets):
            if s in reference:
                ax.plot([j - 0.4, j + 0.4], [reference[s][0]] * 2, color="black", ls="--", lw=1)
        ax.plot([], [], color="black", ls="--", lw=1, label="paper, test personalized")
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(x, sets)
    ax.set_xlabel("feature set")
    ax.set_ylabel("CCC")
    ax.set_title("Speaker vs. listener vs. both (best configuration per set, chosen on validation)", fontsize=9)
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
