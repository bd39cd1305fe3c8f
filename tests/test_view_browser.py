"""The results page in a real browser: headless system Chromium through Selenium and chromium-driver
(no browser download), pages opened from ``file://``. Without Chromium these tests are skipped, saying
why; under ``CI=true`` that is a failure instead."""

from __future__ import annotations

import os
import time

import pytest

from k9bench.view import browser
from k9bench.view.__main__ import main
from tests.view_fakes import DEMO_NOTE, demo_eval, demo_judge, frame_indices

TAG = "tiny-m_mf4_n-1"


def skip_or_fail(reason: str):
    if os.environ.get("CI", "").strip().lower() == "true":
        pytest.fail(f"CI=true, but the browser tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def driver():
    reason = browser.unavailable()
    if reason:
        skip_or_fail(reason)
    drv = browser.start()
    yield drv
    drv.quit()


@pytest.fixture(scope="module")
def pages(tmp_path_factory, demo_video_dir):
    tmp = tmp_path_factory.mktemp("view_browser")
    indices = frame_indices(demo_video_dir)
    ev = demo_eval(tmp / f"eval_{TAG}.json", demo_video_dir, failed=(11,), indices=indices)
    other = demo_eval(tmp / "eval_other-m_mf4_n-1.json", demo_video_dir, model="other-m", shift=-1, indices=indices)
    judge = demo_judge(tmp / f"judge_{TAG}.json")
    assert main([str(ev), str(judge), "--output_dir", str(tmp / "demo"), "--note", DEMO_NOTE, "-q"]) == 0
    assert main([str(ev), str(other), "--output_dir", str(tmp / "two"), "-q"]) == 0
    return tmp


def visible_rows(drv) -> int:
    return drv.execute_script("return document.querySelectorAll('#qtable tbody tr.qrow:not([hidden])').length")


def test_demo_page_in_chromium(driver, pages):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver.get_log("browser")
    driver.get_log("performance")  # start both logs afresh for this page
    browser.open_page(driver, pages / "demo" / "index.html")
    assert visible_rows(driver) == 12
    assert driver.find_element(By.ID, "count").text == "12 of 12 questions"
    assert "MEANINGLESS" in driver.find_element(By.ID, "notes").text

    Select(driver.find_element(By.ID, "f-cat")).select_by_value("posture analysis")
    assert visible_rows(driver) == 3 and driver.find_element(By.ID, "count").get_attribute("data-count") == "3"
    Select(driver.find_element(By.ID, "f-cat")).select_by_value("")
    Select(driver.find_element(By.ID, "f-verdict")).select_by_value("failed")
    assert visible_rows(driver) == 1
    Select(driver.find_element(By.ID, "f-verdict")).select_by_value("")

    driver.find_element(By.ID, "row-4").click()
    detail = driver.find_element(By.ID, "detail")
    assert detail.text.startswith("#4 ")
    assert len(detail.find_elements(By.CSS_SELECTOR, ".bar")) == 5
    thumbs = detail.find_elements(By.CSS_SELECTOR, "img.thumb")
    assert 1 <= len(thumbs) <= 8
    driver.execute_script("arguments[0].scrollIntoView()", thumbs[-1])
    deadline = time.time() + 10
    while not all(driver.execute_script("return arguments[0].complete && arguments[0].naturalWidth > 0", t) for t in thumbs):
        assert time.time() < deadline, "the thumbnails did not load"
        time.sleep(0.05)

    # keyboard: j next, k previous
    driver.find_element(By.TAG_NAME, "body").send_keys("j")
    assert detail.text.startswith("#5 ")
    driver.find_element(By.TAG_NAME, "body").send_keys("k")
    assert detail.text.startswith("#4 ")

    # deep link: the hash follows the open question, and a new #idx opens that one
    assert driver.execute_script("return location.hash") == "#4"
    driver.execute_script("location.hash = '#9'")
    time.sleep(0.2)
    assert driver.find_element(By.ID, "detail").text.startswith("#9 ")

    assert browser.console_errors(driver) == []
    urls = browser.requested_urls(driver)
    assert urls and all(u.startswith("file://") for u in urls), [u for u in urls if not u.startswith("file://")]


def test_a_fresh_load_with_a_hash_opens_that_question(driver, pages):
    from selenium.webdriver.common.by import By

    driver.get("about:blank")
    driver.get((pages / "demo" / "index.html").resolve().as_uri() + "#7")
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.body.getAttribute('data-ready')") == "1")
    assert driver.find_element(By.ID, "detail").text.startswith("#7 ")
    assert "sel" in driver.find_element(By.ID, "row-7").get_attribute("class")


def test_two_run_page_shows_the_disagreements(driver, pages):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver.get_log("browser")
    browser.open_page(driver, pages / "two" / "index.html")
    data = driver.execute_script("return JSON.parse(document.getElementById('k9data').textContent)")
    expected = sum(1 for q in data["questions"] if (q["r"][0]["v"] == "correct") != (q["r"][1]["v"] == "correct"))
    assert expected > 0
    Select(driver.find_element(By.ID, "f-verdict")).select_by_value("disagree")
    assert visible_rows(driver) == expected
    assert "Agreement" in driver.find_element(By.ID, "across").text
    driver.find_element(By.CSS_SELECTOR, "#qtable tbody tr.qrow:not([hidden])").click()
    assert len(driver.find_elements(By.CSS_SELECTOR, "#detail .run")) == 2
    assert browser.console_errors(driver) == []


def test_text_filter_and_sorting(driver, pages):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.open_page(driver, pages / "demo" / "index.html")
    data = driver.execute_script("return JSON.parse(document.getElementById('k9data').textContent)")
    box = driver.find_element(By.ID, "f-text")
    box.send_keys("camera-like")
    want = [q["i"] for q in data["questions"] if "camera-like" in q["q"].lower()]
    assert want and visible_rows(driver) == len(want)
    box.clear()
    box.send_keys(" ")  # an input event with nothing to search for: every row again
    assert visible_rows(driver) == 12
    Select(driver.find_element(By.ID, "f-sort")).select_by_value("x")
    first = driver.execute_script("return document.querySelector('#qtable tbody tr.qrow').id")
    top = max((q for q in data["questions"] if q["r"][0].get("x")), key=lambda q: (max(q["r"][0]["x"]), -q["i"]))
    assert first == f"row-{top['i']}"
    assert browser.console_errors(driver) == []
