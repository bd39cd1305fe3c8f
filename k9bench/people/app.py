"""The local web app of both modes (Flask), and the server that runs it.

Security, as for a server on a shared login node:

- it listens on 127.0.0.1 unless ``--host`` names another interface *and* ``--allow_remote`` is given
  (then a warning says that anyone who can reach the port and has the URL can write answers);
- every request needs the session's token (``secrets.token_urlsafe``), printed in the URL as
  ``?token=...`` (as Jupyter does); it is compared in constant time (``hmac.compare_digest``), and a
  write carries it a second time in its form, checked again;
- only the run's own videos are served: the name must be one of the session's video files, and its
  resolved path (symbolic links followed) must lie inside ``--video_dir``; ``../``, an encoded ``..``
  and a link out are refused (404);
- every text is escaped by Jinja's autoescaping; a Content-Security-Policy allows nothing but this
  server (scripts and styles only with the page's nonce), and ``Referrer-Policy: no-referrer`` keeps
  the token out of any Referer: no request leaves the machine.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger("k9bench.people")

LOOPBACK = "127.0.0.1"


def _same(given: Any, token: str) -> bool:
    return isinstance(given, str) and hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8"))


def safe_video(video_dir: Path, name: str, allowed: set[str]) -> Path | None:
    """The file of video ``name`` when it is one of ``allowed`` and lies inside ``video_dir`` once every link is
    followed; None otherwise."""
    if name not in allowed or "/" in name or "\\" in name or name in (".", ".."):
        return None
    root = video_dir.resolve()
    path = (video_dir / name).resolve()
    if path.parent != root or not path.is_file():
        return None
    return path


def create_app(session: Any, token: str):
    """The Flask app serving ``session`` (:class:`k9bench.people.answering.AnswerSession` or
    :class:`k9bench.people.labels.LabelSession`), guarded by ``token``."""
    from flask import Flask, abort, redirect, render_template, request, send_file

    app = Flask(__name__, static_folder=None, template_folder=str(Path(__file__).with_name("templates")))
    allowed = {session.video_of(item) for item in session.items}

    @app.before_request
    def _check_token():
        if not _same(request.args.get("token"), token):
            abort(403)
        if request.method not in ("GET", "HEAD", "POST"):
            abort(405)
        if request.method == "POST" and not _same(request.form.get("token"), token):
            abort(403)
        request.csp_nonce = secrets.token_urlsafe(16)

    @app.after_request
    def _headers(response):
        nonce = getattr(request, "csp_nonce", "none")
        response.headers["Content-Security-Policy"] = (
            f"default-src 'none'; media-src 'self'; img-src 'self' data:; style-src 'nonce-{nonce}'; script-src 'nonce-{nonce}'; "
            "form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Cache-Control"] = "no-store"
        return response

    def pending() -> list:
        done = session.book.records
        return [item for item in session.items if item.idx not in done]

    def page(item, error: str | None = None, form: dict | None = None, status: int = 200):
        left = pending()
        number = len(session.items) - len(left) + 1
        video = session.video_of(item)
        return render_template(session.template, token=token, nonce=request.csp_nonce, who=session.who, idx=item.idx,
                               number=number, total=len(session.items), error=error, form=form or {},
                               video=video if safe_video(session.video_dir, video, allowed) else None, **session.context(item)), status

    @app.get("/")
    def index():
        left = pending()
        if not left:
            return render_template("done.html", nonce=request.csp_nonce, who=session.who, total=len(session.items),
                                   mode=session.mode, output=str(session.book.export_path))
        return page(left[0])

    @app.post("/submit")
    def submit():
        try:
            idx = int(request.form.get("idx", ""))
        except ValueError:
            abort(400)
        item = next((q for q in session.items if q.idx == idx), None)
        if item is None:
            abort(400)
        try:
            seconds = round(float(request.form.get("seconds", "")), 1)
        except ValueError:
            seconds = None
        try:
            record = session.record(item, request.form.to_dict(), seconds)
        except ValueError as exc:
            return page(item, str(exc), request.form.to_dict(), 400)
        if not session.book.add(record):
            log.info("%s: idx %s was already saved; the second submission is ignored", session.book.checkpoint, idx)
        return redirect(f"/?token={token}", code=303)

    @app.get("/video/<path:name>")
    def video(name: str):
        path = safe_video(session.video_dir, name, allowed)
        if path is None:
            abort(404)
        return send_file(path, mimetype="video/mp4", conditional=True, max_age=0)

    return app


class Server:
    """The app on a werkzeug threaded server (a thread of its own until :meth:`close`)."""

    def __init__(self, app, host: str, port: int):
        from werkzeug.serving import make_server

        self._server = make_server(host, port, app, threaded=True)
        self.host = host
        self.port = self._server.server_port
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="people-app")

    def start(self) -> "Server":
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread until :meth:`close` or an exception (Ctrl-C)."""
        self._server.serve_forever()

    def url(self, token: str) -> str:
        """The address to open (every interface, ``0.0.0.0`` or ``::``: this machine's name)."""
        import socket

        host = socket.gethostname() if self.host in ("0.0.0.0", "::", "") else self.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/?token={token}"

    def close(self) -> None:
        self._server.shutdown()
        self._thread.join(timeout=5)
