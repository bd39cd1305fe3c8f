"""The ``--backend openai`` flags: one frozen dataclass, a section of :class:`k9bench.inference.settings.RunConfig`
named by the registry's openai row, and ``--video_fps``, which sets shared flags too."""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass

from k9bench.settings import setting
from k9bench.validators import float_in_range, http_url, int_in_range, non_negative_int, positive_float, positive_int
from k9bench.video.audio import API_AUDIO_FORMATS

TRANSPORTS = ("auto", "frames", "video", "video_url")
"""``--video_transport`` choices (:mod:`k9bench.inference.openai_compat.video_transport`); ``auto`` is ``video`` for a vLLM or
SGLang server, ``frames`` otherwise."""

IMAGE_DETAILS = ("auto", "low", "high")
"""``--image_detail`` choices (OpenAI's ``detail`` of an image part)."""

MAX_TOKENS_PARAMS = ("max_tokens", "max_completion_tokens")
"""How the token budget is named in an OpenAI request (newer OpenAI models want the second)."""

DEFAULT_MAX_REQUEST_MB = 20.0
"""``--max_request_mb``: Gemini's inline request limit (20971520 bytes: "Request payload size exceeds the limit"),
the smallest of the known providers'."""

MAX_REQUEST_MB_RANGE = (0.01, 2048.0)
"""The values ``--max_request_mb`` takes."""

VIDEO_FPS_MAX_FRAMES = 1800
"""The frame cap ``--video_fps`` sets: 30 minutes at 1 FPS, i.e. the whole of any K9-Bench video."""

MAX_FRAME_SIDE = 4096
"""Longest side of ``--frame_size`` in pixels."""

_jpeg_quality = int_in_range(1, 100)
"""``--jpeg_quality``: an integer in 1..100."""



def parse_frame_size(text: str) -> str:
    """``"512x512"`` (also ``512X512``, ``512×512``, ``512*512``) -> ``"512x512"``; width first."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX×*]\s*(\d+)\s*", str(text))
    if not match or int(match.group(1)) < 1 or int(match.group(2)) < 1:
        raise argparse.ArgumentTypeError(f"--frame_size {text!r}: expected WIDTHxHEIGHT in pixels, e.g. 512x512")
    if max(int(match.group(1)), int(match.group(2))) > MAX_FRAME_SIDE:
        raise argparse.ArgumentTypeError(f"--frame_size {text!r}: each side at most {MAX_FRAME_SIDE} pixels")
    return f"{int(match.group(1))}x{int(match.group(2))}"


def frame_size_tuple(text: str | None) -> tuple[int, int] | None:
    """``"512x384"`` -> ``(512, 384)`` (width, height); None stays None."""
    if not text:
        return None
    width, height = parse_frame_size(text).split("x")
    return int(width), int(height)


def parse_json_object(text: str) -> dict:
    """``--extra_body`` value: a JSON object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"--extra_body is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--extra_body must be a JSON object, e.g. '{\"top_k\": 20}'")
    return value


