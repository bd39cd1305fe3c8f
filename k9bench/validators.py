"""argparse value types shared by every script: one home for each rule.

Each function takes the text of a flag and returns the value, or raises
:class:`argparse.ArgumentTypeError` with a message that says what was expected. Numbers
must be finite (``nan``/``inf`` are refused everywhere: they break JSON artifacts).
"""

from __future__ import annotations

import argparse
import math
import os


def str2bool(value: str | bool) -> bool:
    """``True/False`` flags written the reference's way (``--use_system_message False``)."""
    if isinstance(value, bool):
        return value
    lowered = str(value).strip().lower()
    if lowered in ("true", "t", "yes", "y", "1", "on"):
        return True
    if lowered in ("false", "f", "no", "n", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected True or False, got {value!r}")


def http_url(text: str) -> str:
    """An ``http://`` or ``https://`` URL with a host (an API base URL), trailing slashes dropped.

    ``localhost:8000/v1`` (no scheme) is refused here, at once, rather than retried by an HTTP client."""
    from urllib.parse import urlsplit

    value = str(text).strip()
    if not value and not os.environ.get("OPENAI_API_KEY", "").strip():  # `--base_url "$URL"` with URL unset, and no key
        raise argparse.ArgumentTypeError("is empty and OPENAI_API_KEY is not set: export OPENAI_API_KEY=... for the OpenAI API "
                                         "(and leave --base_url out), or give the server's URL, e.g. http://localhost:8000/v1")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL, got {text!r} ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL with a host (e.g. http://localhost:8000/v1), got {text!r}")
    return value.rstrip("/")


def device_name(text: str) -> str:
    """``--device``: ``auto``, ``cpu``, ``cuda``, ``cuda:N`` or ``mps`` (its syntax only; whether that device is
    there is checked when the run starts, :func:`k9bench.models.accelerator.resolve_device`)."""
    value = str(text).strip()
    if value not in ("auto", "cpu", "mps", "cuda") and not (value.startswith("cuda:") and value[5:].isdigit()
                                                             and value[5:].isascii()):
        raise argparse.ArgumentTypeError(f"expected auto, cpu, cuda, cuda:N or mps, got {text!r}")
    return value


def _int(text: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def finite_float(text: str) -> float:
    """Any finite number."""
    try:
        value = float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def int_at_least(low: int):
    """An integer ``>= low``."""

    def parse(text: str) -> int:
        value = _int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}")
        return value

    parse.__name__ = f"int_at_least_{low}".replace("-", "minus")
    return parse


def int_in_range(low: int, high: int):
    """An integer in ``[low, high]``."""

    def parse(text: str) -> int:
        value = _int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected an integer in {low}..{high}, got {text!r}")
        return value

    parse.__name__ = f"int_in_{low}_{high}"
    return parse


positive_int = int_at_least(1)
"""An integer ``>= 1``."""


def all_or_positive_int(text: str) -> int:
    """``-1`` (all) or an integer ``>= 1`` (``--max_samples``: 0 would select nothing and do nothing)."""
    value = _int(text)
    if value != -1 and value < 1:
        raise argparse.ArgumentTypeError(f"expected -1 (all) or an integer >= 1, got {text!r} (0 would select nothing)")
    return value

non_negative_int = int_at_least(0)
"""An integer ``>= 0``."""


def positive_float(text: str) -> float:
    """A finite number ``> 0``."""
    value = finite_float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number ``>= 0``."""
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def unit_interval(text: str) -> float:
    """A finite number in ``[0, 1]`` (thresholds, probabilities)."""
    value = finite_float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}")
    return value


def fraction(text: str) -> float:
    """A finite number in ``(0, 1]`` (a share that cannot be none: the memory an engine may take)."""
    value = finite_float(text)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}")
    return value


def float_in_range(low: float, high: float):
    """A finite number in ``[low, high]``."""

    def parse(text: str) -> float:
        value = finite_float(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected a number in [{low}, {high}], got {text!r}")
        return value

    parse.__name__ = f"float_in_{low}_{high}"
    return parse
