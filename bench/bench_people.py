"""Benchmark of the people app (issue 38): how soon it serves, and what a saved answer costs.

- start: seconds from launching ``python -m k9bench.people answer`` (the demo set, 12 questions) to its
  URL line on stdout, and to the first page served, against the baseline of a bare interpreter start
  (``python -c pass``) measured the same way in this process (ratio start / baseline); the goal: the
  first page within about a second of the interpreter's own start;
- save: milliseconds per answer submitted over HTTP (the checkpoint line fsynced, the raw file rewritten
  atomically, the next page served), for the demo's 12 questions.

Exits 1 when the first page takes more than 1.5 s beyond the interpreter's start.

    python bench/bench_people.py --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def build_parser() -> argparse.ArgumentParser:
    from k9bench.cli import ArgumentParser

    parser = ArgumentParser(prog="bench_people.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="starts measured (default: %(default)s)")
    return parser


def _start(tmp: Path, n: int) -> tuple[float, float, subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [sys.executable, "-m", "k9bench.people", "answer", "--subset", str(tmp / "subset.json"), "--annotator", f"b{n}",
            "--output_dir", str(tmp / "out"), "--dataset_name", "demo", "--video_dir", str(tmp), "-q"]
    began = time.perf_counter()
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    url = proc.stdout.readline().strip()
    at_url = time.perf_counter() - began
    with urllib.request.urlopen(url, timeout=10) as resp:
        resp.read()
    return at_url, time.perf_counter() - began, proc, url


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from k9bench.people.answering import seeded_order

    baseline = []
    for _ in range(args.repeats):
        began = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        baseline.append(time.perf_counter() - began)
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        (tmp / "subset.json").write_text(json.dumps(list(range(12))))
        urls, pages, saves = [], [], []
        for n in range(args.repeats):
            at_url, at_page, proc, url = _start(tmp, n)
            urls.append(at_url)
            pages.append(at_page)
            if n == 0:
                base, token = url.split("/?token=")
                for idx in seeded_order(list(range(12)), "b0", 0):
                    data = urllib.parse.urlencode({"token": token, "idx": idx, "answer": f"answer {idx}", "seconds": "1"}).encode()
                    began = time.perf_counter()
                    with urllib.request.urlopen(f"{base}/submit?token={token}", data=data, timeout=10) as resp:
                        resp.read()
                    saves.append(time.perf_counter() - began)
                assert len(json.loads((tmp / "out" / "raw_human-b0.json").read_text())["individual_results"]) == 12
            proc.terminate()
            proc.wait(timeout=10)
    base_s, url_s, page_s = statistics.median(baseline), statistics.median(urls), statistics.median(pages)
    print(f"interpreter start (python -c pass), median of {args.repeats}: {base_s:.3f} s")
    print(f"people app: URL printed {url_s:.3f} s, first page served {page_s:.3f} s (ratio to the interpreter {page_s / base_s:.1f}x; "
          f"{page_s - base_s:.3f} s beyond it)")
    print(f"a saved answer over HTTP (fsync, atomic raw file, next page): median {1000 * statistics.median(saves):.1f} ms, "
          f"max {1000 * max(saves):.1f} ms over {len(saves)}")
    return 0 if page_s - base_s <= 1.5 else 1


if __name__ == "__main__":
    sys.exit(main())
