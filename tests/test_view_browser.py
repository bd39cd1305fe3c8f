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
    other = demo_eval(tmp / "eval_other-m_mf2_n-1.json", demo_video_dir, model="other-m", shift=-1, max_frames=2)  # its own frames
    judge = demo_judge(tmp / f"judge_{TAG}.json")
    assert main([str(ev), str(judge), "--output_dir", str(tmp / "demo"), "--note", DEMO_NOTE, "-q"]) == 0
    assert main([str(ev), str(other), "--output_dir", str(tmp / "two"), "-q"]) == 0
    # the report of ev with --baseline other: its own page holds both runs and the paired block
    from k9bench.report import ReportStage, config_from_argv
    from k9bench.stage import run_stage

    # the baseline is right where this run is wrong and the reverse (b and c both above 0)
    base = demo_eval(tmp / "base" / "eval_base-m_mf2_n-1.json", demo_video_dir, model="base-m", shift=4, max_frames=2)
    assert run_stage(ReportStage(config_from_argv(["--input_file", str(ev), "--baseline", str(base), "--report_dir",
                                                   str(tmp / "report"), "-q"]))) == 0
    from tests.test_view import hostile_eval

    hostile = hostile_eval(tmp / "hostile" / f"eval_{TAG}.json", demo_video_dir, indices)
    assert main([str(hostile), "--output_dir", str(tmp / "hostile_page"), "--thumbnails", "0", "-q"]) == 0
    from k9bench.artifact_io import read_json, write_json_atomic

    shifted = read_json(other)
    for rec in shifted["individual_results"][:3]:
        rec["ground_truth"] = "ABCDE"[("ABCDE".index(rec["ground_truth"]) + 1) % 5]
    shifted = write_json_atomic(tmp / "apart" / "eval_other-m_mf2_n-1.json", shifted)
    assert main([str(ev), str(shifted), "--output_dir", str(tmp / "apart_page"), "--thumbnails", "0", "-q"]) == 0
    many = [demo_eval(tmp / "many" / f"eval_model-{k:02d}_mf4_n-1.json", demo_video_dir, model=f"model-{k:02d}", shift=k % 3 - 1,
                      indices=indices) for k in range(13)]
    assert main([*map(str, many), "--output_dir", str(tmp / "thirteen"), "--thumbnails", "0", "-q"]) == 0
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


def shown_ids(drv) -> list[int]:
    return drv.execute_script("return Array.prototype.map.call(document.querySelectorAll('#qtable tbody tr.qrow:not([hidden])'), "
                              "function (r) { return +r.id.slice(4); })")


def test_comparison_filters_give_the_reports_b_and_c(driver, pages):
    import json

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    pc = json.loads((pages / "report" / "report.json").read_text())["paired_comparison"]
    browser.open_page(driver, pages / "report" / "index.html")
    assert driver.find_element(By.CSS_SELECTOR, "#runs summary").text.startswith("2 runs")  # the baseline is on the page
    assert driver.execute_script("return document.querySelectorAll('#qtable thead .hchip').length") == 2
    paired = driver.find_element(By.ID, "paired").text
    assert f"{pc['diff']:+.1f}" in paired and "clustered p = n/a" in paired and "assumes independent questions" in paired
    links = driver.find_elements(By.CSS_SELECTOR, "#paired button.pairlink")
    assert [b.get_attribute("data-pair") for b in links] == ["rw", "wr"]
    links[0].click()
    assert visible_rows(driver) == pc["mcnemar_b"] > 0
    assert "A right, B wrong (%d)" % pc["mcnemar_b"] in driver.find_element(By.ID, "f-pair").text
    driver.find_elements(By.CSS_SELECTOR, "#paired button.pairlink")[1].click()
    assert visible_rows(driver) == pc["mcnemar_c"] > 0
    counts = {}
    for kind in ("rw", "wr", "rr", "ww"):
        Select(driver.find_element(By.ID, "f-pair")).select_by_value(kind)
        counts[kind] = visible_rows(driver)
    assert (counts["rw"], counts["wr"]) == (pc["mcnemar_b"], pc["mcnemar_c"]) and sum(counts.values()) == pc["n_common_questions"]
    matrix = driver.execute_script("return JSON.parse(document.getElementById('k9data').textContent).across.pairs[0][1]")
    assert (matrix["rw"], matrix["wr"], matrix["rr"], matrix["ww"]) == (counts["rw"], counts["wr"], counts["rr"], counts["ww"])
    agreement = float(driver.find_element(By.CSS_SELECTOR, "#across .matrix tr:nth-child(2) td:nth-child(3)").text.rstrip("%"))
    assert agreement == round(100 * (counts["rr"] + counts["ww"]) / sum(counts.values()), 1)
    # the "differ" filter: the same definition (A and B swapped or not)
    Select(driver.find_element(By.ID, "f-pair")).select_by_value("")
    Select(driver.find_element(By.ID, "f-verdict")).select_by_value("disagree")
    assert visible_rows(driver) == counts["rw"] + counts["wr"]
    assert browser.console_errors(driver) == []


