"""eval_video_llm.py --backend openai against the local fake OpenAI-compatible server (offline).

Videos are generated: two "ramp" clips whose brightness grows with time (so the order of the
frames in a request can be read back from the decoded JPEGs) plus the demo videos.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import re
from pathlib import Path

import pytest

import eval_video_llm
from k9bench.inference.backend import BackendError
from k9bench.inference.openai_compat.backend import ApiCallError, BatchPartlyFailed, OpenAIBackend
from k9bench.inference.openai_compat.settings import VIDEO_FPS_MAX_FRAMES, parse_frame_size
from k9bench.inference.openai_compat.video_transport import encode_frames_jpeg
from k9bench.inference.runner import EXIT_BACKEND, EXIT_OK, EXIT_USAGE
from k9bench.prompts import load_prompt
from tests.fake_openai_server import IMAGE_PART_TOKENS, FakeOpenAIServer, Fault, Reply, count_tokens, fake_openai  # noqa: F401

SECRET = "sk-test-K9SECRET-0123456789abcdef"
RAMPS = {"rampVid0001": 128, "rampVid0002": 200}  # scene -> chroma (cb) to tell the clips apart
QUESTION_RE = re.compile(r"Q(\d+): ")


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def ramp_dir(tmp_path_factory) -> Path:
    """Two 6 s clips at 10 fps whose luma grows by 40 per second."""
    from k9bench.video.ffmpeg import make_video

    folder = tmp_path_factory.mktemp("ramp_videos")
    for scene, cb in RAMPS.items():
        make_video(folder / f"{scene}.mp4", duration=6, fps=10, width=96, height=64,
                   extra_args=["-vf", f"geq=lum='min(250,T*40)':cb={cb}:cr=128"])
    return folder


@pytest.fixture(scope="module")
def ramp_dataset(tmp_path_factory) -> Path:
    """Five questions, the two videos interleaved in dataset order."""
    scenes = ["rampVid0001", "rampVid0002", "rampVid0001", "rampVid0002", "rampVid0001"]
    path = tmp_path_factory.mktemp("ramp_data") / "ramp.jsonl"
    rows = []
    for idx, scene in enumerate(scenes):
        rows.append({
            "idx": idx, "video_url": f"https://www.youtube.com/watch?v={scene}", "scene_name": scene,
            "question_category": "posture analysis", "question": f"Q{idx}: how does the brightness change?",
            "options": {k: f"option {k} of {idx}" for k in "ABCDE"}, "correct_answer": "A",
        })
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def json_reply(request) -> str:
    match = QUESTION_RE.search(request.text)
    label = match.group(1) if match else "?"
    return json.dumps({"reasoning": "it gets brighter", "answer": f"answer {label}"})


def question_of(request) -> int:
    return int(QUESTION_RE.search(request.text).group(1))


def run(out: Path, server: FakeOpenAIServer, dataset: Path | str, video_dir: Path, *extra: str) -> int:
    return eval_video_llm.main([
        "--backend", "openai", "--api_model", "gpt-test", "--base_url", server.base_url,
        "--dataset_name", str(dataset), "--video_dir", str(video_dir), "--output_file", str(out),
        "--retry_backoff", "0.01", "-q", *extra,
    ])


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def decode_jpeg(url: str):
    from PIL import Image

    assert url.startswith("data:image/jpeg;base64,")
    image = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1], validate=True)))
    image.load()
    return image


def luma(image) -> float:
    import numpy as np

    return float(np.asarray(image.convert("L"), dtype=float).mean())


def all_file_text(root: Path) -> str:
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in root.rglob("*") if p.is_file())


# --------------------------------------------------------------------------- unit tests


@pytest.mark.parametrize("text, expected", [
    ("512x512", "512x512"), ("640X360", "640x360"), ("320×240", "320x240"), (" 64*48 ", "64x48"),
])
def test_parse_frame_size(text, expected):
    assert parse_frame_size(text) == expected


@pytest.mark.parametrize("text", ["512", "0x10", "axb", "512x", "-1x5", "1.5x2"])
def test_parse_frame_size_rejects(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_frame_size(text)


def config_of(*argv: str):
    """The run config as eval_video_llm.main builds it."""
    from k9bench.inference.settings import config_from_namespace, resolve

    return resolve(config_from_namespace(eval_video_llm.build_parser().parse_args(list(argv))))


def parse(*argv: str) -> argparse.Namespace:
    """The resolved config's values by flag name (``.config``: the config itself)."""
    config = config_of("--backend", "openai", *argv)
    return argparse.Namespace(**config.flat(), config=config)