@dataclass(frozen=True)
class OpenAISettings:
    """The ``--backend openai`` flags (``--video_fps`` is added by hand: it sets shared flags too, see
    :func:`add_openai_arguments`; ``--api_model`` names the run when ``--model_name_or_path`` is not given,
    :func:`k9bench.inference.settings.resolve`)."""

    api_model: str | None = setting(None, "model name sent to the server (gpt-4o, the served name of a vLLM model...); "
                                    "also names the run (model_name, default output file), like --model_name_or_path "
                                    "(default: --model_name_or_path); with a backend that loads the weights here it must equal "
                                    "--model_name_or_path")
    base_url: str | None = setting(None, "OpenAI-compatible endpoint, e.g. http://localhost:8000/v1 for vllm serve "
                                   "(default: the OpenAI API). The key comes from OPENAI_API_KEY only. With --backend gemini: the Gemini "
                                   "API's endpoint (default: Google's), the key from GEMINI_API_KEY", type=http_url)
    concurrency: int = setting(8, "requests in flight at most (questions of one video are sent next to each other; "
                               "default: %(default)s)", type=positive_int)
    max_retries: int = setting(5, "retries per request on 429/5xx/timeouts/broken replies (other 4xx are not retried; "
                               "default: %(default)s)", type=non_negative_int)
    timeout: float = setting(180.0, "seconds per HTTP attempt (default: %(default)s)", type=positive_float)
    retry_backoff: float = setting(1.0, "seconds before the first retry, doubled each time with jitter; a longer Retry-After wins "
                                   "(default: %(default)s)", type=positive_float)
    video_transport: str = setting("auto", "auto: video for a vLLM or SGLang server, frames otherwise; "
                                   "frames: the sampled frames as base64 JPEG image parts (any vision API, GPT-4o); "
                                   "video: the sampled frames as one mp4 at their true times (vLLM, SGLang); "
                                   "video_url: the video file, sampled by the server (default: %(default)s)",
                                   choices=TRANSPORTS, result=True)
    video_crf: int | None = setting(None, "with --video_transport video: encode the mp4 lossy, libx264 yuv420p at this CRF "
                                    "(0-51; smaller requests, but the server sees other pixels than in-process vLLM); "
                                    "default: lossless (libx264rgb -qp 0)", type=int_in_range(0, 51), result=True)
    frame_size: str | None = setting(None, "resize every frame to exactly this size before sending (512x512: the paper's GPT-4o protocol)",
                                     type=parse_frame_size, metavar="WxH", result=True)
    video_fps: float | None = setting(None, f"whole-video sampling at this many frames per second: sets --fps and raises --max_frames "
                                      f"to {VIDEO_FPS_MAX_FRAMES} (pass --max_frames after it to cap differently)", cli=False)
    jpeg_quality: int = setting(90, "JPEG quality of the frames (default: %(default)s)", type=_jpeg_quality, result=True)
    image_detail: str | None = setting(None, "OpenAI's image detail for each frame (default: not sent)", choices=IMAGE_DETAILS, result=True)
    video_url_base: str | None = setting(None, "with --video_transport video_url: URL of a folder holding {scene}.mp4 "
                                         "(file:///abs/dir for vllm serve --allowed-local-media-path, or http://...); "
                                         "default: the file itself as a base64 data URL")
    max_tokens_param: str = setting("max_tokens", "request field for --max_new_tokens (newer OpenAI models want "
                                    "max_completion_tokens; default: %(default)s)",
                                    choices=MAX_TOKENS_PARAMS)
    extra_body: dict | None = setting(None, "JSON object merged into every request body, e.g. "
                                      "'{\"chat_template_kwargs\": {\"enable_thinking\": false}}' for vLLM",
                                      type=parse_json_object, result=True)
    max_request_mb: float = setting(DEFAULT_MAX_REQUEST_MB, f"largest request body to send, in MiB, {MAX_REQUEST_MB_RANGE[0]:g}.."
                                    f"{MAX_REQUEST_MB_RANGE[1]:g}: a question whose request (its frames, video or soundtrack) is larger is "
                                    "a failed record request_too_large, never sent (default: %(default)s, Gemini's inline limit; "
                                    "OpenAI's is larger)", type=float_in_range(*MAX_REQUEST_MB_RANGE))
    stream: bool = setting(False, "ask for streamed replies (stream: true, the usage in the last chunk) and assemble them, with the "
                           "same timeouts, size caps and retries: for APIs that answer only streamed, such as Qwen-Omni's",
                           action="store_true")
    one_modality_per_message: bool = setting(
        False, "the API takes one non-text modality per message (Qwen-Omni's): frames or one video, never an input_audio part "
        "beside them; with --audio send the video file itself, whose soundtrack the model hears (--video_transport video_url)",
        action="store_true")
    audio_format: str = setting("wav", "with --audio: encoding of the soundtrack's input_audio part (default: %(default)s)",
                                choices=API_AUDIO_FORMATS, result=True)
    no_seed_param: bool = setting(False, "do not send --seed as the request's seed (for APIs that reject it)", action="store_true")


class VideoFpsAction(argparse.Action):
    """``--video_fps F`` sets ``--fps F`` and the frame cap to :data:`VIDEO_FPS_MAX_FRAMES` (whole video)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        namespace.fps = values
        namespace.max_frames = VIDEO_FPS_MAX_FRAMES


def add_openai_arguments(group: argparse._ArgumentGroup) -> None:
    """The ``--backend openai`` flags: generated from :class:`OpenAISettings`, plus ``--video_fps``, which sets
    shared flags as well."""
    from k9bench.settings import add_arguments, default_of, field_docs

    docs = field_docs(OpenAISettings)
    add_arguments(group, OpenAISettings, exclude=("video_fps",))
    group.add_argument("--video_fps", type=positive_float, default=default_of(OpenAISettings, "video_fps"), action=VideoFpsAction,
                       help=docs["video_fps"])


__all__ = [
    "IMAGE_DETAILS", "MAX_FRAME_SIDE", "MAX_TOKENS_PARAMS", "OpenAISettings", "TRANSPORTS", "VIDEO_FPS_MAX_FRAMES",
    "add_openai_arguments", "frame_size_tuple", "parse_frame_size", "parse_json_object",
]
