"""python -m k9bench.pipeline in process with the real stages: the demo chain (tiny random-weight
Qwen3-VL, the small offline embedding model, a fake judge on loopback), its unchanged rerun, a changed
setting, USR1 during inference then the resume, and DEMO=1 AUDIO=1. One interpreter: torch is imported once."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from k9bench import CATEGORIES
from k9bench.pipeline import main
from tests.pipeline_fakes import LAUNCHER_VARS, REPO, checkpoint_lines, comparable_eval

TAG = "tiny-qwen3vl_mf4_n-1"
INFER_ARGS = "--device cpu --max_new_tokens 96 --greedy"
"""Long enough answers that a signal reliably lands while inference runs."""
JUDGE_REPLY = "CoT: the answer is short and clear.\n{'Logic': 7, 'Factuality': 6, 'Accuracy': 5, 'Conciseness': 8, 'Overall': 6}"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

pytestmark = pytest.mark.slow


def demo_env(monkeypatch, tmp: Path, model: Path | None, **values: str) -> None:
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    for name in [n for n in os.environ if n.startswith("SLURM_")]:
        monkeypatch.delenv(name)
    env = {"K9BENCH_DIR": str(REPO), "DEMO": "1", "OUT_DIR": str(tmp / "out"), "VIDEO_DIR": str(tmp / "videos"),
           "INFER_ARGS": INFER_ARGS, "K9BENCH_NO_PROGRESS": "1", **({"MODEL_NAME": str(model)} if model else {}), **values}
    for key, value in env.items():
        monkeypatch.setenv(key, value)


def ran_stages(out: str) -> list[str]:
    return re.findall(r"step ([\w-]+): runs: ", out)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, tiny_model_dir):
    """One uninterrupted demo run with the judge on (fake server): (folder, log, judge requests)."""
    from tests.fake_openai_server import FakeOpenAIServer

    tmp = tmp_path_factory.mktemp("pipeline_demo")
    mp = pytest.MonkeyPatch()
    try:
        with FakeOpenAIServer(lambda request: JUDGE_REPLY) as server:
            demo_env(mp, tmp, tiny_model_dir, JUDGE_BASE_URL=server.base_url, JUDGE_MODEL="judge-test")
            import io
            from contextlib import redirect_stdout

            buf = io.StringIO()
            with redirect_stdout(buf):
                code = main([])
            judged = len(server.chat_requests())
    finally:
        mp.undo()
    assert code == 0, buf.getvalue()[-4000:]
    return tmp, buf.getvalue(), judged


def test_demo_chain_in_process_writes_every_artifact(demo_run):
    tmp, log, judged = demo_run
    out = tmp / "out"
    assert ran_stages(log) == ["download", "inference", "calculate", "evaluate", "judge", "report"]
    assert "MEANINGLESS" in log and "all steps done" in log
    assert sorted(p.name for p in (tmp / "videos").glob("*.mp4")) == ["demoVid0001.mp4", "demoVid0002.mp4", "demoVid0003.mp4"]
    raw = json.loads((out / f"raw_{TAG}.json").read_text())
    assert raw["total_count"] == 12 and all(r["model_name"] == "tiny-qwen3vl" for r in raw["individual_results"])
    ev = json.loads((out / f"eval_{TAG}.json").read_text())
    assert ev["eval_mode"] == "fine" and ev["threshold"] == 0.5 and ev["total_count"] == 12
    assert set(ev["category_wise_accuracy"]) == set(CATEGORIES)
    judge = json.loads((out / f"judge_{TAG}.json").read_text())
    assert judge and judged >= len(judge)
    md = (out / f"report_{TAG}" / "report.md").read_text()
    assert "these scores are MEANINGLESS" in md.split("## MCQ accuracy")[0] and "Judge scores" in md
    assert (out / f"report_{TAG}" / "accuracy_by_category.png").read_bytes()[:8] == PNG_MAGIC
    page = out / f"report_{TAG}" / "index.html"  # the results page (docs/view.md), its path printed at the end
    assert page.is_file() and f"results page: {page}" in log and len(list((page.parent / "frames").glob("*.jpg"))) >= 3
    assert not list(out.glob("*.partial.jsonl"))


def copy_run(ref: Path, tmp: Path) -> None:
    shutil.copytree(ref / "videos", tmp / "videos")
    shutil.copytree(ref / "out", tmp / "out", ignore=shutil.ignore_patterns("tiny-*", ".k9bench"))


def test_unchanged_rerun_runs_no_stage_and_a_new_threshold_only_the_verdicts(demo_run, tiny_model_dir, tmp_path, monkeypatch, capsys):
    ref, _, _ = demo_run
    copy_run(ref, tmp_path)  # the artifacts only (each carries its stage block), elsewhere
    demo_env(monkeypatch, tmp_path, tiny_model_dir, REPORT="0")
    assert main([]) == 0
    first = capsys.readouterr().out
    assert "inference" not in ran_stages(first), first  # the raw file's own stage block matches these settings
    eval_bytes = (tmp_path / "out" / f"eval_{TAG}.json").read_bytes()
    assert main([]) == 0
    again = capsys.readouterr().out
    assert ran_stages(again) == [], again
    assert (tmp_path / "out" / f"eval_{TAG}.json").read_bytes() == eval_bytes
    demo_env(monkeypatch, tmp_path, tiny_model_dir, REPORT="0", THRESHOLD="0.25")
    assert main([]) == 0
    changed = capsys.readouterr().out
    assert ran_stages(changed) == ["evaluate"], changed
    assert json.loads((tmp_path / "out" / f"eval_{TAG}.json").read_text())["threshold"] == 0.25
    demo_env(monkeypatch, tmp_path, tiny_model_dir, REPORT="0", THRESHOLD="0.25", INFER_ARGS="--device cpu --max_new_tokens 8 --greedy")
    assert main([]) == 0
    changed = capsys.readouterr().out
    assert ran_stages(changed) == ["inference", "calculate", "evaluate"], changed  # not the download before it
    assert "settings differ" in next(ln for ln in changed.splitlines() if "step inference: runs: " in ln)


def test_usr1_during_inference_stops_with_the_checkpoint_and_the_rerun_resumes(demo_run, tiny_model_dir, tmp_path, monkeypatch, capsys):
    ref, _, _ = demo_run
    shutil.copytree(ref / "videos", tmp_path / "videos")
    demo_env(monkeypatch, tmp_path, tiny_model_dir)
    partial = tmp_path / "out" / f"raw_{TAG}.json.partial.jsonl"
    sent = threading.Event()

    def send_when_checkpointed():
        deadline = time.monotonic() + 300
        while checkpoint_lines(partial) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGUSR1)  # what SLURM's --signal=B:USR1@100 does
        sent.set()

    watcher = threading.Thread(target=send_when_checkpointed, daemon=True)
    watcher.start()
    code = main([])
    watcher.join()
    log = capsys.readouterr().out
    assert sent.is_set() and code == 138, log[-3000:]
    assert "interrupted by SIGUSR1 during step 'inference'" in log
    assert not (tmp_path / "out" / f"raw_{TAG}.json").exists()
    done = checkpoint_lines(partial)
    assert 2 <= done < 12
    assert main([]) == 0
    again = capsys.readouterr()
    assert ran_stages(again.out)[:1] == ["inference"]
    assert re.search(rf"\b{done} already done", again.out + again.err), (again.out + again.err)[-3000:]
    assert comparable_eval(tmp_path / "out" / f"eval_{TAG}.json") == comparable_eval(ref / "out" / f"eval_{TAG}.json")


def test_demo_with_audio_end_to_end(tmp_path, monkeypatch, capsys):
    """DEMO=1 AUDIO=1: a tiny Qwen2.5-Omni thinker is built, two demo videos get a soundtrack, the silent
    one's questions become failed no_audio_stream records, every artifact is tagged _av."""
    demo_env(monkeypatch, tmp_path, None, AUDIO="1", INFER_ARGS="--device cpu --max_new_tokens 24 --greedy")
    monkeypatch.delenv("VIDEO_DIR")
    assert main([]) == 0, capsys.readouterr().out[-4000:]
    log = capsys.readouterr().out
    out = tmp_path / "out"
    assert "--family qwen2_5_omni" in log and "step demo-videos: " in log
    tag = "tiny-qwen2_5omni_mf4_n-1_av"
    raw = json.loads((out / f"raw_{tag}.json").read_text())
    failed = {r["scene_name"]: r.get("error_class") for r in raw["individual_results"] if r.get("error_class")}
    assert set(failed) == {"demoVid0003"} and set(failed.values()) == {"no_audio_stream"}
    md = (out / f"report_{tag}" / "report.md").read_text()
    assert "| tiny-qwen2_5omni (A+V) | this run | 4 |" in md
    assert not (out / "videos").exists() and (out / "videos_av").is_dir()


