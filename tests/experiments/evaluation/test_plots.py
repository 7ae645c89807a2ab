"""The figures are readable: labelled axes with units or ranges, a title, a legend, no text cut off.

test_ablation.py opens each PNG (size, not blank); here the figure objects are checked as they
are saved, with long run labels such as the sweep writes as titles.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from experiments.evaluation.plots import (
    plot_ablation,
    plot_importance,
    plot_listener_scores,
    plot_predictions,
    plot_session_scores,
)

LONG = (
    "xgboost(n_estimators=200,max_depth=3,learning_rate=0.05) both w2,8s d2s global_calibrated "
    "smooth4s rescale=train"
)


@pytest.fixture
def saved(monkeypatch):
    """Figures passed to savefig, in order."""
    figures: list[Figure] = []
    real = Figure.savefig

    def savefig(self, *args, **kwargs):
        figures.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return figures


def scores_and_series(listeners=(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)):
    rng = np.random.default_rng(3)
    sessions = [f"Subject_{L}_Story_{S}" for L in listeners for S in (1, 3)]
    truth = {s: np.clip(np.cumsum(rng.normal(size=400)) / 30, -1, 1) for s in sessions}
    preds = {s: 0.5 * y + rng.normal(0, 0.1, len(y)) for s, y in truth.items()}
    scores = pd.DataFrame(
        [
            {
                "session": s,
                "listener": int(s.split("_")[1]),
                "story": int(s.split("_")[3]),
                "split": "val" if s.endswith("_1") else "test",
                "ccc": rng.uniform(-0.3, 0.8),
            }
            for s in sessions
        ]
    )
    return scores, truth, preds


def check_readable(fig: Figure, xlabel_has: str, ylabel_has: str, legend: bool = True) -> None:
    canvas = FigureCanvasAgg(fig)  # the figure was closed after saving: draw it again, as saved
    canvas.draw()
    renderer = canvas.get_renderer()
    axes = [ax for ax in fig.axes if ax.has_data() and ax.get_label() != "<colorbar>"]
    assert axes
    assert any(xlabel_has in ax.get_xlabel() for ax in axes), [ax.get_xlabel() for ax in axes]
    for ax in axes:
        assert ylabel_has in ax.get_ylabel(), ax.get_ylabel()
        assert ax.get_title() or (fig._suptitle is not None and fig._suptitle.get_text())
    assert not legend or any(ax.get_legend() is not None for ax in axes), "no legend"
    texts = [fig._suptitle] if fig._suptitle is not None else []
    for ax in axes:
        texts += [ax.title, ax.xaxis.label, ax.yaxis.label]
        if ax.get_legend() is not None:
            texts += [*ax.get_legend().get_texts(), ax.get_legend().get_title()]
    width, height = fig.bbox.width, fig.bbox.height
    for t in texts:
        if not t.get_text() or not t.get_visible():
            continue
        box = t.get_window_extent(renderer)
        assert box.x0 >= -1 and box.x1 <= width + 1 and box.y0 >= -1 and box.y1 <= height + 1, (
            f"text {t.get_text()!r} is cut off ({box} in a {width:.0f} x {height:.0f} figure)"
        )


def test_predictions_figure(saved, tmp_path):
    scores, truth, preds = scores_and_series()
    plot_predictions(preds, truth, scores, tmp_path / "p.png", title=LONG)
    check_readable(saved[-1], "time (s)", "valence (-1 to 1)")


@pytest.mark.parametrize("n_listeners", [1, 4, 10])
def test_listener_ccc_figure(saved, tmp_path, n_listeners):
    scores, _, _ = scores_and_series(tuple(range(1, n_listeners + 1)))
    plot_listener_scores(scores, tmp_path / "l.png", title=f"CCC per listener: {LONG}")
    check_readable(saved[-1], "listener", "CCC")


def test_ablation_figure(saved, tmp_path):
    table = pd.DataFrame(
        [
            {
                "feature_set": fs,
                "split": sp,
                "ccc_personalized": v,
                "ccc_generalized": v / 2,
                "run_id": "x",
            }
            for fs, v in (("speaker", -0.05), ("listener", 0.7), ("both", 0.62))
            for sp in ("val", "test")
        ]
    )
    plot_ablation(
        table, tmp_path / "a.png", reference={"speaker": (0.11, 0.13), "listener": (0.19, 0.23)}
    )
    check_readable(saved[-1], "feature set", "CCC (-1 to 1)")


def test_importance_figure(saved, tmp_path):
    rng = np.random.default_rng(0)
    rows = [
        {
            "level": lv,
            "group": f"listener/face_au/AU{i:02d}" if lv == "column" else f"g{i}",
            "importance": v,
            "ci_low": v - 0.05,
            "ci_high": v + 0.05,
        }
        for lv, n in (("channel", 3), ("column", 30))
        for i, v in enumerate(rng.normal(0.02, 0.05, n))
    ]
    plot_importance(pd.DataFrame(rows), tmp_path / "i.png", top=12, title=f"importance: {LONG}")
    fig = saved[-1]
    check_readable(fig, "drop in CCC", "", legend=True)
    assert [len(ax.patches) for ax in fig.axes] == [3, 12]  # every channel, the top 12 columns


def test_session_heat_map(saved, tmp_path):
    scores, _, _ = scores_and_series()
    scores = pd.concat([scores, scores.assign(split="test_unseen", ccc=-1.0)])
    plot_session_scores(scores, tmp_path / "h.png", title=f"CCC per session: {LONG}")
    fig = saved[-1]
    check_readable(fig, "story", "listener", legend=False)
    image = fig.axes[0].images[0].get_array()
    assert image.shape == (10, 2) and image.min() > -1.0  # the unseen-listener rows left out
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["S1\nval", "S3\ntest"]


def test_figures_in_memory_are_the_files_a_path_gets(tmp_path):
    """A worker draws into BytesIO and the parent writes the bytes: the same PNG as drawing to a path."""
    import io

    from experiments.evaluation.plots import PREDICTIONS_FIGURE, listener_figure, trial_figures

    scores, truth, preds = scores_and_series((1, 2, 3))
    figures = trial_figures(preds, truth, scores, LONG)
    assert (
        set(figures)
        == {PREDICTIONS_FIGURE, listener_figure()}
        == {"predicted_vs_true.png", "ccc_per_listener.png"}
    )
    on_disk = plot_predictions(preds, truth, scores, tmp_path / PREDICTIONS_FIGURE, title=LONG)
    assert (
        on_disk == tmp_path / PREDICTIONS_FIGURE
        and figures[PREDICTIONS_FIGURE] == on_disk.read_bytes()
    )
    plot_listener_scores(scores, tmp_path / listener_figure(), title=f"CCC per listener: {LONG}")
    assert figures[listener_figure()] == (tmp_path / listener_figure()).read_bytes()
    buf = io.BytesIO()
    assert (
        plot_ablation(
            pd.DataFrame(
                [
                    {
                        "feature_set": "both",
                        "split": "val",
                        "ccc_personalized": 0.3,
                        "ccc_generalized": 0.2,
                        "run_id": "x",
                    }
                ]
            ),
            buf,
        )
        is buf
    )
    assert buf.getvalue().startswith(b"\x89PNG\r\n\x1a\n") and len(buf.getvalue()) > 1000


@pytest.mark.parametrize(
    ("setup", "backend"),
    [("pass", "agg"), ("import matplotlib.pyplot; matplotlib.use('svg')", "svg")],
)
@pytest.mark.integration
def test_drawing_keeps_a_notebooks_backend(setup, backend):
    """A headless process draws with Agg; a session that chose its backend (a notebook's inline
    one) keeps it, so its own figures still show after a sweep drew the runs' plots."""
    import subprocess
    import sys

    from tests.experiments.helpers import cli_env

    env = {k: v for k, v in cli_env().items() if k != "MPLBACKEND"}
    code = (
        f"import matplotlib; {setup}; from experiments.evaluation.plots import load_backend; load_backend(); "
        "print(matplotlib.get_backend().lower())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == backend


def test_saving_skips_the_draw_without_output_and_gives_the_same_bytes(monkeypatch, tmp_path):
    """After ``tight_layout`` savefig would draw each figure twice (once without output, for a
    layout engine that has nothing left to do): it is drawn once, into the same PNG bytes."""
    import matplotlib.layout_engine

    scores, truth, preds = scores_and_series((1, 2, 3, 4))
    draws: list[Figure] = []
    real_draw = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda self, r: (draws.append(self), real_draw(self, r))[1])

    def every_figure(folder):
        folder.mkdir()
        plot_predictions(preds, truth, scores, folder / "p.png", title=LONG)
        plot_listener_scores(scores, folder / "l.png", title=LONG)
        plot_session_scores(scores, folder / "s.png", title=LONG)
        return {p.name: p.read_bytes() for p in folder.iterdir()}

    once = every_figure(tmp_path / "once")
    assert len(draws) == len(once) == 3  # one draw per figure
    draws.clear()

    class NotThePlaceholder:  # matplotlib's own path: the draw without output, then the real one
        pass

    monkeypatch.setattr(matplotlib.layout_engine, "PlaceHolderLayoutEngine", NotThePlaceholder)
    twice = every_figure(tmp_path / "twice")
    assert len(draws) == 6
    assert once == twice
