"""The project against a real vLLM server (marker ``vllm``).

One server per session, started by :func:`k9bench.serving.serve.serve_vllm` from the vLLM environment that
``K9BENCH_VLLM_PYTHON`` names (``.ci/run`` builds it from requirements-vllm.txt), serving a tiny
random-weight Qwen3-VL with head size 64 (vLLM's CPU attention refuses the default 16), with the
serve command docs/vllm.md gives. Without that environment every test here is skipped, saying why;
under ``CI=true`` that is a failure instead.

What it shows: the demo set answered through each transport, every question, the records carrying
the server block; through the ``video`` transport the model gets exactly as many video tokens as
the transformers backend gives it on the same frames and checkpoint, and the timestamps in the
prompt are the sampled frames' times (to 0.5 s); killing the server mid-run keeps the finished questions.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import eval_video_llm
from k9bench.inference.runner import EXIT_OK
from k9bench.serving.serve import PYTHON_ENV, serve_vllm

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

SERVED = "tiny-vllm"
"""The served model name (``--served-model-name``)."""

SERVE_ARGS = [
    "--served-model-name", SERVED, "--enforce-eager", "--max-model-len", "4096", "--max-num-seqs", "4",
    "--limit-mm-per-prompt", '{"image": 32, "video": 1}', "--media-io-kwargs", '{"video": {"num_frames": -1}}',
    "--trust-request-mm-kwargs",
]
"""The arguments docs/vllm.md's CPU command adds to ``--model PATH --host 127.0.0.1 --port P --enable-prefix-caching``."""

