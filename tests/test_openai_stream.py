"""Issue 37 item 4: ``--stream`` asks for streamed replies (server-sent events, the usage in the last chunk) and
assembles them, with the same timeouts, size caps and retries; against the fake server streaming as the real wire
protocol the ``openai`` client reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import eval_video_llm
from k9bench.inference.runner import EXIT_ERROR, EXIT_OK
from tests.fake_openai_server import demo_args, Fault, Reply, fake_openai, sequence  # noqa: F401

TIMING_KEYS = {"api_elapsed_s", "timestamp"}
"""Record keys that differ between two runs of the same questions (wall clock and wall times)."""

STREAM_FIELDS = len(',"stream":true,"stream_options":{"include_usage":true}')
"""What a streamed request's body adds."""


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-stream-test-0123456789")


def args(server, out: Path, video_dir: Path, *extra: str) -> list[str]:
    return demo_args(server, out, video_dir, *extra)


def answer(req) -> Reply:
    question = req.text.rsplit("\n", 1)[-1]
    return Reply(text=json.dumps({"reasoning": f"the dog in {len(question)} characters of question", "answer": "B"}))


def records(path: Path) -> list[dict]:
    return json.loads(path.read_text())["individual_results"]


def test_streamed_records_equal_the_non_streamed_ones(fake_openai, demo_video_dir, tmp_path):
    fake_openai.responder = answer
    plain, streamed = tmp_path / "plain.json", tmp_path / "streamed.json"
    assert eval_video_llm.main(args(fake_openai, plain, demo_video_dir)) == EXIT_OK
    sent_plain = len(fake_openai.chat_requests())
    assert eval_video_llm.main(args(fake_openai, streamed, demo_video_dir, "--stream")) == EXIT_OK
    bodies = [r.body for r in fake_openai.chat_requests()[sent_plain:]]
    assert len(bodies) == sent_plain == 12
    assert all(b["stream"] is True and b["stream_options"] == {"include_usage": True} for b in bodies)
    assert all("stream" not in r.body for r in fake_openai.chat_requests()[:sent_plain])
    first, second = records(plain), records(streamed)
    for a, b in zip(first, second, strict=True):
        assert b["request_bytes"] - a["request_bytes"] == STREAM_FIELDS  # the size is the body sent
        same = lambda r: {k: v for k, v in r.items() if k not in TIMING_KEYS | {"request_bytes"}}  # noqa: E731
        assert same(a) == same(b)
    assert second[0]["usage"]["completion_tokens"] > 0  # the usage came from the stream's last chunk
    assert json.loads(streamed.read_text())["inference"]["backend"]["stream"] is True


@pytest.mark.parametrize("fault", [Fault(cut_stream=True), Fault(stream_error="the model is overloaded")],
                         ids=["stream cut short", "error event"])
def test_a_broken_stream_is_retried(fake_openai, demo_video_dir, tmp_path, fault):
    fake_openai.responder = sequence(fault, then=answer)
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(args(fake_openai, out, demo_video_dir, "--stream", "--max_samples", "1")) == EXIT_OK
    (record,) = records(out)
    assert record.get("error") is None and record["api_attempts"] == 2 and record["answer"] == "B"


def test_a_broken_stream_without_retries_is_a_failed_record(fake_openai, demo_video_dir, tmp_path):
    fake_openai.responder = sequence(Fault(cut_stream=True), then=answer)
    out = tmp_path / "raw.json"
    argv = args(fake_openai, out, demo_video_dir, "--stream", "--max_samples", "2", "--max_retries", "0", "--concurrency", "1")
    assert eval_video_llm.main(argv) == EXIT_OK
    failed = [r for r in records(out) if r.get("error")]
    assert len(failed) == 1 and "the stream ended before its reply finished" in failed[0]["error"]


def test_the_timeout_and_size_cap_hold_for_streams(fake_openai, demo_video_dir, tmp_path):
    fake_openai.responder = sequence(Fault(stall=3, then="late"), then=answer)
    out = tmp_path / "raw.json"
    argv = args(fake_openai, out, demo_video_dir, "--stream", "--max_samples", "1", "--timeout", "1")
    assert eval_video_llm.main(argv) == EXIT_OK
    (record,) = records(out)
    assert record.get("error") is None and record["api_attempts"] == 2  # the stalled attempt timed out and was retried
    capped = tmp_path / "capped.json"
    before = len(fake_openai.chat_requests())
    argv = args(fake_openai, capped, demo_video_dir, "--stream", "--max_samples", "1", "--max_request_mb", "0.01")
    assert eval_video_llm.main(argv) == EXIT_ERROR
    assert records(capped)[0]["error_class"] == "request_too_large" and len(fake_openai.chat_requests()) == before


# Qwen3-Omni-Flash's API: streamed replies only, one non-text modality per message (docs/inference.md)

def test_qwen_omni_audio_and_video_travel_as_the_file_itself(fake_openai, av_video_dir, tmp_path):
    import base64

    out = tmp_path / "raw.json"
    argv = args(fake_openai, out, av_video_dir, "--stream", "--one_modality_per_message", "--audio", "--max_samples", "4")
    argv[argv.index("frames")] = "video_url"
    fake_openai.responder = answer
    assert eval_video_llm.main(argv) == EXIT_OK
    for req in fake_openai.chat_requests():
        non_text = [t for t in req.content_types if t != "text"]
        assert non_text == ["video_url"] and req.audio_parts == [] and req.body["stream"] is True
        url = req.image_parts[0]["video_url"]["url"]
        assert base64.b64decode(url.split(",", 1)[1]) == (av_video_dir / "demoVid0001.mp4").read_bytes()  # with its soundtrack
    assert {r["audio_sent"] for r in records(out)} == {"in the video file"} and all(r["audio_used"] for r in records(out))


@pytest.mark.parametrize("extra, words", [
    (["--audio"], ["--one_modality_per_message", "input_audio", "--video_transport video_url"]),
    (["--video_transport", "video_url"], ["--one_modality_per_message", "soundtrack", "frames or video"]),
], ids=["frames with a soundtrack part", "the file with its soundtrack, video only"])
def test_what_one_modality_per_message_cannot_take_is_refused_in_one_line(fake_openai, av_video_dir, tmp_path, capfd, extra, words):
    from k9bench.inference.runner import EXIT_USAGE

    argv = args(fake_openai, tmp_path / "raw.json", av_video_dir, "--stream", "--one_modality_per_message")
    if "--video_transport" in extra:
        argv = argv[: argv.index("--video_transport")] + argv[argv.index("--video_transport") + 2:]
    assert eval_video_llm.main([*argv, *extra]) == EXIT_USAGE
    err = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and all(w in err[0] for w in words), err
    assert fake_openai.requests == []