def test_flags_of_the_other_backend_are_warned_and_recorded():
    """One rule from the registry for every backend (issue 40): :func:`k9bench.inference.settings.inapplicable_flags`."""
    from k9bench.inference.settings import inapplicable_flags

    text = inapplicable_flags(parse("--api_model", "gpt-4o", "--attn_implementation", "flash_attention_2", "--torch_dtype", "float16").config)
    assert text == ("--attn_implementation (for --backend hf); --torch_dtype (for a backend that loads the weights here): "
                    "not read by --backend openai, ignored")
    assert inapplicable_flags(parse("--api_model", "gpt-4o").config) is None
    hf = config_of("--frame_size", "512x512", "--concurrency", "4", "--video_fps", "1")
    assert inapplicable_flags(hf) == "--concurrency, --frame_size (for --backend openai): not read by --backend hf, ignored"
    assert inapplicable_flags(config_of()) is None


def test_flags_map_onto_the_run():
    args = parse("--api_model", "gpt-4o", "--video_fps", "1", "--frame_size", "512x512", "--concurrency", "16")
    assert args.model_name_or_path == "gpt-4o"  # names the run: model_name and the default file name
    assert (args.fps, args.max_frames) == (1.0, VIDEO_FPS_MAX_FRAMES)
    backend = OpenAIBackend(args.config)
    assert backend.max_batches_in_flight() == 16
    assert args.max_pixels == 2 * 512 * 512  # frames are sampled large enough, then scaled down to 512x512
    assert set(backend.adjustments) == {"max_pixels"}
    # an explicit cap after --video_fps wins
    assert parse("--video_fps", "1", "--max_frames", "64").max_frames == 64


def test_api_model_and_model_path_must_agree():
    with pytest.raises(BackendError, match="disagree"):
        OpenAIBackend(parse("--api_model", "gpt-4o", "--model_name_or_path", "other/model").config)


def test_request_params_pass_sampling_through():
    args = parse("--temperature", "0.7", "--top_p", "0.9", "--top_k", "20", "--seed", "3", "--max_new_tokens", "99",
                 "--extra_body", '{"chat_template_kwargs": {"enable_thinking": false}, "top_k": 5}')
    params = OpenAIBackend(args.config).request_params(3)
    assert params["max_tokens"] == 99 and params["temperature"] == 0.7 and params["top_p"] == 0.9 and params["seed"] == 3
    assert params["extra_body"] == {"top_k": 5, "chat_template_kwargs": {"enable_thinking": False}}  # --extra_body wins
    greedy = OpenAIBackend(parse("--greedy", "--no_seed_param", "--max_tokens_param", "max_completion_tokens").config)
    params = greedy.request_params(0)
    assert params["temperature"] == 0.0 and "seed" not in params and "max_tokens" not in params
    assert params["max_completion_tokens"] == 2048


def test_context_overflow_counts_as_out_of_memory():
    backend = OpenAIBackend(parse().config)
    overflow = ApiCallError("client_error (HTTP 400) after 1 attempt(s): maximum context length is 8192 tokens",
                            kind="client_error", status_code=400)
    other = ApiCallError("client_error (HTTP 400) after 1 attempt(s): invalid image", kind="client_error", status_code=400)
    rate = ApiCallError("rate_limit (HTTP 429) after 6 attempt(s): context length", kind="rate_limit", status_code=429)
    assert backend.is_out_of_memory(overflow)
    assert not backend.is_out_of_memory(other) and not backend.is_out_of_memory(rate)
    assert backend.is_out_of_memory(BatchPartlyFailed({1: other, 2: overflow}, 3))


