"""Calling an OpenAI-compatible chat API: key, client, retries, a bounded concurrent runner.

Shared by the judge (``subjective_evals.py``) and any OpenAI-compatible model
backend. The retry loop is ours (the ``openai`` client is built with
``max_retries=0``), so its behaviour is explicit and tested:

=====================================  =============================================
HTTP 429, 5xx, 408                      retried: exponential backoff with jitter, or
                                        the server's ``Retry-After`` when longer
timeouts, connection errors             retried the same way
a body that is not a chat completion    retried the same way (a proxy hiccup)
a completion whose content is not text  not retried (``bad_response``): the server
or whose usage is not numeric           answered, wrongly; the reason is kept
other 4xx (400, 401, 403, 404, 422...)  not retried: the request itself is wrong
=====================================  =============================================

Every retry is logged (WARNING) with its reason and delay. A call that still fails
returns a :class:`ChatResult` with ``ok=False`` and the reason: it is never turned
into a reply, and never raises. The API key is read from the environment only; the key
in use is registered with :mod:`k9bench.redact`, so it is scrubbed from every text we
keep (replies, error texts) and, once ``install_log_filter`` runs, from every log line.

Endpoints (:mod:`k9bench.serving.endpoint`, re-exported here): :func:`check_base_url` refuses a URL without ``http(s)://`` at once (:class:`BadBaseUrl`,
exit 2); :func:`probe_endpoint` tells within seconds whether anything answers
(:class:`EndpointUnreachable`); :func:`get_json` is the small GET both use (and the backend's
``/v1/models`` and ``/version`` reads).

Typical use::

    key = resolve_api_key(base_url)              # raises MissingApiKey before any work
    client = ChatClient(api_key=key, base_url=base_url, timeout=60, retry=RetryPolicy(max_retries=5))
    for item, result in run_concurrent(lambda q: client.chat(messages_for(q), model="gpt-4o"), items, 16):
        checkpoint(item, result)                 # results arrive as they complete
"""

from __future__ import annotations

import email.utils
import json
import logging
import os
import queue
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, TypeVar

from k9bench.serving.endpoint import (
    PLACEHOLDER_KEY,
    BadBaseUrl,
    EndpointUnreachable,
    RequestOverTime,
    ResponseLimits,
    ResponseTooLarge,
    check_base_url,
    get_json,
    probe_endpoint,
    redact,
    response_limit_hooks,
    scrub,
)

log = logging.getLogger(__name__)

API_KEY_ENV = "OPENAI_API_KEY"
"""The only place the key is read from."""

MAX_REPLY_CHARS = 100_000
"""The longest reply used (a judge's CoT line and dictionary, a model's answer: a few thousand characters at
most). Callers give it to :class:`ChatClient` (``max_reply_chars``) so that a longer reply is cut before anything
scans it: the judge skips such a reply (``reply_too_large``), inference keeps its first characters and records
the length as sent (``api_reply_chars``)."""


T = TypeVar("T")
R = TypeVar("R")


class BadResponse(Exception):
    """A 200 reply that is not a usable chat completion (no choices, no message)."""


class UnusableReply(BadResponse):
    """A 200 chat completion whose content is not text (a number, a list...) or whose ``usage`` is
    not numeric: the server did answer, so the call is not retried; the message says what was wrong.
    ``usage`` holds the tokens the reply reported when they could be read."""

    def __init__(self, message: str, usage: "Usage | None" = None) -> None:
        super().__init__(message)
        self.usage = usage


class MissingApiKey(Exception):
    """No API key in the environment and no server that needs none; the message says what to do."""