def test_hostile_text_is_shown_as_text_and_unsafe_links_are_not_links(driver, pages):
    from selenium.webdriver.common.by import By

    from tests.test_view import HOSTILE

    browser.open_page(driver, pages / "hostile_page" / "index.html")
    assert visible_rows(driver) == 12 and driver.find_element(By.ID, "count").text == "12 of 12 questions"
    detail = driver.find_element(By.ID, "detail")
    for idx in range(4):
        driver.find_element(By.ID, f"row-{idx}").click()
        answer = detail.find_element(By.CSS_SELECTOR, ".run q")
        assert answer.text == HOSTILE[idx].strip() and answer.find_elements(By.CSS_SELECTOR, "*") == []  # text, no element
        hrefs = [a.get_attribute("href") for a in detail.find_elements(By.CSS_SELECTOR, "a")]
        assert all(h.startswith(("file://", "https://")) for h in hrefs), hrefs
        if idx == 0:  # its video_url is javascript:...: no link made of it
            assert len(hrefs) == 1 and hrefs[0].startswith("file://") and "javascript" not in detail.get_attribute("innerHTML")
        if idx == 1:
            assert "https://example.org/watch?v=1" in hrefs
    assert browser.console_errors(driver) == []


def test_the_demo_links_its_videos_to_their_local_files(driver, pages):
    from selenium.webdriver.common.by import By

    browser.open_page(driver, pages / "demo" / "index.html")
    driver.find_element(By.ID, "row-3").click()
    hrefs = [a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "#detail a")]
    assert len(hrefs) == 1 and hrefs[0].startswith("file://") and hrefs[0].endswith(".mp4")


def test_each_run_shows_its_own_frames_labelled(driver, pages):
    from selenium.webdriver.common.by import By

    browser.open_page(driver, pages / "two" / "index.html")
    driver.find_element(By.ID, "row-4").click()
    strips = driver.find_elements(By.CSS_SELECTOR, "#detail .strip")
    assert [s.find_element(By.CSS_SELECTOR, ".strip-runs").text for s in strips] == ["frames seen by 1. tiny-m", "frames seen by 2. other-m"]
    seen = [[int(i.get_attribute("alt").split()[-1]) for i in s.find_elements(By.CSS_SELECTOR, "img")] for s in strips]
    assert len(seen[0]) == 4 and len(seen[1]) == 2 and seen[0] != seen[1]


