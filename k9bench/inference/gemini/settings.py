"""The ``--backend gemini`` flags, and where its key comes from.

Its own flags (the ``--help`` group "Gemini API (--backend gemini)") are the thinking budget and what
happens to the uploaded videos; the endpoint, concurrency, timeout and retries are the API flags the
OpenAI-compatible backend already has (``--base_url``, ``--concurrency``, ``--timeout``, ``--max_retries``,
``--retry_backoff``: :class:`~k9bench.inference.settings.OpenAISettings`), which the backend reads from there.
The sampling rate of the video is the run's ``--fps`` (default 1, the paper's Gemini rows), sent as the video's
``video_metadata.fps``; ``--audio`` sends the file with its soundtrack, otherwise a copy without one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

from k9bench.settings import setting
from k9bench.validators import float_in_range, int_in_range

KEY_ENVS = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
"""Where the key is read from, in this order (never a flag or a file)."""

THINKING_BUDGET_MAX = 32768
"""The largest thinking budget Gemini 2.5 takes."""

UPLOAD_TIMEOUT_RANGE = (0.1, 172800.0)
"""``--upload_timeout`` values: up to 48 h, the life of an uploaded file."""

POLL_INTERVAL_RANGE = (0.01, 600.0)
"""``--upload_poll_interval`` values."""


@dataclass(frozen=True)
class GeminiSettings:
    """The ``--backend gemini`` settings (see the module doc)."""

    thinking_budget: int | None = setting(
        None, f"--backend gemini: thinking tokens per reply, -1..{THINKING_BUDGET_MAX} (-1: the model decides; 0: off where the "
        "model allows it; Gemini 2.5 Pro takes 128 and up and always thinks); its thinking counts against --max_new_tokens; "
        "default: the model's own", type=int_in_range(-1, THINKING_BUDGET_MAX), result=True)
    delete_uploads: bool = setting(False, "--backend gemini: delete the videos this run uploaded when it ends (default: leave them "
                                   "to expire after 48 h, so that a rerun reuses them)", action="store_true")
    upload_timeout: float = setting(900.0, f"--backend gemini: seconds an uploaded video may stay PROCESSING before its questions "
                                    f"fail, {UPLOAD_TIMEOUT_RANGE[0]:g}..{UPLOAD_TIMEOUT_RANGE[1]:g} (default: %(default)s)",
                                    type=float_in_range(*UPLOAD_TIMEOUT_RANGE))
    upload_poll_interval: float = setting(2.0, f"--backend gemini: seconds between two reads of a PROCESSING video's state, "
                                          f"{POLL_INTERVAL_RANGE[0]:g}..{POLL_INTERVAL_RANGE[1]:g} (default: %(default)s)",
                                          type=float_in_range(*POLL_INTERVAL_RANGE))


def api_key(env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """``(key, the variable it came from)``, or None when neither of :data:`KEY_ENVS` is set."""
    env = os.environ if env is None else env
    for name in KEY_ENVS:
        value = (env.get(name) or "").strip()
        if value:
            return value, name
    return None


def missing_key(config: object = None) -> str | None:
    """The one line refusing a run without a key (None: there is one); checked before any work (the registry row's
    ``check``; ``config`` is not needed)."""
    if api_key() is not None:
        return None
    return (f"--backend gemini needs an API key: export {KEY_ENVS[0]}=... (or {KEY_ENVS[1]}); "
            "it is read from the environment only, never from a flag or a file")


__all__ = ["GeminiSettings", "KEY_ENVS", "THINKING_BUDGET_MAX", "api_key", "missing_key"]