def test_encode_frames_jpeg_keeps_order_and_size():
    import torch

    frames = torch.stack([torch.full((3, 30, 40), v, dtype=torch.uint8) for v in (10, 100, 200)])
    urls = encode_frames_jpeg(frames, (24, 16), quality=95)
    images = [decode_jpeg(u) for u in urls]
    assert [im.format for im in images] == ["JPEG"] * 3 and [im.size for im in images] == [(24, 16)] * 3
    assert [round(luma(im) / 10) for im in images] == [1, 10, 20]


# --------------------------------------------------------------------------- end to end


def test_frames_transport_end_to_end(fake_openai, ramp_dir, ramp_dataset, tmp_path, monkeypatch):
    import k9bench.inference.openai_compat.video_transport as backend_module

    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    encoded = []
    real_encode = backend_module.encode_frames_jpeg
    monkeypatch.setattr(backend_module, "encode_frames_jpeg", lambda frames, *a: encoded.append(len(frames)) or real_encode(frames, *a))
    fake_openai.responder = json_reply
    out = tmp_path / "raw.json"
    code = run(out, fake_openai, ramp_dataset, ramp_dir, "--max_frames", "8", "--fps", "2", "--frame_size", "64x48",
               "--greedy", "--max_new_tokens", "32", "--seed", "7", "--concurrency", "4")
    assert code == EXIT_OK
    data = load(out)
    records = {r["idx"]: r for r in data["individual_results"]}
    requests = fake_openai.chat_requests()
    assert len(requests) == 5 and sorted(question_of(r) for r in requests) == list(range(5))
    system_prompt = load_prompt("system_prompt", None)[0]
    cb_seen = []
    for req in requests:
        idx = question_of(req)
        body = req.body
        assert req.headers["authorization"] == f"Bearer {SECRET}"
        assert body["model"] == "gpt-test" and body["max_tokens"] == 32 and body["temperature"] == 0 and body["seed"] == 7
        assert body["messages"][0] == {"role": "system", "content": system_prompt}
        user = body["messages"][1]["content"]
        assert [p["type"] for p in user] == ["image_url"] * 8 + ["text"]  # the video, then the question
        assert user[-1]["text"] == f"Q{idx}: how does the brightness change?"
        assert not any(f"option A of {idx}" in req.text for _ in [0])  # the options are never shown
        images = [decode_jpeg(p["image_url"]["url"]) for p in user[:-1]]
        assert all(im.format == "JPEG" and im.size == (64, 48) for im in images)
        brightness = [luma(im) for im in images]
        assert brightness == sorted(brightness) and brightness[-1] - brightness[0] > 150, brightness  # in time order
        rec = records[idx]
        assert rec["num_frames"] == rec["frames_sent"] == 8 and rec["frame_size"] == [48, 64]
        assert rec["video_transport"] == "frames" and rec["answer"] == f"answer {idx}" and rec["answer_extraction"] == "json"
        expected_prompt = count_tokens(req.text) + 8 * IMAGE_PART_TOKENS
        assert rec["usage"]["prompt_tokens"] == rec["num_input_tokens"] == expected_prompt
        assert rec["api_attempts"] == 1 and rec["api_served_model"] == "gpt-test" and rec["model_name"] == "gpt-test"
        cb_seen.append(rec["scene_name"])
    # the questions of one video are sent next to each other (prefix-cache friendly), videos in first-seen order
    assert cb_seen == ["rampVid0001"] * 3 + ["rampVid0002"] * 2
    backend = data["inference"]["backend"]
    assert backend["name"] == "openai" and backend["video_transport"] == "frames" and backend["frame_size"] == "64x48"
    assert backend["base_url"].startswith(fake_openai.base_url) and backend["api_key_source"] == "OPENAI_API_KEY"
    assert backend["usage"]["requests"] == 5 and backend["usage"]["failed_requests"] == 0
    assert backend["usage"]["prompt_tokens"] == sum(r["usage"]["prompt_tokens"] for r in records.values())
    assert backend["usage"]["total_tokens"] == sum(r["usage"]["total_tokens"] for r in records.values())
    assert encoded == [8, 8]  # once per video, although its questions were in flight together
    assert SECRET not in all_file_text(tmp_path)


