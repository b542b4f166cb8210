"""msvm's views in a real JupyterLab and a real browser, in light and dark theme.

The quickstart renders its dashboard (figures as wide as their tab, tables that scroll instead of
being cut off, a timeline whose hover gives each slice's own duration); a long ``%%msvm`` cell updates
the JIT monitor and its progress line while the kernel is still busy with it; after ``ms.vm.reset()``
the views shown earlier say that their entries are gone. JupyterLab runs on 127.0.0.1 with a free
port, a temporary root (copies of the notebooks, plus one notebook the test writes) and temporary
config/runtime/settings dirs; headless Debian Chromium drives it through Playwright (never
``playwright install``). Screenshots land in ``tests/artifacts/`` for a person to look at. Skipped only
when ``/usr/bin/chromium`` is absent.
"""

from __future__ import annotations

import contextlib
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
from typing import Any

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "tests" / "artifacts"
NOTEBOOK = "01_quickstart.ipynb"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
KERNEL_STATUS = "window.jupyterapp?.shell?.currentWidget?.sessionContext?.session?.kernel?.status"
KERNEL_IDLE = f"() => {KERNEL_STATUS} === 'idle'"
LIVE = "live.ipynb"
LIVE_CELLS = [
    "import time\n\nimport numpy as np\n\nimport msvm as ms\n\n%load_ext msvm",
    "%msvm monitor",
    # a long cell: a new batch size every few calls, so entries keep compiling while it runs
    "%%msvm\n"
    "def grow(x: ms.Tensor['N', 16]):\n"
    "    return ms.ops.relu(x * 2.0 + 1.0)\n\n\n"
    "end = time.monotonic() + 12\n"
    "n = 0\n"
    "while time.monotonic() < end:\n"
    "    n = n % 40 + 1\n"
    "    for _ in range(6):\n"
    "        grow(np.ones((n, 16), np.float32))\n",
    "%msvm info grow",
    "ms.vm.reset()",
]

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A JupyterLab server on the notebooks' copies and the live notebook; yields its base URL."""
    tmp_path = tmp_path_factory.mktemp("lab")
    root, home = tmp_path / "root", tmp_path / "jupyter"
    shutil.copytree(ROOT / "notebooks", root, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    live = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in LIVE_CELLS])
    live.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(live, root / LIVE)
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


def _open_and_run(page: Any, lab: str, notebook: str) -> None:
    page.goto(f"{lab}/lab/workspaces/{uuid.uuid4().hex}/tree/{notebook}?reset")
    page.wait_for_selector(".jp-Notebook", timeout=30_000)
    page.wait_for_function("() => !!window.jupyterapp", timeout=30_000)
    page.wait_for_function(KERNEL_IDLE, timeout=30_000)
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")


def _dark(page: Any) -> None:
    page.evaluate("() => window.jupyterapp.commands.execute('apputils:change-theme',"
                  " {theme: 'JupyterLab Dark'})")
    page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'", timeout=15_000)
    page.wait_for_timeout(500)


@contextlib.contextmanager
def _browser(viewport_width: int = 1400) -> Iterator[tuple[Any, list[str]]]:
    sync_api = pytest.importorskip("playwright.sync_api")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": viewport_width, "height": 1000})
            page.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
            yield page, errors
        finally:
            browser.close()
    assert not errors, "JavaScript errors in the console:\n" + "\n".join(errors)


def _assert_figures_fill(timeline: Any) -> None:
    """The timeline's two figures are as wide as the view, not Plotly's 700 px, nor sticking out."""
    widths = timeline.evaluate(
        "(el) => [el.getBoundingClientRect().width, ...Array.from(el.querySelectorAll('.js-plotly-plot'),"
        " (f) => f.querySelector('.main-svg').getBoundingClientRect().width)]")
    assert len(widths) == 3 and all(abs(w - widths[0]) <= 2 for w in widths[1:]), widths
    assert widths[0] != 700, widths


