"""Issue 37 item 3: on the OpenAI-compatible route each request's size is known before it is sent; a request over
``--max_request_mb`` is a failed record ``request_too_large`` (never sent), and a provider's own size refusal
(Gemini's "Request payload size exceeds the limit: 20971520 bytes.", HTTP 413) is the same class."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import eval_video_llm
from k9bench.inference.openai_compat.request import request_bytes
from k9bench.inference.runner import EXIT_ERROR, EXIT_OK, EXIT_USAGE
from tests.fake_gemini_server import SIZE_REFUSAL
from tests.fake_openai_server import demo_args, Fault, fake_openai  # noqa: F401


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-size-test-0123456789")


def args(server, out: Path, video_dir: Path, *extra: str) -> list[str]:
    return demo_args(server, out, video_dir, "--concurrency", "1", *extra)


def test_the_size_recorded_is_the_body_sent(fake_openai, demo_video_dir, tmp_path):
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(args(fake_openai, out, demo_video_dir, "--max_samples", "2")) == EXIT_OK
    records = json.loads(out.read_text())["individual_results"]
    sent = [len(r.raw_body) for r in fake_openai.chat_requests()]
    assert [r["request_bytes"] for r in records] == sent  # measured before sending, equal to what went out


def test_a_request_over_the_cap_is_a_classed_failure_never_sent(fake_openai, demo_video_dir, tmp_path, capfd):
    out = tmp_path / "raw.json"
    code = eval_video_llm.main(args(fake_openai, out, demo_video_dir, "--max_samples", "3", "--max_request_mb", "0.01"))
    assert code == EXIT_ERROR  # every question failed: the run says it cannot be trusted
    data = json.loads(out.read_text())
    assert {r["error_class"] for r in data["individual_results"]} == {"request_too_large"}
    assert all("over --max_request_mb (10,485 bytes): not sent" in r["error"] for r in data["individual_results"])
    assert fake_openai.chat_requests() == []
    assert data["inference"]["backend"]["usage"]["requests_over_size"] == 3
    assert "3 failed (request_too_large: 3)" in capfd.readouterr().err  # the run log counts them


@pytest.mark.parametrize("fault", [
    Fault(400, body=json.dumps({"error": {"code": 400, "message": SIZE_REFUSAL, "status": "INVALID_ARGUMENT"}})),
    Fault(413, body="<html>413 Request Entity Too Large</html>"),
], ids=["gemini's text", "HTTP 413"])
def test_a_provider_size_refusal_is_the_same_class(fake_openai, demo_video_dir, tmp_path, fault):
    calls = []

    def responder(req):
        calls.append(req)
        return fault if len(calls) == 1 else "Answer: A"

    fake_openai.responder = responder
    out = tmp_path / "raw.json"
    assert eval_video_llm.main(args(fake_openai, out, demo_video_dir, "--max_samples", "2")) == EXIT_OK
    failed = [r for r in json.loads(out.read_text())["individual_results"] if r.get("error")]
    assert len(failed) == 1 and failed[0]["error_class"] == "request_too_large", failed
    assert len(calls) == 2  # not retried, not resent with half the frames


@pytest.mark.parametrize("value", ["0", "-1", "5000", "nan"])
def test_the_cap_is_range_checked(fake_openai, demo_video_dir, tmp_path, capfd, value):
    assert eval_video_llm.main(args(fake_openai, tmp_path / "raw.json", demo_video_dir, "--max_request_mb", value)) == EXIT_USAGE
    assert "--max_request_mb" in capfd.readouterr().err


def test_request_bytes_counts_the_extra_body_and_unicode():
    params = {"max_tokens": 5, "extra_body": {"top_k": 20}}
    size = request_bytes("m", [{"role": "user", "content": "é"}], params)
    assert size == len('{"model":"m","messages":[{"role":"user","content":"é"}],"max_tokens":5,"top_k":20}'.encode())