def test_video_url_transport_sends_one_video_part(fake_openai, ramp_dir, ramp_dataset, tmp_path):
    fake_openai.responder = json_reply
    out = tmp_path / "raw.json"
    assert run(out, fake_openai, ramp_dataset, ramp_dir, "--video_transport", "video_url", "--max_frames", "16") == EXIT_OK
    for req in fake_openai.chat_requests():
        parts = req.image_parts
        assert [p["type"] for p in parts] == ["video_url"]
        url = parts[0]["video_url"]["url"]
        assert url.startswith("data:video/mp4;base64,")
        scene = load(out)["individual_results"][question_of(req)]["scene_name"]
        assert base64.b64decode(url.split(",", 1)[1]) == (ramp_dir / f"{scene}.mp4").read_bytes()
        assert "mm_processor_kwargs" not in req.body  # vLLM refuses them by default, and they break its Qwen3-VL processing
        assert req.body["media_io_kwargs"] == {"video": {"num_frames": 16, "fps": 1.0}}
    records = load(out)["individual_results"]
    assert all(r["video_transport"] == "video_url" and r["num_frames"] is None and r["frame_indices"] is None for r in records)
    # a URL folder instead of the bytes
    fake_openai.clear()
    out2 = tmp_path / "raw2.json"
    assert run(out2, fake_openai, ramp_dataset, ramp_dir, "--video_transport", "video_url",
               "--video_url_base", "file:///srv/videos/") == EXIT_OK
    urls = {r.image_parts[0]["video_url"]["url"] for r in fake_openai.chat_requests()}
    assert urls == {"file:///srv/videos/rampVid0001.mp4", "file:///srv/videos/rampVid0002.mp4"}


def test_faults_are_retried(fake_openai, ramp_dir, ramp_dataset, tmp_path):
    """429 (Retry-After), 500, a timeout, a broken body and a dropped connection each cost one retry; nothing fails."""
    faults = {0: Fault(status=429, retry_after="0"), 1: Fault(status=500), 2: Fault(stall=2.0, then="late"),
              3: Fault(malformed=True), 4: Fault(drop=True)}
    seen: dict[int, int] = {}

    def responder(req):
        idx = question_of(req)
        seen[idx] = seen.get(idx, 0) + 1
        return faults[idx] if seen[idx] == 1 and idx in faults else json_reply(req)

    fake_openai.responder = responder
    out = tmp_path / "raw.json"
    assert run(out, fake_openai, ramp_dataset, ramp_dir, "--max_frames", "2", "--timeout", "0.5", "--concurrency", "5") == EXIT_OK
    data = load(out)
    records = {r["idx"]: r for r in data["individual_results"]}
    assert data["failed_count"] == 0
    assert {i: r["api_attempts"] for i, r in records.items()} == {0: 2, 1: 2, 2: 2, 3: 2, 4: 2}
    assert all(r["answer"] == f"answer {i}" for i, r in records.items())
    assert data["inference"]["backend"]["usage"]["retries"] == 5


