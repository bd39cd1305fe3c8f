"""What a judge request is, by content, and the store of paid replies (issue 31 item 1).

A request's key (:func:`request_key`) is the SHA-256 of what decides the judge's reply: the model id
sent to the endpoint (``--judge_model``), the filled prompt, and the sampling parameters sent that
shape a reply (``--temperature``; a larger ``--max_tokens`` does not change a whole reply, and raising
it to retry the replies cut short must not pay again for the others). The endpoint's URL is not part
of it (as it is not part of the fingerprint): a server restarted on another port, or a proxy in
front of the same model, must not make a resume pay again; the model that answered is recorded in each
entry (``judge_model_served``). An earlier entry whose key equals the task's is reused; only the
others are sent.

:class:`ReplyStore` keeps each paid reply that gave a scored entry as one JSON file named by its key
(``<judge output dir>/.judge_cache/<key>.json`` by default), written atomically
(:func:`k9bench.artifact_io.write_json_atomic`: a temporary file renamed over the target), so two
processes that pay for the same request both leave one whole file, and a reply paid under one output
name serves every other. Replies that were not scored (a failed call, no score dictionary) are not
kept: a rerun retries them. ``--no_cache`` turns the store off.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

log = logging.getLogger("k9bench.judge")

CACHE_DIR = ".judge_cache"
"""The store's folder, beside the judge output."""

OPENAI_BASE_URL = "https://api.openai.com/v1"
"""The endpoint when ``--base_url`` is not given (the openai client's default)."""

KEY_VERSION = 1
"""Bumped when what goes into a key changes (old keys then never match)."""


def endpoint_id(base_url: str | None) -> str:
    """The endpoint as a stored reply records it: the base URL without ``user:key@`` and a trailing slash."""
    url = (base_url or OPENAI_BASE_URL).strip()
    parts = urlsplit(url)
    if "@" in parts.netloc:
        parts = parts._replace(netloc=parts.netloc.rsplit("@", 1)[1])
    return urlunsplit(parts).rstrip("/")


def keyed_params(params: dict) -> dict:
    """The sent parameters that shape a reply (all but ``max_tokens``, see the module doc)."""
    return {k: v for k, v in sorted(params.items()) if k != "max_tokens"}


def request_key(*, judge_model: str, prompt: str, params: dict) -> str:
    """SHA-256 (hex) of one judge request's content (see the module doc)."""
    content = {"v": KEY_VERSION, "judge_model": judge_model, "prompt": prompt, "params": keyed_params(params)}
    return hashlib.sha256(json.dumps(content, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def requests_digest(keys: dict) -> str:
    """One SHA-256 over every target's ``idx -> key``: the judge stage's input (its requests, nothing else)."""
    return hashlib.sha256(json.dumps(sorted(keys.items()), ensure_ascii=False).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CachedReply:
    """A paid reply, as the store keeps it (what :func:`k9bench.judge.score.outcome_from_reply` reads)."""

    text: str
    model: str | None = None
    finish_reason: str | None = None
    usage: dict | None = None
    attempts: int = 1


class ReplyStore:
    """Content-addressed store of paid replies: one JSON file per request key."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.hits = 0
        self.written = 0
        self._warned: set[str] = set()

    def _warn(self, kind: str, message: str) -> None:
        """One warning per kind of store problem (a store that cannot be searched would say it per request)."""
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning("judge reply store: %s", message)

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str) -> CachedReply | None:
        """The reply stored under ``key``, or None. A file that cannot be read or is not a reply is
        said (a warning naming it) and the request is sent again; so is a store that cannot be searched at all
        (another user's folder, mode 000: one warning, never a traceback)."""
        from k9bench.artifact_io import ArtifactError, read_json

        path = self.path(key)
        try:
            if not path.is_file():
                return None
        except OSError as exc:
            self._warn("search", f"{self.folder} cannot be searched ({exc.strerror or exc}); requests are sent again")
            return None
        try:
            data = read_json(path)
        except (ArtifactError, OSError) as exc:
            log.warning("judge reply store: %s; sending that request again", exc)
            return None
        if not isinstance(data, dict) or data.get("key") != key or not isinstance(data.get("text"), str):
            log.warning("judge reply store: %s is not a stored reply for its key; sending that request again", path)
            return None
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else None
        attempts = data.get("attempts") if isinstance(data.get("attempts"), int) else 1
        self.hits += 1
        return CachedReply(text=data["text"], model=data.get("model"), finish_reason=data.get("finish_reason"), usage=usage,
                           attempts=attempts)

    def put(self, key: str, *, text: str, model: str | None, finish_reason: str | None, usage: dict | None, attempts: int,
            request: dict) -> None:
        """Keep one paid reply (atomically). A write that fails (a full disk) is one warning: the entry
        itself is already in the checkpoint, only the store misses it."""
        from k9bench.artifacts import now_iso
        from k9bench.artifact_io import ArtifactError, write_json_atomic
        from k9bench.redact import redact

        record = {"key": key, "request": redact(request), "text": text, "model": model, "finish_reason": finish_reason,
                  "usage": usage, "attempts": attempts, "stored_at": now_iso()}
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.path(key), record)
        except (ArtifactError, OSError) as exc:
            self._warn("write", f"{exc} (the entry is kept in the checkpoint; only the store misses it)")
            return
        self.written += 1


def default_store_folder(output: str | Path) -> Path:
    """``<judge output dir>/.judge_cache``."""
    return Path(output).parent / CACHE_DIR


__all__ = ["CACHE_DIR", "CachedReply", "KEY_VERSION", "OPENAI_BASE_URL", "ReplyStore", "default_store_folder", "endpoint_id",
           "keyed_params", "request_key", "requests_digest"]
