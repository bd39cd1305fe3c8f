"""A local fake of the Gemini REST API that the real ``google-genai`` SDK talks to, on 127.0.0.1.

The wire protocol, as the SDK (3.6.1) speaks it (../shared/SPEC.md section 11):

- ``POST /upload/{version}/files`` with ``X-Goog-Upload-Protocol: resumable`` and ``X-Goog-Upload-Command: start``
  (and ``X-Goog-Upload-Header-Content-Length``/``-Content-Type``) opens an upload: the reply's
  ``X-Goog-Upload-URL`` says where the bytes go, ``X-Goog-Upload-Status: active``;
- ``POST`` to that URL, in chunks, ``X-Goog-Upload-Command: upload`` (the last ``upload, finalize``) with
  ``X-Goog-Upload-Offset``: ``active`` until the last, then ``final`` with ``{"file": {...}}``;
- ``GET /{version}/files/{id}``: the file, ``PROCESSING`` for the first :attr:`FakeGeminiServer.processing_polls`
  reads, then ``ACTIVE``; an unknown (expired, deleted) file is a 404 ``NOT_FOUND``;
- ``DELETE /{version}/files/{id}``; ``GET /{version}/models/{model}`` describes any model;
- ``POST /{version}/models/{model}:generateContent``: a file that is not ``ACTIVE`` is a 400
  ``FAILED_PRECONDITION``; otherwise the *responder* answers (a text, a :class:`GeminiReply` or a
  :class:`GeminiFault`).

Every request is recorded (:attr:`FakeGeminiServer.requests`); :attr:`FakeGeminiServer.uploads` counts finished
uploads. Use it as ``with FakeGeminiServer() as server: genai.Client(api_key="k", http_options={"base_url":
server.base_url})``.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Union

SIZE_REFUSAL = "Request payload size exceeds the limit: 20971520 bytes."
"""Gemini's text for a request that is too large."""


@dataclass
class GeminiReply:
    """A ``generateContent`` answer."""

    text: str | None
    """The candidate's text (None: a candidate with no parts, as when thinking used up the output limit)."""
    finish_reason: str = "STOP"
    """``finishReason``."""
    thoughts_tokens: int = 7
    """``usageMetadata.thoughtsTokenCount``."""


@dataclass
class GeminiFault:
    """An HTTP error in Google's error shape."""

    status: int = 500
    """HTTP status."""
    message: str = "fake error"
    """``error.message``."""
    state: str = "INTERNAL"
    """``error.status`` (``RESOURCE_EXHAUSTED``, ``INVALID_ARGUMENT``...)."""


Outcome = Union[str, GeminiReply, GeminiFault]


@dataclass
class Recorded:
    """One request the fake received."""

    method: str
    path: str
    headers: dict
    body: Any
    size: int

    @property
    def text(self) -> str:
        """Every text part of a generateContent body, joined."""
        parts = [p for c in (self.body or {}).get("contents", []) for p in c.get("parts", [])]
        return "\n".join(p["text"] for p in parts if "text" in p)

    @property
    def file_parts(self) -> list[dict]:
        """The ``fileData`` parts of a generateContent body: ``uri``, ``mime_type``, ``video_metadata``."""
        out = []
        for content in (self.body or {}).get("contents", []):
            for part in content.get("parts", []):
                data = part.get("fileData") or part.get("file_data")
                if data:
                    out.append({"uri": data.get("fileUri") or data.get("file_uri"), "mime_type": data.get("mimeType") or data.get("mime_type"),
                                "video_metadata": part.get("videoMetadata") or part.get("video_metadata")})
        return out


@dataclass
class _File:
    name: str
    display_name: str
    mime_type: str
    data: bytes
    polls_left: int

    def json(self, base: str) -> dict:
        return {"name": self.name, "displayName": self.display_name, "mimeType": self.mime_type, "sizeBytes": str(len(self.data)),
                "uri": f"{base}v1/{self.name}", "state": "PROCESSING" if self.polls_left > 0 else "ACTIVE",
                "source": "UPLOADED"}


def default_responder(request: Recorded) -> Outcome:
    """An answer naming the files and the words it got."""
    return f"seen {len(request.file_parts)} file(s), {len(request.text.split())} words. Answer: A"


def sequence(*steps: Outcome, then: Callable[[Recorded], Outcome] = default_responder) -> Callable[[Recorded], Outcome]:
    """Answer the n-th generateContent with ``steps[n]``, then with ``then``; thread-safe."""
    pending, lock = list(steps), threading.Lock()

    def respond(request: Recorded) -> Outcome:
        with lock:
            step = pending.pop(0) if pending else None
        return then(request) if step is None else step

    return respond


