"""Each video uploaded once through Gemini's Files API, reused for all its questions and across reruns.

A video is sent as a file: with ``--audio`` the file itself, otherwise a copy without its soundtrack
(``ffmpeg -an -c copy``, made once per video into a work folder removed at the end). Once uploaded, a
file is ``PROCESSING`` until ``files.get`` says ``ACTIVE`` (generating with it before then is refused),
so :meth:`Uploads.file_for` waits for that, up to ``--upload_timeout``.

The upload ledger, a small JSON file beside the run's output (``<output>.gemini_uploads.json``), maps a
video's content hash and variant (``audio+video`` or ``video only``) to the uploaded file's name and URI,
so that a rerun (a resume, or the same videos with other flags) reuses a file that is still there:
each entry is checked with ``files.get`` before use, and a file that has expired (48 h) or failed is
uploaded again. The ledger names the endpoint it belongs to; another endpoint's entries are not used.
Counters (:attr:`Uploads.counts`): ``uploaded``, ``reused``, ``uploaded_again`` (expired), ``deleted``.
"""

from __future__ import annotations

import hashlib
import logging
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger(__name__)

LEDGER_KIND = "k9bench gemini uploads"
"""The ``kind`` of a ledger file."""

AUDIO_VIDEO, VIDEO_ONLY = "audio+video", "video only"
"""The two variants of a video sent."""


class UploadFailed(RuntimeError):
    """A video could not be made ready (the upload failed, its processing failed or took too long)."""


def ledger_path(output: Path) -> Path:
    """Where the ledger of the run writing ``output`` lives."""
    return output.with_name(output.name + ".gemini_uploads.json")


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _state(file: Any) -> str:
    state = getattr(file, "state", None)
    return str(getattr(state, "value", state) or "")


