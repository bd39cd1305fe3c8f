"""Benchmark: subjective_evals.py with --concurrency 16 against --concurrency 1, same process.

A local OpenAI-compatible server (tests/fake_openai_server.py) answers every judge
request after a fixed latency (200 ms by default, like a real API round trip). The
same 200-entry evaluations file is judged twice through ``subjective_evals.main``;
the script prints both wall times and their ratio, and exits non-zero when the ratio
is below the required speed-up (10x). A small untimed warm-up run comes first, so
neither timed run pays the one-time imports::

    python bench/bench_judge.py
    python bench/bench_judge.py --entries 400 --latency 0.3 --concurrency 32 --required 20
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def build_parser() -> argparse.ArgumentParser:
    from k9bench.cli import ArgumentParser  # the project's one parser: no abbreviated flags
    p = ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--entries", type=int, default=200, help="questions to judge")
    p.add_argument("--latency", type=float, default=0.2, help="seconds the server takes per request")
    p.add_argument("--concurrency", type=int, default=16, help="requests in flight for the concurrent run")
    p.add_argument("--required", type=float, default=10.0, help="minimum speed-up (baseline time / concurrent time)")
    return p


def make_evaluations(path: Path, n: int) -> None:
    from k9bench import CATEGORIES, LETTERS

    records = [
        {
            "idx": i,
            "question_category": CATEGORIES[i % 5],
            "video": "abcdefghijk.mp4",
            "ground_truth": LETTERS[i % 5],
            "response": "r",
            "answer": f"answer-{i}: the dog sits down",
            "scene_name": "abcdefghijk",
            "question": f"Question {i}: what does the dog do?",
            "options": [f"{L}. option {L}" for L in LETTERS],
        }
        for i in range(n)
    ]
    path.write_text(json.dumps({"individual_results": records, "total_count": n}))


def reply(request) -> str:
    import re

    i = int(re.search(r"answer-(\d+):", request.text).group(1))
    return f"CoT: answer {i} judged.\n{{'Logic': {1 + i % 10}, 'Factuality': 7, 'Accuracy': 6, 'Conciseness': 9, 'Overall': {1 + (3 * i) % 10}}}"


def timed_run(workdir: Path, evaluations: Path, base_url: str, concurrency: int) -> tuple[float, int, list]:
    import subjective_evals

    workdir.mkdir()
    out = workdir / "judge.json"
    argv = ["--evaluations", str(evaluations), "--output", str(out), "--base_url", base_url, "--concurrency", str(concurrency), "-q"]
    start = time.perf_counter()
    rc = subjective_evals.main(argv)
    elapsed = time.perf_counter() - start
    entries = json.loads(out.read_text())
    return elapsed, rc, entries


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.pop("OPENAI_API_KEY", None)  # the local server needs none; never send a real key to it
    os.environ["K9BENCH_NO_PROGRESS"] = "1"
    import contextlib
    import io

    import openai  # noqa: F401  (imported once, outside the timed runs)

    from tests.fake_openai_server import FakeOpenAIServer

    with tempfile.TemporaryDirectory(prefix="bench_judge_") as tmp, FakeOpenAIServer(reply, latency=args.latency) as server:
        tmp = Path(tmp)
        evaluations = tmp / "eval.json"
        make_evaluations(evaluations, args.entries)
        # untimed warm-up: first-time imports and lazy initialisation are paid here, not by either timed run
        warm = tmp / "warm.json"
        make_evaluations(warm, 4)
        with contextlib.redirect_stdout(io.StringIO()):
            timed_run(tmp / "warmup", warm, server.base_url, 2)
        results = {}
        for label, conc in (("concurrent", args.concurrency), ("baseline", 1)):
            server.clear()
            with contextlib.redirect_stdout(io.StringIO()):
                elapsed, rc, entries = timed_run(tmp / label, evaluations, server.base_url, conc)
            if rc != 0 or len(entries) != args.entries or len(server.chat_requests()) != args.entries:
                print(f"{label}: run failed (exit {rc}, {len(entries)} entries, {len(server.chat_requests())} requests)")
                return 2
            results[label] = (elapsed, conc, entries)
            print(f"{label:10s} --concurrency {conc:<3d} {args.entries} entries in {elapsed:7.2f} s  ({args.entries / elapsed:6.1f} entries/s)")
    same = [e["scores"] for e in results["concurrent"][2]] == [e["scores"] for e in results["baseline"][2]]
    ratio = results["baseline"][0] / results["concurrent"][0]
    floor = args.entries * args.latency
    print(f"latency {args.latency * 1000:.0f} ms per request; sequential floor {floor:.1f} s, concurrent floor {floor / args.concurrency:.2f} s")
    print(f"speed-up: {ratio:.1f}x (required >= {args.required:g}x); identical scores in both runs: {same}")
    if not same:
        return 1
    return 0 if ratio >= args.required else 1


if __name__ == "__main__":
    raise SystemExit(main())
