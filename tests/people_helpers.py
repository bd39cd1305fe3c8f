"""Helpers of the people tests: the app as a subprocess (its URL read from its first stdout line), and
a browser that answers or labels through it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


class App:
    """``python -m k9bench.people ARGS`` running; :attr:`url` is its first stdout line."""

    def __init__(self, args: list[str], tmp: Path):
        env = {**os.environ, "PYTHONPATH": str(REPO), "K9BENCH_NO_PROGRESS": "1"}
        self.err_path = tmp / f"app_err_{time.monotonic_ns()}.txt"
        self._err = open(self.err_path, "w")
        self.proc = subprocess.Popen([sys.executable, "-m", "k9bench.people", *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                     stderr=self._err, text=True)
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout=30)
        if not line or not line[0].startswith("http://"):
            self.stop()
            pytest.fail(f"the app printed no URL: {line} / {self.err_path.read_text()}")
        self.url = line[0].strip()
        self.base, self.token = self.url.split("/?token=")

    def stop(self, sig: int | None = None) -> None:
        if self.proc.poll() is None:
            if sig is None:
                self.proc.terminate()
            else:
                os.kill(self.proc.pid, sig)
            self.proc.wait(timeout=20)
        self._err.close()


def wait_text(driver, element_id: str, want: str, timeout: float = 20.0) -> str:
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        try:
            text = driver.find_element(By.ID, element_id).text
        except Exception:  # noqa: BLE001 (the page is being replaced)
            text = ""
        if want in text:
            return text
        time.sleep(0.05)
    pytest.fail(f"#{element_id} never said {want!r} (last: {text!r})")


def answer_one(driver, text: str | None, expect_next: str) -> str:
    """Type ``text`` (None: press Cannot answer) and wait for the next page's progress; returns the question shown before."""
    from selenium.webdriver.common.by import By

    shown = driver.find_element(By.ID, "question").text
    if text is None:
        driver.find_element(By.ID, "cannot").click()
    else:
        driver.find_element(By.ID, "answer").send_keys(text)
        driver.find_element(By.ID, "submit").click()
    wait_text(driver, "progress", expect_next)
    return shown


def records(path: Path) -> list[dict]:
    return json.loads(path.read_text())["individual_results"]