class Uploads:
    """The run's uploaded videos (see the module doc). ``call(label, fn)`` runs one SDK call with the
    backend's retries; ``client`` is the kept ``genai.Client``."""

    def __init__(self, client: Any, call: Callable[[str, Callable[[], Any]], Any], *, ledger: Path, endpoint: str,
                 timeout: float, poll_interval: float, sleep: Callable[[float], None] = time.sleep) -> None:
        self.client = client
        self.call = call
        self.ledger = ledger
        self.endpoint = endpoint
        self.timeout = timeout
        self.poll_interval = poll_interval
        self._sleep = sleep
        self.counts = {"uploaded": 0, "reused": 0, "uploaded_again": 0, "deleted": 0}
        """This invocation's uploads (live; ``run_stats.decoding.uploads``)."""
        self.used: dict[str, dict] = {}
        """Ledger key -> entry, for the files this run used."""
        self._entries = self._read()
        self._lock = threading.Lock()
        self._video_locks: dict[str, threading.Lock] = {}
        self._ready: dict[str, dict] = {}  # "path|variant" -> entry, once checked in this run
        self._failed: dict[str, str] = {}  # "path|variant" -> why its upload failed in this run
        self._work: tempfile.TemporaryDirectory | None = None

    # ------------------------------------------------------------------ the ledger

    def _read(self) -> dict[str, dict]:
        from k9bench.artifact_io import read_json

        if not self.ledger.exists():
            return {}
        try:
            data = read_json(self.ledger)
        except Exception as exc:  # a torn or foreign file: uploads start afresh, said once
            log.warning("%s is not an upload ledger (%s); uploading again", self.ledger, exc)
            return {}
        if not isinstance(data, dict) or data.get("kind") != LEDGER_KIND or not isinstance(data.get("files"), dict):
            log.warning("%s is not an upload ledger; uploading again", self.ledger)
            return {}
        if data.get("endpoint") != self.endpoint:
            log.info("%s lists uploads to %s, not %s; uploading again", self.ledger, data.get("endpoint"), self.endpoint)
            return {}
        return dict(data["files"])

    def _write(self) -> None:
        from k9bench.artifact_io import write_json_atomic

        write_json_atomic(self.ledger, {"kind": LEDGER_KIND, "endpoint": self.endpoint, "files": self._entries})

    # ------------------------------------------------------------------ files

    def file_for(self, video: str, *, audio: bool) -> dict:
        """The ledger entry (``name``, ``uri``, ``mime_type``...) of ``video``'s ACTIVE file, uploading it when needed."""
        variant = AUDIO_VIDEO if audio else VIDEO_ONLY
        here = f"{video}|{variant}"
        with self._lock:
            lock = self._video_locks.setdefault(here, threading.Lock())
        with lock:  # the questions of one video in flight at once wait for one upload
            with self._lock:
                ready, failed = self._ready.get(here), self._failed.get(here)
            if ready is not None:
                return ready
            if failed is not None:  # the video's other questions fail at once; a rerun tries again
                raise UploadFailed(failed)
            key = f"{_sha256(Path(video))}|{variant}"
            with self._lock:
                known = self._entries.get(key)
            try:
                if known is not None and self._usable(known):
                    counter, entry = "reused", known
                else:
                    counter, entry = ("uploaded_again" if known is not None else "uploaded"), self._upload(Path(video), variant)
            except Exception as exc:  # UploadFailed, or the SDK's error after its retries
                with self._lock:
                    self._failed[here] = str(exc) if isinstance(exc, UploadFailed) else f"{Path(video).name}: upload failed: {exc}"
                raise
            with self._lock:
                self.counts[counter] += 1
                self.used[key] = self._entries[key] = self._ready[here] = entry
                self._write()
            return entry

    def _usable(self, entry: dict) -> bool:
        """True when the ledger's file is still there and becomes ACTIVE."""
        from google.genai import errors

        try:
            file = self.call(f"files.get {entry['name']}", lambda: self.client.files.get(name=entry["name"]))
        except errors.ClientError as exc:
            log.info("%s (%s) is gone (%s %s): uploading it again", entry["name"], entry.get("video"), exc.code, exc.status)
            return False
        if _state(file) == "FAILED":
            return False
        if _state(file) != "ACTIVE":
            self._wait_active(file)
        return True

    def _source(self, video: Path, variant: str) -> Path:
        """The file to upload: the video itself, or (video only) its copy without a soundtrack."""
        if variant == AUDIO_VIDEO:
            return video
        from k9bench.video.ffmpeg import run_ffmpeg

        with self._lock:
            if self._work is None:
                self._work = tempfile.TemporaryDirectory(prefix="k9bench-gemini-")
        copy = Path(self._work.name) / f"{hashlib.sha256(str(video).encode()).hexdigest()[:12]}_{video.stem}.mp4"
        try:
            run_ffmpeg(["-i", str(video), "-map", "0:v:0", "-an", "-c", "copy", "-f", "mp4", str(copy)], timeout=600)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            detail = getattr(exc, "stderr", None) or exc
            raise UploadFailed(f"{video}: could not make its copy without a soundtrack: {str(detail).strip()[:300]}") from None
        return copy

    def _upload(self, video: Path, variant: str) -> dict:
        source = self._source(video, variant)
        started = time.monotonic()
        config = {"display_name": f"k9bench {video.stem} ({variant})", "mime_type": "video/mp4"}
        file = self.call(f"upload {video.name}", lambda: self.client.files.upload(file=str(source), config=config))
        log.info("uploaded %s (%s, %d bytes) as %s in %.1f s", video.name, variant, source.stat().st_size, file.name,
                 time.monotonic() - started)
        if source != video:
            source.unlink(missing_ok=True)
        if _state(file) != "ACTIVE":
            file = self._wait_active(file)
        return {"name": file.name, "uri": file.uri, "mime_type": file.mime_type or "video/mp4", "video": video.name,
                "variant": variant, "bytes": source_size(file)}

    def _wait_active(self, file: Any) -> Any:
        deadline = time.monotonic() + self.timeout
        while _state(file) != "ACTIVE":
            if _state(file) == "FAILED":
                raise UploadFailed(f"{file.name}: Gemini could not process the video (state FAILED)")
            if time.monotonic() >= deadline:
                raise UploadFailed(f"{file.name} is still {_state(file)} after {self.timeout:g} s (--upload_timeout)")
            self._sleep(self.poll_interval)
            file = self.call(f"files.get {file.name}", lambda: self.client.files.get(name=file.name))
        return file

    def close(self, *, delete: bool) -> None:
        """With ``delete``: delete the files this run used (and drop them from the ledger); remove the work folder."""
        if delete:
            for key, entry in list(self.used.items()):
                try:
                    self.call(f"files.delete {entry['name']}", lambda: self.client.files.delete(name=entry["name"]))
                    self.counts["deleted"] += 1
                except Exception as exc:  # it expires anyway; said, not fatal
                    log.warning("could not delete %s (%s): %s; it expires after 48 h", entry["name"], entry.get("video"), exc)
                    continue
                with self._lock:
                    self._entries.pop(key, None)
            with self._lock:
                self._write()
        if self._work is not None:
            self._work.cleanup()
            self._work = None


def source_size(file: Any) -> int | None:
    """The uploaded file's size in bytes, as the API says (None when it does not)."""
    size = getattr(file, "size_bytes", None)
    return int(size) if size is not None else None


__all__ = ["AUDIO_VIDEO", "LEDGER_KIND", "UploadFailed", "Uploads", "VIDEO_ONLY", "ledger_path", "source_size"]