# The figure's own numbers for the bar under the mouse: its hover fields, its length and its base.
HOVERED = """(figure) => {
  const text = document.querySelector('.hoverlayer .hovertext')?.textContent || '';
  const out = [];
  figure.data.forEach((trace) => (trace.customdata || []).forEach((c, i) => {
    if (text.includes(c[0]) && text.includes('duration ' + c[2])) out.push([c[2], trace.x[i], trace.base[i]]);
  }));
  return {text, matches: out, unit: figure.layout.xaxis.title.text.split(' ')[0]};
}"""
TO_NS = {"ns": 1, "µs": 1e3, "ms": 1e6, "s": 1e9}


def test_quickstart_renders_widgets_in_light_and_dark_theme(lab: str) -> None:
    with _browser(viewport_width=1100) as (page, _errors):  # a tab about as wide as the 1,060 px
        _open_and_run(page, lab, NOTEBOOK)
        dashboard = page.locator(".jp-OutputArea-output .msvm-dashboard").first
        dashboard.wait_for(timeout=45_000)
        registers = dashboard.locator(".msvm-register-view").first
        registers.wait_for()
        assert "float32[N, 3, H, W]" in registers.inner_text()
        # a table wider than its tab scrolls inside it: nothing is cut off on the right
        fit = registers.locator(".msvm-html").first.evaluate(
            "(el) => { const panel = el.closest('.jupyter-widget-Tab-contents, .widget-tab-contents')"
            " || el.closest('.jp-OutputArea-output'); const r = el.getBoundingClientRect();"
            " return {right: r.right, panel: panel.getBoundingClientRect().right, scroll: el.scrollWidth,"
            " client: el.clientWidth, overflow: getComputedStyle(el).overflowX}; }")
        assert fit["right"] <= fit["panel"] + 1, fit
        assert fit["scroll"] <= fit["client"] or fit["overflow"] in ("auto", "scroll"), fit
        dashboard.scroll_into_view_if_needed()
        dashboard.screenshot(path=str(ARTIFACTS / "quickstart-registers-light.png"))

        dashboard.get_by_role("tab", name="SCD").click()
        dashboard.locator(".msvm-scd-view").wait_for()
        dashboard.screenshot(path=str(ARTIFACTS / "quickstart-scd-light.png"))

        dashboard.get_by_role("tab", name="Timeline").click()
        timeline = dashboard.locator(".msvm-timeline")
        figures = timeline.locator(".js-plotly-plot")
        figures.first.wait_for(timeout=15_000)
        timeline.locator(".js-plotly-plot .bars path").first.wait_for(state="attached")
        page.wait_for_timeout(500)  # the figures refit to the tab once it shows
        _assert_figures_fill(timeline)
        # hover the widest slice of the call: its duration is the event's own, not the bar's end
        call_figure = figures.first
        bars = call_figure.locator(".bars path")
        boxes = [b for b in (bars.nth(i).bounding_box() for i in range(bars.count())) if b]
        widest = max(boxes, key=lambda b: b["width"])
        page.mouse.move(widest["x"] + widest["width"] / 2, widest["y"] + widest["height"] / 2)
        page.wait_for_selector(".hoverlayer .hovertext", timeout=10_000)
        hovered = call_figure.evaluate(HOVERED)
        assert hovered["matches"], hovered
        exact, length, _base = hovered["matches"][0]
        value, unit = exact.replace(",", "").split(" ")
        assert float(value) * TO_NS[unit] == pytest.approx(length * TO_NS[hovered["unit"]], rel=1e-6), hovered
        assert "into the call" in hovered["text"]
        dashboard.screenshot(path=str(ARTIFACTS / "quickstart-timeline-light.png"))
        page.mouse.move(5, 5)

        dashboard.get_by_role("tab", name="Debugger").click()
        debugger = dashboard.locator(".msvm-debugger")
        debugger.get_by_role("button", name="Step", exact=True).click()
        page.wait_for_function("() => document.querySelector('.msvm-debugger')?.innerText"
                               ".includes('1 instructions executed')", timeout=10_000)
        dashboard.screenshot(path=str(ARTIFACTS / "quickstart-debugger-light.png"))

        dashboard.get_by_role("tab", name="JIT cache").click()
        dashboard.locator(".msvm-jit-cache").wait_for()
        dashboard.screenshot(path=str(ARTIFACTS / "quickstart-jit-cache-light.png"))

        _dark(page)
        dashboard.screenshot(path=str(ARTIFACTS / "quickstart-jit-cache-dark.png"))
        dashboard.get_by_role("tab", name="Debugger").click()
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


