"""What an OpenAI-compatible server says about itself, for the raw file's ``inference.backend.server``.

Read once when the backend loads (``GET <base_url>/models``, ``GET <root>/version`` for a
self-hosted server), then completed by each response's ``system_fingerprint``. The block
(every key always present, None when the server did not say):

``engine``
    ``vllm`` or ``sglang`` (the served model's ``owned_by``, or a ``vllm-...`` fingerprint), else None.
``version``
    ``/version``'s ``version`` (vLLM: ``0.32.0``).
``served_model``
    The ``/v1/models`` id that the run's ``--api_model`` names (None when not listed).
``root``
    That model's checkpoint as the server loaded it (vLLM: the path or Hub id given to ``--model``);
    a report compares it with the run's model name (an FP8 checkpoint served as the bf16 name differs).
``max_model_len``
    The served context length.
``owned_by``
    As listed.
``models``
    Every id the server lists (at most 20).
``system_fingerprints``
    The distinct ``system_fingerprint`` values of the responses, in order seen (vLLM: ``vllm-<version>-<hash>``).
``read_from``
    The endpoints that answered (``/v1/models``, ``/version``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ENGINES = ("vllm", "sglang")
"""Servers that take video parts (the ``auto`` transport sends ``video`` to them)."""

SERVER_KEYS = ("engine", "version", "served_model", "root", "max_model_len", "owned_by", "models", "system_fingerprints", "read_from")
"""The keys of ``inference.backend.server``."""


def empty_server_block() -> dict[str, Any]:
    """The block with nothing known yet."""
    return {key: ([] if key in ("models", "system_fingerprints", "read_from") else None) for key in SERVER_KEYS}


def _field(item: Any, name: str) -> Any:
    if isinstance(item, dict):
        return item.get(name)
    value = getattr(item, name, None)
    if value is None:
        extra = getattr(item, "model_extra", None) or {}
        value = extra.get(name)
    return value


def server_block(models: list[Any] | None, api_model: str, version: dict | None) -> dict[str, Any]:
    """The block from a ``/v1/models`` listing (objects or dicts; None: not listed) and ``/version``'s body."""
    block = empty_server_block()
    if models is not None:
        block["read_from"].append("/v1/models")
        block["models"] = [str(_field(m, "id")) for m in models[:20]]
        chosen = next((m for m in models if _field(m, "id") == api_model), None)
        if chosen is not None:
            block["served_model"] = api_model
            block["root"] = _field(chosen, "root")
            length = _field(chosen, "max_model_len")
            block["max_model_len"] = int(length) if isinstance(length, (int, float)) and not isinstance(length, bool) else None
            owner = _field(chosen, "owned_by")
            block["owned_by"] = str(owner) if owner is not None else None
            if block["owned_by"] in ENGINES:
                block["engine"] = block["owned_by"]
    if isinstance(version, dict) and version.get("version") is not None:
        block["read_from"].append("/version")
        block["version"] = str(version["version"])
    return block


def note_fingerprint(block: dict[str, Any], fingerprint: str | None) -> None:
    """Add a response's ``system_fingerprint`` (a ``vllm-`` one also names the engine). Call under a lock."""
    if not fingerprint or fingerprint in block["system_fingerprints"]:
        return
    block["system_fingerprints"].append(fingerprint)
    if block["engine"] is None and fingerprint.startswith("vllm-"):
        block["engine"] = "vllm"


def read_version(base_url: str, api_key: str | None, timeout: float = 5.0) -> dict | None:
    """``/version`` at the server's root (``base_url`` without its ``/v1``); None when it has none."""
    from k9bench.serving.endpoint import EndpointUnreachable, get_json

    root = base_url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    try:
        status, body = get_json(f"{root}/version", api_key=api_key, timeout=timeout)
    except EndpointUnreachable:
        return None
    return body if status == 200 and isinstance(body, dict) else None


def checkpoint_video_processor(root: str | None) -> tuple[dict | None, str]:
    """The served checkpoint's video processor settings (``root``: a local folder, or a Hub id in the
    local Hugging Face cache): ``({"patch_size": int, "max_pixels": int | None}, source file)``, or
    ``(None, why)`` when no processor config with a patch size can be read. ``max_pixels`` is the
    video processor's ``size.longest_edge``: for Qwen3-VL a budget over all frames together (T x H x W),
    beyond which the server's processor shrinks the frames."""
    if not root:
        return None, "the server names no checkpoint"
    names = ("video_preprocessor_config.json", "preprocessor_config.json", "processor_config.json")
    folder = Path(root)
    files: list[Path] = []
    if folder.is_dir():
        files = [folder / n for n in names if (folder / n).is_file()]
    else:
        try:
            from huggingface_hub import try_to_load_from_cache

            for name in names:
                found = try_to_load_from_cache(root, name)
                if isinstance(found, str):
                    files.append(Path(found))
        except Exception as exc:  # an id the cache cannot take: treated as not found
            log.debug("no cached processor config for %s: %s", root, exc)
    for path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for section in (data.get("video_processor"), data.get("image_processor"), data):  # processor_config.json nests them
            patch = section.get("patch_size") if isinstance(section, dict) else None
            if isinstance(patch, int) and patch > 0:
                size = section.get("size") if isinstance(section.get("size"), dict) else {}
                longest = size.get("longest_edge") if section is not data.get("image_processor") else None
                return {"patch_size": patch, "max_pixels": longest if isinstance(longest, int) else None}, str(path)
    return None, f"no processor config with a patch_size for {root} (not a local folder, not in the Hugging Face cache)"


__all__ = ["ENGINES", "SERVER_KEYS", "checkpoint_video_processor", "empty_server_block", "note_fingerprint", "read_version", "server_block"]
