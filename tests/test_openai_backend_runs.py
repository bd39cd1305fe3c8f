"""--backend openai: concurrency across videos, the raw layout against the HF backend's, SIGKILL and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import eval_video_llm
from k9bench.layout import checkpoint_path
from k9bench.inference.runner import EXIT_OK
from tests.fake_openai_server import FakeOpenAIServer, Fault, fake_openai  # noqa: F401

SECRET = "sk-test-K9SECRET-fedcba9876543210"
OPENAI_RECORD_EXTRAS = {"usage", "api_model", "api_served_model", "api_system_fingerprint", "api_attempts", "api_elapsed_s",
                        "video_transport", "frames_sent", "request_bytes"}
"""Record keys the openai backend adds to the HF backend's (all under the record's extra fields)."""


def reply(request) -> str:
    return json.dumps({"reasoning": "the pattern moves", "answer": "it moves steadily"})


def openai_args(server: FakeOpenAIServer, out: Path, video_dir: Path, *extra: str) -> list[str]:
    return ["--backend", "openai", "--api_model", "gpt-test", "--base_url", server.base_url, "--dataset_name", "demo",
            "--video_dir", str(video_dir), "--output_file", str(out), "--retry_backoff", "0.01", "-q", *extra]


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_requests_of_several_videos_are_in_flight_together(fake_openai, demo_video_dir, tmp_path):
    """The first six requests (one question each: four on the first video, two on the second) must
    all be waiting at once to pass the barrier; no more than --concurrency are ever in flight."""
    barrier = threading.Barrier(6, timeout=20)
    lock = threading.Lock()
    state = {"n": 0, "active": 0, "max_active": 0}

    def responder(req):
        with lock:
            state["n"] += 1
            first = state["n"] <= 6
            if first:
                state.setdefault("first_scenes", []).append(req.text)
            state["active"] += 1
            state["max_active"] = max(state["max_active"], state["active"])
        try:
            if first:
                barrier.wait()  # raises (-> HTTP 500, then a failed record) unless 6 requests overlap
            time.sleep(0.05)
            return reply(req)
        finally:
            with lock:
                state["active"] -= 1

    fake_openai.responder = responder
    out = tmp_path / "raw.json"
    # demo questions 0-3 are on demoVid0001, 4-7 on demoVid0002
    code = eval_video_llm.main(openai_args(fake_openai, out, demo_video_dir, "--max_frames", "2", "--concurrency", "6",
                                           "--max_retries", "0", "--max_samples", "8"))
    assert code == EXIT_OK
    data = load(out)
    assert data["failed_count"] == 0 and not barrier.broken
    assert state["max_active"] <= 6
    questions = {r["question"]: r["scene_name"] for r in data["individual_results"]}
    first = [next(scene for q, scene in questions.items() if q in text) for text in state["first_scenes"]]
    assert sorted(first) == ["demoVid0001"] * 4 + ["demoVid0002"] * 2  # video by video, in dataset order


@pytest.mark.slow
def test_raw_layout_matches_the_hf_backend(fake_openai, demo_video_dir, tmp_path):
    from k9bench.tiny_model import build_tiny_qwen3vl

    tiny = build_tiny_qwen3vl(tmp_path / "tiny", seed=0)
    common = ["--dataset_name", "demo", "--video_dir", str(demo_video_dir), "--max_frames", "4", "--max_pixels", "16384",
              "--min_pixels", "2048", "--max_new_tokens", "8", "--greedy", "--max_samples", "3", "-q"]
    hf_out, api_out = tmp_path / "hf.json", tmp_path / "api.json"
    assert eval_video_llm.main(["--model_name_or_path", str(tiny), "--output_file", str(hf_out), *common]) == EXIT_OK
    fake_openai.responder = reply
    assert eval_video_llm.main(["--backend", "openai", "--api_model", "gpt-test", "--base_url", fake_openai.base_url,
                                "--output_file", str(api_out), *common]) == EXIT_OK
    hf, api = load(hf_out), load(api_out)
    assert set(hf) == set(api)
    assert set(hf["inference"]) == set(api["inference"]) and set(hf["run_stats"]) == set(api["run_stats"])
    assert hf["inference"]["prompt"] == api["inference"]["prompt"]  # same system prompt, same placement
    # the same sampler settings; the patch size is the processor's for HF (16 for Qwen3-VL), qwen-vl-utils' 14 for an API
    assert {k: v for k, v in hf["inference"]["frames"].items() if k != "image_patch_size"} == \
        {k: v for k, v in api["inference"]["frames"].items() if k != "image_patch_size"}
    for h, a in zip(hf["individual_results"], api["individual_results"]):
        assert set(h) <= set(a) and set(a) - set(h) <= OPENAI_RECORD_EXTRAS, set(a) ^ set(h)
        for key in ("idx", "question_category", "video", "ground_truth", "scene_name", "question", "options", "max_frames",
                    "frame_indices", "num_frames", "video_duration", "text_only", "seed"):
            assert h[key] == a[key], key
        assert a["answer"] == "it moves steadily" and a["model_name"] == "gpt-test"


@pytest.mark.slow
def test_sigkill_then_resume_loses_nothing(demo_video_dir, tmp_path, repo_root):
    out = tmp_path / "raw.json"
    ckpt = checkpoint_path(out)
    with FakeOpenAIServer(reply, latency=0.4, model="gpt-test") as slow:
        argv = openai_args(slow, out, demo_video_dir, "--max_frames", "2", "--concurrency", "2")
        env = {**os.environ, "OPENAI_API_KEY": SECRET, "K9BENCH_NO_PROGRESS": "1"}
        proc = subprocess.Popen([sys.executable, str(repo_root / "eval_video_llm.py"), *argv], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and proc.poll() is None:
                if ckpt.exists() and len(ckpt.read_text(encoding="utf-8").splitlines()) >= 4:
                    break
                time.sleep(0.05)
            assert proc.poll() is None, proc.stderr.read().decode()
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.stderr.close()
        assert slow.chat_requests()[0].headers["authorization"] == f"Bearer {SECRET}"
    assert not out.exists()
    before = [json.loads(line) for line in ckpt.read_text(encoding="utf-8").splitlines() if line.strip().endswith("}")]
    assert 4 <= len(before) < 12
    assert SECRET not in ckpt.read_text(encoding="utf-8")

    with FakeOpenAIServer(reply, model="gpt-test") as fast:
        assert eval_video_llm.main(openai_args(fast, out, demo_video_dir, "--max_frames", "2", "--concurrency", "2")) == EXIT_OK
        resent = len(fast.chat_requests())
    data = load(out)
    records = {r["idx"]: r for r in data["individual_results"]}
    assert sorted(records) == list(range(12)) and data["failed_count"] == 0
    assert resent == 12 - len({r["idx"] for r in before})  # only the questions without a record are asked again
    for old in before:
        assert records[old["idx"]] == old  # kept as written before the kill
    assert not ckpt.exists()
    assert all(SECRET not in p.read_text(encoding="utf-8", errors="replace") for p in tmp_path.rglob("*") if p.is_file())


@pytest.mark.slow
def test_sigterm_stops_at_once_with_requests_in_flight(demo_video_dir, tmp_path, repo_root):
    """SIGTERM (SLURM preemption) exits 75 promptly even while requests wait on a slow server."""
    from k9bench.inference.runner import EXIT_INTERRUPTED

    out = tmp_path / "raw.json"
    with FakeOpenAIServer(reply, latency=60.0, model="gpt-test") as stuck:
        argv = openai_args(stuck, out, demo_video_dir, "--max_frames", "2", "--concurrency", "4", "--timeout", "120")
        env = {**os.environ, "K9BENCH_NO_PROGRESS": "1"}
        proc = subprocess.Popen([sys.executable, str(repo_root / "eval_video_llm.py"), *argv], cwd=tmp_path, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(stuck.chat_requests()) < 4 and proc.poll() is None:
                time.sleep(0.05)
            assert len(stuck.chat_requests()) == 4  # --concurrency requests in flight, no more
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=20)
            stopped_in = time.monotonic() - t0
        finally:
            if proc.poll() is None:
                proc.kill()
            stderr = proc.stderr.read().decode()
            proc.stderr.close()
    assert code == EXIT_INTERRUPTED, stderr
    assert stopped_in < 10 and "rerun the same command to resume" in stderr
    assert not out.exists()
