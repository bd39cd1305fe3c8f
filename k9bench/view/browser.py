"""Headless system Chromium through Selenium, for the page's browser tests, its benchmark and its
screenshots (a development tool: ``pip install -r requirements-dev.txt``, ``apt-get install chromium
chromium-driver``). The browser and driver are named explicitly, so Selenium Manager never downloads
anything; pages are opened from ``file://`` only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

CHROMIUM = os.environ.get("K9BENCH_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("K9BENCH_CHROMEDRIVER", "/usr/bin/chromedriver")


def unavailable() -> str | None:
    """Why no browser can be driven here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -r requirements-dev.txt)"
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            return f"{path} not found (apt-get install {package})"
    return None


def start(width: int = 1400, height: int = 900):
    """A headless Chromium WebDriver with console and network logging on."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", f"--window-size={width},{height}",
                "--allow-file-access-from-files", "--no-first-run", "--disable-background-networking", "--disable-extensions",
                "--disable-component-update", "--disable-sync", "--disable-default-apps", "--hide-scrollbars"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def open_page(driver, page: str | Path) -> None:
    """Load a page from ``file://`` and wait until its script has run."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(Path(page).resolve().as_uri())
    WebDriverWait(driver, 30, poll_frequency=0.02).until(lambda d: d.execute_script("return document.body.getAttribute('data-ready')") == "1")


def requested_urls(driver) -> list[str]:
    """Every URL the page requested, from the performance log (and the page's resource entries)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"]).get("message", {})
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    urls += driver.execute_script("return performance.getEntriesByType('resource').map(function (e) { return e.name; })")
    return urls


def console_errors(driver) -> list[str]:
    """Console messages at SEVERE level."""
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def screenshot(page: str | Path, png: str | Path, *, question: int | None = None, width: int = 1400, height: int = 900) -> Path:
    """Save a PNG of ``page`` (with question ``#question`` opened) as headless Chromium draws it."""
    driver = start(width, height)
    try:
        open_page(driver, page)
        if question is not None:
            driver.execute_script(f"location.hash = '#{int(question)}'")
            driver.execute_script("return document.getElementById('detail').textContent")
        driver.save_screenshot(str(png))
    finally:
        driver.quit()
    return Path(png)


def axe_source() -> str:
    """axe-core's script, from the pinned ``axe-core-python`` package (requirements-dev.txt): offline, no CDN."""
    from importlib.resources import files

    return files("axe_core_python").joinpath("axe.min.js").read_text(encoding="utf-8")


def axe_violations(driver, impacts: tuple = ("serious", "critical")) -> list[dict]:
    """axe-core's violations of the open page at the given impacts (rule id, impact, help, the first targets)."""
    driver.execute_script(axe_source())
    driver.set_script_timeout(120)
    result = driver.execute_async_script("var done = arguments[arguments.length - 1];"
                                         "axe.run(document, {resultTypes: ['violations']}).then(done, function (e) { done({error: String(e)}); });")
    if "error" in result:
        raise RuntimeError(f"axe-core failed: {result['error']}")
    return [{"id": v["id"], "impact": v["impact"], "help": v["help"], "targets": [n["target"] for n in v["nodes"][:5]],
             "version": result.get("testEngine", {}).get("version")}
            for v in result["violations"] if v["impact"] in impacts]