@dataclass
class FakeGeminiServer:
    """The fake (see the module doc); a context manager."""

    responder: Callable[[Recorded], Outcome] = default_responder
    processing_polls: int = 0
    """Reads of a new file that still say ``PROCESSING``."""
    requests: list = field(default_factory=list)
    files: dict = field(default_factory=dict)
    uploads: int = 0
    """Uploads finished (finalized)."""
    _sessions: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    _httpd: Any = None

    def __enter__(self) -> "FakeGeminiServer":
        fake = self

        class Handler(_Handler):
            server_fake = fake

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/`` (the SDK's ``http_options.base_url``)."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/"

    def generate_requests(self) -> list[Recorded]:
        """The recorded generateContent requests."""
        with self._lock:
            return [r for r in self.requests if r.path.endswith(":generateContent")]

    def expire(self) -> None:
        """Forget every file (as if the 48 hours had passed)."""
        with self._lock:
            self.files.clear()


def _error(status: int, message: str, state: str) -> dict:
    return {"error": {"code": status, "message": message, "status": state}}


class _Handler(BaseHTTPRequestHandler):
    server_fake: FakeGeminiServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def _send(self, status: int, body: Any, headers: dict | None = None) -> None:
        data = (json.dumps(body) if not isinstance(body, str) else body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _record(self) -> tuple[Recorded, bytes]:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = None
        if raw and not self.path.startswith("/upload-session/"):  # the upload's chunks are the file's bytes
            try:
                body = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                body = None
        rec = Recorded(self.command, self.path.split("?")[0], {k.lower(): v for k, v in self.headers.items()}, body, len(raw))
        with self.server_fake._lock:
            self.server_fake.requests.append(rec)
        return rec, raw

    def do_GET(self) -> None:  # noqa: N802
        rec, _ = self._record()
        fake = self.server_fake
        model = re.fullmatch(r"/v1\w*/models/([\w.-]+)", rec.path)
        if model:
            self._send(200, {"name": f"models/{model.group(1)}", "version": "fake-001", "inputTokenLimit": 1048576,
                             "outputTokenLimit": 65536})
            return
        match = re.fullmatch(r"/v1\w*/(files/[\w-]+)", rec.path)
        with fake._lock:
            found = fake.files.get(match.group(1)) if match else None
            if found is not None:
                answer = found.json(fake.base_url)
                found.polls_left = max(0, found.polls_left - 1)
        if found is None:
            self._send(404, _error(404, f"{rec.path} not found", "NOT_FOUND"))
        else:
            self._send(200, answer)

    def do_DELETE(self) -> None:  # noqa: N802
        rec, _ = self._record()
        fake = self.server_fake
        match = re.fullmatch(r"/v1\w*/(files/[\w-]+)", rec.path)
        with fake._lock:
            gone = fake.files.pop(match.group(1), None) if match else None
        self._send(200 if gone else 404, {} if gone else _error(404, "no such file", "NOT_FOUND"))

    def do_POST(self) -> None:  # noqa: N802
        rec, raw = self._record()
        fake = self.server_fake
        command = rec.headers.get("x-goog-upload-command", "")
        if re.fullmatch(r"/upload/v1\w*/files", rec.path) and command == "start":
            session = str(next(fake._ids))
            with fake._lock:
                fake._sessions[session] = {"size": int(rec.headers.get("x-goog-upload-header-content-length", 0)),
                                           "type": rec.headers.get("x-goog-upload-header-content-type", ""),
                                           "name": ((rec.body or {}).get("file") or {}).get("display_name")
                                           or rec.headers.get("x-goog-upload-file-name", ""), "data": b""}
            self._send(200, {}, {"X-Goog-Upload-URL": f"{fake.base_url}upload-session/{session}", "X-Goog-Upload-Status": "active"})
            return
        match = re.fullmatch(r"/upload-session/(\d+)", rec.path)
        if match and command.startswith("upload"):
            with fake._lock:
                session = fake._sessions[match.group(1)]
                if int(rec.headers.get("x-goog-upload-offset", -1)) != len(session["data"]):
                    self._send(400, _error(400, "bad offset", "INVALID_ARGUMENT"))
                    return
                session["data"] += raw
                if "finalize" not in command:
                    file_json = None
                else:
                    name = f"files/fake{next(fake._ids)}"
                    made = _File(name, session["name"], session["type"], session["data"], fake.processing_polls)
                    fake.files[name] = made
                    fake.uploads += 1
                    file_json = made.json(fake.base_url)
            if file_json is None:
                self._send(200, "", {"X-Goog-Upload-Status": "active"})
            else:
                self._send(200, {"file": file_json}, {"X-Goog-Upload-Status": "final"})
            return
        if rec.path.endswith(":generateContent"):
            self._generate(rec)
            return
        self._send(404, _error(404, f"no route {rec.path}", "NOT_FOUND"))

    def _generate(self, rec: Recorded) -> None:
        fake = self.server_fake
        for part in rec.file_parts:
            name = "files/" + str(part["uri"]).rsplit("/files/", 1)[-1]
            with fake._lock:
                found = fake.files.get(name)
            if found is None or found.polls_left > 0:
                why = "is not in an ACTIVE state" if found else "does not exist"
                self._send(400, _error(400, f"The File {name} {why} and usage is not allowed.", "FAILED_PRECONDITION"))
                return
        outcome = fake.responder(rec)
        if isinstance(outcome, GeminiFault):
            self._send(outcome.status, _error(outcome.status, outcome.message, outcome.state))
            return
        reply = outcome if isinstance(outcome, GeminiReply) else GeminiReply(outcome)
        content: dict = {"role": "model"}
        if reply.text is not None:
            content["parts"] = [{"text": reply.text}]
        words = len(reply.text.split()) if reply.text else 0
        prompt = len(rec.text.split()) + 300 * len(rec.file_parts)
        self._send(200, {"candidates": [{"content": content, "finishReason": reply.finish_reason, "index": 0}],
                         "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": words,
                                           "thoughtsTokenCount": reply.thoughts_tokens,
                                           "totalTokenCount": prompt + words + reply.thoughts_tokens},
                         "modelVersion": rec.path.split("/models/")[-1].split(":")[0], "responseId": f"fake-{next(fake._ids)}"})


__all__ = ["FakeGeminiServer", "GeminiFault", "GeminiReply", "Recorded", "SIZE_REFUSAL", "default_responder", "sequence"]
