"""Planning an inference run: which questions, grouped how, into which file, and the checks that
refuse a run before anything expensive happens (no model load, no download).

- :func:`group_by_video` / :func:`shard_groups`: questions grouped by video in first-seen order;
  with ``--num_shards`` whole videos are dealt to shards round-robin.
- :func:`output_path`: ``--output_file`` (or the launcher's name in ``eval_results/``) plus the shard suffix.
- :func:`preflight`: flag values that cannot work together (their own ranges are the argparse types'), the
  placement flags among them (:func:`k9bench.models.accelerator.placement_flags_problem`).
- :func:`check_selection`: the selection against the dataset (``--split`` of a source without splits,
  over-long questions are counted) and :func:`videos_present` for the ``--video_dir`` preflight.
- :func:`check_model_config`: what the model's ``config.json`` says, read before any weight loads
  (``--max_new_tokens`` against the context, ``--audio`` against the model's modalities).
- :func:`build_messages`: the chat of one question.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from k9bench.models import families
from k9bench.models.accelerator import placement_flags_problem
from k9bench.layout import RESULTS_DIR, artifact_name, shard_path

from k9bench.inference import registry
from k9bench.inference.settings import MAX_FRAME_PIXELS, RunConfig

if TYPE_CHECKING:
    from k9bench.data.dataset import Question

log = logging.getLogger(__name__)

EXIT_BACKEND = 3
"""The model/backend could not be loaded (inference's own exit code beside :mod:`k9bench.stage`'s)."""

MAX_QUESTION_CHARS = 20_000
"""A question longer than this is a failed record (``question_too_long``), never sent to a model: K9-Bench's
questions are a sentence or two, and a megabyte of text would only stall the tokenizer and the model."""

PLACEMENTS = ("system", "empty_system", "user_turn")
"""Where the instructions stand (:attr:`k9bench.inference.settings.PromptSettings.placement`)."""


class UsageError(ValueError):
    """Bad flags or input; the message says which (exit 2)."""


@dataclass
class VideoGroup:
    """The selected questions of one video."""

    scene_name: str
    """YouTube id."""
    video_url: str
    """URL of the video (for --auto_download)."""
    path: Path
    """``{video_dir}/{scene}.mp4``."""
    questions: list = field(default_factory=list)
    """The questions (k9bench.data.dataset.Question), in dataset order."""


def group_by_video(questions: list["Question"], video_dir: str | Path) -> list[VideoGroup]:
    """Questions grouped by video, groups in order of first appearance."""
    groups: dict[str, VideoGroup] = {}
    for q in questions:
        group = groups.get(q.scene_name)
        if group is None:
            group = groups[q.scene_name] = VideoGroup(q.scene_name, q.video_url, Path(video_dir) / q.video)
        group.questions.append(q)
    return list(groups.values())


def shard_groups(groups: list[VideoGroup], num_shards: int, shard_id: int) -> list[VideoGroup]:
    """Videos dealt round-robin (in first-appearance order): shard ``k`` gets groups k, k+N, k+2N..."""
    if num_shards < 1 or not 0 <= shard_id < num_shards:
        raise UsageError(f"--shard_id {shard_id} must be in [0, --num_shards {num_shards})")
    return groups[shard_id::num_shards]


def chunks(items: list, size: int) -> Iterator[list]:
    """Consecutive slices of at most ``size`` items."""
    for start in range(0, len(items), size):
        yield items[start:start + size]


def default_output_file(model: str, max_frames: int, max_samples: int, audio: bool = False) -> str:
    """The launcher's file name: ``raw_<model>_mf<frames>_n<samples>.json``, ``..._av.json`` with ``--audio``
    (:func:`k9bench.layout.artifact_name`)."""
    return artifact_name("raw", model, max_frames, max_samples, audio=audio)


def shard_output_file(output: str | Path, num_shards: int, shard_id: int) -> Path:
    """``x.json`` -> ``x.shard{i}of{n}.json`` for a sharded run (:func:`k9bench.layout.shard_path`)."""
    return shard_path(output, num_shards, shard_id)


def merged_output_path(config: RunConfig) -> Path:
    """The run's raw file without a shard suffix: ``--output_file``, else the launcher's name in
    :data:`RESULTS_DIR` (a hand run's files gather there, not in the current folder)."""
    d = config.data
    if config.output.output_file:
        return Path(config.output.output_file)
    return Path(RESULTS_DIR) / default_output_file(config.model.model_name_or_path, config.frames.max_frames, d.max_samples,
                                                   audio=config.frames.audio)


def output_path(config: RunConfig) -> Path:
    """The raw file this process writes: :func:`merged_output_path` plus the shard suffix."""
    return shard_output_file(merged_output_path(config), config.data.num_shards, config.data.shard_id)


def build_messages(question: str, system_prompt: str, placement: str, with_video: bool) -> list[dict]:
    """The chat for one question: a system turn, then a user turn with the video and the question.

    ``placement`` ``system``: the instructions are the system turn (the default); ``empty_system``:
    an empty system turn, no instructions at all (the reference's ``--use_system_message False``);
    ``user_turn``: no system turn, the instructions open the user turn (``--instructions_in_user_turn``,
    for templates without a system role). The options are never shown (SPEC section 3).
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"placement {placement!r}: one of {', '.join(PLACEMENTS)}")
    user: list[dict] = []
    if with_video:
        user.append({"type": "video"})
    text = f"{system_prompt}\n\n{question}" if placement == "user_turn" else question
    user.append({"type": "text", "text": text})
    messages: list[dict] = []
    if placement != "user_turn":
        messages.append({"role": "system", "content": [{"type": "text", "text": system_prompt if placement == "system" else ""}]})
    messages.append({"role": "user", "content": user})
    return messages


# --------------------------------------------------------------------------- checks before work


def preflight(config: RunConfig) -> None:
    """Raise :class:`UsageError` for flag values that cannot work together (the flags' own ranges are
    checked by their argparse types). Runs before any file is read or model loaded."""
    f, g, d = config.frames, config.generation, config.data
    backend = registry.entry(config.model.backend)
    section = registry.backend_settings(config)
    checks = [
        (f.max_frames == 0 or f.max_frames >= 2,
         f"--max_frames must be 0 (text only) or at least 2 (qwen-vl-utils rounds frame counts to even numbers) (got {f.max_frames})"),
        (d.shard_id < d.num_shards, f"--shard_id must be in [0, {d.num_shards}) (got {d.shard_id})"),
        (d.max_samples == -1 or d.max_samples >= 1, f"--max_samples must be -1 (all) or at least 1 (got {d.max_samples})"),
        (d.end_idx is None or d.end_idx > d.start_idx, f"--end_idx {d.end_idx} must be above --start_idx {d.start_idx}"),
        (not (g.do_sample is True and g.temperature == 0), "--do_sample with --temperature 0 cannot sample; use --greedy"),
        (g.top_p is None or g.top_p > 0, f"--top_p must be in (0, 1] (got {g.top_p})"),
        (not (config.prompt.instructions_in_user_turn and config.prompt.use_system_message),
         "--instructions_in_user_turn goes with --use_system_message False (the instructions are then not the system turn)"),
        (not (f.audio and f.text_only), "--audio needs the videos: it cannot go with --max_frames 0 (text only)"),
        (not (backend.local_weights and config.openai.api_model not in (None, config.model.model_name_or_path)),
         f"--api_model {config.openai.api_model}: --backend {config.model.backend} loads --model_name_or_path "
         f"({config.model.model_name_or_path}) on this machine; --api_model names a served model (--backend openai): pass "
         f"--model_name_or_path {config.openai.api_model} instead"),
        (not (f.audio and not backend.audio),
         f"--audio: --backend {config.model.backend} sends the model no soundtrack; run without --audio, or with a backend that "
         f"does ({', '.join(n for n, e in registry.REGISTRY.items() if e.audio)})"),
        (not (f.audio and backend.audio_part and section.video_transport == "video_url" and not section.one_modality_per_message),
         "--audio sends the soundtrack as an input_audio part beside the frames: use --video_transport frames"),
        (f.min_pixels is None or f.max_pixels is None or f.min_pixels <= f.max_pixels,
         f"--min_pixels {f.min_pixels} is above --max_pixels {f.max_pixels}; a frame cannot be both"),
        (f.max_pixels is None or f.max_pixels <= MAX_FRAME_PIXELS,
         f"--max_pixels {f.max_pixels} is above the cap of {MAX_FRAME_PIXELS} pixels per frame"),
        (f.min_pixels is None or f.min_pixels <= MAX_FRAME_PIXELS,
         f"--min_pixels {f.min_pixels} is above the cap of {MAX_FRAME_PIXELS} pixels per frame"),
        (d.data_parallel == 1 or d.num_shards == 1,
         f"--data_parallel {d.data_parallel} shards the run itself: it cannot go with --num_shards {d.num_shards}"),
    ]
    for ok, message in checks:
        if not ok:
            raise UsageError(message)
    problem = placement_flags_problem(config.hf.device, config.hf.device_map, config.hf.max_memory)
    if not problem and backend.transformers_load:  # what is sure without torch, before its 10 s import
        from k9bench.models.accelerator import attention_problem_without_torch, device_problem_without_torch

        problem = (device_problem_without_torch(config.hf.device) or
                   attention_problem_without_torch(config.hf.attn_implementation, config.hf.device, device_map=config.hf.device_map))
    if problem:
        raise UsageError(problem)
    if backend.check:  # the backend's own: a missing key, flags its API cannot take
        refused = registry.load(backend.check)(config)
        if refused:
            raise UsageError(refused)
    if backend.api_key_without_base_url and not section.base_url:  # the OpenAI API itself needs the key: say so now
        from k9bench.serving.openai_api import MissingApiKey, resolve_api_key

        try:
            resolve_api_key(None)
        except MissingApiKey as exc:
            raise UsageError(str(exc)) from None


def check_split(config: RunConfig) -> None:
    """``--split`` other than the default for a source that has no splits (the demo set, one file) is refused:
    it would be ignored silently."""
    from k9bench.data.dataset import DEFAULT_SPLIT, DEMO_NAME

    d = config.data
    if d.split == DEFAULT_SPLIT:
        return
    if d.dataset_name == DEMO_NAME:
        raise UsageError(f"--split {d.split}: the demo set has one split, {DEFAULT_SPLIT!r}")
    if Path(d.dataset_name).expanduser().is_file():
        raise UsageError(f"--split {d.split}: {d.dataset_name} is one file and has no splits (--split applies to Hub ids and folders)")


def videos_present(groups: list[VideoGroup]) -> tuple[int, int]:
    """(questions whose video file is in ``--video_dir``, questions) over ``groups``."""
    have = sum(len(g.questions) for g in groups if g.path.is_file())
    return have, sum(len(g.questions) for g in groups)


def check_videos(config: RunConfig, pending: list[VideoGroup], run: list[VideoGroup] | None = None) -> None:
    """Say how many of the questions to run have their video; raise :class:`UsageError` when none of the whole
    run's videos (``run``, default ``pending``) are there (a wrong ``--video_dir`` must not cost a model load),
    unless ``--auto_download`` will fetch them. The folder is judged by the whole run, not by what is left: a
    resume whose pending questions are only those of a missing video finishes (failed records, missing_video)."""
    d = config.data
    if config.frames.text_only or not pending or d.auto_download:
        return
    from k9bench.models.hub import setting_name

    launcher = setting_name("--video_dir", "VIDEO_DIR") == "VIDEO_DIR"  # the user typed VIDEO_DIR, not these flags
    where = f"VIDEO_DIR={d.video_dir}" if launcher else f"--video_dir {d.video_dir}"
    fix = (f"the download stage fetches them: see {Path(d.video_dir) / 'download_manifest.json'} for why it could not, and rerun"
           if launcher else f"fetch them (download_videos.py --output_dir {d.video_dir}) or pass --auto_download")
    if not Path(d.video_dir).is_dir():
        raise UsageError(f"{where} is not a folder; {fix}")
    have, total = videos_present(pending)
    if have == 0 and run is not None and videos_present(run)[0] > 0:
        log.info("--video_dir %s: none of the %d video(s) left to run is there (e.g. %s); their %d question(s) will be failed "
                 "records, missing_video (the run's other videos are there)", d.video_dir, len(pending), pending[0].path.name, total)
        return
    if have == 0:
        raise UsageError(f"{where} holds none of the {len(pending)} video(s) of the {total} question(s) to run "
                         f"(e.g. {pending[0].path.name}); {fix}")
    log.info("--video_dir %s: %d of %d question(s) to run have their video%s", d.video_dir, have, total,
             "" if have == total else f" ({total - have} will be failed records, missing_video)")


def check_model_path(config: RunConfig) -> str | None:
    """Why the model cannot be loaded, known without loading it (a local path that does not exist), or None.
    (A Hub id that is not cached while the Hub is out of reach is refused by the HF backend before it loads
    anything: :meth:`k9bench.inference.hf.HFBackend.check_source`.)"""
    from k9bench.models.hub import looks_like_local_path

    name = config.model.model_name_or_path
    if registry.entry(config.model.backend).local_weights and looks_like_local_path(name):
        path = Path(name).expanduser()
        if not path.exists():
            return f"--model_name_or_path {name}: no such folder (a local model path; a Hub id looks like org/name)"
        if not path.is_dir():
            return f"--model_name_or_path {name}: not a folder (a local model is a folder with config.json and the weights)"
    folder = Path(name).expanduser()  # a folder that exists is what transformers loads, whatever the name looks like
    if registry.entry(config.model.backend).transformers_load and folder.is_dir() and not (folder / "config.json").is_file():
        return f"--model_name_or_path {name}: the folder has no config.json (a local model is a folder with config.json and the weights)"
    return None


def _context_length(model_config: dict) -> int | None:
    """The longest sequence the model's config allows (its text model's ``max_position_embeddings``)."""
    stack = [model_config]
    while stack:
        node = stack.pop(0)
        value = node.get("max_position_embeddings")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        stack.extend(v for k, v in node.items() if k.endswith("_config") and isinstance(v, dict))
    return None


def check_model_config(config: RunConfig) -> dict | None:
    """Check the settings against the model's ``config.json`` when it is on this machine (a local folder or the
    Hub cache), before any weight loads; raise :class:`UsageError`. Returns the config read (None: not here)."""
    from k9bench.models.hub import read_model_config

    if not registry.entry(config.model.backend).local_weights:
        return None
    name = config.model.model_name_or_path
    model_config = read_model_config(name)
    if model_config is None:
        return None
    context = _context_length(model_config)
    wanted = config.generation.max_new_tokens
    if context is not None and wanted is not None and wanted >= context:
        raise UsageError(f"--max_new_tokens {wanted} is not below the context of {name} ({context} tokens, max_position_embeddings "
                         f"in its config.json); the prompt needs room too")
    model_type = str(model_config.get("model_type") or "")
    if config.frames.audio and model_type and not families.hears_audio(model_type):
        raise UsageError(f"--audio: {name} is a {model_type!r} model (its config.json), which takes no soundtrack "
                         f"({families.audio_labels()} do); run without --audio")
    return model_config


def auto_download(groups: list[VideoGroup], config: RunConfig) -> dict:
    """``--auto_download``: every video of ``groups`` through :func:`k9bench.download.stage.fetch_for_questions`;
    return a summary (recorded in ``run_stats.auto_download``).

    Every video is passed, not only the missing ones: the downloader skips a present, verified file and
    replaces a corrupt one. The demo set's videos are made locally (with soundtracks under ``--audio``),
    never looked for online."""
    from k9bench.download.stage import fetch_for_questions
    from k9bench.download.settings import DownloadConfig
    from k9bench.progress import progress_enabled

    d = config.data
    videos = {g.scene_name: g.video_url for g in groups}
    log.info("--auto_download: checking %d video(s) in %s (missing or corrupt ones are fetched)", len(videos), d.video_dir)
    download_config = DownloadConfig(progress=progress_enabled() is not True, cookies=d.download_cookies,
                                     cookies_from_browser=d.download_cookies_from_browser, workers=d.download_workers)
    report = fetch_for_questions(videos, d.video_dir, download_config, dataset_name=d.dataset_name, soundtrack=config.frames.audio)
    log.info("--auto_download: %s", report.summary_line())
    failed = {r.scene_name: f"{r.error_class}: {r.message}" for r in report.failed}
    for scene, why in failed.items():
        log.warning("--auto_download: %s failed (%s); its questions will be recorded as missing_video", scene, why)
    return {"requested": len(videos), "counts": report.counts, "failed": failed}


def question_too_long(question: "Question") -> str | None:
    """Why a question is not sent to the model (longer than :data:`MAX_QUESTION_CHARS`), or None."""
    n = len(question.question)
    if n > MAX_QUESTION_CHARS:
        return f"the question is {n} characters, above the cap of {MAX_QUESTION_CHARS}; not sent to the model"
    return None


__all__ = [
    "EXIT_BACKEND", "MAX_QUESTION_CHARS", "PLACEMENTS", "RESULTS_DIR", "UsageError", "VideoGroup", "auto_download",
    "build_messages", "check_model_config", "check_model_path", "check_split", "check_videos", "chunks", "default_output_file",
    "group_by_video", "merged_output_path", "output_path", "preflight", "question_too_long", "shard_groups", "shard_output_file",
    "videos_present",
]