def resolve_api_key(base_url: str | None, env: Mapping[str, str] | None = None, *, flag: str = "--base_url") -> str:
    """The API key from ``OPENAI_API_KEY``; checked before any work.

    Without a key: a custom ``base_url`` (a self-hosted server that needs none) gets
    :data:`PLACEHOLDER_KEY`, logged; the OpenAI API itself raises :class:`MissingApiKey`.
    """
    env = os.environ if env is None else env
    key = (env.get(API_KEY_ENV) or "").strip()
    if key:
        return key
    if base_url:
        log.info("%s is not set; sending a placeholder key to %s (fine for servers that need none)", API_KEY_ENV, base_url)
        return PLACEHOLDER_KEY
    raise MissingApiKey(
        f"{API_KEY_ENV} is not set. Export your key first (export {API_KEY_ENV}=...), "
        f"or pass {flag} for an OpenAI-compatible server that needs none. "
        "The key is read from the environment only, never from a flag or a file."
    )


# ---------------------------------------------------------------------------
# Results


@dataclass
class Usage:
    """Token usage as the API reported it, summed over calls."""

    prompt_tokens: int = 0
    """Input tokens."""
    completion_tokens: int = 0
    """Output tokens."""
    total_tokens: int = 0
    """As reported (prompt + completion for most servers)."""
    requests: int = 0
    """Successful API responses counted."""

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
            self.requests + other.requests,
        )

    def to_dict(self) -> dict:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "requests": self.requests,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> "Usage":
        data = data or {}
        return cls(*(int(data.get(k) or 0) for k in ("prompt_tokens", "completion_tokens", "total_tokens", "requests")))

    @classmethod
    def from_response(cls, usage: Any) -> "Usage":
        """From a response's ``usage`` object (None when the server sent none: zero tokens, one request).

        Raises :class:`UnusableReply` when ``usage`` is not an object or a count is not a whole,
        non-negative number (a missing or null count is 0)."""
        if usage is None:
            return cls(requests=1)
        if isinstance(usage, Mapping):
            get = usage.get
        elif isinstance(usage, (str, bytes, int, float, list, tuple)):
            raise UnusableReply(f"the reply's usage is {_show(usage)} (type {type(usage).__name__}), not an object of token counts")
        else:
            def get(name: str, default: Any = None) -> Any:
                return getattr(usage, name, default)
        prompt = _token_count(get("prompt_tokens", None), "prompt_tokens")
        completion = _token_count(get("completion_tokens", None), "completion_tokens")
        total = _token_count(get("total_tokens", None), "total_tokens") or (prompt + completion)
        return cls(prompt, completion, total, 1)


def _show(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _token_count(value: Any, name: str) -> int:
    """A token count from a reply's usage: None -> 0; a whole non-negative number -> int; else :class:`UnusableReply`."""
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    raise UnusableReply(f"the reply's usage.{name} is {_show(value)}, not a token count")


def sum_usage(usages: Iterable[Usage]) -> Usage:
    """The sum of several :class:`Usage`."""
    total = Usage()
    for u in usages:
        total = total + u
    return total


@dataclass
class ChatResult:
    """The outcome of one chat call, after retries."""

    ok: bool
    """True when the API returned a chat completion."""
    text: str | None = None
    """The first choice's message content ("" when the server sent none; the key scrubbed; cut to the client's
    ``max_reply_chars``); None when not ok."""
    reply_chars: int | None = None
    """The content's length as the server sent it (over :attr:`text`'s when it was cut); None when not ok."""
    usage: Usage = field(default_factory=Usage)
    """Token usage reported by the API for the successful response."""
    attempts: int = 0
    """HTTP attempts made (1 = no retry)."""
    model: str | None = None
    """The model the server says answered (e.g. a dated snapshot behind an alias)."""
    finish_reason: str | None = None
    """The first choice's finish reason."""
    error: str | None = None
    """Why the call failed (last error, key scrubbed); None when ok."""
    error_kind: str | None = None
    """``rate_limit``, ``server_error``, ``timeout``, ``connection``, ``bad_response`` or ``client_error``."""
    status_code: int | None = None
    """HTTP status of the last failed attempt, when there was one."""
    elapsed_s: float = 0.0
    """Wall time of the call, retries and waits included."""
    system_fingerprint: str | None = None
    """The response's ``system_fingerprint`` (vLLM: ``vllm-<version>-<hash>``; OpenAI: the backend build), when sent."""

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "system_fingerprint": self.system_fingerprint,
            "text": self.text,
            "usage": self.usage.to_dict(),
            "attempts": self.attempts,
            "model": self.model,
            "finish_reason": self.finish_reason,
            "error": self.error,
            "error_kind": self.error_kind,
            "status_code": self.status_code,
            "elapsed_s": round(self.elapsed_s, 3),
        }