@pytest.mark.parametrize("page", ["demo", "two", "report", "big"])
def test_axe_finds_no_serious_or_critical_violation(driver, pages, page, big_page):
    import importlib.util

    from selenium.webdriver.common.by import By

    if importlib.util.find_spec("axe_core_python") is None:
        skip_or_fail("axe-core-python is not installed (pip install -r requirements-dev.txt)")

    target = big_page if page == "big" else pages / page / "index.html"
    browser.open_page(driver, target)
    if page == "big":
        from selenium.webdriver.support.ui import WebDriverWait

        WebDriverWait(driver, 60).until(lambda d: d.execute_script("return document.body.getAttribute('data-complete')"))
    driver.find_element(By.CSS_SELECTOR, "#qtable tbody tr.qrow").click()  # a question open: its bars, chips, GT tag
    driver.find_element(By.ID, "keys-btn").click()
    assert browser.axe_violations(driver) == []


@pytest.fixture(scope="module")
def big_page(tmp_path_factory):
    """The 4,744-question page of bench/bench_view.py (one synthetic run, no thumbnails)."""
    import importlib.util
    from pathlib import Path

    from k9bench.view import build_page

    spec = importlib.util.spec_from_file_location("bench_view", Path(__file__).resolve().parent.parent / "bench" / "bench_view.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    tmp = tmp_path_factory.mktemp("view_big")
    ev = bench.synthetic_eval(tmp / "eval_model-00_mf32_n-1.json", questions=4744, videos=907, model="model-00", seed=0)
    return build_page([ev], tmp / "page", thumbnails=0)


def test_keyboard_only(driver, pages):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.open_page(driver, pages / "two" / "index.html")
    keys = ActionChains(driver)
    for _ in range(60):  # Tab through the page until a question row has the focus
        keys.send_keys(Keys.TAB).perform()
        if driver.execute_script("return document.activeElement.classList.contains('qrow')"):
            break
    else:
        raise AssertionError("no question row is reachable with Tab")
    assert driver.execute_script("return document.activeElement.id") == "row-0"
    keys.send_keys(Keys.ENTER).perform()
    detail = driver.find_element(By.ID, "detail")
    assert detail.text.startswith("#0 ")
    keys.send_keys("j").perform()
    assert detail.text.startswith("#1 ") and driver.execute_script("return document.activeElement.id") == "row-1"
    keys.send_keys(Keys.ARROW_DOWN).perform()
    assert detail.text.startswith("#2 ")
    keys.send_keys("k").perform()
    assert detail.text.startswith("#1 ")
    # from a menu: j and k still move (its arrows move the menu); in the text box they are text
    driver.find_element(By.ID, "f-cat").click()
    driver.find_element(By.ID, "f-cat").send_keys(Keys.ESCAPE)
    keys.send_keys("j").perform()
    assert detail.text.startswith("#2 ")
    driver.find_element(By.ID, "f-text").click()
    keys.send_keys("j").perform()
    assert detail.text.startswith("#2 ") and driver.find_element(By.ID, "f-text").get_attribute("value") == "j"
    keys.send_keys(Keys.ESCAPE).perform()
    driver.find_element(By.ID, "f-text").clear()
    driver.find_element(By.TAG_NAME, "body").click()
    keys.send_keys("?").perform()
    help_box = driver.find_element(By.ID, "keys")
    assert help_box.is_displayed() and "next question" in help_box.text
    keys.send_keys(Keys.ESCAPE).perform()
    assert not help_box.is_displayed()


def test_state_is_in_the_url_and_survives_a_reload(driver, pages):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    browser.open_page(driver, pages / "two" / "index.html")
    Select(driver.find_element(By.ID, "f-pair")).select_by_value("wr")
    Select(driver.find_element(By.ID, "f-sort")).select_by_value("m")
    Select(driver.find_element(By.ID, "f-run")).select_by_value("1")
    ids = shown_ids(driver)
    assert len(ids) >= 2 and ids != sorted(ids)  # sorted by run 2's margin, not by idx
    driver.find_element(By.ID, f"row-{ids[1]}").click()
    url = driver.current_url
    assert "pair=wr" in url and "sort=m" in url and "run=1" in url and f"#{ids[1]}&" in url
    driver.get("about:blank")
    driver.get(url)
    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.body.getAttribute('data-ready')") == "1")
    assert shown_ids(driver) == ids
    assert driver.find_element(By.ID, "f-pair").get_attribute("value") == "wr"
    assert driver.find_element(By.ID, "detail").text.startswith(f"#{ids[1]} ")


def test_export_copy_and_the_score_sorts_of_a_chosen_run(driver, pages):
    import csv
    import io
    import json

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.open_page(driver, pages / "two" / "index.html")
    data = driver.execute_script("return JSON.parse(document.getElementById('k9data').textContent)")
    Select(driver.find_element(By.ID, "f-verdict")).select_by_value("wrong")
    ids = shown_ids(driver)
    rows = list(csv.reader(io.StringIO(driver.execute_script("return k9export('csv')"))))
    assert rows[0] == ["idx", "video", "category", "question", "ground_truth", "tiny-m verdict", "tiny-m answer",
                       "other-m verdict", "other-m answer"]
    assert [int(r[0]) for r in rows[1:]] == ids and all(r[5] == "wrong" for r in rows[1:])
    exported = json.loads(driver.execute_script("return k9export('json')"))
    assert [q["idx"] for q in exported["questions"]] == ids and exported["runs"] == ["tiny-m", "other-m"]
    assert exported["questions"][0]["runs"][1]["answer"] == data["questions"][ids[0]]["r"][1]["a"]
    Select(driver.find_element(By.ID, "f-verdict")).select_by_value("")

    def margin(q, k):
        x, g = q["r"][k]["x"], "ABCDE".index(q["g"])
        return x[g] - max(v for j, v in enumerate(x) if j != g)

    for k in (0, 1):  # the sort follows the run chosen, not the first run
        Select(driver.find_element(By.ID, "f-run")).select_by_value(str(k))
        Select(driver.find_element(By.ID, "f-sort")).select_by_value("m")
        scored = [q for q in data["questions"] if q["r"][k].get("x")]
        want = [q["i"] for q in sorted(scored, key=lambda q: (margin(q, k), q["i"]))]
        assert shown_ids(driver)[:len(want)] == want
        Select(driver.find_element(By.ID, "f-margin")).select_by_value("far-")
        assert shown_ids(driver) == [i for i in want if margin(data["questions"][i], k) < -0.1]
        Select(driver.find_element(By.ID, "f-margin")).select_by_value("")
    driver.find_element(By.ID, "row-3").click()
    driver.find_element(By.ID, "copy-id").click()
    from selenium.webdriver.support.ui import WebDriverWait

    said = WebDriverWait(driver, 10).until(lambda d: d.find_element(By.ID, "copied").text)  # the clipboard answers later
    assert said in ("copied 3", "id 3 (copying is not allowed here)")


def test_judge_score_filter_and_sort(driver, pages):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.open_page(driver, pages / "demo" / "index.html")
    Select(driver.find_element(By.ID, "f-judge")).select_by_value("mid")  # the demo judge's overall score is 6 on 0, 1, 2
    assert shown_ids(driver) == [0, 1, 2]
    assert "overall 4 to 6 (3)" in driver.find_element(By.ID, "f-judge").text
    Select(driver.find_element(By.ID, "f-judge")).select_by_value("none")
    assert len(shown_ids(driver)) == 9


def test_narrow_screen_and_many_runs(driver, pages, tmp_path):
    from PIL import Image
    from selenium.webdriver.common.by import By

    try:  # a phone's 400 CSS px: the viewport meta is honoured (mobile emulation), no sideways scrolling of the page
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {"width": 400, "height": 850, "deviceScaleFactor": 1, "mobile": True})
        browser.open_page(driver, pages / "two" / "index.html")
        assert driver.execute_script("return document.querySelector('meta[name=viewport]').content") == "width=device-width, initial-scale=1"
        width = driver.execute_script("return window.innerWidth")
        for chip in driver.find_elements(By.CSS_SELECTOR, "#row-0 .chip"):
            box = driver.execute_script("var r = arguments[0].getBoundingClientRect(); return [r.left, r.right, r.width]", chip)
            assert box[2] > 0 and 0 <= box[0] and box[1] <= width, box  # the verdict column is on screen
        assert driver.execute_script("return document.documentElement.scrollWidth") <= width
        driver.find_element(By.ID, "row-0").click()
        png = tmp_path / "narrow.png"
        driver.save_screenshot(str(png))
        assert Image.open(png).size[0] == 400
        # thirteen runs: the question column keeps a readable width (the list scrolls sideways instead)
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        browser.open_page(driver, pages / "thirteen" / "index.html")
        question = driver.execute_script("return document.querySelector('#row-0 td.q').getBoundingClientRect().width")
        assert question >= 200, question
        chips = driver.execute_script("return Array.prototype.map.call(document.querySelectorAll('#row-0 .chip'), function (c) {"
                                      " var r = c.getBoundingClientRect(); return [r.top, r.right]; })")
        cell = driver.execute_script("var r = document.querySelector('#row-0 td:last-child').getBoundingClientRect(); return [r.top, r.right]")
        assert len(chips) == 13 and len({top for top, _ in chips}) == 1 and max(right for _, right in chips) <= cell[1]  # one line, not clipped
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_a_big_page_lists_the_first_rows_and_more_on_demand(driver, big_page):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.open_page(driver, big_page)
    assert driver.find_element(By.ID, "count").text == "4744 of 4744 questions" and visible_rows(driver) == 400
    more = driver.find_element(By.ID, "more")
    assert more.text == "show 400 more (4344 not listed yet)"
    driver.execute_script("arguments[0].click()", more)
    assert visible_rows(driver) == 800 and shown_ids(driver) == list(range(800))
    Select(driver.find_element(By.ID, "f-cat")).select_by_value("posture analysis")  # a filter lists its first 400 again
    count = int(driver.find_element(By.ID, "count").get_attribute("data-count"))
    assert count == 4744 // 5 + 1 and visible_rows(driver) == 400 and shown_ids(driver) == list(range(0, 2000, 5))
    driver.execute_script("location.hash = '#4000&cat=posture%20analysis'")  # a question past the listed rows: listed, opened
    assert driver.find_element(By.ID, "detail").text.startswith("#4000 ") and visible_rows(driver) == count  # 4000 is the 801st: up to 1200
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(driver).send_keys("j").perform()
    assert driver.find_element(By.ID, "detail").text.startswith("#4005 ")
    assert browser.console_errors(driver) == []


def test_another_ground_truth_is_compared_apart(driver, pages):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.open_page(driver, pages / "apart_page" / "index.html")
    counts = []
    for kind in ("rw", "wr", "rr", "ww"):
        Select(driver.find_element(By.ID, "f-pair")).select_by_value(kind)
        counts.append(visible_rows(driver))
        assert not set(shown_ids(driver)) & {0, 1, 2}  # the three shifted questions are in no pair
    assert sum(counts) == 9
    Select(driver.find_element(By.ID, "f-pair")).select_by_value("")
    Select(driver.find_element(By.ID, "f-verdict")).select_by_value("disagree")
    assert visible_rows(driver) == counts[0] + counts[1]
    Select(driver.find_element(By.ID, "f-verdict")).select_by_value("")
    driver.find_element(By.ID, "row-0").click()
    blocks = driver.find_elements(By.CSS_SELECTOR, "#detail .run")
    assert "another ground truth" not in blocks[0].text and "another ground truth" in blocks[1].text
    gt = [b.find_element(By.CSS_SELECTOR, "tr.gt td.letter").text for b in blocks]
    assert gt[0] != gt[1]  # each run's bars show its own file's ground truth
