"""The inference runner's resume part: which records of earlier runs this run may reuse.

The files and the mechanics (final file, checkpoint log, retry of failed records) are
:class:`k9bench.resume.ResumableStage`'s. This module says what a raw record's fingerprint is:
the record keys ``model_name``, ``max_frames``, ``generation``, ``seed``, ``attn_implementation``,
``text_only`` and ``run_settings`` (the settings marked ``result=True`` in
:mod:`k9bench.inference.settings` that are not already record keys, plus what the backend
reports: dtype, transport, request parameters). Two checks use it: :func:`expected_before_load`
(what the flags alone decide, checked before a model loads) and :func:`expected_after_load` (the
effective values the backend reports).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from k9bench.redact import redact, redact_text
from k9bench.settings import result_fingerprint

from k9bench.inference.settings import RunConfig

BACKEND_SETTING_KEYS = ("dtype", "video_transport", "frame_size", "jpeg_quality", "image_detail", "request_params")
"""Keys of a backend's ``describe()`` copied into ``run_settings`` when the backend has them."""

_RECORD_FRAME_KEYS = {"fps": "fps", "max_pixels": "max_pixels", "min_pixels": "min_pixels", "video_decoder": "decoder"}
"""Frame settings (field -> key in a record's ``run_settings.frames``); ``max_frames`` is a record key of its own."""


REQUEST_BODY_KEYS = ("extra_body", "request_params")
"""Keys holding request bodies, whose secret-named fields (``api_key``...) are masked by name."""


def masked(value: Any) -> Any:
    """``value`` with secrets masked for an artifact: known secret values and URL userinfo everywhere
    (:func:`k9bench.redact.redact_text`), and secret-named fields inside request bodies (``--extra_body``)
    by name. Other names are kept (``api_key_source`` says where the key came from, not the key)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: redact(v) if k in REQUEST_BODY_KEYS else masked(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [masked(v) for v in value]
    return value


def read_raw_records(path: Path) -> list[dict]:
    """The records of an existing raw file (raises ``ArtifactError`` when it is not one)."""
    from k9bench.artifacts import load_records_artifact

    return [rec.to_dict() for rec in load_records_artifact(path).records]


def frame_fingerprint(config: RunConfig, image_patch_size: int | None) -> dict | None:
    """``run_settings.frames``: the frame settings that shape what the model sees (None when text only);
    ``audio`` (and the API's ``audio_format``) when the model hears the soundtracks too."""
    if config.frames.text_only:
        return None
    values = result_fingerprint(config.frames)
    out = {key: values[field] for field, key in _RECORD_FRAME_KEYS.items()}
    out["image_patch_size"] = image_patch_size
    picked = {k: out[k] for k in ("fps", "max_pixels", "min_pixels", "image_patch_size", "decoder")}
    if config.frames.audio:  # written only with --audio, so that video-only records keep their shape
        picked["audio"] = True
        if config.model.backend == "openai":
            picked["audio_format"] = config.openai.audio_format
    return picked


def prompt_fingerprint(config: RunConfig, system_prompt_sha256: str) -> dict:
    """The prompt part of ``run_settings``. ``prompt_placement`` is written only when the instructions
    are not the system turn, so that a default run's records keep their shape (see :func:`record_fingerprint`)."""
    placement = config.prompt.placement
    out: dict[str, Any] = {"system_prompt_sha256": system_prompt_sha256, "use_system_message": config.prompt.use_system_message}
    if placement != "system":
        out["prompt_placement"] = placement
    return out


def run_settings(config: RunConfig, describe: dict, system_prompt_sha256: str, image_patch_size: int | None) -> dict:
    """A record's ``run_settings`` (secrets masked: ``--extra_body`` travels in ``request_params``)."""
    out: dict[str, Any] = {"backend": describe.get("name")}
    out.update({k: describe[k] for k in BACKEND_SETTING_KEYS if k in describe})
    out.update(prompt_fingerprint(config, system_prompt_sha256))
    out["frames"] = frame_fingerprint(config, image_patch_size)
    return masked(out)


def record_fingerprint(record: dict) -> dict:
    """The fingerprint of a finished record, with the defaults of keys it may omit filled in: a record
    without ``prompt_placement`` had its instructions in the system turn, or (written before the
    empty-system-turn mode existed) in the user turn when ``use_system_message`` is False."""
    settings = record.get("run_settings")
    if isinstance(settings, dict) and "prompt_placement" not in settings and "use_system_message" in settings:
        settings = {**settings, "prompt_placement": "system" if settings["use_system_message"] else "user_turn"}
        record = {**record, "run_settings": settings}
    return record


def _placement_key(config: RunConfig) -> dict:
    return {"prompt_placement": config.prompt.placement}


def expected_before_load(config: RunConfig, model_name: str, system_prompt_sha256: str) -> dict:
    """The part of the fingerprint the flags decide alone (checked before any model load); the
    generation settings the model's own config decides are left to :func:`expected_after_load`."""
    gen = result_fingerprint(config.generation)
    generation = {"max_new_tokens": gen["max_new_tokens"]}
    generation.update({k: gen[k] for k in ("do_sample", "temperature", "top_p", "top_k") if gen[k] is not None})
    settings: dict[str, Any] = {**prompt_fingerprint(config, system_prompt_sha256), **_placement_key(config)}
    frames = frame_fingerprint(config, None)
    if frames is not None:
        frames.pop("image_patch_size")  # the backend's processor decides it
        settings["frames"] = frames
    return masked({
        "model_name": model_name, "max_frames": config.frames.max_frames, "generation": generation,
        "seed": gen["seed"], "text_only": config.frames.text_only, "run_settings": settings,
    })


def expected_after_load(ctx: Any) -> dict:
    """The whole fingerprint, from the run context built once the backend is loaded."""
    return {
        "model_name": ctx.model_name, "max_frames": ctx.max_frames, "generation": ctx.generation, "seed": ctx.seed,
        "attn_implementation": ctx.attn_implementation, "text_only": ctx.text_only,
        "run_settings": {**ctx.settings, **({"prompt_placement": ctx.placement} if ctx.placement else {})},
    }


__all__ = ["BACKEND_SETTING_KEYS", "masked", "expected_after_load", "expected_before_load", "frame_fingerprint", "read_raw_records",
           "record_fingerprint", "run_settings"]
