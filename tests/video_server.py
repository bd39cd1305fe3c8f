"""A local HTTP video server on 127.0.0.1 for the download tests and benchmark.

It serves generated videos through a small metadata API that the yt-dlp test
plugin (``tests/ytdlp_test_plugins``) turns into yt-dlp formats, and it can
misbehave on purpose for each failure the downloader must explain::

    with VideoServer(latency=0.0) as server:
        server.add("aaaaaaaaaaa", formats=[Fmt("mp4-360", "/tmp/a.mp4", height=360)])
        server.add("bbbbbbbbbbb", error="unavailable")
        server.add("ccccccccccc", formats=[Fmt("mp4", "/tmp/a.mp4", mode="truncate")])
        ...

Modes for a format: ``ok`` (full body, Range honoured), ``http404``, ``http500``,
``truncate`` (Content-Length promises the whole file, half is sent), ``stall``
(half the body, then silence for ``stall_s``), ``refused`` (the URL points at a
closed port). Video-level errors (``unavailable``, ``private``, ``bot``) make the
plugin raise yt-dlp's usual messages; a video-level ``warning`` is reported by the plugin
as a yt-dlp warning. ``latency`` delays every response.

:func:`install_test_extractor` loads the plugin into yt-dlp and returns the
DownloadConfig overrides that restrict yt-dlp to it.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PLUGIN_DIR = Path(__file__).resolve().parent / "ytdlp_test_plugins"
TEST_EXTRACTOR = "k9test"


@dataclass
class Fmt:
    """One format offered for a test video."""

    format_id: str
    path: str | os.PathLike | None = None
    height: int | None = None
    width: int | None = None
    ext: str = "mp4"
    vcodec: str | None = None
    acodec: str | None = "none"
    mode: str = "ok"
    data: bytes | None = None


@dataclass
class _Video:
    formats: list = field(default_factory=list)
    error: str | None = None
    warning: str | None = None


class _QuietServer(ThreadingHTTPServer):
    """Clients hanging up mid-response are expected here (timeouts, kills): no tracebacks."""

    def handle_error(self, request, client_address) -> None:
        pass


def closed_port() -> int:
    """A loopback port with nothing listening (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class VideoServer:
    """Threaded HTTP server on 127.0.0.1 (see module doc)."""

    def __init__(self, latency: float = 0.0, stall_s: float = 30.0):
        self.latency = latency
        self.stall_s = stall_s
        self.videos: dict[str, _Video] = {}
        self.requests: list[str] = []
        self.range_requests: list[str] = []
        self.cookies: list[str] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._refused_port = closed_port()

    # -- set-up
    def add(self, video_id: str, formats: list[Fmt] | None = None, error: str | None = None, warning: str | None = None) -> None:
        """``warning``: a text the plugin reports through yt-dlp's warning channel while extracting."""
        self.videos[video_id] = _Video(formats=list(formats or []), error=error, warning=warning)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def media_requests(self, video_id: str) -> int:
        """How many media (not metadata) requests were made for a video."""
        with self._lock:
            return sum(1 for p in self.requests if p.startswith(f"/media/{video_id}/"))

    def __enter__(self) -> "VideoServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                with server._lock:
                    server.requests.append(self.path)
                    if self.headers.get("Cookie"):
                        server.cookies.append(self.headers["Cookie"])
                    if (self.headers.get("Range") or "bytes=0-").split("=")[-1].split("-")[0] not in ("", "0"):
                        server.range_requests.append(self.path)  # a resumed transfer
                if server.latency:
                    time.sleep(server.latency)
                try:
                    server._handle(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._httpd = _QuietServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    # -- responses
    def _meta(self, video_id: str) -> dict | None:
        video = self.videos.get(video_id)
        if video is None:
            return None
        if video.error:
            return {"id": video_id, "error": video.error}
        formats = []
        for f in video.formats:
            if f.mode == "refused":
                url = f"http://127.0.0.1:{self._refused_port}/media/{video_id}/{f.format_id}"
            else:
                url = f"{self.base_url}/media/{video_id}/{f.format_id}"
            entry = {"format_id": f.format_id, "url": url, "ext": f.ext, "protocol": "http"}
            if f.height is not None:
                entry["height"] = f.height
            if f.width is not None:
                entry["width"] = f.width
            if f.vcodec is not None:
                entry["vcodec"] = f.vcodec
            if f.acodec is not None:
                entry["acodec"] = f.acodec
            formats.append(entry)
        meta = {"id": video_id, "title": f"test video {video_id}", "formats": formats}
        if video.warning:
            meta["warning"] = video.warning
        return meta

    def _handle(self, req: BaseHTTPRequestHandler) -> None:
        parts = [p for p in req.path.split("?")[0].split("/") if p]
        if len(parts) == 2 and parts[0] == "meta":
            meta = self._meta(parts[1])
            if meta is None:
                return self._send(req, 404, b"no such video", "text/plain")
            return self._send(req, 200, json.dumps(meta).encode(), "application/json")
        if len(parts) == 3 and parts[0] == "media":
            video = self.videos.get(parts[1])
            fmt = next((f for f in (video.formats if video else []) if f.format_id == parts[2]), None)
            if fmt is None:
                return self._send(req, 404, b"no such format", "text/plain")
            return self._media(req, fmt)
        return self._send(req, 404, b"not found", "text/plain")

    def _send(self, req, status: int, body: bytes, ctype: str, headers: dict | None = None) -> None:
        req.send_response(status)
        req.send_header("Content-Type", ctype)
        req.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            req.send_header(k, v)
        req.end_headers()
        req.wfile.write(body)

    def _media(self, req, fmt: Fmt) -> None:
        if fmt.mode == "http404":
            return self._send(req, 404, b"gone", "text/plain")
        if fmt.mode == "http500":
            return self._send(req, 500, b"server error", "text/plain")
        data = fmt.data if fmt.data is not None else Path(fmt.path).read_bytes()
        ctype = "video/webm" if fmt.ext == "webm" else "video/mp4"
        if fmt.mode == "truncate":
            req.send_response(200)
            req.send_header("Content-Type", ctype)
            req.send_header("Content-Length", str(len(data)))
            req.end_headers()
            req.wfile.write(data[: len(data) // 2])
            req.wfile.flush()
            req.close_connection = True
            return
        if fmt.mode == "stall":
            req.send_response(200)
            req.send_header("Content-Type", ctype)
            req.send_header("Content-Length", str(len(data)))
            req.end_headers()
            req.wfile.write(data[: len(data) // 2])
            req.wfile.flush()
            self._stop.wait(self.stall_s)
            req.close_connection = True
            return
        start = 0
        rng = req.headers.get("Range")
        if rng and rng.startswith("bytes="):
            first = rng[len("bytes="):].split("-", 1)[0]
            if first.isdigit():
                start = int(first)
        if start:
            if start >= len(data):
                return self._send(req, 416, b"", ctype, {"Content-Range": f"bytes */{len(data)}"})
            body = data[start:]
            return self._send(req, 206, body, ctype, {"Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"})
        return self._send(req, 200, data, ctype, {"Accept-Ranges": "bytes"})


def install_test_extractor() -> dict:
    """Load the test plugin into yt-dlp (plugin dirs = ours only); return DownloadConfig overrides.

    The overrides restrict yt-dlp to the test extractor, so no real extractor
    (YouTube included) can ever handle a URL in a test.
    """
    import yt_dlp.globals
    import yt_dlp.plugins

    yt_dlp.globals.plugin_dirs.value = [str(PLUGIN_DIR)]
    yt_dlp.plugins.load_all_plugins()
    return {"allowed_extractors": (TEST_EXTRACTOR,), "ydl_overrides": {"proxy": ""}}
