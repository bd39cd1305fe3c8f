"""Issue 31 item 3: a server that answers with a huge body, or trickles its bytes, hangs nothing.

Every response is read under :class:`k9bench.serving.endpoint.ResponseLimits`: reading stops at the byte cap
whatever the server claims (a Content-Length, or a chunked body with none), and an attempt ends once its time
is up. The caps are lowered here (a 1 MB cap, 1 s attempts) so that each test takes about a second."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

import eval_video_llm
import subjective_evals
from k9bench.serving import endpoint as openai_endpoint
from k9bench.inference.runner import EXIT_OK
from k9bench.serving.openai_api import ChatClient, RetryPolicy
from k9bench.serving.endpoint import EndpointUnreachable, get_json
from k9bench.serving.endpoint import ResponseLimits
from tests.fake_openai_server import FakeOpenAIServer, Fault
from tests.test_judge_run import FAST, good, idx_of, make_records, write_eval

KEY = "sk-limits-test-0123456789"
CAP = 1_000_000
HUGE = 200_000_000  # far more than could be read in the test's time: a client that read it all would hang


@pytest.fixture(autouse=True)
def small_caps(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setattr(openai_endpoint, "RESPONSE_LIMITS", ResponseLimits(max_bytes=CAP))


def chat_once(server: FakeOpenAIServer, *, timeout: float = 5.0, retries: int = 0):
    client = ChatClient(api_key=KEY, base_url=server.base_url, timeout=timeout,
                        retry=RetryPolicy(max_retries=retries, backoff_base=0.01), rng=random.Random(0))
    started = time.monotonic()
    result = client.chat([{"role": "user", "content": "hi"}], model="m")
    return result, time.monotonic() - started


@pytest.mark.parametrize("fault, said", [
    (Fault(huge=HUGE), f"it claimed Content-Length {HUGE}"),
    (Fault(huge=HUGE, chunked=True), "it sent no Content-Length"),
    (Fault(huge=HUGE, claimed_length=10 * CAP), f"it claimed Content-Length {10 * CAP}"),
], ids=["content-length", "chunked, no length", "a length that lies"])
def test_a_huge_body_stops_at_the_cap_and_is_not_retried(fault, said):
    with FakeOpenAIServer(lambda req: fault) as server:
        result, took = chat_once(server, retries=3)
        assert not result.ok and result.error_kind == "bad_response" and result.attempts == 1  # asking again sends it again
        assert f"the response from {server.base_url}/chat/completions is over the {CAP}-byte cap" in result.error
        assert said in result.error
        assert len(server.chat_requests()) == 1
    assert took < 5


def test_limits_given_to_the_client_win_over_the_defaults():
    limits = ResponseLimits(max_bytes=1000)
    with FakeOpenAIServer(lambda req: Fault(huge=HUGE, chunked=True)) as server:
        client = ChatClient(api_key=KEY, base_url=server.base_url, timeout=5.0, retry=RetryPolicy(max_retries=0), limits=limits)
        result = client.chat([{"role": "user", "content": "hi"}], model="m")
    assert not result.ok and "over the 1000-byte cap" in result.error


def test_a_trickling_server_ends_at_the_attempt_timeout_and_is_retried_like_a_timeout():
    with FakeOpenAIServer(lambda req: Fault(trickle=0.05)) as server:
        result, took = chat_once(server, timeout=0.6, retries=1)
        assert not result.ok and result.error_kind == "timeout" and result.attempts == 2
        assert f"the response from {server.base_url}/chat/completions took over 0.6 s in all" in result.error
    assert took < 4  # two attempts of 0.6 s (the ~250-byte reply at 20 bytes/s would take 12 s each)


def test_an_explicit_total_limit_wins_over_the_attempt_timeout():
    with FakeOpenAIServer(lambda req: Fault(trickle=0.05)) as server:
        client = ChatClient(api_key=KEY, base_url=server.base_url, timeout=30.0, retry=RetryPolicy(max_retries=0),
                            limits=ResponseLimits(total_s=0.5))
        started = time.monotonic()
        result = client.chat([{"role": "user", "content": "hi"}], model="m")
    assert not result.ok and "took over 0.5 s in all" in result.error and time.monotonic() - started < 3


def test_a_normal_reply_is_read_as_before():
    with FakeOpenAIServer(lambda req: "fine") as server:
        result, _ = chat_once(server)
        assert result.ok and result.text == "fine"
        assert server.chat_requests()[0].headers.get("accept-encoding") == "identity"  # the cap bounds what is decoded


def test_get_json_reads_under_the_cap(monkeypatch):
    """The small GETs (/models, /version) too: a body over the cap is an unreachable endpoint naming the URL."""
    with FakeOpenAIServer() as server:
        monkeypatch.setattr(openai_endpoint, "RESPONSE_LIMITS", ResponseLimits(max_bytes=20))
        with pytest.raises(EndpointUnreachable, match=r"/models is over the 20-byte cap"):
            get_json(f"{server.base_url}/models")
        monkeypatch.setattr(openai_endpoint, "RESPONSE_LIMITS", ResponseLimits())
        status, body = get_json(f"{server.base_url}/models")
        assert status == 200 and body["data"]


# --------------------------------------------------------------------------- the inference backend


def infer(server: FakeOpenAIServer, out: Path, *extra: str) -> int:
    return eval_video_llm.main(["--backend", "openai", "--api_model", "gpt-test", "--base_url", server.base_url,
                                "--dataset_name", "demo", "--max_frames", "0", "--max_samples", "3", "--max_retries", "0",
                                "--concurrency", "1", "--output_file", str(out), "-q", *extra])


@pytest.mark.parametrize("fault, words", [
    (Fault(huge=HUGE, chunked=True), [f"over the {CAP}-byte cap", "it sent no Content-Length"]),
    (Fault(trickle=0.05), ["took over 1 s in all"]),
], ids=["huge chunked body", "trickle"])
def test_inference_keeps_a_failed_record_naming_the_url_and_answers_the_rest(tmp_path, capfd, fault, words):
    calls = []

    def responder(req):
        calls.append(req)
        return fault if len(calls) == 2 else '{"answer": "Sits."}'

    out = tmp_path / "raw.json"
    with FakeOpenAIServer(responder) as server:
        started = time.monotonic()
        assert infer(server, out, "--timeout", "1") == EXIT_OK
        took = time.monotonic() - started
        url = f"{server.base_url}/chat/completions"
    records = json.loads(out.read_text())["individual_results"]
    failed = [r for r in records if r.get("error")]
    assert len(records) == 3 and len(failed) == 1  # nothing lost: the other two answered
    assert url in failed[0]["error"] and all(w in failed[0]["error"] for w in words)
    assert took < 20
    assert "Traceback" not in capfd.readouterr().err


# --------------------------------------------------------------------------- the judge


@pytest.mark.parametrize("fault, words", [
    (Fault(huge=HUGE), [f"over the {CAP}-byte cap", f"Content-Length {HUGE}"]),
    (Fault(trickle=0.05), ["took over 1 s in all"]),
], ids=["huge body", "trickle"])
def test_the_judge_skips_the_entry_naming_the_url_and_scores_the_rest(tmp_path, capsys, fault, words):
    write_eval(tmp_path / "eval.json", make_records(3))
    argv = ["--evaluations", str(tmp_path / "eval.json"), "--output", str(tmp_path / "judge.json"),
            "--skipped", str(tmp_path / "skipped.json"), *FAST, "--timeout", "1", "--max_retries", "0", "--concurrency", "1"]
    with FakeOpenAIServer(lambda req: fault if idx_of(req) == 1 else good(req)) as server:
        started = time.monotonic()
        code = subjective_evals.main([*argv, "--base_url", server.base_url])
        took = time.monotonic() - started
        url = f"{server.base_url}/chat/completions"
    assert code == 0 and took < 20
    skipped = json.loads((tmp_path / "skipped.json").read_text())
    assert [s["idx"] for s in skipped] == [1]
    assert url in skipped[0]["error"] and all(w in skipped[0]["error"] for w in words)
    assert [e["idx"] for e in json.loads((tmp_path / "judge.json").read_text())] == [0, 2]
    assert "Traceback" not in capsys.readouterr().err
    with FakeOpenAIServer(good) as server:  # nothing lost: a rerun against a sane server judges only the skipped one
        assert subjective_evals.main([*argv, "--base_url", server.base_url]) == 0
        assert [idx_of(r) for r in server.chat_requests()] == [1]
    assert [e["idx"] for e in json.loads((tmp_path / "judge.json").read_text())] == [0, 1, 2]


def test_a_reply_through_a_proxy_is_capped_too(monkeypatch):
    """The caps are the client's event hooks, not a transport: a proxy's transport (HTTP_PROXY) is capped alike.
    The fake server stands in as the proxy (it answers the absolute-form request itself)."""
    with FakeOpenAIServer(lambda req: Fault(huge=HUGE, chunked=True)) as server:
        for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.port}")
        client = ChatClient(api_key=KEY, base_url="http://judge.example.invalid/v1", timeout=5.0, retry=RetryPolicy(max_retries=0))
        result = client.chat([{"role": "user", "content": "hi"}], model="m")
        assert server.chat_requests(), "the request did not go through the proxy"
    assert not result.ok and "http://judge.example.invalid/v1/chat/completions is over the" in result.error
