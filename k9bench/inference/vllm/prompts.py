"""vLLM prompt dicts for a chunk of questions, built on the CPU without vLLM (any thread).

One video, one array: the questions of a video in a chunk share one ``(T, H, W, 3)`` uint8 array, a view
of the sampled frames' own tensor (no copy at all), and one ``multi_modal_uuids`` id, the sha256 of those
frames and their metadata, computed once per video. vLLM 0.32 then hashes that id (with the processor
keywords) instead of the array for every question (``ProcessorInputs.get_mm_hashes``), and its processor
cache gives each question of the video the same processed item.

The frame rule is the model family's (:func:`k9bench.video.policy.policy_for`, the HF backend's rule):
``qwen_vl_rules`` frames go with their metadata and ``do_resize=False`` (and the sampled ``fps`` as a keyword to the
Omni processors, which read it there); ``fixed_size`` frames (InternVL)
were sampled at the processor's exact size, go without metadata, ``do_resize=False``; ``processor_resizes``
frames are resized by the processor.

Host memory: the prompts add no frame bytes (views), so a chunk holds the frames of its videos, which the
frame cache holds anyway until the video's last question is answered. :func:`chunk_size` keeps a chunk's
frames under :data:`CHUNK_FRAME_BYTES`; bench/bench_vllm_prompts.py measures it at full scale.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from k9bench.inference.backend import GenerationRequest
    from k9bench.video.policy import FramePolicy
    from k9bench.video.sampling import Frames

CHUNK_PER_SEQ = 4
"""``--batch_size auto``: questions per ``LLM.generate`` call, as a multiple of the engine's ``max_num_seqs``."""
MIN_CHUNK = 64
"""``--batch_size auto`` never goes below this many questions per call (unless the frame bound says fewer)."""
CHUNK_FRAME_BYTES = 1 << 30
"""``--batch_size auto``: most bytes of sampled frames one chunk's videos may hold (1 GiB). The run holds the
chunk answering plus the chunks prepared ahead (``--prefetch_videos``, at least 2): 3 GiB of frames by default."""


def chunk_size(max_num_seqs: int, questions: int, *, videos: int | None = None, frame_bytes: int | None = None) -> tuple[int, str]:
    """Questions per ``LLM.generate`` call and why: ``CHUNK_PER_SEQ`` times the engine's running sequences (at
    least :data:`MIN_CHUNK`), at most the questions left, and at most as many questions as the videos whose frames
    (``frame_bytes`` each, at most) fit in :data:`CHUNK_FRAME_BYTES` ask on average (``questions / videos``)."""
    size = max(MIN_CHUNK, CHUNK_PER_SEQ * max_num_seqs)
    reason = f"vllm: {CHUNK_PER_SEQ} x max_num_seqs {max_num_seqs} (at least {MIN_CHUNK})"
    if videos and frame_bytes:
        fit_videos = max(1, CHUNK_FRAME_BYTES // frame_bytes)
        by_memory = max(1, math.floor(fit_videos * questions / videos))
        if by_memory < size:
            size = by_memory
            reason = (f"vllm: the questions of {fit_videos} video(s) (frames of at most {frame_bytes / 2**20:.1f} MiB each, "
                      f"{CHUNK_FRAME_BYTES / 2**30:.0f} GiB a chunk; {questions / videos:.2f} questions a video)")
    return max(1, min(questions, size)), f"{reason}, at most the {questions} questions"


def frame_bytes_bound(max_frames: int, max_pixels: int | None) -> int | None:
    """Most bytes of one video's sampled uint8 RGB frames (None: no pixel cap to bound it)."""
    return max_frames * max_pixels * 3 if max_frames and max_pixels else None


def video_array(frames: "Frames") -> Any:
    """The frames as vLLM takes a video, ``(T, H, W, 3)`` uint8: a view of ``frames.frames``, never a copy."""
    return frames.frames.permute(0, 2, 3, 1).numpy()


def video_uuid(frames: "Frames", metadata: dict | None) -> str:
    """A stable id of what vLLM is sent for a video: sha256 of its frames' bytes, shape and metadata."""
    digest = hashlib.sha256()
    pixels = frames.frames.contiguous().numpy()  # already contiguous as sampled: no copy
    digest.update(json.dumps({"shape": list(pixels.shape), "metadata": metadata}, sort_keys=True).encode())
    digest.update(memoryview(pixels).cast("B"))
    return "k9bench-video-" + digest.hexdigest()


@dataclass
class Prepared:
    """A chunk built on the CPU: vLLM prompt dicts, the rendered prompt texts, the seeds, and how many distinct
    video arrays (one per video) its prompts hold."""

    prompts: list[dict] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    videos: int = 0


def build_prompts(requests: list["GenerationRequest"], render: Callable[[list[dict]], str], policy: "FramePolicy | None") -> Prepared:
    """The chunk's prompt dicts (see the module doc); ``render`` is the chat template, ``policy`` the family's
    frame rule (None: text only)."""
    prepared = Prepared()
    shared: dict[int, tuple[Any, dict, str]] = {}  # id(Frames) -> the video's array, metadata, uuid
    for request in requests:
        text = render(request.messages)
        prompt: dict[str, Any] = {"prompt": text}
        frames = request.frames
        if frames is not None:
            if policy is None:
                raise ValueError("a request with frames, but no frame policy: the backend was not loaded")
            policy.check_frames(frames)
            video = shared.get(id(frames))
            if video is None:
                metadata = ({**frames.processor_metadata(), "duration": float(frames.duration), "do_sample_frames": False}
                            if policy.video_metadata else None)
                video = shared[id(frames)] = (video_array(frames), metadata, video_uuid(frames, metadata))
            array, metadata, uuid = video
            prompt["multi_modal_data"] = {"video": [(array, metadata) if metadata is not None else array]}
            prompt["multi_modal_uuids"] = {"video": [uuid]}
            kwargs: dict[str, Any] = {"do_sample_frames": False, **({} if policy.resize_in_processor else {"do_resize": False})}
            if policy.fps_keyword:  # the Omni processors place video tokens in time by this keyword, as on the HF path
                kwargs["fps"] = float(frames.sample_fps)
            prompt["mm_processor_kwargs"] = kwargs
        prepared.prompts.append(prompt)
        prepared.texts.append(text)
        prepared.seeds.append(request.seed)
    prepared.videos = len(shared)
    return prepared


__all__ = ["CHUNK_FRAME_BYTES", "CHUNK_PER_SEQ", "MIN_CHUNK", "Prepared", "build_prompts", "chunk_size", "frame_bytes_bound",
           "video_array", "video_uuid"]
