"""k9bench.serving.openai_api against the local fake server, driven by the real openai client."""

from __future__ import annotations

import logging
import random
import threading
import time

import pytest

from k9bench.serving.openai_api import (
    ChatClient,
    MissingApiKey,
    RetryPolicy,
    Usage,
    parse_retry_after,
    resolve_api_key,
    run_concurrent,
    sum_usage,
)
from k9bench.serving.endpoint import PLACEHOLDER_KEY, redact
from tests.fake_openai_server import FakeOpenAIServer, Fault, Reply, fake_openai, sequence  # noqa: F401 (fixture)

SECRET = "sk-test-9f8e7d6c5b4a-do-not-leak"
MSGS = [{"role": "user", "content": "one two three"}]


def make_client(server: FakeOpenAIServer, *, retries: int = 3, timeout: float = 2.0, sleeps: list | None = None) -> ChatClient:
    record = sleeps if sleeps is not None else []
    return ChatClient(
        api_key=SECRET,
        base_url=server.base_url,
        timeout=timeout,
        retry=RetryPolicy(max_retries=retries, backoff_base=0.01, backoff_max=0.05),
        sleep=lambda s: (record.append(s), time.sleep(min(s, 0.05))),
        rng=random.Random(0),
    )


# -- key handling ----------------------------------------------------------------


def test_key_from_environment_only():
    assert resolve_api_key(None, {"OPENAI_API_KEY": "sk-abc"}) == "sk-abc"
    assert resolve_api_key("http://127.0.0.1:9/v1", {"OPENAI_API_KEY": "sk-abc"}) == "sk-abc"
    assert resolve_api_key("http://127.0.0.1:9/v1", {}) == PLACEHOLDER_KEY
    with pytest.raises(MissingApiKey, match="OPENAI_API_KEY is not set.*--base_url"):
        resolve_api_key(None, {"OPENAI_API_KEY": "  "})


def test_redact():
    assert redact(f"bad key {SECRET}!", SECRET) == "bad key ***!"
    assert redact("nothing here", SECRET) == "nothing here"
    assert redact(f"x {PLACEHOLDER_KEY}", PLACEHOLDER_KEY) == f"x {PLACEHOLDER_KEY}"


# -- Retry-After and backoff ---------------------------------------------------