def test_serve_vllm_runs_the_demo_through_the_server_it_starts_and_stops(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """SERVE=vllm wiring with the fake OpenAI-compatible server standing in for vLLM (the real server is
    tests marked vllm): k9bench.serving.serve's context manager is entered around inference only, the questions go
    there through --backend openai with the video transport, and the server is stopped afterwards."""
    import contextlib

    import k9bench.serving.serve
    from tests.fake_openai_server import FakeOpenAIServer

    events: list[str] = []
    servers: list[FakeOpenAIServer] = []

    @contextlib.contextmanager
    def fake_serve_vllm(model, *, args=(), tensor_parallel=1, log_path=None, **_):
        events.append(f"start {model} tp={tensor_parallel} args={list(args)} log={log_path}")
        with FakeOpenAIServer(lambda request: "A. the answer", engine="vllm") as server:
            servers.append(server)
            yield server.base_url
        events.append("stop")

    monkeypatch.setattr(k9bench.serving.serve, "serve_vllm", fake_serve_vllm)
    # the preflight's `python -c "import vllm"` of the vLLM environment: a stand-in that succeeds
    monkeypatch.setenv("K9BENCH_VLLM_PYTHON", shutil.which("true") or "/bin/true")
    demo_env(monkeypatch, tmp_path, tiny_model_dir, SERVE="vllm", SERVE_ARGS="--max-model-len 4096", REPORT="0")
    assert main([]) == 0, capsys.readouterr().out[-4000:]
    log = capsys.readouterr().out
    assert events[0].startswith(f"start {tiny_model_dir} tp=1 args=['--max-model-len', '4096']") and events[-1] == "stop"
    assert "--backend openai" in log and "--video_transport video" in log
    requests = servers[0].chat_requests()
    assert len(requests) == 12  # every demo question went to the server
    assert ran_stages(log) == ["download", "inference", "calculate", "evaluate"]
    raw = json.loads((tmp_path / "out" / f"raw_{TAG}.json").read_text())
    assert raw["total_count"] == 12 and not any(r.get("error") for r in raw["individual_results"])


def test_judge_with_skipped_entries_reports_then_fails_and_the_rerun_retries_them(demo_run, tiny_model_dir, tmp_path, monkeypatch,
                                                                                  capsys):
    from tests.fake_openai_server import FakeOpenAIServer

    ref, _, _ = demo_run
    copy_run(ref, tmp_path)
    for stale in (tmp_path / "out").glob("judge_*"):
        stale.unlink()
    shutil.rmtree(tmp_path / "out" / ".judge_cache")  # the paid replies too (issue 31): this judge must be asked again
    with FakeOpenAIServer(lambda request: "no scores here") as server:
        demo_env(monkeypatch, tmp_path, tiny_model_dir, JUDGE_BASE_URL=server.base_url, JUDGE_ARGS="--max_retries 0")
        assert main([]) == 1
    log = capsys.readouterr().out
    assert ran_stages(log)[-2:] == ["judge", "report"] and "inference" not in ran_stages(log), log
    assert "step judge: some entries were skipped" in log and "ERROR: step judge incomplete" in log
    assert json.loads((tmp_path / "out" / f"judge_{TAG}_skipped.json").read_text())
    assert (tmp_path / "out" / f"report_{TAG}" / "report.md").exists()
    with FakeOpenAIServer(lambda request: JUDGE_REPLY) as server:
        demo_env(monkeypatch, tmp_path, tiny_model_dir, JUDGE_BASE_URL=server.base_url, JUDGE_ARGS="--max_retries 0")
        assert main([]) == 0
        retried = len(server.chat_requests())
    log = capsys.readouterr().out
    assert ran_stages(log) == ["judge", "report"], log
    assert "some entries to retry" in log and retried >= 1
    assert not json.loads((tmp_path / "out" / f"judge_{TAG}_skipped.json").read_text())


def test_two_demo_runs_give_byte_identical_videos_and_identical_answers(tmp_path, monkeypatch, capsys):
    """DEMO=1 as a new user runs it (the demo builds its own tiny model), twice, into two OUT_DIRs."""
    answers, videos = [], []
    for name in ("first", "second"):
        tmp = tmp_path / name
        demo_env(monkeypatch, tmp, None, INFER_ARGS="--device cpu --max_new_tokens 12")
        assert main([]) == 0, capsys.readouterr().out[-3000:]
        capsys.readouterr()
        raw = json.loads((tmp / "out" / f"raw_{TAG}.json").read_text())
        answers.append([(r["idx"], r["response"], r["answer"]) for r in raw["individual_results"]])
        videos.append({p.name: p.read_bytes() for p in sorted((tmp / "videos").glob("*.mp4"))})
    assert len(videos[0]) == 3 and videos[0] == videos[1]
    assert len(answers[0]) == 12 and answers[0] == answers[1]
