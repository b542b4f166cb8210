"""The quickstart in a real JupyterLab and a real browser: the widgets render, in light and dark theme.

JupyterLab runs on 127.0.0.1 with a free port, a temporary root (copies of the notebooks) and
temporary config/runtime/settings dirs; headless Debian Chromium drives it through Playwright
(never ``playwright install``). Screenshots land in ``tests/artifacts/`` for a person to look at.
Skipped only when ``/usr/bin/chromium`` is absent.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "tests" / "artifacts"
NOTEBOOK = "01_quickstart.ipynb"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
KERNEL_IDLE = ("() => window.jupyterapp?.shell?.currentWidget?.sessionContext?.session?.kernel?.status"
               " === 'idle'")

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[str]:
    """A JupyterLab server on the notebooks' copies; yields its base URL."""
    root, home = tmp_path / "root", tmp_path / "jupyter"
    shutil.copytree(ROOT / "notebooks", root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    for sub in ("config", "runtime", "data", "settings", "workspaces"):
        (home / sub).mkdir(parents=True)
    news = home / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))  # no news pop-up
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               JUPYTER_DATA_DIR=str(home / "data"), JUPYTER_PLATFORM_DIRS="1")
    port = _free_port()
    log = open(tmp_path / "lab.log", "wb")  # noqa: SIM115  (closed in the finally below)
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ip=127.0.0.1",
         f"--port={port}", f"--ServerApp.root_dir={root}", "--IdentityProvider.token=",
         "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True", "--ServerApp.port_retries=0",
         "--LabApp.expose_app_in_browser=True", f"--LabApp.user_settings_dir={home / 'settings'}",
         f"--LabApp.workspaces_dir={home / 'workspaces'}"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                log_text = (tmp_path / "lab.log").read_text()
                pytest.fail(f"JupyterLab exited with {proc.returncode}:\n{log_text}")
            try:
                with urllib.request.urlopen(f"{base}/api/status", timeout=1) as resp:
                    json.load(resp)
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("JupyterLab did not answer /api/status within 30 s")
                time.sleep(0.2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_quickstart_renders_widgets_in_light_and_dark_theme(lab: str) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            page.goto(f"{lab}/lab/workspaces/{uuid.uuid4().hex}/tree/{NOTEBOOK}?reset")
            page.wait_for_selector(".jp-Notebook", timeout=30_000)
            page.wait_for_function("() => !!window.jupyterapp", timeout=30_000)
            page.wait_for_function(KERNEL_IDLE, timeout=30_000)
            page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")

            dashboard = page.locator(".jp-OutputArea-output .msvm-dashboard").first
            dashboard.wait_for(timeout=45_000)
            registers = dashboard.locator(".msvm-register-view").first
            registers.wait_for()
            assert "float32[N, 3, H, W]" in registers.inner_text()
            dashboard.scroll_into_view_if_needed()
            dashboard.screenshot(path=str(ARTIFACTS / "quickstart-registers-light.png"))

            dashboard.get_by_role("tab", name="SCD").click()
            dashboard.locator(".msvm-scd-view").wait_for()
            dashboard.screenshot(path=str(ARTIFACTS / "quickstart-scd-light.png"))

            dashboard.get_by_role("tab", name="Timeline").click()
            dashboard.locator(".msvm-timeline .js-plotly-plot").wait_for(timeout=15_000)
            dashboard.locator(".msvm-timeline .js-plotly-plot .bars path").first.wait_for(state="attached")
            dashboard.screenshot(path=str(ARTIFACTS / "quickstart-timeline-light.png"))

            dashboard.get_by_role("tab", name="Debugger").click()
            debugger = dashboard.locator(".msvm-debugger")
            debugger.get_by_role("button", name="Step", exact=True).click()
            page.wait_for_function("() => document.querySelector('.msvm-debugger')?.innerText"
                                   ".includes('1 instructions executed')", timeout=10_000)
            dashboard.screenshot(path=str(ARTIFACTS / "quickstart-debugger-light.png"))

            dashboard.get_by_role("tab", name="JIT cache").click()
            dashboard.locator(".msvm-jit-cache").wait_for()
            dashboard.screenshot(path=str(ARTIFACTS / "quickstart-jit-cache-light.png"))

            page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme',"
                          " {theme: 'JupyterLab Dark'})")
            page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'", timeout=15_000)
            page.wait_for_timeout(500)
            dashboard.screenshot(path=str(ARTIFACTS / "quickstart-debugger-dark.png"))
            dashboard.get_by_role("tab", name="Registers").click()
            dashboard.screenshot(path=str(ARTIFACTS / "quickstart-registers-dark.png"))
            dashboard.get_by_role("tab", name="SCD").click()
            dashboard.screenshot(path=str(ARTIFACTS / "quickstart-scd-dark.png"))
            dashboard.get_by_role("tab", name="JIT monitor").click()
            dashboard.screenshot(path=str(ARTIFACTS / "quickstart-jit-monitor-dark.png"))
            dashboard.get_by_role("tab", name="Timeline").click()
            page.wait_for_timeout(300)
            dashboard.screenshot(path=str(ARTIFACTS / "quickstart-timeline-dark.png"))
            page.screenshot(path=str(ARTIFACTS / "quickstart-page-dark.png"), full_page=True)
        finally:
            browser.close()
    assert not errors, "JavaScript errors in the console:\n" + "\n".join(errors)