@pytest.mark.parametrize(
    "headers, expected",
    [
        ({"Retry-After": "2"}, 2.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"Retry-After": "Thu, 01 Jan 1970 00:00:10 GMT"}, 5.0),  # HTTP date, 'now' = 5 s
        ({"Retry-After": "soon"}, None),
        ({"Retry-After": "-3"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_parse_retry_after(headers, expected):
    assert parse_retry_after(headers, now=5.0) == expected


def test_backoff_grows_exponentially_with_bounded_jitter():
    policy = RetryPolicy(backoff_base=1.0, backoff_max=8.0, jitter=0.5)
    rng = random.Random(1)
    for n, base in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (6, 8.0)]:
        for _ in range(20):
            d = policy.backoff(n, rng)
            assert base * 0.5 <= d <= base
    assert RetryPolicy(backoff_base=1.0, jitter=0).backoff(3, rng) == 4.0
    # Retry-After wins when longer, is capped, and never shortens the backoff
    p = RetryPolicy(backoff_base=1.0, jitter=0, retry_after_max=30)
    assert p.delay(1, 7.0, rng) == 7.0
    assert p.delay(1, 500.0, rng) == 30.0
    assert p.delay(3, 0.1, rng) == 4.0


# -- the chat call against the fake server ---------------------------------------


def test_success_returns_text_usage_model_and_sends_params(fake_openai):
    fake_openai.served_suffix = "-2024-08-06"
    fake_openai.responder = lambda req: Reply("hello there friend", prompt_tokens=11, completion_tokens=3)
    result = make_client(fake_openai).chat(MSGS, model="gpt-4o", temperature=0.0, max_tokens=None, seed=7)
    assert result.ok and result.text == "hello there friend" and result.attempts == 1
    assert result.usage == Usage(11, 3, 14, 1)
    assert result.model == "gpt-4o-2024-08-06" and result.finish_reason == "stop"
    (req,) = fake_openai.chat_requests()
    assert req.body["model"] == "gpt-4o" and req.body["temperature"] == 0.0 and req.body["seed"] == 7
    assert "max_tokens" not in req.body  # None is not sent
    assert req.headers["authorization"] == f"Bearer {SECRET}"
    assert req.headers.get("x-stainless-retry-count") == "0"  # the library does not retry on its own


def test_429_with_retry_after_is_honoured(fake_openai, caplog):
    fake_openai.responder = sequence(Fault(429, retry_after=0.3), "fine")
    sleeps: list = []
    client = ChatClient(
        api_key=SECRET,
        base_url=fake_openai.base_url,
        timeout=2.0,
        retry=RetryPolicy(max_retries=2, backoff_base=0.01, backoff_max=0.05),
    )
    client._sleep = lambda s: (sleeps.append(s), time.sleep(s))
    with caplog.at_level(logging.WARNING, logger="k9bench.serving.openai_api"):
        result = client.chat(MSGS, model="m", label="idx 4")
    assert result.ok and result.text == "fine" and result.attempts == 2
    assert sleeps == [pytest.approx(0.3)]
    first, second = fake_openai.chat_requests()
    assert second.received_at - first.received_at >= 0.3
    assert "idx 4: rate_limit on attempt 1/3" in caplog.text and "Retry-After 0.3" in caplog.text
    assert client.retries_done == 1


@pytest.mark.parametrize(
    "faults, kind",
    [
        ([Fault(500), Fault(503), Fault(502)], "server_error"),
        ([Fault(stall=5.0)], "timeout"),
        ([Fault(drop=True)], "connection"),
        ([Fault(malformed=True), Fault(malformed=True, body='{"object": "chat.completion", "choices": []}')], "bad_response"),
        ([Fault(408)], "timeout"),
    ],
)
def test_transient_failures_are_retried_until_success(fake_openai, caplog, faults, kind):
    fake_openai.responder = sequence(*faults, "recovered")
    sleeps: list = []
    with caplog.at_level(logging.WARNING, logger="k9bench.serving.openai_api"):
        result = make_client(fake_openai, retries=4, timeout=0.4, sleeps=sleeps).chat(MSGS, model="m")
    assert result.ok and result.text == "recovered"
    assert result.attempts == len(faults) + 1 == len(fake_openai.chat_requests())
    assert len(sleeps) == len(faults)
    assert caplog.text.count("retrying in") == len(faults) and kind in caplog.text


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_other_4xx_are_not_retried(fake_openai, status):
    fake_openai.responder = lambda req: Fault(status)
    sleeps: list = []
    result = make_client(fake_openai, retries=5, sleeps=sleeps).chat(MSGS, model="m")
    assert not result.ok and result.text is None
    assert result.error_kind == "client_error" and result.status_code == status
    assert result.attempts == 1 and sleeps == [] and len(fake_openai.chat_requests()) == 1


def test_permanent_failure_gives_up_after_max_retries(fake_openai, caplog):
    fake_openai.responder = lambda req: Fault(500)
    sleeps: list = []
    with caplog.at_level(logging.WARNING, logger="k9bench.serving.openai_api"):
        result = make_client(fake_openai, retries=2, sleeps=sleeps).chat(MSGS, model="m", label="idx 9")
    assert not result.ok and result.error_kind == "server_error" and result.status_code == 500
    assert result.attempts == 3 and len(sleeps) == 2 and len(fake_openai.chat_requests()) == 3
    assert "giving up" in caplog.text
    assert result.usage == Usage()  # no reply, no tokens


def test_key_is_scrubbed_from_errors_and_logs(fake_openai, caplog):
    def echo_key(req):
        auth = req.headers.get("authorization", "")
        return Fault(401, body='{"error": {"message": "Incorrect API key provided: %s", "type": "invalid_request_error"}}' % auth[7:])

    fake_openai.responder = echo_key
    with caplog.at_level(logging.DEBUG):
        result = make_client(fake_openai).chat(MSGS, model="m")
    assert not result.ok and result.status_code == 401
    assert "Incorrect API key provided: ***" in result.error
    assert SECRET not in result.error and SECRET not in caplog.text


def test_empty_content_is_an_empty_text_not_a_failure(fake_openai):
    fake_openai.responder = lambda req: Reply(None, finish_reason="content_filter", usage=False)
    result = make_client(fake_openai).chat(MSGS, model="m")
    assert result.ok and result.text == "" and result.finish_reason == "content_filter"
    assert result.usage == Usage(requests=1)


def test_image_parts_pass_through_and_count(fake_openai):
    parts = [{"type": "text", "text": "what is this"}, {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}}]
    result = make_client(fake_openai).chat([{"role": "user", "content": parts}], model="m")
    (req,) = fake_openai.chat_requests()
    assert req.image_parts == [parts[1]] and req.text == "what is this"
    assert result.usage.prompt_tokens == 3 + 85


# -- the concurrent runner -------------------------------------------------------


def test_run_concurrent_bounds_in_flight_and_yields_as_completed():
    lock = threading.Lock()
    state = {"now": 0, "peak": 0}

    def work(n: int) -> int:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(0.02 if n != 0 else 0.2)  # item 0 is slow: it must not hold back the others
        with lock:
            state["now"] -= 1
        return n * n

    out = list(run_concurrent(work, range(12), 4))
    assert sorted(out) == [(n, n * n) for n in range(12)]
    assert state["peak"] == 4
    assert out[-1][0] == 0  # finished last, yielded last


def test_run_concurrent_reraises_worker_errors_and_handles_empty():
    def work(n: int) -> int:
        if n == 3:
            raise RuntimeError("bug in worker")
        return n

    with pytest.raises(RuntimeError, match="bug in worker"):
        list(run_concurrent(work, range(6), 2))
    assert list(run_concurrent(work, [], 4)) == []


def test_usage_sums():
    total = sum_usage([Usage(1, 2, 3, 1), Usage(10, 20, 30, 1), Usage.from_dict({"prompt_tokens": 5})])
    assert total == Usage(16, 22, 33, 2)
    assert Usage.from_dict(total.to_dict()) == total


# -- replies that are well-formed JSON but unusable (issue 15 item 2) -------------------------------


@pytest.mark.parametrize(
    "usage, expected",
    [
        (None, Usage(requests=1)),
        ({"prompt_tokens": 3, "completion_tokens": 2}, Usage(3, 2, 5, 1)),
        ({"prompt_tokens": 3.0, "completion_tokens": None, "total_tokens": 3}, Usage(3, 0, 3, 1)),
    ],
)
def test_usage_from_response_reads_counts(usage, expected):
    assert Usage.from_response(usage) == expected


@pytest.mark.parametrize(
    "usage, fragment",
    [
        ("lots", "usage is 'lots' (type str)"),
        ([1, 2], "usage is [1, 2] (type list)"),
        ({"prompt_tokens": "many"}, "usage.prompt_tokens is 'many'"),
        ({"completion_tokens": 2.5}, "usage.completion_tokens is 2.5"),
        ({"total_tokens": True}, "usage.total_tokens is True"),
        ({"prompt_tokens": -1}, "usage.prompt_tokens is -1"),
    ],
)
def test_usage_that_is_not_numeric_is_refused_with_the_field(usage, fragment):
    from k9bench.serving.openai_api import UnusableReply

    with pytest.raises(UnusableReply) as info:
        Usage.from_response(usage)
    assert fragment in str(info.value)


def test_scrub_masks_the_key_userinfo_and_registered_secrets():
    from k9bench.serving.endpoint import scrub

    text = f"key {SECRET} at http://u:p4ss-word-1@host/v1"
    assert scrub(text, SECRET) == "key *** at http://***@host/v1"
    assert scrub(5, SECRET) == 5  # not text: returned as given, never a crash


# ---------------------------------------------------------------------------
# check_base_url, probe_endpoint (used by the judge and the OpenAI backend)


@pytest.mark.parametrize("url", ["localhost:8000/v1", "127.0.0.1:8000", "ftp://host/v1", "http://", "http://host:port/v1", "//host/v1"])
def test_a_url_without_http_scheme_and_host_is_one_line_exit_2(url):
    from k9bench.serving.endpoint import BadBaseUrl, check_base_url

    with pytest.raises(BadBaseUrl) as info:
        check_base_url(url, flag="--judge_base_url")
    text = str(info.value)
    assert "\n" not in text and text.startswith("--judge_base_url: expected an http:// or https:// URL")
    assert text.endswith(repr(url)) or f"got {url!r} (" in text
    assert info.value.exit_code == 2


def test_a_good_url_is_kept():
    from k9bench.serving.endpoint import check_base_url

    assert check_base_url("http://localhost:8000/v1/") == "http://localhost:8000/v1"
    assert check_base_url(" https://api.example.com/v1 ") == "https://api.example.com/v1"
    assert check_base_url(None) is None


def test_probe_answers_with_the_status_of_a_server_that_is_up():
    from k9bench.serving.endpoint import probe_endpoint
    from tests.fake_openai_server import FakeOpenAIServer

    with FakeOpenAIServer() as server:
        assert probe_endpoint(server.base_url) == 200


def test_probe_of_a_closed_port_fails_at_once():
    import socket
    import time

    from k9bench.serving.endpoint import EndpointUnreachable, probe_endpoint

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again when the block ends
    start = time.monotonic()
    with pytest.raises(EndpointUnreachable) as info:
        probe_endpoint(f"http://127.0.0.1:{port}/v1")
    assert time.monotonic() - start < 5
    assert f"nothing answers at http://127.0.0.1:{port}/v1/models" in str(info.value) and "is the server up" in str(info.value)


def test_probe_of_a_server_that_never_answers_gives_up_after_its_timeout():
    import socket
    import time

    from k9bench.serving.endpoint import EndpointUnreachable, probe_endpoint

    with socket.socket() as sock:  # listens, accepts into the backlog, never replies
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        start = time.monotonic()
        with pytest.raises(EndpointUnreachable, match="within 1 s"):
            probe_endpoint(f"http://127.0.0.1:{sock.getsockname()[1]}/v1", timeout=1.0)
        assert time.monotonic() - start < 4