def test_failures_become_records_and_are_retried_on_resume(fake_openai, ramp_dir, ramp_dataset, tmp_path, monkeypatch):
    """A failing request fails alone; its batch's answers are not asked twice; a rerun retries only it."""
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    calls: dict[int, int] = {}

    def responder(req):
        idx = question_of(req)
        calls[idx] = calls.get(idx, 0) + 1
        if idx == 0:
            return Fault(status=503)  # retried, then recorded as a failure
        if idx == 2:  # a 4xx is not retried; its error text echoes the key, which must be scrubbed
            return Fault(status=400, body=json.dumps({"error": {"message": f"bad request for key {SECRET}"}}))
        if idx == 4:
            return Reply(text=None, finish_reason="content_filter")  # an empty reply is a failure
        if idx == 1:
            return "The dog is sitting still."  # not JSON: the whole reply is the answer
        return json_reply(req)

    fake_openai.responder = responder
    out = tmp_path / "raw.json"
    # batches of 3: a batch with a failure is rerun question by question by the runner, without new calls
    assert run(out, fake_openai, ramp_dataset, ramp_dir, "--max_frames", "2", "--max_retries", "1", "--concurrency", "3",
               "--batch_size", "3") == EXIT_OK
    data = load(out)
    records = {r["idx"]: r for r in data["individual_results"]}
    assert data["failed_count"] == 3 and {i for i, r in records.items() if r.get("error")} == {0, 2, 4}
    assert calls == {0: 2, 1: 1, 2: 1, 3: 1, 4: 1}  # one call each (+1 retry for the 503), none repeated by the fallback
    assert records[0]["error_class"] == "generation_error" and "server_error (HTTP 503) after 2 attempt(s)" in records[0]["error"]
    assert "***" in records[2]["error"] and SECRET not in records[2]["error"]
    assert "empty reply" in records[4]["error"]
    assert records[1]["answer"] == "The dog is sitting still." and records[1]["answer_extraction"] == "raw"
    assert records[0]["prompt"] and records[0]["response"] == ""
    assert SECRET not in all_file_text(tmp_path)

    fake_openai.responder = json_reply
    calls.clear()
    fake_openai.clear()
    assert run(out, fake_openai, ramp_dataset, ramp_dir, "--max_frames", "2", "--max_retries", "1", "--concurrency", "3") == EXIT_OK
    assert sorted(question_of(r) for r in fake_openai.chat_requests()) == [0, 2, 4]  # only the failed ones
    again = {r["idx"]: r for r in load(out)["individual_results"]}
    assert load(out)["failed_count"] == 0 and again[3] == records[3]
    assert SECRET not in all_file_text(tmp_path)


def test_resume_refuses_other_request_settings(fake_openai, ramp_dir, ramp_dataset, tmp_path, capfd):
    """Records sent with other frames or request parameters are not mixed into the file."""

    def responder(req):
        if question_of(req) == 0:
            return Fault(status=400, body=json.dumps({"error": {"message": "rejected"}}))  # a failed record, retried later
        return json_reply(req)

    fake_openai.responder = responder
    out = tmp_path / "raw.json"
    assert run(out, fake_openai, ramp_dataset, ramp_dir, "--max_frames", "2", "--max_samples", "3") == EXIT_OK
    assert load(out)["failed_count"] == 1
    assert load(out)["individual_results"][1]["run_settings"]["video_transport"] == "frames"
    fake_openai.responder = json_reply
    for other, named in ((["--jpeg_quality", "50"], "jpeg_quality"), (["--extra_body", '{"top_k": 5}'], "request_params"),
                         (["--frame_size", "64x48"], "frame_size"), (["--video_transport", "video_url"], "video_transport")):
        fake_openai.clear()
        capfd.readouterr()
        assert run(out, fake_openai, ramp_dataset, ramp_dir, "--max_frames", "2", "--max_samples", "3", *other) == 2, other
        assert named in capfd.readouterr().err and not fake_openai.chat_requests()
    fake_openai.clear()
    assert run(out, fake_openai, ramp_dataset, ramp_dir, "--max_frames", "2", "--max_samples", "3") == EXIT_OK
    assert [question_of(r) for r in fake_openai.chat_requests()] == [0] and load(out)["failed_count"] == 0


