"""--audio through eval_video_llm.py main() with the OpenAI-compatible backend (issue 17).

The local test server (tests/fake_openai_server.py) receives, for every question, the frames and then
exactly one ``input_audio`` part holding the video's soundtrack (16 kHz mono WAV or MP3, encoded once per
video); a video without a soundtrack gives failed records (``no_audio_stream``) naming the file; every
record says whether audio was used; the API key is written nowhere.
"""

from __future__ import annotations

import base64
import io
import json
import wave
from pathlib import Path

import pytest

import eval_video_llm
from k9bench.inference.runner import EXIT_OK
from tests.fake_openai_server import FakeOpenAIServer, fake_openai  # noqa: F401

SECRET = "sk-test-K9AUDIO-0123456789abcdef"
SILENT = "demoVid0003"


def args(server: FakeOpenAIServer, out: Path, video_dir: Path, *extra: str) -> list[str]:
    return ["--backend", "openai", "--api_model", "gemini-test", "--base_url", server.base_url, "--dataset_name", "demo",
            "--video_dir", str(video_dir), "--output_file", str(out), "--retry_backoff", "0.01", "--max_frames", "2",
            "--audio", "-q", *extra]


def reply(request) -> str:
    return "The dog runs. Answer: A"


def test_one_input_audio_part_per_request_after_the_frames(fake_openai, av_video_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    fake_openai.responder = reply
    out = tmp_path / "raw_av.json"
    assert eval_video_llm.main(args(fake_openai, out, av_video_dir)) == EXIT_OK
    requests = fake_openai.chat_requests()
    assert len(requests) == 8  # 4 questions on each of the two videos with a soundtrack
    durations = {}
    for req in requests:
        parts = req.audio_parts
        assert len(parts) == 1 and parts[0]["input_audio"]["format"] == "wav"
        types = req.content_types
        assert types == ["image_url", "image_url", "input_audio", "text"]  # the frames, the soundtrack, the question
        with wave.open(io.BytesIO(base64.b64decode(parts[0]["input_audio"]["data"]))) as w:
            assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
            durations.setdefault(round(w.getnframes() / 16000, 1), 0)
            durations[round(w.getnframes() / 16000, 1)] += 1
    assert durations == {6.0: 4, 5.0: 4}  # each clip's whole soundtrack

    data = json.loads(out.read_text(encoding="utf-8"))
    records = data["individual_results"]
    assert len(records) == 12
    silent = [r for r in records if r["scene_name"] == SILENT]
    heard = [r for r in records if r["scene_name"] != SILENT]
    assert len(silent) == 4 and all(r["error_class"] == "no_audio_stream" and f"{SILENT}.mp4" in r["error"] for r in silent)
    assert all(r["audio_used"] is False and r["audio"] is None for r in silent)
    assert all(r.get("error") is None and r["audio_used"] is True and r["audio"]["sampling_rate"] == 16000 for r in heard)
    assert all(r["audio_sent"]["format"] == "wav" for r in heard)
    assert data["failures_by_class"] == {"no_audio_stream": 4}
    assert data["inference"]["frames"]["audio"] is True
    assert data["inference"]["backend"]["audio"] == {"part": "input_audio", "format": "wav", "sampling_rate": 16000}
    assert SECRET not in out.read_text(encoding="utf-8")
    assert not any(SECRET in p.read_text(encoding="utf-8", errors="replace") for p in tmp_path.rglob("*") if p.is_file())


def test_mp3_and_the_default_file_name_says_av(fake_openai, av_video_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.chdir(tmp_path)
    fake_openai.responder = reply
    argv = [a for a in args(fake_openai, tmp_path / "x.json", av_video_dir, "--audio_format", "mp3", "--max_samples", "2")]
    i = argv.index("--output_file")
    del argv[i:i + 2]
    assert eval_video_llm.main(argv) == EXIT_OK
    assert (tmp_path / "eval_results" / "raw_gemini-test_mf2_n2_av.json").exists()  # a hand run writes under eval_results/
    req = fake_openai.chat_requests()[0]
    part = req.audio_parts[0]["input_audio"]
    assert part["format"] == "mp3" and base64.b64decode(part["data"])[:3] in (b"ID3", b"\xff\xfb", b"\xff\xf3", b"\xff\xf2")


def test_audio_refused_in_text_only_mode(fake_openai, av_video_dir, tmp_path, capfd):
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(args(fake_openai, out, av_video_dir, "--max_frames", "0")) == 2
    assert "--audio" in capfd.readouterr().err and not out.exists()


def test_resume_refuses_to_mix_audio_and_video_only_records(fake_openai, av_video_dir, tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    fake_openai.responder = reply
    out = tmp_path / "raw.json"
    video_only = [a for a in args(fake_openai, out, av_video_dir, "--max_samples", "2") if a != "--audio"]
    assert eval_video_llm.main(video_only) == EXIT_OK
    record = json.loads(out.read_text(encoding="utf-8"))["individual_results"][0]
    assert "audio" not in record["run_settings"]["frames"]
    capfd.readouterr()
    assert eval_video_llm.main(args(fake_openai, out, av_video_dir, "--max_samples", "2")) == 2
    assert "audio" in capfd.readouterr().err
