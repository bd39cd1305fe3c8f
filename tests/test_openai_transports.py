"""The OpenAI backend's transports and server block against the fake server (offline): ``auto`` picks
``video`` for a vLLM/SGLang server and ``frames`` otherwise; ``video`` sends exactly the sampled frames as
one mp4 played at their true times, and nothing vLLM refuses by default; what the server says about
itself lands in ``inference.backend.server``. The real vLLM server is tests/test_vllm.py's."""

from __future__ import annotations

import base64
import json
from fractions import Fraction
from pathlib import Path

import pytest

import eval_video_llm
from k9bench.inference.runner import EXIT_BACKEND, EXIT_OK
from k9bench.inference.openai_compat.server_info import SERVER_KEYS, checkpoint_video_processor
from k9bench.inference.openai_compat.video_transport import video_timing
from tests.fake_openai_server import FAKE_VERSION, FakeOpenAIServer, Fault, fake_openai  # noqa: F401

ANSWER = json.dumps({"reasoning": "r", "answer": "a"})


@pytest.fixture(scope="module")
def ramp_dir(tmp_path_factory) -> Path:
    """One 6 s clip at 10 fps whose luma grows by 40 per second."""
    from k9bench.video.ffmpeg import make_video

    folder = tmp_path_factory.mktemp("ramp")
    make_video(folder / "rampVid0001.mp4", duration=6, fps=10, width=96, height=64,
               extra_args=["-vf", "geq=lum='min(250,T*40)':cb=128:cr=128"])
    return folder