SERVE_ENV = {"VLLM_HOST_IP": "127.0.0.1", "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
"""Its environment (loopback-only message queue, 1 GiB of KV cache)."""

FRAME_PIXELS = ["--min_pixels", "16384", "--max_pixels", "65536"]
"""Frames small enough that a video's frames stay within the tiny processor's video budget (T x H x W <= 1,048,576
pixels), beyond which vLLM's processor shrinks them while the transformers backend keeps them as sampled."""

STAMP = re.compile(r"<(\d+(?:\.\d+)?) seconds>")


def unavailable(reason: str) -> None:
    """Skip, saying why; under CI a skip would hide a broken setup, so fail instead."""
    if os.environ.get("CI", "").strip().lower() == "true":
        pytest.fail(f"CI=true, but the vLLM tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def report(request, text: str) -> None:
    """A line on the terminal even under capture (the startup time, for CI's budget)."""
    plugins = request.config.pluginmanager
    reporter, capture = plugins.getplugin("terminalreporter"), plugins.getplugin("capturemanager")
    if reporter is None:
        return
    if capture is None:
        reporter.write_line(f"vllm: {text}")
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(f"vllm: {text}")


@pytest.fixture(scope="module")
def vllm_python() -> str:
    python = os.environ.get(PYTHON_ENV, "").strip()
    if not python:
        unavailable(f"{PYTHON_ENV} is not set: name the python of a vLLM environment "
                    "(pip install -r requirements-vllm.txt, see docs/vllm.md)")
    if not os.access(python, os.X_OK):
        unavailable(f"{PYTHON_ENV}={python} is not an executable")
    done = subprocess.run([python, "-c", "import vllm, sys; sys.stdout.write(vllm.__version__)"], capture_output=True,
                          text=True, timeout=300, check=False)
    if done.returncode != 0:
        unavailable(f"{PYTHON_ENV}={python} cannot import vllm ({(done.stderr.strip().splitlines() or ['?'])[-1]})")
    return python


@pytest.fixture(scope="module")
def tiny64(tmp_path_factory) -> Path:
    from k9bench.tiny_model import build_tiny_qwen3vl

    return build_tiny_qwen3vl(tmp_path_factory.mktemp("tiny64") / "model", seed=0, head_dim=64)


@pytest.fixture(scope="module")
def vllm_server(request, vllm_python, tiny64, tmp_path_factory):
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    start = time.monotonic()
    with serve_vllm(str(tiny64), python=vllm_python, args=SERVE_ARGS, log_path=log, timeout=900, env=SERVE_ENV) as url:
        report(request, f"server up after {time.monotonic() - start:.0f} s (log {log})")
        yield url
    report(request, f"server stopped; {time.monotonic() - start:.0f} s from start to stop")


def run_demo(server: str, video_dir: Path, out: Path, *extra: str) -> dict:
    code = eval_video_llm.main([
        "--backend", "openai", "--api_model", SERVED, "--base_url", server, "--dataset_name", "demo",
        "--video_dir", str(video_dir), "--output_file", str(out), "--max_new_tokens", "24", "--greedy",
        "--concurrency", "4", "--timeout", "600", "-q", *FRAME_PIXELS, *extra,
    ])
    assert code == EXIT_OK
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def video_run(vllm_server, demo_video_dir, tmp_path_factory) -> dict:
    return run_demo(vllm_server, demo_video_dir, tmp_path_factory.mktemp("video") / "raw.json")


def check_server_block(data: dict, tiny64: Path) -> None:
    server = data["inference"]["backend"]["server"]
    assert server["engine"] == "vllm" and server["version"] == "0.32.0"
    assert server["served_model"] == SERVED and server["root"] == str(tiny64) and server["max_model_len"] == 4096
    assert server["read_from"] == ["/v1/models", "/version"]
    assert server["system_fingerprints"] and all(f.startswith("vllm-0.32.0-") for f in server["system_fingerprints"])


@pytest.mark.parametrize("transport", ["video", "frames", "video_url"])
def test_demo_set_answered_through_each_transport(transport, vllm_server, video_run, demo_video_dir, tiny64, tmp_path):
    data = video_run if transport == "video" else run_demo(
        vllm_server, demo_video_dir, tmp_path / "raw.json", "--video_transport", transport)
    records = data["individual_results"]
    assert data["total_count"] == 12 and len(records) == 12 and data["failed_count"] == 0
    assert all("error" not in r and r["response"].strip() for r in records)
    assert {r["video_transport"] for r in records} == {transport}
    assert all(r["api_served_model"] == SERVED and r["api_system_fingerprint"].startswith("vllm-") for r in records)
    backend = data["inference"]["backend"]
    assert backend["video_transport"] == transport
    check_server_block(data, tiny64)
    if transport == "video":  # the default: auto found a vLLM server
        assert backend["video_transport_chosen"] == "auto: video (the server is vllm)"
        assert backend["frame_patch_size"] == 16
        assert backend["server_video_pixel_budget"] == 64 * 32 * 32 * 16  # read from the served checkpoint
        assert all(r["frames_sent"] == r["num_frames"] and r["video_sent"]["max_time_error_s"] < 0.1 for r in records)
        assert not any(r.get("server_resizes") for r in records)
    if transport == "frames":
        assert all(r["frames_sent"] == r["num_frames"] for r in records)


def test_video_tokens_equal_the_transformers_backend(video_run, demo_video_dir, tiny64, tmp_path):
    """Same checkpoint, same demo questions: the prompt vLLM builds from our mp4 has exactly the token
    count the transformers backend's processor gives the same sampled frames (text and video)."""
    out = tmp_path / "hf.json"
    code = eval_video_llm.main(["--model_name_or_path", str(tiny64), "--dataset_name", "demo", "--video_dir", str(demo_video_dir),
                                "--output_file", str(out), "--max_new_tokens", "1", "--greedy", "-q", *FRAME_PIXELS])
    assert code == EXIT_OK
    hf = {r["idx"]: r for r in json.loads(out.read_text(encoding="utf-8"))["individual_results"]}
    served = {r["idx"]: r for r in video_run["individual_results"]}
    assert hf.keys() == served.keys()
    for idx, rec in served.items():
        assert rec["frame_indices"] == hf[idx]["frame_indices"], idx  # the same frames were sampled
        assert rec["usage"]["prompt_tokens"] == hf[idx]["num_input_tokens"], idx


def test_prompt_timestamps_are_the_sampled_frames_times(vllm_server, demo_video_dir, tiny64):
    """vLLM's prompt (its token ids, decoded) holds one ``<t seconds>`` per merged frame pair, each within
    0.5 s of the pair's true time in the source, and as many video tokens as the HF processor makes."""
    from openai import OpenAI
    from transformers import AutoProcessor

    from k9bench.video.sampling import sample
    from k9bench.inference.backend import GenerationRequest
    from k9bench.inference.openai_compat.video_transport import MediaBuilder

    processor = AutoProcessor.from_pretrained(tiny64)
    tokenizer = processor.tokenizer
    video_pad = tokenizer.convert_tokens_to_ids("<|video_pad|>")
    media = MediaBuilder(transport="video", frame_size=None, jpeg_quality=90, image_detail=None, video_url_base=None, fps=1.0,
                         max_frames=32, audio=False, audio_format="wav", keep=4)
    client = OpenAI(base_url=vllm_server, api_key="none", max_retries=0, timeout=600)
    for video in sorted(demo_video_dir.glob("*.mp4")):
        frames = sample(video, image_patch_size=16, min_pixels=16384, max_pixels=65536)
        parts, fields, body = media.parts_for(GenerationRequest(key=0, messages=[], frames=frames, video_path=str(video)))
        assert body == {}  # nothing vLLM refuses by default
        reply = client.chat.completions.create(
            model=SERVED, max_tokens=1, temperature=0,
            messages=[{"role": "user", "content": [*parts, {"type": "text", "text": "What happens?"}]}],
            extra_body={"return_token_ids": True})
        ids = reply.model_extra["prompt_token_ids"]
        stamps = [float(s) for s in STAMP.findall(tokenizer.decode(ids))]
        true = frames.timestamps()
        pairs = [(true[i] + true[i + 1]) / 2 for i in range(0, len(true) - 1, 2)]
        assert len(stamps) == len(pairs) == frames.num_frames // 2, video.name
        assert all(abs(a - b) <= 0.5 for a, b in zip(stamps, pairs)), (video.name, stamps, pairs)
        text = processor.apply_chat_template([{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What happens?"}]}],
                                             tokenize=False, add_generation_prompt=True)
        inputs = processor(text=[text], videos=[frames.video_tensor()], video_metadata=[frames.processor_metadata()],
                           do_sample_frames=False, return_tensors="pt")
        hf_ids = inputs["input_ids"][0].tolist()
        assert ids.count(video_pad) == hf_ids.count(video_pad) > 0, video.name
        assert reply.usage.prompt_tokens == len(hf_ids), video.name


def served_requests(url: str) -> float:
    """Requests the server finished (``vllm:request_success_total`` on ``/metrics``)."""
    import urllib.request

    text = urllib.request.urlopen(url.replace("/v1", "/metrics"), timeout=10).read().decode()
    return sum(float(v) for v in re.findall(r"^vllm:request_success_total(?:\{[^}]*\})? ([0-9.e+]+)$", text, re.M))


RUN_MARK = "K9BENCH_TEST_RUN"
"""An environment variable the test gives the launcher: its children (the vLLM server too) inherit it."""


def _vllm_processes(mark: str) -> set[int]:
    """The vLLM servers whose environment holds ``RUN_MARK=mark``: started under this test's launcher, never another
    vLLM on the machine (its environment is unreadable or holds no such mark)."""
    done = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True, check=True)
    found = set()
    for line in done.stdout.splitlines():
        if "vllm.entrypoints" not in line:
            continue
        pid = int(line.split(None, 1)[0])
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:  # gone, or another user's
            continue
        if f"{RUN_MARK}={mark}".encode() in environ:
            found.add(pid)
    return found


def test_only_the_processes_a_run_started_are_counted(tmp_path):
    """The count above sees a process given the mark, and not the same command started without it."""
    script = tmp_path / "fake_vllm.entrypoints.py"
    script.write_text("import time\ntime.sleep(60)\n")
    mark = uuid.uuid4().hex
    ours = subprocess.Popen([sys.executable, str(script)], env={**os.environ, RUN_MARK: mark})
    other = subprocess.Popen([sys.executable, str(script)], env={k: v for k, v in os.environ.items() if k != RUN_MARK})
    try:
        deadline = time.monotonic() + 10
        while ours.pid not in _vllm_processes(mark) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _vllm_processes(mark) == {ours.pid}
    finally:
        for proc in (ours, other):
            proc.kill()
            proc.wait()
    assert _vllm_processes(mark) == set()


def test_launcher_serve_vllm_runs_the_demo_chain_and_leaves_no_server(vllm_python, tiny64, tmp_path, repo_root):
    """``SERVE=vllm DEMO=1 bash run_eval.sh``: the launcher starts a real vLLM server on the job's machine,
    runs inference through it (--backend openai, the video transport), scores, reports, and stops it."""
    mark = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(SERVE_ENV)
    env[RUN_MARK] = mark
    env.update({
        "SERVE": "vllm", "DEMO": "1", "MODEL_NAME": str(tiny64), "PYTHON": sys.executable, "OUT_DIR": str(tmp_path / "out"),
        "VIDEO_DIR": str(tmp_path / "videos"), "K9BENCH_VLLM_PYTHON": vllm_python, "K9BENCH_NO_PROGRESS": "1",
        "SERVE_ARGS": "--enforce-eager --max-model-len 4096 --max-num-seqs 4 --limit-mm-per-prompt '{\"image\": 32, \"video\": 1}'",
        "INFER_ARGS": "--max_new_tokens 16 --greedy --timeout 600 " + " ".join(FRAME_PIXELS),
    })
    done = subprocess.run(["bash", str(repo_root / "run_eval.sh")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=1500, check=False)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    assert "--backend openai" in log and "--video_transport video" in log
    raw = json.loads(next((tmp_path / "out").glob("raw_*.json")).read_text(encoding="utf-8"))
    assert raw["total_count"] == 12 and not [r for r in raw["individual_results"] if r.get("error")]
    assert raw["inference"]["backend"]["server"]["engine"] == "vllm"
    assert list((tmp_path / "out").glob("eval_*.json")) and list((tmp_path / "out").glob("report_*/report.md"))
    deadline = time.monotonic() + 30
    while _vllm_processes(mark) and time.monotonic() < deadline:
        time.sleep(1)
    assert not _vllm_processes(mark), "the launcher left a vLLM server running"


def test_zz_killing_the_server_mid_run_keeps_the_finished_questions(vllm_server, demo_video_dir, tmp_path):
    """Last in this module (it kills the session's server): the questions answered before the kill stay
    answered, the others become failed records naming the lost connection, and the run says so."""
    import signal
    import threading

    before = served_requests(vllm_server)
    killed = threading.Event()

    def kill_after_three() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and served_requests(vllm_server) < before + 3:
            time.sleep(0.2)
        os.killpg(vllm_server.pid, signal.SIGKILL)
        killed.set()

    watcher = threading.Thread(target=kill_after_three, daemon=True)
    watcher.start()
    out = tmp_path / "raw.json"
    code = eval_video_llm.main([
        "--backend", "openai", "--api_model", SERVED, "--base_url", vllm_server, "--dataset_name", "demo",
        "--video_dir", str(demo_video_dir), "--output_file", str(out), "--max_new_tokens", "24", "--greedy",
        "--concurrency", "1", "--max_retries", "0", "--timeout", "600", "-q", *FRAME_PIXELS])
    watcher.join(timeout=60)
    assert killed.is_set()
    data = json.loads(out.read_text(encoding="utf-8"))
    answered = [r for r in data["individual_results"] if "error" not in r and r.get("response")]
    failed = [r for r in data["individual_results"] if "error" in r or r.get("generation_error")]
    assert len(answered) >= 3 and len(answered) + len(failed) == 12 and failed
    assert data["failed_count"] == len(failed)
    assert all("connection" in json.dumps(r).lower() for r in failed), failed[0]
    assert code != EXIT_OK or data["failed_count"] > 0  # never a silent success
