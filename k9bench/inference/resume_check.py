"""The inference runner's resume part: which records of earlier runs this run may reuse.

The files and the mechanics (final file, checkpoint log, retry of failed records) are
:class:`k9bench.resume.ResumableStage`'s. This module says what a raw record's fingerprint is:
the record keys ``model_name``, ``max_frames``, ``generation``, ``seed``, ``attn_implementation``,
``text_only`` and ``run_settings`` (the settings marked ``result=True`` in
:mod:`k9bench.inference.settings` that are not already record keys, plus what the backend
reports: dtype, transport, request parameters). It is built in one place, :func:`fingerprint`:
before a model loads from the flags alone (checked then, and the stage's fingerprint,
:func:`stage_fingerprint`), after the load with what the backend reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from k9bench.redact import redact, redact_text
from k9bench.settings import result_fingerprint

from k9bench.inference import registry
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
        if registry.entry(config.model.backend).audio_part:
            picked["audio_format"] = registry.backend_settings(config).audio_format
    return picked


def prompt_fingerprint(config: RunConfig, system_prompt_sha256: str) -> dict:
    """The prompt part of ``run_settings``. ``prompt_placement`` is written only when the instructions
    are not the system turn, so that a default run's records keep their shape (see :func:`record_fingerprint`)."""
    placement = config.prompt.placement
    out: dict[str, Any] = {"system_prompt_sha256": system_prompt_sha256, "use_system_message": config.prompt.use_system_message}
    if placement != "system":
        out["prompt_placement"] = placement
    return out


def fingerprint(config: RunConfig, model_name: str, system_prompt_sha256: str, describe: dict | None = None,
                image_patch_size: int | None = None) -> dict:
    """THE inference fingerprint: what a record made by this run carries (``model_name``, ``max_frames``,
    ``generation``, ``seed``, ``text_only``, ``run_settings``, ``attn_implementation``), from the result
    fields of the config (:func:`k9bench.settings.result_fingerprint`) and, once the backend is loaded, what
    it reports (``describe``: the generation config it uses, dtype, transport...).

    Without ``describe`` it is the part the flags decide alone (checked before any model loads, and the stage's
    fingerprint); with it, the whole. A record's ``run_settings`` is this one's, secrets masked; compare
    records against :func:`expected` of it."""
    loaded = describe is not None
    gen = result_fingerprint(config.generation)
    if loaded:
        generation = dict(describe.get("generation") or {})
    else:  # the model's generation config decides the rest
        generation = {"max_new_tokens": gen["max_new_tokens"]}
        generation.update({k: gen[k] for k in ("do_sample", "temperature", "top_p", "top_k") if gen[k] is not None})
    settings: dict[str, Any] = {}
    if loaded:
        settings["backend"] = describe.get("name")
        settings.update({k: describe[k] for k in BACKEND_SETTING_KEYS if k in describe})
    settings.update(prompt_fingerprint(config, system_prompt_sha256))
    frames = frame_fingerprint(config, image_patch_size)
    if frames is not None and not loaded:
        frames.pop("image_patch_size")  # the backend's processor decides it
    if loaded or frames is not None:
        settings["frames"] = frames
    out = {"model_name": model_name, "max_frames": config.frames.max_frames, "generation": generation, "seed": gen["seed"],
           "text_only": config.frames.text_only, "run_settings": settings}
    if loaded:
        out["attn_implementation"] = describe.get("attn_implementation")
    return masked(out)


def expected(fp: dict) -> dict:
    """What a finished record's :func:`record_fingerprint` must match: ``fp`` with the prompt placement always
    stated (records state it only when it is not the default)."""
    placement = fp["run_settings"].get("prompt_placement", "system")
    return {**fp, "run_settings": {**fp["run_settings"], "prompt_placement": placement}}


def record_fingerprint(record: dict) -> dict:
    """The fingerprint of a finished record, with the defaults of keys it may omit filled in: a record
    without ``prompt_placement`` had its instructions in the system turn, or (written before the
    empty-system-turn mode existed) in the user turn when ``use_system_message`` is False."""
    settings = record.get("run_settings")
    if isinstance(settings, dict) and "prompt_placement" not in settings and "use_system_message" in settings:
        settings = {**settings, "prompt_placement": "system" if settings["use_system_message"] else "user_turn"}
        record = {**record, "run_settings": settings}
    return record


def shaped_like(record: Any, want: Any) -> Any:
    """``record`` cut to the keys of ``want`` at every depth where both are dicts (a before-load fingerprint
    leaves out what only the backend knows, ``run_settings.frames.image_patch_size`` for one; the project's
    comparison, :func:`k9bench.settings.fingerprint_differences`, is partial one level deep only)."""
    if isinstance(record, dict) and isinstance(want, dict):
        return {k: shaped_like(v, want[k]) for k, v in record.items() if k in want}
    return record


def stage_fingerprint(config: RunConfig, model_name: str, system_prompt_sha256: str | None) -> dict:
    """The inference stage's fingerprint (:meth:`k9bench.inference.stage.InferenceStage.fingerprint`): the
    record fingerprint the flags decide (:func:`fingerprint`), the model, the backend's result fields and which
    questions (dataset, range, shard, and a ``--subset``'s hash)."""
    d = config.data
    backend = registry.backend_settings(config)
    out = {
        "records": expected(fingerprint(config, model_name, system_prompt_sha256 or "")),
        "model": result_fingerprint(config.model),
        "backend_settings": masked(result_fingerprint(backend)),
        "data": {"dataset_name": d.dataset_name, "split": d.split, "drop_invalid_rows": d.drop_invalid_rows,
                 "start_idx": d.start_idx, "end_idx": d.end_idx, "max_samples": d.max_samples},
    }
    if d.num_shards > 1:
        out["data"].update(num_shards=d.num_shards, shard_id=d.shard_id)
    if d.subset:  # which questions by content (the file's path says nothing); None: unreadable, refused by the run
        from k9bench.data.subset import subset_digest

        out["data"]["subset_sha256"] = subset_digest(d.subset)
    return out


__all__ = ["BACKEND_SETTING_KEYS", "expected", "fingerprint", "frame_fingerprint", "masked", "read_raw_records",
           "record_fingerprint", "shaped_like", "stage_fingerprint"]