# ---------------------------------------------------------------------------
# Retry policy


@dataclass
class RetryPolicy:
    """How failed calls are retried."""

    max_retries: int = 5
    """Retries after the first attempt (0: never retry)."""
    backoff_base: float = 1.0
    """Seconds before the first retry; doubled for each further one."""
    backoff_max: float = 60.0
    """Ceiling of the exponential backoff."""
    jitter: float = 0.5
    """Fraction of the backoff drawn at random (0: none; 0.5: between 50% and 100%)."""
    retry_after_max: float = 300.0
    """Ceiling for a server's ``Retry-After`` (longer values are cut to this, logged)."""

    def backoff(self, retry_number: int, rng: random.Random) -> float:
        """Delay before retry number ``retry_number`` (1-based), jitter included."""
        base = min(self.backoff_max, self.backoff_base * (2 ** max(0, retry_number - 1)))
        if self.jitter <= 0:
            return base
        return base * (1.0 - self.jitter * rng.random())

    def delay(self, retry_number: int, retry_after: float | None, rng: random.Random) -> float:
        """The wait before a retry: the jittered backoff, or the server's Retry-After when longer."""
        wait = self.backoff(retry_number, rng)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.retry_after_max))
        return wait


def parse_retry_after(headers: Mapping[str, str] | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` / ``Retry-After`` (seconds or HTTP date); None if absent/invalid."""
    if not headers:
        return None
    lowered = {str(k).lower(): v for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
            if value >= 0:
                return value
        except ValueError:
            pass
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    raw = str(raw).strip()
    try:
        value = float(raw)
        return value if value >= 0 else None
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    now = time.time() if now is None else now
    return max(0.0, when.timestamp() - now)


def classify_error(exc: BaseException) -> tuple[str, bool, int | None, float | None]:
    """``(kind, retryable, status_code, retry_after)`` for an exception raised by the openai client."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return "timeout", True, None, None
    if isinstance(exc, openai.APIConnectionError):
        return "connection", True, None, None
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        retry_after = parse_retry_after(getattr(exc.response, "headers", None))
        if status == 429:
            return "rate_limit", True, status, retry_after
        if status >= 500:
            return "server_error", True, status, retry_after
        if status == 408:
            return "timeout", True, status, retry_after
        return "client_error", False, status, None
    if isinstance(exc, ResponseTooLarge):  # reading stopped at the cap; asking again would send it again
        return "bad_response", False, None, None
    if isinstance(exc, RequestOverTime):
        return "timeout", True, None, None
    if isinstance(exc, UnusableReply):
        # a well-formed completion with a wrong field: the server answered; asking again pays again
        return "bad_response", False, None, None
    if isinstance(exc, (openai.APIResponseValidationError, json.JSONDecodeError, BadResponse)):
        # a 200 whose body is not a chat completion (a proxy's HTML page, a truncated body)
        return "bad_response", True, None, None
    raise exc


# ---------------------------------------------------------------------------
# Client


def make_openai_client(
    *, api_key: str, base_url: str | None = None, timeout: float = 60.0, limits: ResponseLimits | None = None, **kwargs: Any
):
    """An ``openai.OpenAI`` client with the library's own retries off (``max_retries=0``), whose responses
    are read under ``limits`` (:func:`response_limit_hooks`: a size cap, and ``timeout`` s per attempt in all)."""
    import openai

    if "http_client" not in kwargs:
        kwargs["http_client"] = openai.DefaultHttpxClient(event_hooks=response_limit_hooks(timeout, limits), timeout=timeout)
    return openai.OpenAI(api_key=api_key, base_url=base_url or None, timeout=timeout, max_retries=0, **kwargs)


class ChatClient:
    """One chat-completions endpoint with our retry loop; thread-safe.

    ``sleep`` and ``rng`` are injectable for tests. ``client`` may be given
    directly (any object with ``chat.completions.create``).
    """

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str | None = None,
        timeout: float = 60.0,
        retry: RetryPolicy | None = None,
        client: Any = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        limits: ResponseLimits | None = None,
        max_reply_chars: int | None = None,
    ) -> None:
        from k9bench.redact import register_secret

        self.max_reply_chars = max_reply_chars
        """Replies longer than this are cut to it before anything scans them (the key's scrub included); the
        length as sent is :attr:`ChatResult.reply_chars`. None: no cut."""
        self._secret = api_key
        if api_key != PLACEHOLDER_KEY:
            register_secret(api_key)  # masked in every kept text and (with the log filter) every log line
        self.retry = retry or RetryPolicy()
        self.timeout = timeout
        self.client = client or make_openai_client(api_key=api_key, base_url=base_url, timeout=timeout, limits=limits)
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._rng_lock = threading.Lock()
        self._stats_lock = threading.Lock()
        self.retries_done = 0
        """Retries made so far, over all calls."""

    @property
    def base_url(self) -> str:
        """The endpoint actually used (the client's default when none was given)."""
        return str(getattr(self.client, "base_url", ""))

    def _scrub(self, text: str) -> str:
        return scrub(text, self._secret)

    def _delay(self, retry_number: int, retry_after: float | None) -> float:
        with self._rng_lock:
            return self.retry.delay(retry_number, retry_after, self._rng)

    def chat(self, messages: list[dict], *, model: str, label: str = "", **params: Any) -> ChatResult:
        """One chat completion, retried per :attr:`retry`; never raises for API failures.

        ``params`` go to ``chat.completions.create`` as they are (``temperature``,
        ``max_tokens``, ``seed``...); parameters set to None are not sent. ``stream=True`` asks for a streamed
        reply and assembles it (:mod:`k9bench.serving.streaming`): the result is the same.
        """
        params = {k: v for k, v in params.items() if v is not None}
        stream = bool(params.pop("stream", False))  # streamed replies: k9bench.serving.streaming
        if stream:
            from k9bench.serving.streaming import STREAM_OPTIONS

            params.update(stream=True, stream_options=dict(STREAM_OPTIONS))
        total = self.retry.max_retries + 1
        started = time.monotonic()
        where = f"{label}: " if label else ""
        attempt = 0
        last: tuple[str, str, int | None] = ("", "", None)
        reported = Usage()  # tokens an unusable reply reported (it was answered, and paid)
        while True:
            attempt += 1
            try:
                response = self.client.chat.completions.create(model=model, messages=messages, **params)
                if stream:
                    response = _assembled(response)
                choices = getattr(response, "choices", None)
                if not choices:
                    raise BadResponse("the response has no choices")
                choice = choices[0]
                message = getattr(choice, "message", None)
                if message is None:
                    raise BadResponse("the response's first choice has no message")
                text, usage = _read_reply(response, message)
                reply_chars = len(text)
                if self.max_reply_chars is not None and reply_chars > self.max_reply_chars:
                    text = text[: self.max_reply_chars]  # cut before the scrub: nothing scans more than the cap
                served = getattr(response, "model", None)
                finish = getattr(choice, "finish_reason", None)
                fingerprint = getattr(response, "system_fingerprint", None)
                return ChatResult(
                    ok=True,
                    text=self._scrub(text),
                    reply_chars=reply_chars,
                    usage=usage,
                    attempts=attempt,
                    model=served if isinstance(served, str) else (None if served is None else str(served)),
                    finish_reason=finish if isinstance(finish, str) or finish is None else str(finish),
                    elapsed_s=time.monotonic() - started,
                    system_fingerprint=fingerprint if isinstance(fingerprint, str) else None,
                )
            except Exception as exc:  # classified below; programming errors re-raise from classify_error
                kind, retryable, status, retry_after = classify_error(exc)
                if isinstance(exc, UnusableReply) and exc.usage is not None:
                    reported = exc.usage
                message_text = self._scrub(f"{type(exc).__name__}: {exc}")
                last = (kind, message_text, status)
                if not retryable or attempt >= total:
                    if retryable:
                        log.warning("%s%s after %d attempt(s), giving up: %s", where, kind, attempt, message_text)
                    else:
                        log.warning("%s%s%s, not retried: %s", where, kind, f" (HTTP {status})" if status is not None else "", message_text)
                    break
                wait = self._delay(attempt, retry_after)
                extra = f", server asked Retry-After {retry_after:g} s" if retry_after is not None else ""
                if retry_after is not None and retry_after > self.retry.retry_after_max:
                    extra += f" (capped at {self.retry.retry_after_max:g} s)"
                log.warning(
                    "%s%s on attempt %d/%d: %s; retrying in %.2f s%s", where, kind, attempt, total, message_text, wait, extra
                )
                with self._stats_lock:
                    self.retries_done += 1
                self._sleep(wait)
        kind, message_text, status = last
        return ChatResult(
            ok=False,
            usage=reported,
            attempts=attempt,
            error=message_text,
            error_kind=kind,
            status_code=status,
            elapsed_s=time.monotonic() - started,
        )


def _assembled(chunks: Any) -> Any:
    """A streamed completion as one (:func:`k9bench.serving.streaming.assemble`); a broken stream is a :class:`BadResponse`."""
    from k9bench.serving.streaming import StreamBroken, assemble

    try:
        return assemble(chunks)
    except StreamBroken as exc:
        raise BadResponse(str(exc)) from None


def _read_reply(response: Any, message: Any) -> tuple[str, Usage]:
    """The text and usage of a completion; :class:`UnusableReply` when the content is not text
    (null is an empty reply) or the usage is not numeric (the usage, when readable, rides along)."""
    usage_problem: UnusableReply | None = None
    try:
        usage = Usage.from_response(getattr(response, "usage", None))
    except UnusableReply as exc:  # the response still counts as one (its tokens unknown)
        usage, usage_problem = None, exc
        exc.usage = Usage(requests=1)
    content = getattr(message, "content", None)
    if content is not None and not isinstance(content, str):
        raise UnusableReply(f"the reply's content is {_show(content)} (type {type(content).__name__}), not text", usage=usage)
    if usage_problem is not None:
        raise usage_problem
    return content or "", usage  # type: ignore[return-value]


# ---------------------------------------------------------------------------
# Concurrency


def run_concurrent(fn: Callable[[T], R], items: Iterable[T], concurrency: int) -> Iterator[tuple[T, R]]:
    """Call ``fn`` on every item with at most ``concurrency`` calls in flight; yield ``(item, result)`` as each completes.

    Results come in completion order, so the caller can checkpoint each at once.
    Worker threads are daemons: an interrupted caller (Ctrl-C, closing the
    generator) stops new calls from starting and does not wait for calls in flight.
    An exception raised by ``fn`` stops the run and is re-raised here.
    """
    pending: "queue.Queue[T]" = queue.Queue()
    count = 0
    for item in items:
        pending.put(item)
        count += 1
    if count == 0:
        return
    done: "queue.Queue[tuple[T, Any, BaseException | None]]" = queue.Queue()
    stop = threading.Event()

    def worker() -> None:
        while not stop.is_set():
            try:
                item = pending.get_nowait()
            except queue.Empty:
                return
            try:
                result = fn(item)
            except BaseException as exc:  # handed to the consumer, which re-raises it
                done.put((item, None, exc))
                return
            done.put((item, result, None))

    workers = [threading.Thread(target=worker, name=f"k9bench-api-{i}", daemon=True) for i in range(max(1, min(concurrency, count)))]
    for t in workers:
        t.start()
    try:
        for _ in range(count):
            item, result, exc = done.get()
            if exc is not None:
                raise exc
            yield item, result
    finally:
        stop.set()
