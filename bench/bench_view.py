"""Benchmark of the results page (issue 30 item 6) on a synthetic run of the full benchmark's size.

A seeded synthetic eval file of 4,744 questions on 907 videos (questions, options, answers, similarities,
verdicts and explanations of realistic lengths; no video, so no thumbnails) is turned into a page with
``python -m k9bench.view``'s code, which is then opened in headless Chromium from ``file://``:

- build: seconds to write index.html;
- size: index.html in MB (the goal: under 10 MB without thumbnails);
- load: from navigation to the page's script having drawn every row (the goal: under 2 s), against the
  baseline of today's way to see every answer, the eval JSON itself opened in the same browser (ratio
  baseline / page; under 1 means the page costs more than the bare file);
- filter: one category filter applied, measured inside the page (the goal: under 200 ms), and the text
  filter.

``--runs N`` puts N runs on one page (the 13-run page); ``--screenshot PNG`` saves one. Exits 1 when a
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


def measure(driver, page: Path) -> dict:
    from k9bench.view import browser

    t0 = time.perf_counter()
    browser.open_page(driver, page)
    load = time.perf_counter() - t0
    inside = driver.execute_script("var n = performance.getEntriesByType('navigation')[0]; "
                                   "return Math.max(n.loadEventEnd, window.k9timings.ready)") / 1000.0
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 60, poll_frequency=0.02).until(lambda d: d.execute_script("return document.body.getAttribute('data-complete')"))
    stages = driver.execute_script("return window.k9timings")
    timings = driver.execute_script("""
        function time(el, value, kind) {
          var t = performance.now(); el.value = value; el.dispatchEvent(new Event(kind)); return performance.now() - t;
        }
        var cat = document.getElementById('f-cat'), text = document.getElementById('f-text');
        var out = {category: time(cat, 'posture analysis', 'change'), shown: document.getElementById('count').textContent};
        out.clear = time(cat, '', 'change');
        out.text = time(text, 'sniffs', 'input');
        time(text, '', 'input');
        return out;""")
    errors = browser.console_errors(driver)
    outside = [u for u in browser.requested_urls(driver) if not u.startswith("file://")]
    return {"load": load, "inside": inside, "stages": stages, **timings, "errors": errors, "outside": outside}


def main(argv: list[str] | None = None) -> int:
    from k9bench.cli import ArgumentParser  # the project's one parser: no abbreviated flags
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=4744)
    parser.add_argument("--videos", type=int, default=907)
    parser.add_argument("--runs", type=int, default=1, help="runs on one page (default: %(default)s)")
    parser.add_argument("--screenshot", metavar="PNG", help="save a screenshot of the page (a question opened)")
    args = parser.parse_args(argv)
    from k9bench.view import browser, build_page

    reason = browser.unavailable()
    if reason:
        print(f"bench_view: {reason}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        evals = [synthetic_eval(tmp / f"eval_model-{k:02d}_mf32_n-1.json", questions=args.questions, videos=args.videos,
                                model=f"model-{k:02d}", seed=k) for k in range(args.runs)]
        t0 = time.perf_counter()
        page = build_page(evals, tmp / "page", thumbnails=0)
        build = time.perf_counter() - t0
        size = page.stat().st_size / 1e6
        eval_mb = evals[0].stat().st_size / 1e6
        driver = browser.start()
        try:
            driver.get("about:blank")
            t0 = time.perf_counter()
            driver.get(evals[0].resolve().as_uri())  # the baseline: the eval JSON itself
            driver.execute_script("return document.readyState")
            baseline = time.perf_counter() - t0
            got = measure(driver, page)
            if args.screenshot:
                driver.execute_script("location.hash = '#3'")
                time.sleep(0.3)
                driver.save_screenshot(args.screenshot)
        finally:
            driver.quit()
    print(f"bench_view: {args.questions} questions, {args.videos} videos, {args.runs} run(s); thumbnails off")
    print(f"  build      {build:.2f} s")
    print(f"  size       {size:.2f} MB index.html with its data (one eval JSON: {eval_mb:.2f} MB)")
    print(f"  load       {got['inside']:.2f} s from navigation to the first rows drawn and the load event (page clock; "
          f"{got['load']:.2f} s through WebDriver); the eval JSON alone {baseline:.2f} s; ratio {baseline / got['load']:.2f}")
    st = got["stages"]
    print(f"  in the page: script starts {st['start']:.0f} ms, data parsed +{st['parsed'] - st['start']:.0f} ms, rows drawn "
          f"+{st['rows'] - st['parsed']:.0f} ms (first rows), filters counted +{st['applied'] - st['rows']:.0f} ms; "
          f"every row drawn at {st['complete']:.0f} ms")
    print(f"  filter     category {got['category']:.0f} ms ({got['shown']}), cleared {got['clear']:.0f} ms, text {got['text']:.0f} ms")
    print(f"  console errors {len(got['errors'])}, requests outside file:// {len(got['outside'])}")
    missed = [name for name, bad in (("load < 2 s", max(got["inside"], got["load"]) >= 2), ("filter < 200 ms", got["category"] >= 200),
                                     ("size < 10 MB", size >= 10 and args.runs == 1), ("no console error", got["errors"]),
                                     ("no request outside file://", got["outside"])) if bad]
    if missed:
        print(f"bench_view: goals missed: {', '.join(missed)}")
        return 1
    print("bench_view: every goal met")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
