"""Benchmark of the results page (issues 30 and 39) on synthetic runs of the full benchmark's size.

A seeded synthetic eval file of 4,744 questions on 907 videos (questions, options, answers, similarities,
verdicts and explanations of realistic lengths; no video, so no thumbnails) per run is turned into a page
with ``python -m k9bench.view``'s code, at 1, 2 and 13 runs on one page, each opened in headless Chromium
from ``file://``:

- build: seconds to write index.html; size: index.html in MB (goal: under 10 MB for one run);
- load: on the page's own clock, from navigation to its script having drawn the first rows and the load
  event (goal: under 2 s); the same through WebDriver, and the baseline of the eval JSON itself opened in
  the same browser, are printed for comparison (ratio baseline / page);
- what a person waits for, **to the next paint**: from the change to the frame after it has been painted
  (``requestAnimationFrame``, then a task queued from it, which runs once that frame is drawn) for a
  category filter, clearing it, a sort (by top similarity) and back to idx, and opening a question.
  Goals: filter, clear and sort under 1 s, opening under 200 ms (at every page size). The page lists the
  first 400 rows that pass the filters (more on demand), so these do not grow with the questions.

``--runs 1 2 13`` (the default) says which pages; ``--screenshot PNG`` saves the last one. Exits 1 when a
goal is missed. Needs selenium, chromium and chromium-driver (requirements-dev.txt; apt).

    python bench/bench_view.py
    python bench/bench_view.py --runs 13 --screenshot docs/img/view_13_runs.png
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

WORDS = ("dog tail ears sits lies runs walks jumps barks sniffs owner ball stick grass couch door leash toy food bowl "
         "head paw slowly quickly towards away because after before while looks turns waits plays rolls").split()


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)).capitalize()


def synthetic_eval(path: Path, *, questions: int, videos: int, model: str, seed: int) -> Path:
    """A seeded eval file (SPEC section 2 keys) of ``questions`` questions over ``videos`` videos."""
    from k9bench import CATEGORIES
    from k9bench.artifact_io import write_json_atomic

    rng = random.Random(seed)
    q_rng = random.Random(0)  # the questions are the same in every run; the answers differ
    records = []
    for idx in range(questions):
        scene = f"yt{idx * videos // questions:08d}"
        options = [f"{k}. {sentence(q_rng, 8)}" for k in "ABCDE"]
        gt = "ABCDE"[q_rng.randrange(5)]
        question = sentence(q_rng, 16) + "?"
        duration = 20.0 + (idx * videos // questions) % 280
        sims = {k: round(rng.uniform(0.1, 0.9), 4) for k in "ABCDE"}
        best = max(sims, key=sims.get)
        rec = {"idx": idx, "question_category": CATEGORIES[idx % 5], "video": f"{scene}.mp4", "scene_name": scene,
               "ground_truth": gt, "response": sentence(rng, 30), "answer": sentence(rng, 12), "question": question,
               "options": options, "prompt": "p", "model_name": model, "max_frames": 32, "timestamp": "t", "video_duration": duration,
               "cosine_similarities": sims, "is_correct": best == gt and sims[best] >= 0.5,
               "evaluation_explanation": f"closest option {best} ({sims[best]:.3f}) against the threshold 0.5", "eval_mode": "fine"}
        if rng.random() < 0.01:
            rec.update(error="VideoError: decode failed", error_class="decode_error", is_correct=False)
        records.append(rec)
    meta = {"threshold": 0.5, "eval_mode": "fine", "category_wise_accuracy": {}, "total_count": len(records),
            "correct_count": sum(r["is_correct"] for r in records), "metadata": {"similarity_model": "Qwen/Qwen3-Embedding-8B"},
            "input_meta": {"model_name": model, "inference": {"frames": {"max_frames": 32, "fps": 1.0}, "dataset": {"source": "synthetic"}}},
            "individual_results": records}
    return write_json_atomic(path, meta)


PAINT_GOALS_MS = {"filter": 1000, "clear": 1000, "sort": 1000, "sort back": 1000, "open": 200}
"""Goals, in ms to the next paint, for each step (the same at 1, 2 and 13 runs)."""
LOAD_GOAL_S = 2.0
SIZE_GOAL_MB = 10.0

TO_PAINT = """
var done = arguments[arguments.length - 1], step = arguments[0];
function change(id, value) { var el = document.getElementById(id); el.value = value; el.dispatchEvent(new Event('change')); }
var act = {
  'filter': function () { change('f-cat', 'posture analysis'); },
  'clear': function () { change('f-cat', ''); },
  'sort': function () { change('f-sort', 'x'); },
  'sort back': function () { change('f-sort', 'i'); },
  'open': function () { document.querySelectorAll('#qtable tbody tr.qrow')[200].click(); }
}[step];
var t0 = performance.now();
act();
requestAnimationFrame(function () { setTimeout(function () { done(performance.now() - t0); }, 0); });
"""


def measure(driver, page: Path) -> dict:
    from k9bench.view import browser
    from selenium.webdriver.support.ui import WebDriverWait

    t0 = time.perf_counter()
    browser.open_page(driver, page)
    load = time.perf_counter() - t0
    WebDriverWait(driver, 60, poll_frequency=0.02).until(lambda d: d.execute_script("return document.body.getAttribute('data-complete')"))
    inside = driver.execute_script("var n = performance.getEntriesByType('navigation')[0]; "
                                   "return Math.max(n.loadEventEnd, window.k9timings.ready)") / 1000.0
    stages = driver.execute_script("return window.k9timings")
    driver.set_script_timeout(60)
    paint = {}
    for step in PAINT_GOALS_MS:
        time.sleep(0.2)  # an idle page before each step
        paint[step] = driver.execute_async_script(TO_PAINT, step)
    errors = browser.console_errors(driver)
    outside = [u for u in browser.requested_urls(driver) if not u.startswith("file://")]
    return {"load": load, "inside": inside, "stages": stages, "paint": paint, "errors": errors, "outside": outside}


def main(argv: list[str] | None = None) -> int:
    from k9bench.cli import ArgumentParser  # the project's one parser: no abbreviated flags
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=4744)
    parser.add_argument("--videos", type=int, default=907)
    parser.add_argument("--runs", type=int, nargs="+", default=[1, 2, 13], help="runs on one page, one page each (default: %(default)s)")
    parser.add_argument("--screenshot", metavar="PNG", help="save a screenshot of the last page (a question opened)")
    args = parser.parse_args(argv)
    from k9bench.view import browser, build_page

    reason = browser.unavailable()
    if reason:
        print(f"bench_view: {reason}", file=sys.stderr)
        return 2
    missed = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        evals = [synthetic_eval(tmp / f"eval_model-{k:02d}_mf32_n-1.json", questions=args.questions, videos=args.videos,
                                model=f"model-{k:02d}", seed=k) for k in range(max(args.runs))]
        eval_mb = evals[0].stat().st_size / 1e6
        driver = browser.start()
        try:
            driver.get("about:blank")
            t0 = time.perf_counter()
            driver.get(evals[0].resolve().as_uri())  # the baseline: the eval JSON itself
            driver.execute_script("return document.readyState")
            baseline = time.perf_counter() - t0
            print(f"bench_view: {args.questions} questions, {args.videos} videos; thumbnails off; the eval JSON alone "
                  f"({eval_mb:.2f} MB) loads in {baseline:.2f} s through WebDriver")
            for runs in args.runs:
                t0 = time.perf_counter()
                page = build_page(evals[:runs], tmp / f"page{runs}", thumbnails=0)
                build = time.perf_counter() - t0
                size = page.stat().st_size / 1e6
                driver.get("about:blank")
                got = measure(driver, page)
                st = got["stages"]
                print(f"{runs} run(s): build {build:.2f} s; index.html {size:.2f} MB")
                print(f"  load       {got['inside']:.2f} s on the page's clock (the first rows drawn at "
                      f"{st['complete'] / 1000:.2f} s, then the load event); {got['load']:.2f} s through WebDriver; eval JSON / page {baseline / got['load']:.2f}")
                print("  to paint   " + ", ".join(f"{step} {ms:.0f} ms (goal {PAINT_GOALS_MS[step]})" for step, ms in got["paint"].items()))
                print(f"  console errors {len(got['errors'])}, requests outside file:// {len(got['outside'])}")
                missed += [f"{runs} run(s): {name}" for name, bad in (
                    (f"load < {LOAD_GOAL_S:g} s", got["inside"] >= LOAD_GOAL_S),
                    (f"size < {SIZE_GOAL_MB:g} MB", size >= SIZE_GOAL_MB and runs == 1),
                    *((f"{step} < {goal} ms", got["paint"][step] >= goal) for step, goal in PAINT_GOALS_MS.items()),
                    ("no console error", got["errors"]), ("no request outside file://", got["outside"])) if bad]
            if args.screenshot:
                driver.execute_script("location.hash = '#3'")
                time.sleep(0.3)
                driver.save_screenshot(args.screenshot)
        finally:
            driver.quit()
    if missed:
        print(f"bench_view: goals missed: {'; '.join(missed)}")
        return 1
    print("bench_view: every goal met")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