@pytest.fixture(scope="module")
def ramp_dataset(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "ramp.jsonl"
    rows = [{"idx": i, "video_url": "https://www.youtube.com/watch?v=rampVid0001", "scene_name": "rampVid0001",
             "question_category": "posture analysis", "question": f"Q{i}: how does it change?",
             "options": {k: f"option {k}" for k in "ABCDE"}, "correct_answer": "A"} for i in range(2)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def checkpoint(tmp_path) -> Path:
    """A served checkpoint folder holding only a processor config (patch 16, a 400,000-pixel video budget)."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "processor_config.json").write_text(json.dumps({
        "image_processor": {"patch_size": 16, "size": {"longest_edge": 999}},
        "video_processor": {"patch_size": 16, "size": {"shortest_edge": 1024, "longest_edge": 400000}}}))
    return folder


def run(server: FakeOpenAIServer, dataset: Path, video_dir: Path, out: Path, *extra: str) -> int:
    return eval_video_llm.main(["--backend", "openai", "--api_model", "served-name", "--base_url", server.base_url,
                                "--dataset_name", str(dataset), "--video_dir", str(video_dir), "--output_file", str(out),
                                "--retry_backoff", "0.01", "--max_frames", "6", "-q", *extra])


def test_video_timing_plays_frames_at_their_times():
    timing = video_timing([0, 24, 48, 72, 96, 119], 24.0)  # rounding leaves the last gap one frame short
    assert timing.rate == Fraction(24 * 5, 119)
    assert timing.source_times[-1] == pytest.approx(119 / 24)
    assert timing.max_error_s < 0.05 and timing.summary()["rate"] == "120/119"
    assert video_timing([30, 60], 30.0).max_error_s == pytest.approx(1.0)  # a late first frame counts as error
    assert video_timing([5], 25.0).rate == 1


def test_auto_sends_one_mp4_of_the_sampled_frames_to_a_vllm_server(ramp_dir, ramp_dataset, checkpoint, tmp_path):
    import decord
    import numpy as np

    out = tmp_path / "raw.json"
    with FakeOpenAIServer(lambda req: ANSWER, model="served-name", engine="vllm", root=str(checkpoint)) as server:
        assert run(server, ramp_dataset, ramp_dir, out, "--min_pixels", "1024") == EXIT_OK
        requests = server.chat_requests()
    data = json.loads(out.read_text())
    backend = data["inference"]["backend"]
    assert backend["video_transport"] == "video" and backend["video_transport_chosen"] == "auto: video (the server is vllm)"
    assert backend["frame_patch_size"] == 16 and backend["server_video_pixel_budget"] == 400000
    records = data["individual_results"]
    assert data["inference"]["frames"]["image_patch_size"] == 16  # sampled for the served checkpoint, as the HF backend would
    for req in requests:
        assert "media_io_kwargs" not in req.body and "mm_processor_kwargs" not in req.body  # nothing vLLM refuses by default
        [part] = req.image_parts
        assert part["type"] == "video_url" and part["video_url"]["url"].startswith("data:video/mp4;base64,")
    mp4 = tmp_path / "sent.mp4"
    mp4.write_bytes(base64.b64decode(requests[0].image_parts[0]["video_url"]["url"].split(",", 1)[1]))
    reader = decord.VideoReader(str(mp4))
    rec = records[0]
    assert rec["video_transport"] == "video" and rec["frames_sent"] == rec["num_frames"] == len(reader) == 6
    assert reader.get_avg_fps() == pytest.approx(rec["video_sent"]["fps"], rel=1e-3)
    played = [t / reader.get_avg_fps() for t in range(len(reader))]
    true = [i / 10.0 for i in rec["frame_indices"]]
    assert max(abs(a - b) for a, b in zip(played, true)) < 0.05 and rec["video_sent"]["max_time_error_s"] < 0.05
    frames = reader.get_batch(list(range(len(reader)))).asnumpy()
    luma = [float(np.mean(f)) for f in frames]
    assert luma == sorted(luma) and luma[-1] - luma[0] > 100  # in time order, the ramp intact
    assert [tuple(f.shape[:2]) for f in frames] == [tuple(rec["frame_size"])] * 6
    assert all(r["api_system_fingerprint"] == f"vllm-{FAKE_VERSION}-fake" for r in records)
    server_block = backend["server"]
    assert list(server_block) == list(SERVER_KEYS)
    assert server_block == {"engine": "vllm", "version": FAKE_VERSION, "served_model": "served-name", "root": str(checkpoint),
                            "max_model_len": 4096, "owned_by": "vllm", "models": ["served-name"],
                            "system_fingerprints": [f"vllm-{FAKE_VERSION}-fake"], "read_from": ["/v1/models", "/version"]}


def logged(caplog, capsys) -> str:
    """What was logged, whether through pytest's handler or the scripts' own stderr one."""
    return "\n".join(caplog.messages) + capsys.readouterr().err


def test_frames_beyond_the_served_video_budget_are_flagged(ramp_dir, ramp_dataset, checkpoint, tmp_path, caplog, capsys):
    out = tmp_path / "raw.json"
    with FakeOpenAIServer(lambda req: ANSWER, model="served-name", engine="vllm", root=str(checkpoint)) as server:
        assert run(server, ramp_dataset, ramp_dir, out, "--min_pixels", "65536", "--max_pixels", "200000") == EXIT_OK
    records = json.loads(out.read_text())["individual_results"]
    assert all(r["server_resizes"] for r in records)  # 6 frames of >= 65536 pixels > 400000
    assert logged(caplog, capsys).count("exceed the served processor's 400000-pixel video budget") == 1  # once per video


def test_auto_sends_frames_to_a_plain_api(fake_openai, ramp_dir, ramp_dataset, tmp_path):
    fake_openai.responder = lambda req: ANSWER
    out = tmp_path / "raw.json"
    assert run(fake_openai, ramp_dataset, ramp_dir, out) == EXIT_OK
    backend = json.loads(out.read_text())["inference"]["backend"]
    assert backend["video_transport"] == "frames"
    assert backend["video_transport_chosen"] == "auto: frames (the server does not say it is vLLM or SGLang)"
    assert backend["server"]["engine"] is None and backend["server"]["version"] is None  # /version: 404
    assert backend["server"]["read_from"] == ["/v1/models"] and backend["server"]["system_fingerprints"] == []
    assert all(len(r.image_parts) == 6 and r.image_parts[0]["type"] == "image_url" for r in fake_openai.chat_requests())


def test_video_url_refused_by_the_server_stops_with_one_clear_line(ramp_dir, ramp_dataset, tmp_path, caplog, capsys):
    refusal = Fault(status=400, body=json.dumps({"error": {
        "message": "Per-request media_io_kwargs are disabled by default ... Start the server with --trust-request-mm-kwargs "
                   "only when clients are trusted.", "type": "BadRequestError", "code": 400}}))
    out = tmp_path / "raw.json"
    with FakeOpenAIServer(lambda req: refusal, model="served-name", engine="vllm") as server:
        code = run(server, ramp_dataset, ramp_dir, out, "--video_transport", "video_url", "--concurrency", "1")
        assert len(server.chat_requests()) == 1  # not every question
    assert code == EXIT_BACKEND
    assert "start vLLM with --trust-request-mm-kwargs, or use --video_transport video" in logged(caplog, capsys)


def test_checkpoint_video_processor_reads_the_served_config(checkpoint, tmp_path):
    assert checkpoint_video_processor(str(checkpoint)) == ({"patch_size": 16, "max_pixels": 400000}, str(checkpoint / "processor_config.json"))
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "preprocessor_config.json").write_text(json.dumps({"patch_size": 14}))
    assert checkpoint_video_processor(str(tmp_path / "old"))[0] == {"patch_size": 14, "max_pixels": None}
    info, why = checkpoint_video_processor("nobody/not-cached-anywhere")
    assert info is None and "not in the Hugging Face cache" in why


def test_a_base_url_without_scheme_is_a_usage_error_at_once(capsys):
    code = eval_video_llm.main(["--backend", "openai", "--api_model", "m", "--base_url", "localhost:8000/v1"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("argument --base_url: expected an http:// or https:// URL with a host "
                            "(e.g. http://localhost:8000/v1), got 'localhost:8000/v1'")
