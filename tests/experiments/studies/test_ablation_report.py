"""Reports say what the run did on the corpus it ran on: the averaging actually used
(``averaging: concatenated``), a monadic manifest corpus's words, its own feature sets in
the ablation's title, and the OMG-Empathy paper's numbers only for an OMG-Empathy store."""

from __future__ import annotations

import numpy as np
import pandas as pd

from experiments.config.loading import from_dict
from experiments.studies.ablation import ablation_table, write_report
from experiments.studies.ablation_report import ablation_markdown
from experiments.tracking.summary import SUMMARY_NOTE, nested_markdown, summary_markdown
from featurestore.storage.shard import SessionMeta
from featurestore.storage.store import Store
from tests.experiments.helpers import config_dict
from tests.experiments.studies.test_ablation import _runs, _sweep


def _summary(averaging: str) -> pd.DataFrame:
    row = {"track": "generalized", "run_id": "r", "label": "x", "chosen_on": "val.ccc_generalized"}
    return pd.DataFrame([row | {"ccc_averaging": averaging, "val.ccc_generalized": 0.3}])


def test_summary_states_the_averaging_the_run_used():
    joined = summary_markdown(_summary("concatenated"))
    assert "one CCC over each" in joined and "split's sessions concatenated" in joined
    assert "mean over listeners of each listener's mean CCC" not in joined
    assert "\n".join(SUMMARY_NOTE).format(metric="CCC") not in joined
    assert "\n".join(SUMMARY_NOTE).format(metric="CCC") in summary_markdown(_summary("sessions"))


def test_ablation_report_of_a_concatenated_run_has_no_per_session_averaging():
    df = ablation_table(_sweep(_runs()), ["listener", "speaker"])
    joined = ablation_markdown(df, averaging="concatenated", reference=False)
    assert "concatenated (`averaging: concatenated`, as AVEC): no interval" in joined
    assert "CCC per session, mean over each listener's" not in joined
    assert "**chance**" not in joined and "## Reference" not in joined
    plain = ablation_markdown(df)  # the OMG-Empathy defaults: as before
    assert "CCC per session, mean over each listener's" in plain and "## Reference" in plain


def test_ablation_of_a_monadic_corpus_is_titled_by_its_feature_sets(tmp_path):
    store = Store(tmp_path / "store", mode="a")
    meta = SessionMeta(
        "p01_plan", 1, 1, 0, "val", 10, layout="manifest", person="p01", group="plan"
    )
    store.write_session(meta, labels={"valence": np.zeros(10, np.float32)})
    df = ablation_table(_sweep(_runs()), ["listener", "speaker"])
    df["feature_set"] = df.feature_set.map({"listener": "face", "speaker": "voice"})
    cfg = from_dict(config_dict("unused"))
    out = tmp_path / "reports"
    out.mkdir()
    write_report(out, cfg, store.root, df, pd.DataFrame(), [])
    md = (out / "ablation.md").read_text()
    assert md.splitlines()[0].endswith(
        "one person per session (no partner); per-session ids are the manifest's."
    )
    assert f"# face / voice ({cfg.target}, protocol {cfg.protocol})" in md
    assert "Partner" not in md and "partner" not in md.split("\n", 1)[1]
    assert "## Reference" not in md
    assert (out / "ablation.png").stat().st_size > 0


def test_the_nested_unseen_table_names_the_manifests_persons():
    nested = pd.DataFrame(
        [
            {"listener": n, "label": "ridge", "selection_metric": "val.ccc_generalized"}
            | {"selection_ccc": 0.3, "ccc_test_unseen": 0.2, "run_id": "r"}
            for n in (2, 1)
        ]
    )
    md = nested_markdown(nested, {1: "p01", 2: "p02"})
    assert [line.split(" | ")[0] for line in md.splitlines() if line.startswith("| p0")] == [
        "| p01",
        "| p02",
    ]
    assert "| 1 | ridge" in nested_markdown(nested)  # the OMG layout: the numbers
