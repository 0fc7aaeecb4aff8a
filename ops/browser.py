"""Headless Chromium (Debian's chromium + chromium-driver, driven by Selenium) for the monitor's
dashboard: the browser test and the demo's PNG of the final page.

The flags are the ones this kind of machine needs (no sandbox as root, no GPU, and no background
networking: the machine has no internet, and Chromium's calls home would fail noisily).
"""
from __future__ import annotations

import base64
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars")

# Points each plot on the page holds, by the plot's element id; -1 where plotly has not drawn it yet.
POINTS_JS = """
return Array.from(document.querySelectorAll('.plot')).map(div => [div.id,
  div.querySelector('.main-svg') && div.data
    ? div.data.reduce((n, t) => n + (t.x ? t.x.length : 0), 0) : -1]);
"""


def browser_paths() -> tuple[str, str] | None:
    """(chromium, chromedriver), or None when either is missing (scripts/monitor_deps.sh installs both)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


@contextmanager
def headless_chromium(width: int = 1400, height: int = 1000) -> Iterator["object"]:
    """A Selenium WebDriver on a fresh profile that records the page's console."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    paths = browser_paths()
    if paths is None:
        raise FileNotFoundError("chromium and chromedriver are needed (scripts/monitor_deps.sh installs them)")
    profile = tempfile.mkdtemp(prefix="m1flow-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = paths[0]
    for flag in (*FLAGS, f"--window-size={width},{height}", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(paths[1]), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@dataclass(frozen=True)
class PageCheck:
    points: dict[str, int]  # plot id -> points drawn
    console_errors: list[str]
    refreshes: int


def plot_points(driver: "object") -> dict[str, int]:
    return dict(driver.execute_script(POINTS_JS))


def refreshes(driver: "object") -> int:
    return int(driver.execute_script("return Number(document.body.dataset.refreshes || 0)"))


def console_errors(driver: "object") -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def wait_rendered(driver: "object", timeout: float = 60.0) -> dict[str, int]:
    """Wait until the page refreshed once and plotly drew every plot; the points per plot."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        points = plot_points(driver)
        if refreshes(driver) >= 1 and points and all(n >= 0 for n in points.values()):
            return points
        time.sleep(0.5)
    raise TimeoutError(f"dashboard plots not drawn after {timeout:.0f}s: {plot_points(driver)}")


def screenshot_full_page(driver: "object", path: Path) -> Path:
    """Save a PNG of the whole page, below the fold included (DevTools' captureBeyondViewport)."""
    width, height = driver.execute_script(
        "const e = document.documentElement; return [e.scrollWidth, e.scrollHeight];")
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(shot["data"]))
    return path


def snapshot(url: str, path: Path, timeout: float = 60.0) -> PageCheck:
    """Open the dashboard, wait for its plots, save a full-page PNG; what the page showed."""
    with headless_chromium() as driver:
        driver.get(url)
        points = wait_rendered(driver, timeout)
        screenshot_full_page(driver, path)
        return PageCheck(points, console_errors(driver), refreshes(driver))


def save_page(url: str, path: Path) -> str:
    """The demo's PNG of the final page; a line saying where it is, or why there is none."""
    if browser_paths() is None:
        return "no PNG of the dashboard: chromium/chromedriver missing (scripts/monitor_deps.sh installs them)"
    try:
        check = snapshot(url, path)
    except Exception as exc:  # noqa: BLE001 - the run's results stand without the picture
        return f"no PNG of the dashboard: {exc!r}"
    errors = f" ({len(check.console_errors)} console errors)" if check.console_errors else ""
    return f"dashboard PNG: {path}{errors}"
