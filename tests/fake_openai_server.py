"""A local OpenAI-compatible HTTP server for offline tests and benchmarks.

It listens on 127.0.0.1 (a random free port), records every request, and answers
``POST /v1/chat/completions`` through a *responder*: a function of the recorded
request that returns the reply text, a :class:`Reply` (text plus usage, latency,
finish reason), or a :class:`Fault` (an HTTP error with optional ``Retry-After``,
a stall that outlasts the client's timeout, a malformed body, a dropped
connection). A request with ``"stream": true`` gets the same reply as server-sent events, in pieces
(``Fault(cut_stream=True)``/``Fault(stream_error=...)`` break a stream off). ``GET /v1/models`` lists the served model. Drive it with the real
``openai`` client::

    from tests.fake_openai_server import FakeOpenAIServer, Fault, sequence

    with FakeOpenAIServer(lambda req: "CoT: fine\\n{'Logic': 8, ...}") as server:
        client = openai.OpenAI(api_key="sk-test", base_url=server.base_url, max_retries=0)
        ...
        assert server.chat_requests()[0].body["model"] == "gpt-4o"

As a pytest fixture: ``from tests.fake_openai_server import fake_openai`` in a test
module, then take ``fake_openai`` as an argument and set ``fake_openai.responder``.

Usage is reported in every successful reply: prompt tokens are the
whitespace-separated words of all text parts (+ a fixed 85 per image part),
completion tokens the words of the reply, unless a :class:`Reply` sets them.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable, Union

import pytest

IMAGE_PART_TOKENS = 85
"""Prompt tokens the fake server counts for each image part."""


FAKE_VERSION = "0.0.1"
"""What ``/version`` says for a server with an ``engine``."""


@dataclass
class RecordedRequest:
    """One request the server received."""

    method: str
    """HTTP method."""
    path: str
    """Request path (``/v1/chat/completions``...)."""
    headers: dict
    """Header name (lower case) -> value."""
    body: Any
    """The parsed JSON body (None when absent or not JSON)."""
    raw_body: bytes
    """The body as received."""
    received_at: float
    """``time.monotonic()`` on arrival."""
    number: int
    """1-based arrival order among all requests."""

    @property
    def messages(self) -> list:
        """The chat messages of the body (empty when none)."""
        return list((self.body or {}).get("messages") or []) if isinstance(self.body, dict) else []

    @property
    def text(self) -> str:
        """All text content of the messages, joined by newlines (string content and ``text`` parts)."""
        out: list[str] = []
        for msg in self.messages:
            content = msg.get("content") if isinstance(msg, dict) else None
            if isinstance(content, str):
                out.append(content)
            elif isinstance(content, list):
                out.extend(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        return "\n".join(out)

    @property
    def image_parts(self) -> list[dict]:
        """The ``image_url`` / ``video_url`` content parts of the messages."""
        parts: list[dict] = []
        for msg in self.messages:
            content = msg.get("content") if isinstance(msg, dict) else None
            if isinstance(content, list):
                parts.extend(p for p in content if isinstance(p, dict) and p.get("type") in ("image_url", "video_url"))
        return parts

    @property
    def audio_parts(self) -> list[dict]:
        """The ``input_audio`` content parts of the messages."""
        parts: list[dict] = []
        for msg in self.messages:
            content = msg.get("content") if isinstance(msg, dict) else None
            if isinstance(content, list):
                parts.extend(p for p in content if isinstance(p, dict) and p.get("type") == "input_audio")
        return parts

    @property
    def content_types(self) -> list[str]:
        """The ``type`` of every content part of the user messages, in order."""
        out: list[str] = []
        for msg in self.messages:
            content = msg.get("content") if isinstance(msg, dict) else None
            if isinstance(content, list) and msg.get("role") == "user":
                out.extend(str(p.get("type")) for p in content if isinstance(p, dict))
        return out


@dataclass
class Reply:
    """A successful chat completion."""

    text: str | None
    """The assistant message content (None sends ``"content": null``)."""
    prompt_tokens: int | None = None
    """Reported prompt tokens (None: counted from the request)."""
    completion_tokens: int | None = None
    """Reported completion tokens (None: counted from ``text``)."""
    delay: float = 0.0
    """Extra seconds to wait before answering (on top of the server latency)."""
    finish_reason: str = "stop"
    """The choice's finish reason."""
    usage: bool = True
    """Include a ``usage`` block."""


