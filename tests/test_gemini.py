"""--backend gemini end to end: the real google-genai SDK against the local fake of the Gemini REST API
(tests/fake_gemini_server.py), on the demo set and the demo videos."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import pytest

import eval_video_llm
from k9bench.inference.runner import EXIT_BACKEND, EXIT_ERROR, EXIT_OK, EXIT_USAGE
from tests.fake_gemini_server import SIZE_REFUSAL, FakeGeminiServer, GeminiFault, GeminiReply, sequence

pytest.importorskip("google.genai")

SECRET = "AIza-test-K9SECRET-0123456789"
DEMO_QUESTIONS, DEMO_VIDEOS = 12, 3


@pytest.fixture
def gemini_key(monkeypatch):
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.setenv("GEMINI_API_KEY", SECRET)


@pytest.fixture
def fake_gemini():
    with FakeGeminiServer() as server:
        yield server


def gemini_args(server: FakeGeminiServer, out: Path, video_dir: Path, *extra: str) -> list[str]:
    return ["--backend", "gemini", "--model_name_or_path", "gemini-2.5-pro", "--base_url", server.base_url, "--dataset_name", "demo",
            "--video_dir", str(video_dir), "--output_file", str(out), "--retry_backoff", "0.01", "--upload_poll_interval", "0.01",
            "--max_frames", "2", *extra]


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def has_audio(data: bytes) -> bool:
    import av

    with av.open(io.BytesIO(data)) as container:
        return bool(container.streams.audio)


def test_the_demo_set_is_answered_one_upload_per_video(gemini_key, fake_gemini, demo_video_dir, tmp_path, capfd):
    fake_gemini.processing_polls = 2  # each new file is PROCESSING for two reads: the backend waits for ACTIVE
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(gemini_args(fake_gemini, out, demo_video_dir, "--thinking_budget", "128", "-vv")) == EXIT_OK
    log_text = capfd.readouterr().err
    data = load(out)
    records = data["individual_results"]
    assert data["failed_count"] == 0 and len(records) == DEMO_QUESTIONS
    assert fake_gemini.uploads == DEMO_VIDEOS  # uploads are videos, not questions
    requests = fake_gemini.generate_requests()
    assert len(requests) == DEMO_QUESTIONS
    for req in requests:
        (part,) = req.file_parts
        assert part["video_metadata"] == {"fps": 1.0} and part["mime_type"] == "video/mp4"
        assert req.body["generationConfig"]["thinkingConfig"] == {"thinking_budget": 128}
        assert req.body["generationConfig"]["maxOutputTokens"] == 2048
        assert req.body["systemInstruction"]["parts"][0]["text"]  # the system prompt is the system instruction
    files_used = {r["video_sent"]["file"] for r in records}
    assert len(files_used) == DEMO_VIDEOS
    first = records[0]
    assert first["finish_reason"] == "stop" and first["api_finish_reason"] == "STOP"
    assert first["generation"]["thinking_budget"] == 128 and first["usage"]["thoughts_tokens"] == 7
    assert first["video_sent"]["variant"] == "video only" and first["num_frames"] is None  # Gemini samples the file itself
    assert first["max_frames"] == 1800 and data["inference"]["adjusted_settings"]["max_frames"]["to"] == 1800  # the whole video
    assert [v["sha256"] for v in data["videos"]] == [hashlib.sha256((demo_video_dir / f"demoVid000{n}.mp4").read_bytes()).hexdigest()
                                                     for n in (1, 2, 3)]  # the files the answers came from
    # without --audio the uploads are soundtrack-free copies of the videos
    assert not any(has_audio(f.data) for f in fake_gemini.files.values())
    assert data["inference"]["backend"]["uploads"]["uploaded"] == DEMO_VIDEOS
    # the key is in no artifact and no log line
    ledger = out.with_name(out.name + ".gemini_uploads.json")
    assert "uploads: 3 uploaded, 0 reused" in log_text  # the log is captured: the key is not in it
    assert SECRET not in out.read_text() and SECRET not in ledger.read_text() and SECRET not in log_text
    assert data["inference"]["backend"]["api_key_source"] == "GEMINI_API_KEY"


def test_audio_sends_the_file_itself(gemini_key, fake_gemini, av_video_dir, tmp_path):
    out = tmp_path / "raw.json"
    argv = gemini_args(fake_gemini, out, av_video_dir, "--audio", "--max_samples", "4")  # demoVid0001: a sine soundtrack
    assert eval_video_llm.main(argv) == EXIT_OK
    (uploaded,) = fake_gemini.files.values()
    assert uploaded.data == (av_video_dir / "demoVid0001.mp4").read_bytes()
    assert load(out)["individual_results"][0]["video_sent"]["variant"] == "audio+video"


def test_a_rerun_reuses_the_uploads_and_an_expired_file_is_uploaded_again(gemini_key, fake_gemini, demo_video_dir, tmp_path):
    out = tmp_path / "raw.json"
    fake_gemini.responder = sequence(GeminiFault(400, "bad request", "INVALID_ARGUMENT"))  # the first question fails, not retried
    assert eval_video_llm.main(gemini_args(fake_gemini, out, demo_video_dir)) == EXIT_OK
    assert load(out)["failed_count"] == 1 and fake_gemini.uploads == DEMO_VIDEOS
    # the same command again: the failed question is retried with its video's file from the ledger
    assert eval_video_llm.main(gemini_args(fake_gemini, out, demo_video_dir)) == EXIT_OK
    data = load(out)
    assert data["failed_count"] == 0 and fake_gemini.uploads == DEMO_VIDEOS  # nothing new uploaded
    assert data["run_stats"]["decoding"]["uploads"] == {"uploaded": 0, "reused": 1, "uploaded_again": 0, "deleted": 0}
    # files expire (48 h): a later rerun uploads the video again
    fake_gemini.expire()
    fake_gemini.responder = sequence(GeminiFault(400, "bad request", "INVALID_ARGUMENT"))
    other = tmp_path / "raw2.json"
    (tmp_path / "raw.json.gemini_uploads.json").rename(other.with_name(other.name + ".gemini_uploads.json"))
    assert eval_video_llm.main(gemini_args(fake_gemini, other, demo_video_dir, "--max_samples", "4")) == EXIT_OK
    assert load(other)["run_stats"]["decoding"]["uploads"]["uploaded_again"] == 1 and fake_gemini.uploads == DEMO_VIDEOS + 1


def test_rate_limit_then_success(gemini_key, fake_gemini, demo_video_dir, tmp_path):
    fake_gemini.responder = sequence(GeminiFault(429, "Resource has been exhausted", "RESOURCE_EXHAUSTED"),
                                     GeminiFault(503, "overloaded", "UNAVAILABLE"))
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(gemini_args(fake_gemini, out, demo_video_dir, "--max_samples", "2", "--concurrency", "1")) == EXIT_OK
    data = load(out)
    assert data["failed_count"] == 0 and len(fake_gemini.generate_requests()) == 4
    assert data["inference"]["backend"]["usage"]["retries"] == 2


@pytest.mark.parametrize("outcome, error_class, words", [
    (GeminiFault(400, SIZE_REFUSAL, "INVALID_ARGUMENT"), "request_too_large", ["20971520 bytes"]),
    (GeminiFault(413, "Request Entity Too Large", "INVALID_ARGUMENT"), "request_too_large", ["413"]),
    (GeminiReply(None, "MAX_TOKENS", thoughts_tokens=2048), "output_limit", ["MAX_TOKENS", "2048 thinking tokens", "--max_new_tokens"]),
    (GeminiReply(None, "SAFETY"), "generation_error", ["SAFETY"]),
], ids=["size refusal 400", "size refusal 413", "empty at MAX_TOKENS", "empty for safety"])
def test_classed_failures(gemini_key, fake_gemini, demo_video_dir, tmp_path, outcome, error_class, words):
    fake_gemini.responder = sequence(outcome)
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(gemini_args(fake_gemini, out, demo_video_dir, "--max_samples", "2", "--concurrency", "1")) == EXIT_OK
    failed = [r for r in load(out)["individual_results"] if r.get("error")]
    assert len(failed) == 1 and failed[0]["error_class"] == error_class, failed
    assert all(word in failed[0]["error"] for word in words), failed[0]["error"]
    assert len(fake_gemini.generate_requests()) == 2  # none of these is retried


def test_delete_uploads_at_the_end(gemini_key, fake_gemini, demo_video_dir, tmp_path):
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(gemini_args(fake_gemini, out, demo_video_dir, "--max_samples", "5", "--delete_uploads")) == EXIT_OK
    assert fake_gemini.uploads == 2 and fake_gemini.files == {}
    assert sum(1 for r in fake_gemini.requests if r.method == "DELETE") == 2
    assert load(out.with_name(out.name + ".gemini_uploads.json"))["files"] == {}


@pytest.mark.parametrize("env, extra, words", [
    ({}, [], ["GEMINI_API_KEY", "GOOGLE_API_KEY"]),
    ({"GEMINI_API_KEY": SECRET}, ["--thinking_budget", "40000"], ["--thinking_budget", "40000"]),
    ({"GEMINI_API_KEY": SECRET}, ["--upload_timeout", "0"], ["--upload_timeout"]),
    ({"GEMINI_API_KEY": SECRET}, ["--upload_poll_interval", "9999"], ["--upload_poll_interval"]),
], ids=["no key", "thinking budget too large", "upload timeout zero", "poll interval too long"])
def test_refused_before_any_work(fake_gemini, demo_video_dir, tmp_path, monkeypatch, capfd, env, extra, words):
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert eval_video_llm.main(gemini_args(fake_gemini, tmp_path / "raw.json", demo_video_dir, *extra)) == EXIT_USAGE
    err = capfd.readouterr().err
    assert all(word in err for word in words) and "Traceback" not in err
    assert fake_gemini.requests == [] and not (tmp_path / "raw.json").exists()


def test_google_api_key_is_taken_too(fake_gemini, demo_video_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", SECRET)
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(gemini_args(fake_gemini, out, demo_video_dir, "--max_samples", "1")) == EXIT_OK
    assert load(out)["inference"]["backend"]["api_key_source"] == "GOOGLE_API_KEY"
    assert fake_gemini.requests[0].headers["x-goog-api-key"] == SECRET  # sent to the endpoint, written nowhere


def test_a_video_still_processing_past_the_timeout_fails_its_questions_after_one_upload(gemini_key, fake_gemini, demo_video_dir,
                                                                                       tmp_path):
    fake_gemini.processing_polls = 10_000
    out = tmp_path / "raw.json"
    argv = gemini_args(fake_gemini, out, demo_video_dir, "--max_samples", "4", "--upload_timeout", "0.2", "--concurrency", "1")
    assert eval_video_llm.main(argv) == EXIT_ERROR  # every question failed
    records = load(out)["individual_results"]
    assert all("still PROCESSING after 0.2 s (--upload_timeout)" in r["error"] for r in records)
    assert fake_gemini.uploads == 1 and fake_gemini.generate_requests() == []  # one upload for the video's four questions
    # once processed, the same command answers them, with the file left behind by the first run's upload uploaded anew
    fake_gemini.processing_polls = 0
    assert eval_video_llm.main(argv) == EXIT_OK and load(out)["failed_count"] == 0


def test_a_torn_ledger_is_said_and_the_videos_uploaded_again(gemini_key, fake_gemini, demo_video_dir, tmp_path, capfd):
    out = tmp_path / "raw.json"
    out.with_name(out.name + ".gemini_uploads.json").write_text('{"kind": "k9bench gemini up')
    assert eval_video_llm.main(gemini_args(fake_gemini, out, demo_video_dir, "--max_samples", "1")) == EXIT_OK
    assert "is not an upload ledger" in capfd.readouterr().err and fake_gemini.uploads == 1
    assert load(out.with_name(out.name + ".gemini_uploads.json"))["kind"] == "k9bench gemini uploads"


def test_an_unreachable_endpoint_stops_before_any_question(gemini_key, demo_video_dir, tmp_path, capfd):
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = ["--backend", "gemini", "--model_name_or_path", "gemini-2.5-pro", "--base_url", f"http://127.0.0.1:{port}/",
            "--dataset_name", "demo", "--video_dir", str(demo_video_dir), "--output_file", str(tmp_path / "raw.json"),
            "--max_retries", "0"]
    assert eval_video_llm.main(argv) == EXIT_BACKEND
    err = capfd.readouterr().err
    assert "models.get" in err and "Traceback" not in err and SECRET not in err


def test_flags_of_other_backends_are_warned_and_recorded(gemini_key, fake_gemini, demo_video_dir, tmp_path):
    out = tmp_path / "raw.json"
    argv = gemini_args(fake_gemini, out, demo_video_dir, "--max_samples", "1", "--frame_size", "512x512", "--stream", "--torch_dtype",
                       "float16", "--device", "cpu")
    assert eval_video_llm.main(argv) == EXIT_OK
    said = load(out)["inference"]["ignored_flags"]  # --base_url and --retry_backoff (given) are read: not among them
    assert said == ("--device (for --backend hf); --frame_size, --stream (for --backend openai); --torch_dtype (for a backend that "
                    "loads the weights here): not read by --backend gemini, ignored"), said


@pytest.mark.parametrize("extra, row", [([], "Table 1: Gemini-2.5 Pro (1 FPS)"), (["--audio"], "Table 2: Gemini-2.5 Pro (A+V, 1 FPS)")],
                         ids=["video only", "audio + video"])
def test_the_report_compares_a_gemini_run_with_the_papers_1_fps_rows(gemini_key, fake_gemini, av_video_dir, tmp_path, extra, row):
    from k9bench.report import load_run
    from tests.test_report_comparable import write_eval

    out = tmp_path / "raw.json"
    assert eval_video_llm.main(gemini_args(fake_gemini, out, av_video_dir, "--max_samples", "2", *extra)) == EXIT_OK
    raw = load(out)
    # the run's own inference block, as scoring carries it into the eval file, over the paper's 4,744 questions
    evaluated = write_eval(tmp_path / "eval.json", n=4744, model="gemini-2.5-pro", frames=raw["individual_results"][0]["max_frames"],
                           inference=raw["inference"])
    settings = load_run(evaluated).settings
    assert row in settings.paper_rows  # the nearest row is the 1 FPS one: Gemini saw the whole video
    assert not [d for d in settings.differences if "frames" in d or "fps" in d or "audio" in d], settings.differences


def test_a_reply_over_the_cap_is_cut_before_anything_scans_it(gemini_key, fake_gemini, demo_video_dir, tmp_path):
    """As on the OpenAI-compatible route: a reply longer than MAX_REPLY_CHARS keeps its first MAX_REPLY_CHARS characters,
    its full length is recorded (api_reply_chars), and the key in its tail never reaches the record."""
    from k9bench.serving.openai_api import MAX_REPLY_CHARS

    long_reply = "A" * MAX_REPLY_CHARS + " tail " + SECRET
    fake_gemini.responder = lambda request: long_reply
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(gemini_args(fake_gemini, out, demo_video_dir, "--max_samples", "1")) == EXIT_OK
    (record,) = load(out)["individual_results"]
    assert len(record["response"]) == MAX_REPLY_CHARS and record["api_reply_chars"] == len(long_reply)
    assert SECRET not in out.read_text(encoding="utf-8")
