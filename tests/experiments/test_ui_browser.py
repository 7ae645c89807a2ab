"""The MLflow UI in a real browser: a smoke sweep, ``mlflow ui`` as ``make ui`` starts it, headless Chromium.

Runs when Debian's ``chromium`` and ``chromium-driver`` are installed (``.ci/run`` installs them)
and is skipped otherwise. Selenium drives the system chromedriver: nothing is downloaded.
The screenshot goes to ``reports/mlflow_ui.png`` (git-ignored).
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

from .conftest import free_port, wait_healthy

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
ROOT = Path(__file__).resolve().parents[2]
METRICS = ["val.ccc_personalized", "val.ccc_generalized", "test.ccc_personalized", "test.ccc_generalized"]

pytest.importorskip("selenium", reason="needs selenium (the dev extra: pip install -e '.[dev]')")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
                       reason="needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)"),
]


def ui_command(backend_uri: str, port: int) -> tuple[list[str], dict]:
    """The command and environment of the Makefile's ``ui`` target, for another store and port."""
    recipe = re.search(r"^ui:.*?\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1)
    for flag in ("MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false", "mlflow ui", "--backend-store-uri", "--host 127.0.0.1",
                 "--workers 1"):
        assert flag in recipe, f"the Makefile's ui target no longer has {flag!r}; update this test"
    mlflow = Path(sys.executable).with_name("mlflow")
    cmd = [str(mlflow), "ui", "--backend-store-uri", backend_uri, "--default-artifact-root", "./mlruns",
           "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
    return cmd, env


def chromium(width: int = 1600, height: int = 800):
    """Headless Chromium through the system chromedriver, with a fresh profile."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
                 f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-')}", f"--window-size={width},{height}"):
        opts.add_argument(flag)
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)


def show_runs_table(driver, base_url: str, experiment_id: str, metrics=METRICS, sort_by: str = METRICS[0],
                    hide=("Dataset", "Source", "Models"), hide_sidebar: bool = False) -> None:
    """Open an experiment's runs, best ``sort_by`` first, with ``metrics`` as columns.

    MLflow 3 opens ``/#/experiments/<id>`` on its GenAI overview and shows no metric column by
    default: the runs page is ``.../runs``, sorting by a metric lists the child runs, and the
    columns are picked in the "Columns" menu as a user would.
    """
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, 30)
    driver.get(f"{base_url}/#/experiments/{experiment_id}/runs?orderByKey=metrics.%60{sort_by}%60&orderByAsc=false")

    def button(text):
        return next((b for b in driver.find_elements(By.CSS_SELECTOR, "button") if b.text == text), None)

    wait.until(lambda d: button("Columns") and d.find_elements(By.CSS_SELECTOR, "[role=gridcell]"))
    for b in driver.find_elements(By.CSS_SELECTOR, "button[aria-label=Close]"):  # the assistant side panel
        b.click()
    if hide_sidebar:
        driver.find_element(By.CSS_SELECTOR, "button[aria-label='Toggle sidebar']").click()
    button("Columns").click()
    menu = wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "[data-component-id$='runs_table.column_selector']"))
    for name in [*metrics, *hide]:
        item = menu.find_element(By.XPATH, f".//*[normalize-space(text())='{name}']")
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", item)
        item.click()
    driver.find_element(By.TAG_NAME, "body").send_keys(Keys.ESCAPE)
    wait.until(lambda d: all(cells(d, m) for m in metrics))


def cells(driver, metric: str) -> list[str]:
    """Texts of the non-empty cells of a metric column."""
    from selenium.webdriver.common.by import By

    found = driver.find_elements(By.CSS_SELECTOR, f"[role=gridcell][col-id='metrics.`{metric}`']")
    return [c.text for c in found if c.text.strip() not in ("", "-")]


@pytest.fixture
def ui_server(planted_store, tmp_path):
    """A smoke sweep into a new tracking store, served by ``mlflow ui`` on a free port."""
    from mlflow import MlflowClient

    from experiments.tracking import resolve_tracking_uri

    folder = tmp_path / "mlruns"
    assert main(["sweep", "--config", "smoke", "--store", str(planted_store), "--tracking-uri", str(folder)]) == 0
    uri = resolve_tracking_uri(str(folder))
    port = free_port()
    cmd, env = ui_command(uri, port)
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc, timeout_s=60)
        yield url, MlflowClient(tracking_uri=uri)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)  # the server and its one worker, nothing else
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        proc.stderr.close()


def test_runs_and_ccc_metrics_are_listed_in_the_ui(ui_server):
    url, client = ui_server
    exp = client.get_experiment_by_name("omg-smoke")
    runs = client.search_runs([exp.experiment_id])
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 5
    driver = chromium()
    try:
        show_runs_table(driver, url, exp.experiment_id)
        page = driver.find_element("tag name", "body").text
        headers = " ".join(h.text for h in driver.find_elements("css selector", "[role=columnheader]"))
        for m in METRICS:
            assert m in headers, f"no {m} column in the runs table"
        for r in children:
            assert r.info.run_name in page, f"run {r.info.run_name!r} is not listed"
        shown = sorted(float(v) for v in cells(driver, "val.ccc_personalized"))
        logged = sorted(r.data.metrics["val.ccc_personalized"] for r in children)
        assert shown == pytest.approx(logged, abs=1e-9)
        out = ROOT / "reports"
        out.mkdir(exist_ok=True)
        driver.save_screenshot(str(out / "mlflow_ui.png"))
    finally:
        driver.quit()
    assert (out / "mlflow_ui.png").stat().st_size > 10_000