@dataclass
class Fault:
    """A scripted failure.

    ``status`` sends an HTTP error (with an OpenAI-style error body unless ``body``
    is given, and a ``Retry-After`` header when ``retry_after`` is set). ``stall``
    waits that many seconds before answering at all (longer than the client's
    timeout makes a timeout). ``malformed`` answers 200 with a body that is not a
    chat completion (``body`` or a default non-JSON text). ``drop`` closes the
    connection without a reply. ``huge`` answers 200 with that many bytes of body, written in
    pieces (``chunked``: with no Content-Length, as ``Transfer-Encoding: chunked``; else a
    Content-Length of ``claimed_length`` when set, the true size otherwise). ``trickle`` sends a
    valid completion (of ``then``, default "A") one byte every ``trickle`` seconds.
    """

    status: int = 500
    """HTTP status code for an error reply."""
    retry_after: float | str | None = None
    """Value of the ``Retry-After`` header (seconds, or any string)."""
    body: str | None = None
    """Raw body to send instead of the default."""
    stall: float = 0.0
    """Seconds to hold the request before answering (with the error or, if ``then`` is set, that)."""
    malformed: bool = False
    """Answer 200 with a broken body."""
    drop: bool = False
    """Close the connection without answering."""
    then: "Reply | str | None" = None
    """With ``stall``: what to answer after stalling (default: the error reply)."""
    huge: int = 0
    """Answer 200 with this many bytes of body (a JSON string's worth of ``x``), sent in 64 KiB pieces."""
    chunked: bool = False
    """With ``huge``: no Content-Length, ``Transfer-Encoding: chunked``."""
    claimed_length: int | None = None
    """With ``huge`` (not chunked): the Content-Length header to claim (default: the true size)."""
    trickle: float = 0.0
    """Send a valid completion one byte every this many seconds."""
    cut_stream: bool = False
    """To a streamed request: send the first piece of ``then`` (default "A") and end the stream there, with no
    finish reason and no ``[DONE]``."""
    stream_error: str | None = None
    """To a streamed request: send the first piece, then an error event with this message."""


Outcome = Union[str, Reply, Fault]
Responder = Callable[[RecordedRequest], Outcome]


def default_responder(request: RecordedRequest) -> Outcome:
    """Echo the number of words in the prompt (a stand-in that always succeeds)."""
    return f"ok ({len(request.text.split())} words)"


def sequence(*steps: Outcome | Responder, then: Responder | Outcome | None = None) -> Responder:
    """A responder that answers the 1st request with ``steps[0]``, the 2nd with ``steps[1]``...

    A step may itself be a responder (called with the request). After the steps,
    ``then`` answers (a responder or a fixed outcome; default: :func:`default_responder`).
    Thread-safe.
    """
    pending = list(steps)
    lock = threading.Lock()

    def respond(request: RecordedRequest) -> Outcome:
        with lock:
            step = pending.pop(0) if pending else None
        if step is None:
            tail = then if then is not None else default_responder
            return tail(request) if callable(tail) else tail
        return step(request) if callable(step) else step

    return respond


def count_tokens(text: str | None) -> int:
    """The fake tokenizer: whitespace-separated words."""
    return len((text or "").split())


