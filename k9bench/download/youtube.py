"""YouTube URL parsing.

A scene name (the 11-character YouTube id) doubles as a file name, so it is only
ever accepted when it matches ``[A-Za-z0-9_-]{11}``: it can never contain a path
separator or ``..`` and so can never escape the video folder.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

SCENE_RE = re.compile(r"[A-Za-z0-9_-]{11}")

_HOSTS = {
    "youtube.com",
    "www.youtube.com",
    "m.youtube.com",
    "music.youtube.com",
    "gaming.youtube.com",
    "youtube-nocookie.com",
    "www.youtube-nocookie.com",
}
_SHORT_HOSTS = {"youtu.be", "www.youtu.be"}
# Path prefixes whose next segment is the id.
_PATH_FORMS = ("embed", "shorts", "live", "v", "e")


class InvalidYouTubeURL(ValueError):
    """Raised when a URL is not a recognisable YouTube video URL."""


def is_valid_scene_name(name: str) -> bool:
    """True when ``name`` is a safe 11-character YouTube id."""
    return isinstance(name, str) and SCENE_RE.fullmatch(name) is not None


def parse_youtube_id(url: str) -> str:
    """Return the 11-character video id of a YouTube URL.

    Accepts ``watch?v=`` (any extra query parameters, ``m.``/``music.``/``www.``
    hosts), ``youtu.be/<id>``, ``/shorts/<id>``, ``/embed/<id>``, ``/live/<id>``,
    ``/v/<id>`` and the ``youtube-nocookie.com`` embed host. A scheme-less URL
    (``youtu.be/<id>``) is accepted too. Anything else raises
    :class:`InvalidYouTubeURL`.
    """
    if not isinstance(url, str) or not url.strip():
        raise InvalidYouTubeURL(f"not a URL: {url!r}")
    text = url.strip()
    if "://" not in text:
        text = "https://" + text
    try:
        parts = urlsplit(text)
        host = (parts.hostname or "").lower()
    except ValueError as exc:  # e.g. an unbalanced IPv6 bracket
        raise InvalidYouTubeURL(f"not a valid URL ({exc}): {url!r}") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidYouTubeURL(f"unsupported scheme in {url!r}")
    segments = [s for s in parts.path.split("/") if s]
    candidate = None
    if host in _SHORT_HOSTS:
        candidate = segments[0] if segments else None
    elif host in _HOSTS:
        if segments[:1] == ["watch"] or (not segments and parts.query):
            values = parse_qs(parts.query).get("v")
            candidate = values[0] if values else None
        elif len(segments) >= 2 and segments[0] in _PATH_FORMS:
            candidate = segments[1]
    else:
        raise InvalidYouTubeURL(f"not a YouTube host ({host or 'none'}) in {url!r}")
    if candidate is None or SCENE_RE.fullmatch(candidate) is None:
        raise InvalidYouTubeURL(f"no valid 11-character video id in {url!r}")
    return candidate


def canonical_url(scene_name: str) -> str:
    """The canonical watch URL for a scene name."""
    if not is_valid_scene_name(scene_name):
        raise InvalidYouTubeURL(f"invalid scene name {scene_name!r}")
    return f"https://www.youtube.com/watch?v={scene_name}"