def test_views_are_live_while_a_cell_runs_and_say_what_a_reset_dropped(lab: str) -> None:
    with _browser() as (page, _errors):
        _open_and_run(page, lab, LIVE)
        outputs = page.locator(".jp-Cell")
        monitor = outputs.nth(1).locator(".msvm-jit-monitor")
        progress = outputs.nth(2).locator(".msvm-cell-progress")
        monitor.wait_for(timeout=45_000)
        progress.wait_for(timeout=45_000)
        # while the long cell runs (its prompt [*]: no reply yet), the monitor lists compiled entries and
        # the cell's progress line counts its calls
        state = page.wait_for_function(
            r"""() => {
              const cells = document.querySelectorAll('.jp-Cell');
              const monitor = cells[1]?.querySelector('.msvm-jit-monitor')?.innerText || '';
              const progress = cells[2]?.querySelector('.msvm-cell-progress')?.innerText || '';
              const cache = /Cache \((\d+)/.exec(monitor);
              const calls = /running [\d.]+ s · ([\d,]+) calls/.exec(progress);
              if (cache && +cache[1] >= 2 && calls && /installed/.test(monitor))
                return {cache: +cache[1], calls: calls[1], progress,
                        prompt: cells[2].querySelector('.jp-InputArea-prompt')?.innerText || ''};
              return false;
            }""", timeout=60_000, polling=200).json_value()
        assert "*" in state["prompt"], state  # seen while the cell still runs: its prompt reads [*]
        outputs.nth(1).screenshot(path=str(ARTIFACTS / "live-monitor-running-light.png"))
        progress.screenshot(path=str(ARTIFACTS / "live-progress-light.png"))

        page.wait_for_function(KERNEL_IDLE, timeout=90_000)
        page.wait_for_function("() => document.querySelectorAll('.jp-Cell')[4]?.querySelector"
                               "('.jp-InputArea-prompt')?.innerText.includes('5')", timeout=30_000)
        assert "ran" in progress.inner_text()
        # after ms.vm.reset(): the cache view of cell 4 and the monitor say their entries are gone
        cache = outputs.nth(3).locator(".msvm-jit-cache")
        page.wait_for_function("() => document.querySelectorAll('.jp-Cell')[3]?.innerText.includes('gone')",
                               timeout=15_000)
        assert "0 cache entries of grow" in cache.inner_text()
        assert cache.locator("select option").count() == 0  # nothing left to select
        page.wait_for_function("() => document.querySelectorAll('.jp-Cell')[1]?.innerText"
                               ".includes('ms.vm.reset() emptied the JIT cache')", timeout=15_000)
        assert "Cache (0)" in monitor.inner_text()
        cache.screenshot(path=str(ARTIFACTS / "live-cache-after-reset-light.png"))
        monitor.screenshot(path=str(ARTIFACTS / "live-monitor-after-reset-light.png"))
        _dark(page)
        cache.screenshot(path=str(ARTIFACTS / "live-cache-after-reset-dark.png"))
        monitor.screenshot(path=str(ARTIFACTS / "live-monitor-after-reset-dark.png"))

        # the long cell ran without --trace: its timeline says so, and one click traces its last call
        dashboard = outputs.nth(2).locator(".msvm-dashboard")
        dashboard.get_by_role("tab", name="Timeline").click()
        timeline = dashboard.locator(".msvm-timeline")
        assert "Nothing was traced in this cell" in timeline.inner_text()
        timeline.get_by_role("button", name="Trace the last call again").click()
        timeline.locator(".js-plotly-plot .bars path").first.wait_for(state="visible", timeout=15_000)
        assert "interpreted) in 1 call, over" in timeline.inner_text()
        page.wait_for_timeout(500)
        _assert_figures_fill(timeline)  # drawn while hidden, refitted once shown
        dashboard.screenshot(path=str(ARTIFACTS / "live-timeline-traced-again-dark.png"))