class FakeOpenAIServer:
    """A threaded OpenAI-compatible server on 127.0.0.1; a context manager.

    ``responder`` answers chat requests (see module doc); ``latency`` is added to
    every chat reply; ``model`` is echoed as the served model (default: the
    requested model, with ``served_suffix`` appended when set, to mimic an alias
    resolving to a dated snapshot).
    """

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        latency: float = 0.0,
        model: str | None = None,
        served_suffix: str = "",
        engine: str | None = None,
        root: str | None = None,
    ) -> None:
        self.responder: Responder = responder or default_responder
        self.latency = latency
        self.model = model
        self.served_suffix = served_suffix
        self.engine = engine
        """``vllm`` or ``sglang``: ``/v1/models`` says ``owned_by`` it, lists ``root`` and ``max_model_len``,
        ``/version`` answers and replies carry a ``system_fingerprint`` (None: a plain API, 404 on /version)."""
        self.root = root
        """The checkpoint ``/v1/models`` names (default: the model name)."""
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._counter = 0
        self._ids = 0

    # -- lifecycle -----------------------------------------------------------
    def start(self) -> "FakeOpenAIServer":
        server = self

        class Handler(_Handler):
            fake = server

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        httpd.daemon_threads = True
        httpd.block_on_close = False
        self._httpd = httpd
        self._stop.clear()
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> "FakeOpenAIServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- introspection ---------------------------------------------------------
    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("server not started")
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1`` (what ``openai.OpenAI(base_url=...)`` takes)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def chat_requests(self) -> list[RecordedRequest]:
        """The recorded ``/chat/completions`` requests, in arrival order."""
        with self._lock:
            return [r for r in self.requests if r.path.rstrip("/").endswith("/chat/completions")]

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    # -- internals ---------------------------------------------------------------
    def _record(self, handler: BaseHTTPRequestHandler, raw: bytes) -> RecordedRequest:
        try:
            body = json.loads(raw) if raw else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        with self._lock:
            self._counter += 1
            req = RecordedRequest(
                method=handler.command,
                path=handler.path,
                headers={k.lower(): v for k, v in handler.headers.items()},
                body=body,
                raw_body=raw,
                received_at=time.monotonic(),
                number=self._counter,
            )
            self.requests.append(req)
        return req

    def _wait(self, seconds: float) -> bool:
        """Sleep, waking early when the server stops; True if it stopped."""
        return self._stop.wait(seconds) if seconds > 0 else self._stop.is_set()

    def _completion(self, req: RecordedRequest, reply: Reply) -> dict:
        with self._lock:
            self._ids += 1
            n = self._ids
        requested = (req.body or {}).get("model", "") if isinstance(req.body, dict) else ""
        model = self.model or (requested + self.served_suffix)
        prompt = reply.prompt_tokens
        if prompt is None:
            prompt = count_tokens(req.text) + IMAGE_PART_TOKENS * len(req.image_parts)
        completion = reply.completion_tokens if reply.completion_tokens is not None else count_tokens(reply.text)
        out: dict[str, Any] = {
            "id": f"chatcmpl-fake{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": reply.text}, "finish_reason": reply.finish_reason}
            ],
        }
        if self.engine:
            out["system_fingerprint"] = f"{self.engine}-{FAKE_VERSION}-fake"
        if reply.usage:
            out["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
        return out


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOpenAIServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stalls

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet by default
        pass

    def _send(self, status: int, body: bytes, *, content_type: str = "application/json", headers: dict | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True

    def _send_json(self, status: int, obj: Any, headers: dict | None = None) -> None:
        self._send(status, json.dumps(obj).encode("utf-8"), headers=headers)

    def do_GET(self) -> None:  # noqa: N802
        req = self.fake._record(self, b"")
        fake = self.fake
        if req.path.rstrip("/").endswith("/models"):
            name = fake.model or "fake-model"
            entry: dict[str, Any] = {"id": name, "object": "model", "owned_by": fake.engine or "fake"}
            if fake.engine:
                entry.update(root=fake.root or name, max_model_len=4096)
            self._send_json(200, {"object": "list", "data": [entry]})
        elif req.path.rstrip("/") == "/version" and fake.engine:
            self._send_json(200, {"version": FAKE_VERSION})
        else:
            self._send_json(404, {"error": {"message": f"no route {req.path}", "type": "invalid_request_error"}})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        req = self.fake._record(self, raw)
        if not req.path.rstrip("/").endswith("/chat/completions"):
            self._send_json(404, {"error": {"message": f"no route {req.path}", "type": "invalid_request_error"}})
            return
        if not isinstance(req.body, dict) or "messages" not in req.body:
            self._send_json(400, {"error": {"message": "body must be a JSON object with messages", "type": "invalid_request_error"}})
            return
        try:
            outcome = self.fake.responder(req)
        except Exception as exc:  # a bug in a test's responder: answer 500 naming it
            self._send_json(500, {"error": {"message": f"responder raised {exc!r}", "type": "server_error"}})
            return
        if self.fake._wait(self.fake.latency):
            return
        self._answer(req, outcome)

    def _answer(self, req: RecordedRequest, outcome: Outcome) -> None:
        if isinstance(outcome, str) or outcome is None:
            outcome = Reply(text=outcome)
        if isinstance(outcome, Reply):
            if self.fake._wait(outcome.delay):
                return
            if (req.body or {}).get("stream"):
                self._send_stream(req, self.fake._completion(req, outcome))
                return
            self._send_json(200, self.fake._completion(req, outcome))
            return
        fault = outcome
        if (fault.cut_stream or fault.stream_error) and (req.body or {}).get("stream"):
            then = fault.then if isinstance(fault.then, Reply) else Reply(text=fault.then if fault.then is not None else "A")
            self._send_stream(req, self.fake._completion(req, then), cut=True, error=fault.stream_error)
            return
        if fault.stall and self.fake._wait(fault.stall):
            return
        if fault.huge:
            self._send_huge(fault)
            return
        if fault.trickle:
            then = fault.then if isinstance(fault.then, Reply) else Reply(text=fault.then if fault.then is not None else "A")
            self._send_trickle(json.dumps(self.fake._completion(req, then)).encode("utf-8"), fault.trickle)
            return
        if fault.then is not None:
            self._answer(req, fault.then)
            return
        if fault.drop:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        if fault.malformed:
            body = fault.body if fault.body is not None else "<html>upstream proxy error: this is not JSON"
            self._send(200, body.encode("utf-8"))
            return
        headers = {}
        if fault.retry_after is not None:
            headers["Retry-After"] = str(fault.retry_after)
        body = fault.body
        if body is None:
            kind = "rate_limit_exceeded" if fault.status == 429 else ("server_error" if fault.status >= 500 else "invalid_request_error")
            body = json.dumps({"error": {"message": f"fake {fault.status}", "type": kind, "code": kind}})
        self._send(fault.status, body.encode("utf-8"), headers=headers)

    def _send_stream(self, req: RecordedRequest, completion: dict, *, cut: bool = False, error: str | None = None) -> None:
        """``completion`` as the server-sent events of a streamed reply (what the ``openai`` client parses): a first chunk
        with the role, the text in pieces of a few words, a chunk with the finish reason, then (``stream_options:
        {include_usage: true}``) one with no choices and the usage, then ``data: [DONE]``; chunked, no Content-Length."""
        choice = completion["choices"][0]
        text = choice["message"]["content"] or ""
        words = text.split(" ")
        pieces = [" ".join(words[i:i + 3]) + (" " if i + 3 < len(words) else "") for i in range(0, len(words), 3)] if text else []
        base = {k: completion[k] for k in ("id", "created", "model", "system_fingerprint") if k in completion}
        base["object"] = "chat.completion.chunk"

        def chunk(delta: dict, finish: str | None = None) -> dict:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        events = [chunk({"role": "assistant", "content": ""})] + [chunk({"content": p}) for p in pieces]
        if cut or error:
            events = events[:2]
        else:
            events.append(chunk({}, choice["finish_reason"]))
            if ((req.body or {}).get("stream_options") or {}).get("include_usage") and "usage" in completion:
                events.append({**base, "choices": [], "usage": completion["usage"]})
        lines = [f"data: {json.dumps(e)}\n\n" for e in events]
        if error:
            lines.append(f"data: {json.dumps({'error': {'message': error, 'type': 'server_error'}})}\n\n")
        if not (cut or error):
            lines.append("data: [DONE]\n\n")
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for line in lines:
                data = line.encode("utf-8")
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True

    def _send_huge(self, fault: Fault) -> None:
        piece = b"x" * 65536
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if fault.chunked:
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.send_header("Content-Length", str(fault.claimed_length if fault.claimed_length is not None else fault.huge))
            self.end_headers()
            left = fault.huge
            while left > 0 and not self.fake._stop.is_set():
                data = piece[: min(left, len(piece))]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data) if fault.chunked else data)
                left -= len(data)
            if fault.chunked:
                self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass  # the client stopped reading (its cap): expected
        self.close_connection = True

    def _send_trickle(self, body: bytes, every: float) -> None:
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.flush()
            for i in range(len(body)):
                if self.fake._wait(every):
                    break
                self.wfile.write(body[i : i + 1])
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        self.close_connection = True


@pytest.fixture
def fake_openai() -> Iterable[FakeOpenAIServer]:
    """A started :class:`FakeOpenAIServer` (default responder); set ``.responder`` in the test."""
    with FakeOpenAIServer() as server:
        yield server


__all__ = [
    "FAKE_VERSION",
    "FakeOpenAIServer",
    "Fault",
    "RecordedRequest",
    "Reply",
    "default_responder",
    "sequence",
    "count_tokens",
    "fake_openai",
    "IMAGE_PART_TOKENS",
]


def demo_args(server: FakeOpenAIServer, out, video_dir, *extra: str) -> list[str]:
    """``eval_video_llm.py`` flags that answer the demo set through ``server`` (2 frames each, as JPEG parts)."""
    return ["--backend", "openai", "--api_model", "gpt-test", "--base_url", server.base_url, "--dataset_name", "demo",
            "--video_dir", str(video_dir), "--output_file", str(out), "--retry_backoff", "0.01", "--max_frames", "2",
            "--video_transport", "frames", *extra]
