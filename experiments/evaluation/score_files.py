"""``experiments score``: true and predicted ``Subject_<L>_Story_<S>.csv`` files paired by session,
each pair's CCC and every other registered metric (Pearson's r, RMSE, MAE), on the stories with
predictions or an official split's (an incomplete export is refused, not averaged).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from featurestore.sources.annotations import read_annotation
from featurestore.sources.manifest import SPLITS
from featurestore.storage.store import parse_session, session_name

from ..config.metrics import DEFAULT_METRIC, metric_specs
from .metrics import listener_means, protocol_means, score_matrix, story_means


@dataclass
class ScoredFolders:
    """The per-session CCC rows of two folders, or the problems that prevent scoring."""

    #: one ``{session, listener, story, ccc, <metric>...}`` per scored session (every registered
    #: metric, CCC first)
    rows: list[dict] = field(default_factory=list)
    #: what stops the score (missing, extra, duplicate, unreadable or mismatched files)
    problems: list[str] = field(default_factory=list)
    #: (listener, story) of the sessions left out (their story is not scored)
    skipped: list[tuple[int, int]] = field(default_factory=list)
    #: the scored stories, and how they were chosen
    stories: set[int] = field(default_factory=set)
    how: str = ""


def session_csvs(folder: Path) -> tuple[dict[tuple[int, int], Path], list[str]]:
    """(listener, story) -> CSV path of a folder; plus problems (two files for one session).

    Raises:
        NotADirectoryError: ``folder`` is not a folder (the message says what to pass).
    """
    if not folder.is_dir():
        raise NotADirectoryError(
            f"{folder} is not a folder; pass the folder holding Subject_<L>_Story_<S>.csv files"
        )
    found: dict[tuple[int, int], Path] = {}
    problems: list[str] = []
    for path in sorted(folder.iterdir()):
        if path.suffix.lower() != ".csv" or path.name.startswith("."):
            continue
        ls = parse_session(path.stem)
        if ls is None:
            continue
        if ls in found:
            problems.append(
                f"{folder}: two files for {session_name(*ls)}: {found[ls].name} and {path.name}; keep one"
            )
            continue
        found[ls] = path
    return found, problems


def read_valence(path: Path) -> np.ndarray:
    """Values of one challenge-format CSV (float32; the official scorer's float64 CCCs agree to 1e-8)."""
    # predictions may leave [-1, 1]; the official scorer does not check the range either
    return read_annotation(path, value_range=(-float("inf"), float("inf")))


def score_folders(truth_dir: Path, pred_dir: Path, split: str | None = None) -> ScoredFolders:
    """Score ``pred_dir`` against ``truth_dir`` per session, on ``split``'s stories (None: predicted ones)."""
    out = ScoredFolders()
    truth, out.problems = session_csvs(truth_dir)
    preds, more = session_csvs(pred_dir)
    out.problems += more
    if not truth:
        out.problems.append(f"no Subject_<L>_Story_<S>.csv files in {truth_dir}")
        return out
    if split is not None:
        out.stories, out.how = set(SPLITS[split]), f"--split {split}"
    else:
        out.stories, out.how = {story for _, story in preds}, "the stories with predictions"
    listed = ", ".join(map(str, sorted(out.stories))) or "none"
    out.skipped = sorted(k for k in set(truth) | set(preds) if k[1] not in out.stories)
    truth = {k: v for k, v in truth.items() if k[1] in out.stories}
    preds = {k: v for k, v in preds.items() if k[1] in out.stories}
    if not truth:
        out.problems.append(f"no ground truth in {truth_dir} for {out.how} (stories {listed})")
        return out
    missing = sorted(set(truth) - set(preds))
    extra = sorted(set(preds) - set(truth))
    if missing:
        out.problems.append(
            f"{len(missing)} predictions missing from {pred_dir} for stories {listed} ({out.how}): "
            + ", ".join(f"{session_name(*k)}.csv" for k in missing)
        )
    if extra:
        out.problems.append(
            f"{len(extra)} predictions in {pred_dir} have no ground truth in {truth_dir}: "
            + ", ".join(preds[k].name for k in extra)
        )
    metrics = _metrics()
    for key in sorted(set(truth) & set(preds)):
        name = session_name(*key)
        try:
            y_true, y_pred = read_valence(truth[key]), read_valence(preds[key])
        except ValueError as e:
            out.problems.append(str(e))
            continue
        if len(y_true) != len(y_pred):
            out.problems.append(
                f"{name}: ground truth has {len(y_true)} frames ({truth[key]}) but the prediction has "
                f"{len(y_pred)} ({preds[key]}); write one row per label frame"
            )
            continue
        row: dict = {"session": name, "listener": key[0], "story": key[1]}
        out.rows.append(row | {m.name: m(y_true, y_pred) for m in metrics})
    return out


def _metrics() -> list:
    """The registered metrics, CCC (the challenge's) first."""
    return sorted(metric_specs().values(), key=lambda m: m.name != DEFAULT_METRIC)


def print_scores(scored: ScoredFolders, csv: Path | None = None) -> None:
    """``experiments score``'s report: the CCC matrix, both protocols, then both of every metric,
    what was skipped; the per-session table (every metric) to ``csv``."""
    import pandas as pd  # only here: the scorer itself needs numpy alone

    rows, skipped, how, stories = scored.rows, scored.skipped, scored.how, scored.stories
    table = pd.DataFrame(rows)
    matrix = score_matrix(table)
    shown = matrix.copy()
    shown["mean"] = listener_means(table)
    shown.loc["mean"] = list(story_means(table).reindex(matrix.columns)) + [float("nan")]
    shown.columns = pd.Index([str(c) for c in shown.columns], name="story")
    protocols = protocol_means(table)
    if skipped:
        gone = sorted({story for _, story in skipped})
        print(
            f"scored {how} ({', '.join(map(str, sorted(stories)))}); skipped {len(skipped)} "
            f"sessions of stories {', '.join(map(str, gone))} (--split NAME chooses the stories)"
        )
    print(f"CCC per session: {len(table)} sessions (rows: listener, columns: story)")
    print(shown.to_string(float_format=lambda v: f"{v:.4f}", na_rep=""))
    print()
    print(
        f"personalized  {protocols['personalized']:.4f}   mean over listeners of each listener's mean over stories"
    )
    print(
        f"generalized   {protocols['generalized']:.4f}   mean over stories of each story's mean over listeners"
    )
    print()
    print("every metric: personalized, generalized (the same averagings), which way is better")
    for m in _metrics():
        means = protocol_means(table, m.name)
        better = "higher" if m.higher_is_better else "lower"
        print(
            f"  {m.title:<12}{means['personalized']:>9.4f}{means['generalized']:>13.4f}   "
            f"{better} is better"
        )
    if csv is not None:
        csv.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(csv, index=False)
        print(f"per-session scores written to {csv}")
