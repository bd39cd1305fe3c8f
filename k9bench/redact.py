"""Secrets never reach an artifact or a log line: redaction by flag name and by value.

Three routes are covered: a secret-looking flag (``--api_key X``, ``--hf_token=X``), a key written
inside another value (``http://user:KEY@host``, ``--extra_body '{"api_key": "KEY"}'``), and any
value equal to a known secret of this process (the API key in use, ``HF_TOKEN``...), wherever it
appears. :func:`redact` works on text and on JSON-like data; :func:`install_log_filter` masks log
records; :func:`register_secret` adds a value found at run time (e.g. a key read from a file) and
:func:`register_url_secrets` the credentials inside a URL.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

MASK = "***"

SECRET_WORDS = frozenset({"key", "apikey", "token", "secret", "password", "passwd", "credential", "credentials", "authorization"})
"""Words that mark a flag or field name as secret (``--api_key``, ``hf_token``); whole words only, so
``--max_tokens`` or ``--tokenizer`` keep their values."""

SECRET_ENV_VARS = ("OPENAI_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "K9BENCH_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")
"""Environment variables whose values are masked wherever they appear."""

_MIN_SECRET_LEN = 6
_registered: set[str] = set()
_URL_USERINFO = re.compile(r"(?<![a-zA-Z0-9+.-])(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@")
"""A scheme starts where a run of scheme characters starts (the look-behind): tried at every letter of a long
run, the scheme's ``*`` made redaction quadratic in the run's length (issue 40 item 8); linear now."""
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{6,}")
_BASIC = re.compile(r"(?i)(basic\s+)([A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])")


def _mask_basic(match: re.Match) -> str:
    """``Basic <base64 of user:password>`` (HTTP basic auth, e.g. from URL userinfo) -> ``Basic ***``;
    other text after the word "basic" is left alone."""
    import base64
    import binascii

    try:
        decoded = base64.b64decode(match.group(2), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return match.group(0)
    return match.group(1) + MASK if ":" in decoded else match.group(0)


def is_secret_name(name: str) -> bool:
    """True when a flag/field name holds a secret word (split on ``-``, ``_`` and ``.``)."""
    return any(part in SECRET_WORDS for part in re.split(r"[-_.]+", str(name).lower().lstrip("-")))


def register_secret(value: str | None) -> None:
    """Mask ``value`` from now on wherever it appears (short values are ignored: too many false hits)."""
    if value and len(value) >= _MIN_SECRET_LEN:
        _registered.add(value)


def register_url_secrets(url: str | None) -> None:
    """Register the credentials written inside a URL (``http://user:KEY@host``: the password, and
    the user part too when it stands alone as in ``http://KEY@host``), so they are masked even
    where a library prints them apart from the URL."""
    if not url or "@" not in str(url):
        return
    match = _URL_USERINFO.search(str(url))
    if not match:
        return
    userinfo = match.group("userinfo")
    register_secret(userinfo)
    user, sep, password = userinfo.partition(":")
    from urllib.parse import unquote

    for value in ((password,) if sep else (user,)):
        register_secret(value)
        register_secret(unquote(value))


def known_secrets() -> list[str]:
    """Registered values plus the secret environment variables' values, longest first."""
    values = set(_registered)
    for name in SECRET_ENV_VARS:
        value = os.environ.get(name)
        if value and len(value) >= _MIN_SECRET_LEN:
            values.add(value)
    return sorted(values, key=len, reverse=True)


def redact_text(text: str) -> str:
    """``text`` with URL userinfo, bearer tokens and every known secret value masked."""
    if not isinstance(text, str) or not text:
        return text
    out = _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    out = _BEARER.sub(lambda m: m.group(1) + MASK, out)
    out = _BASIC.sub(_mask_basic, out)
    for secret in known_secrets():
        if secret in out:
            out = out.replace(secret, MASK)
    return out


def redact(value: Any) -> Any:
    """A copy of JSON-like ``value`` with secret-named fields and every secret inside strings masked."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: (MASK if is_secret_name(k) and v not in (None, "", False) and not isinstance(v, (dict, list)) else redact(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v) for v in value) if isinstance(value, list) else [redact(v) for v in value]
    return value


def redact_argv(argv: list[str], parser: Any = None) -> list[str]:
    """Command-line arguments with the values of secret flags masked, and secrets inside other values
    (URLs with userinfo, JSON bodies, known values) masked too.

    With ``parser`` (a :class:`k9bench.cli.ArgumentParser`), a flag it knows is judged by the flag it
    resolves to (:meth:`~k9bench.cli.ArgumentParser.is_secret_flag`); a flag it does not know, or any flag
    without a parser, by its name's words (:func:`is_secret_name`: ``--max_new_tokens`` is never masked)."""
    out, hide_next = [], False
    for arg in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        flag = arg.split("=", 1)[0]
        resolved = parser.is_secret_flag(flag) if parser is not None and arg.startswith("--") else None
        if arg.startswith("--") and (resolved if resolved is not None else is_secret_name(flag)):
            if "=" in arg:
                out.append(flag + "=" + MASK)
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(redact_secret_json_text(redact_text(arg)))
    return out


def register_argv_secrets(argv: list[str] | tuple[str, ...] | None) -> None:
    """Register every secret a command line carries, so that it is masked by value wherever it shows up
    later (an error line, a library's message, an artifact): the value of each secret-named flag
    (``--api_key X``, ``--api_key=X``) and the credentials inside any URL (``https://user:X@host``)."""
    args = [str(a) for a in (argv or ())]
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if arg.startswith("--") and is_secret_name(flag):
            register_secret(value if eq else (args[i + 1] if i + 1 < len(args) else None))
        register_url_secrets(arg)


def redact_secret_json_text(text: str) -> str:
    """Mask the values of secret-named keys inside a JSON object written as text (``--extra_body``)."""
    if "{" not in text:
        return text
    return re.sub(
        r'(?P<key>"[^"]*"\s*:\s*)"(?P<value>[^"]*)"',
        lambda m: m.group("key") + (f'"{MASK}"' if is_secret_name(m.group("key").split('"')[1]) else f'"{m.group("value")}"'),
        text,
    )


class RedactingFilter(logging.Filter):
    """A logging filter that masks secrets in the rendered message of every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: leave it to logging's own error path
            return True
        cleaned = redact_text(message)
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        return True


def install_log_filter() -> None:
    """Mask secrets in every log line from now on (call once from ``main``, after logging is set up)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
