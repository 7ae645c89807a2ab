"""docs/tutorial.ipynb: committed without outputs, and it runs headless (nbclient) from end to end.

The notebook runs on the small planted store with a copy of the shared test tracking database
and an ablation table written here with the documented columns plus one more (the notebook
must read it generically), through the environment variables a user sets.
"""

from __future__ import annotations

import pandas as pd
import pytest
from mlflow import MlflowClient

from tests.experiments.helpers import ROOT, copy_tracking_db

pytestmark = pytest.mark.integration

nbformat = pytest.importorskip("nbformat", reason="needs the dev extra (pip install -e '.[dev]')")

NOTEBOOK = ROOT / "docs" / "tutorial.ipynb"


def test_committed_notebook_has_no_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert len(code) >= 6
    dirty = [i for i, c in enumerate(code) if c.outputs or c.execution_count is not None]
    assert not dirty, (
        f"code cells {dirty} of {NOTEBOOK.name} carry outputs: clear them before committing"
    )
    assert set(nb.metadata) <= {"kernelspec", "language_info"}, (
        "notebook metadata beyond the kernel (widget state?)"
    )


@pytest.mark.slow
def test_notebook_runs_on_a_small_store(planted_store, tracking_dir, tmp_path, monkeypatch):
    nbclient = pytest.importorskip(
        "nbclient", reason="needs the dev extra (pip install -e '.[dev]')"
    )
    uri = copy_tracking_db(tracking_dir, tmp_path / "mlruns")
    reports = tmp_path / "reports"
    reports.mkdir()
    rows = [
        {
            "feature_set": fs,
            "split": split,
            "ccc_personalized": v,
            "ccc_generalized": v - 0.01,
            "run_id_personalized": f"p{fs}{split}",
            "run_id_generalized": f"g{fs}{split}",
            "n_sessions": 3,
        }
        for fs, v in (("speaker", 0.05), ("listener", 0.6), ("both", 0.58))
        for split in ("val", "test")
    ]
    pd.DataFrame(rows).to_csv(reports / "ablation.csv", index=False)
    monkeypatch.setenv("OMG_STORE", str(planted_store))
    monkeypatch.setenv("OMG_TRACKING_URI", uri)
    monkeypatch.setenv("OMG_REPORTS", str(reports))
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")

    nb = nbformat.read(NOTEBOOK, as_version=4)
    # run from docs/ as Jupyter would; a cell that raises fails the test with its traceback
    nbclient.NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    ).execute()

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    figures = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(figures) >= 3  # the session, the runs compared, the ablation
    text = "\n".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs)
    assert (
        f"store {planted_store}" in text and "n_sessions" in text
    )  # the variables were read; the whole table shown
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("omg-smoke")
    kids = client.search_runs(
        [exp.experiment_id], "tags.mlflow.parentRunId != '' and attributes.status = 'FINISHED'"
    )
    assert len(kids) == 5
