"""Speaker vs. listener vs. both: the OMG-Empathy paper's Table IV for this project's features.

The config's grid is swept once for every feature set (one MLflow parent run covering
all of them), each set's best configuration is chosen on validation (or LOSO), and its
validation and test CCC under both protocols are reported beside the paper's numbers.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import pandas as pd

from .config import ExperimentConfig
from .sweep import SweepResult, run_sweep

#: Barros et al. (2019), Table IV, test set: (personalized, generalized) CCC of the baseline
PAPER_TEST_CCC = {"speaker": (0.11, 0.13), "listener": (0.19, 0.23), "both": (0.17, 0.19)}
COLUMNS = ["feature_set", "split", "ccc_personalized", "ccc_generalized", "run_id"]


def ablation_table(sweep: SweepResult, feature_sets: list[str]) -> pd.DataFrame:
    """Rows (feature set, split) for the best configuration of each set, chosen on validation."""
    table = sweep.table
    metric = sweep.selection_metric
    sel_split = metric.split(".")[0]
    rows = []
    for fs in feature_sets:
        part = table[(table["features.set"] == fs) & (table["status"] != "failed")]
        part = part[part[metric].notna()] if metric in part else part.iloc[0:0]
        if part.empty:
            for split in (sel_split, "test"):
                rows.append({"feature_set": fs, "split": split, "ccc_personalized": float("nan"), "ccc_generalized": float("nan"), "run_id": ""})
            continue
        best = part.loc[part[metric].idxmax()]
        for split in (sel_split, "test"):
            rows.append(
                {
                    "feature_set": fs,
                    "split": split,
                    "ccc_personalized": float(best.get(f"{split}.ccc_personalized", float("nan"))),
                    "ccc_generalized": float(best.get(f"{split}.ccc_generalized", float("nan"))),
                    "run_id": str(best.run_id),
                    "label": best.label,
                }
            )
    return pd.DataFrame(rows)


def ablation_markdown(df: pd.DataFrame, title: str = "") -> str:
    """The table in the shape of the paper's Table IV, with the published test numbers beside it."""
    splits = list(dict.fromkeys(df.split))
    head = ["features"] + [f"{s} {p}" for s in splits for p in ("pers.", "gen.")] + ["paper test pers.", "paper test gen.", "chosen run"]
    lines = [f"# {title or 'Speaker / listener / both ablation'}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for fs in dict.fromkeys(df.feature_set):
        part = df[df.feature_set == fs].set_index("split")
        cells = [fs]
        for s in splits:
            for p in ("ccc_personalized", "ccc_generalized"):
                v = part.loc[s, p] if s in part.index else float("nan")
                cells.append("n/a" if pd.isna(v) else f"{v:.3f}")
        paper = PAPER_TEST_CCC.get(fs)
        cells += [f"{paper[0]:.2f}", f"{paper[1]:.2f}"] if paper else ["", ""]
        cells.append(f"`{part.run_id.iloc[0][:8]}`" if len(part) and part.run_id.iloc[0] else "")
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "CCC per session (population variance), then personalized = mean over listeners of each listener's",
        "mean over stories; generalized = mean over stories of each story's mean over listeners.",
        "Each row is the configuration with the best validation CCC for that feature set; test is reported once.",
        "Paper: Barros et al., *The OMG-Empathy Dataset*, ACII 2019, Table IV (VGG16-LSTM + SoundNet baseline, test set).",
    ]
    if "label" in df:
        lines += ["", "Chosen configurations:", ""]
        for fs, part in df.groupby("feature_set", sort=False):
            lines.append(f"- **{fs}**: {part.label.iloc[0]} (run `{part.run_id.iloc[0]}`)")
    return "\n".join(lines) + "\n"


def ablate(
    cfg: ExperimentConfig,
    store="features",
    tracking_uri: str | None = None,
    jobs: int | None = None,
    out_dir: str | Path = "reports",
    progress: bool = True,
    executor: str = "local",
    scheduler: str | None = None,
) -> tuple[pd.DataFrame, SweepResult]:
    """Sweep every feature set of ``cfg``, write ``reports/ablation.{md,csv,png}``, log them to MLflow.

    ``executor`` ``dask`` runs the configurations on a local Dask cluster of ``jobs`` workers,
    or on the cluster of ``scheduler`` (``tcp://host:8786``); see :func:`experiments.distributed.run_sweep_dask`.
    """
    from .plots import plot_ablation
    from .tracking import Tracker

    sets = list(cfg.feature_set) if cfg.feature_set else list(cfg.feature_sets)
    cfg = replace(cfg, feature_set=sets)
    if executor == "dask":
        from .distributed import run_sweep_dask

        sweep = run_sweep_dask(cfg, store=store, tracking_uri=tracking_uri, jobs=jobs, scheduler=scheduler,
                               progress=progress, run_name="ablation")
    elif executor == "local":
        sweep = run_sweep(cfg, store=store, tracking_uri=tracking_uri, jobs=jobs, progress=progress, run_name="ablation")
    else:
        raise ValueError(f"unknown executor {executor!r}; use 'local' or 'dask'")
    df = ablation_table(sweep, sets)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    df[COLUMNS].to_csv(out / "ablation.csv", index=False)
    md = ablation_markdown(df, title=f"Speaker / listener / both ({cfg.target}, protocol {cfg.protocol})")
    (out / "ablation.md").write_text(md)
    plot_ablation(df, out / "ablation.png", reference=PAPER_TEST_CCC)
    tracker = Tracker(tracking_uri or cfg.tracking.uri, cfg.tracking.experiment)
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("ablation.csv", "ablation.md", "ablation.png"):
            (Path(tmp) / name).write_bytes((out / name).read_bytes())
        tracker.log_artifacts(sweep.parent_run_id, tmp, "ablation")
    metrics = {}
    for r in df.itertuples():
        for p in ("personalized", "generalized"):
            v = getattr(r, f"ccc_{p}")
            if pd.notna(v):
                metrics[f"ablation.{r.feature_set}.{r.split}.ccc_{p}"] = float(v)
    tracker.log(sweep.parent_run_id, metrics=metrics, tags={"ablation": "true"})
    return df, sweep