def test_server_gone_mid_run_stops_instead_of_failing_every_question(fake_openai, demo_video_dir, tmp_path, capfd):
    """After unreachable_limit (10 at concurrency 1) requests in a row cannot connect, the run stops (exit 3)
    with every finished question checkpointed; the rerun finishes the rest."""
    from k9bench.layout import checkpoint_path
    from k9bench.inference.runner import EXIT_BACKEND

    seen: list[int] = []

    def responder(req):
        seen.append(1)
        return json_reply(req) if len(seen) <= 1 else Fault(drop=True)

    fake_openai.responder = responder
    out = tmp_path / "raw.json"
    capfd.readouterr()
    code = run(out, fake_openai, "demo", demo_video_dir, "--max_frames", "2", "--max_retries", "0", "--concurrency", "1")
    assert code == EXIT_BACKEND and "could not connect" in capfd.readouterr().err
    lines = [json.loads(line) for line in checkpoint_path(out).read_text().splitlines()]
    assert len(lines) == 10 and not out.exists()  # 1 answered + 9 failed; the 10th failure stopped the run
    assert "error" not in lines[0] and all(r["error_class"] == "generation_error" for r in lines[1:])
    fake_openai.responder = json_reply
    fake_openai.clear()
    assert run(out, fake_openai, "demo", demo_video_dir, "--max_frames", "2", "--max_retries", "0", "--concurrency", "1") == EXIT_OK
    assert len(fake_openai.chat_requests()) == 11 and load(out)["failed_count"] == 0


def test_context_overflow_is_retried_with_half_the_frames(fake_openai, ramp_dir, ramp_dataset, tmp_path):
    def responder(req):
        if len(req.image_parts) > 4:
            return Fault(status=400, body=json.dumps({"error": {"message": "This model's maximum context length is 9 tokens"}}))
        return json_reply(req)

    fake_openai.responder = responder
    out = tmp_path / "raw.json"
    assert run(out, fake_openai, ramp_dataset, ramp_dir, "--max_frames", "8", "--fps", "2", "--max_samples", "2") == EXIT_OK
    for rec in load(out)["individual_results"]:
        assert "error" not in rec and rec["num_frames"] == rec["frames_sent"] == 4
        assert rec["oom_retry"]["retried"] and rec["oom_retry"]["original_num_frames"] == 8


def test_missing_key_stops_before_any_request(tmp_path, demo_video_dir, capfd):
    code = eval_video_llm.main(["--backend", "openai", "--api_model", "gpt-4o", "--dataset_name", "demo",
                                "--video_dir", str(demo_video_dir), "--output_file", str(tmp_path / "raw.json")])
    assert code == EXIT_USAGE  # issue 31 item 3: a usage error, said in the preflight (before the dataset is read)
    assert "OPENAI_API_KEY is not set" in capfd.readouterr().err
    assert not (tmp_path / "raw.json").exists()


def test_unreachable_server_stops_the_run(tmp_path, demo_video_dir, capfd):
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = eval_video_llm.main(["--backend", "openai", "--base_url", f"http://127.0.0.1:{port}/v1", "--dataset_name", "demo",
                                "--video_dir", str(demo_video_dir), "--output_file", str(tmp_path / "raw.json")])
    assert code == EXIT_BACKEND and "is the server up?" in capfd.readouterr().err


def test_encoded_frames_are_cached_per_video_and_dropped_with_it():
    import gc

    import torch

    from k9bench.video.sampling import Frames

    from k9bench.inference.openai_compat.video_transport import MediaBuilder

    media = MediaBuilder(transport="frames", frame_size=(16, 16), jpeg_quality=90, image_detail=None, video_url_base=None,
                         fps=1.0, max_frames=32, audio=False, audio_format="wav", keep=4)
    frames = Frames(frames=torch.zeros((2, 3, 28, 28), dtype=torch.uint8), indices=[0, 5], source_fps=10.0, total_frames=10,
                    sample_fps=2.0, height=28, width=28, duration=1.0, decoder="decord")
    first = media._frame_parts(frames)
    assert media._frame_parts(frames) is first and len(first) == 2  # encoded once for all questions of the video
    assert len(media._media) == 1
    del frames, first
    gc.collect()
    assert media._media == {}  # released with the video's frames
