"""The MLflow UI in a real browser: a smoke sweep, ``mlflow ui`` as ``make ui`` starts it, headless Chromium.

What a person sees first when opening an experiment through the link ``make ui`` prints: the
runs table with the child runs and the CCC columns, best validation CCC first, not MLflow 3's
GenAI overview. Runs when Debian's ``chromium`` and ``chromium-driver`` are installed
(``.ci/run`` installs them) and is skipped otherwise. Selenium drives the system chromedriver
with a fresh profile (no remembered UI state): nothing is downloaded. The screenshot of that
first view goes to ``reports/mlflow_ui.png`` (git-ignored).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from experiments.cli import main
from experiments.tracking.ui_view import (
    CCC_METRICS,
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    RUN_NAME_COLUMN,
)
from tests.experiments.helpers import cli_env, free_port, loopback_server_args, wait_healthy

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
ROOT = Path(__file__).resolve().parents[3]
METRICS = list(CCC_METRICS)

pytest.importorskip("selenium", reason="needs selenium (the dev extra: pip install -e '.[dev]')")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.browser,
    pytest.mark.skipif(
        not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
        reason="needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)",
    ),
]


def ui_recipe() -> str:
    """The recipe of the Makefile's ``ui`` target."""
    return re.search(r"^ui:.*?\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1)


def ui_command(backend_uri: str, port: int) -> tuple[list[str], dict]:
    """The command and environment of the Makefile's ``ui`` target, for another store and port."""
    recipe = ui_recipe()
    for flag in (
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false",
        "mlflow ui",
        "--backend-store-uri",
        "--host 127.0.0.1",
        "--workers 1",
    ):
        assert flag in recipe, f"the Makefile's ui target no longer has {flag!r}; update this test"
    mlflow = Path(sys.executable).with_name("mlflow")
    cmd = [
        str(mlflow),
        "ui",
        "--backend-store-uri",
        backend_uri,
        "--default-artifact-root",
        "./mlruns",
        *loopback_server_args(port),
    ]
    env = {
        **os.environ,
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }
    return cmd, env


def ui_links(backend_uri: str, url: str) -> dict[str, str]:
    """Experiment name -> runs link, as the ``ui`` target prints them before starting the UI."""
    assert "-m experiments.tracking.ui --tracking-uri" in ui_recipe(), (
        "the Makefile's ui target no longer prints the links"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "experiments.tracking.ui",
            "--tracking-uri",
            backend_uri,
            "--url",
            url,
        ],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return dict(re.findall(r"^(\S+): (http://\S+)$", out, re.M))


def chromium(width: int = 1600, height: int = 800):
    """Headless Chromium through the system chromedriver, with a fresh profile."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-')}",
        f"--window-size={width},{height}",
    ):
        opts.add_argument(flag)
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)


def cells(driver, metric: str) -> list[str]:
    """Texts of the non-empty cells of a metric column, top row first."""
    from selenium.webdriver.common.by import By

    found = driver.find_elements(By.CSS_SELECTOR, f"[role=gridcell][col-id='metrics.`{metric}`']")
    # the grid may keep its row elements out of display order: sort by the row's index
    rows = [
        (
            int(
                c.find_element(By.XPATH, "./ancestor::*[@role='row'][1]").get_attribute("row-index")
            ),
            c.text,
        )
        for c in found
    ]
    return [text for _, text in sorted(rows) if text.strip() not in ("", "-")]


def param_cells(driver, param: str) -> list[str]:
    """Texts of the non-empty cells of a parameter column."""
    from selenium.webdriver.common.by import By

    found = driver.find_elements(By.CSS_SELECTOR, f"[role=gridcell][col-id='params.`{param}`']")
    return [c.text for c in found if c.text.strip() not in ("", "-")]


@pytest.fixture
def ui_server(planted_store, tmp_path):
    """A smoke sweep into a new tracking store, its links as ``make ui`` prints them, and
    ``mlflow ui`` on a free port: (UI address, MLflow client, experiment name -> link)."""
    from mlflow import MlflowClient

    from experiments.tracking.tracker import resolve_tracking_uri

    folder = tmp_path / "mlruns"
    assert (
        main(
            [
                "sweep",
                "--config",
                "smoke",
                "--store",
                str(planted_store),
                "--tracking-uri",
                str(folder),
            ]
        )
        == 0
    )
    uri = resolve_tracking_uri(str(folder))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    links = ui_links(uri, url)
    cmd, env = ui_command(uri, port)
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        wait_healthy(url, proc, timeout_s=60)
        yield url, MlflowClient(tracking_uri=uri), links
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the server and its one worker, nothing else
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        proc.stderr.close()


def test_the_experiment_opens_on_its_runs_table_with_the_ccc_columns(ui_server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    url, client, links = ui_server
    exp = client.get_experiment_by_name("omg-smoke")
    assert exp.tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    assert set(links) == {"omg-smoke"} and links["omg-smoke"].startswith(
        f"{url}/#/experiments/{exp.experiment_id}/runs?"
    )
    children = [
        r for r in client.search_runs([exp.experiment_id]) if "mlflow.parentRunId" in r.data.tags
    ]
    assert len(children) == 5
    driver = chromium()  # a fresh profile: nothing remembered from an earlier visit
    try:
        driver.get(links["omg-smoke"])
        WebDriverWait(driver, 30).until(lambda d: len(cells(d, METRICS[0])) == len(children))
        # the page: the runs table, not the GenAI overview or traces
        route = driver.current_url.split("#", 1)[1].split("?", 1)[0]
        assert route == f"/experiments/{exp.experiment_id}/runs", driver.current_url
        titles = [h.text for h in driver.find_elements(By.CSS_SELECTOR, "h1, h2")]
        assert titles == ["Runs"], titles
        page = driver.find_element(By.TAG_NAME, "body").text
        for r in children:
            assert r.info.run_name in page, f"run {r.info.run_name!r} is not listed"
        # the CCC columns are there without opening the "Columns" menu, validation CCC first and in
        # sight (the grid renders columns near the view without their text, the others not at all)
        headers = sorted(
            (int(h.get_attribute("aria-colindex")), h.get_attribute("col-id"), h.text)
            for h in driver.find_elements(By.CSS_SELECTOR, "[role=columnheader][col-id]")
        )
        ids = [i for _, i, _ in headers]
        # (a column of a metric no run has is not drawn: the other averaging's where none differs)
        logged = [m for m in METRICS if any(m in r.data.metrics for r in children)]
        assert logged[:2] == METRICS[:2], logged
        assert [i for i in ids if i.startswith("metrics.")] == [f"metrics.`{m}`" for m in logged], (
            ids
        )
        assert next(text for _, i, text in headers if i == f"metrics.`{METRICS[0]}`") == METRICS[0]
        # the run name, then the track, then its CCC per split (among the data columns: the
        # grid's group headers have ids too)
        data = [i for i in ids if "`" in i]
        assert data[data.index(RUN_NAME_COLUMN) + 1 : data.index(RUN_NAME_COLUMN) + 4] == [
            "params.`track`",
            f"metrics.`{METRICS[0]}`",
            f"metrics.`{METRICS[1]}`",
        ], data
        tracks = {r.data.params["track"] for r in children}
        assert set(param_cells(driver, "track")) == tracks
        # a run name leads with feature set, personalization, model and is read whole in its column
        run = children[0]
        lead = " ".join(
            run.data.params[p] for p in ("features.set", "personalization", "model.name")
        )
        assert run.info.run_name.startswith(lead + " "), run.info.run_name
        name_cells = driver.find_elements(
            By.CSS_SELECTOR, f"[role=gridcell][col-id='{RUN_NAME_COLUMN}']"
        )
        shown_names = [c.text for c in name_cells]
        assert any(lead in n for n in shown_names), shown_names  # (after a colour swatch)
        for c in name_cells:
            link = c.find_element(By.TAG_NAME, "a")
            # the whole name fits: the link is no wider than its cell (no cut, no ellipsis)
            assert link.size["width"] <= c.size["width"], (link.text, link.size, c.size)
        # best validation CCC first, the values MLflow holds
        shown = [float(v) for v in cells(driver, METRICS[0])]
        logged = sorted((r.data.metrics[METRICS[0]] for r in children), reverse=True)
        assert shown == pytest.approx(logged, abs=1e-9)
        out = ROOT / "reports"
        out.mkdir(exist_ok=True)
        driver.save_screenshot(str(out / "mlflow_ui.png"))
    finally:
        driver.quit()
    assert (out / "mlflow_ui.png").stat().st_size > 10_000
