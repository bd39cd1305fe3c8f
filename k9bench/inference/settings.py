"""The typed settings of one inference run (``eval_video_llm.py``): one frozen dataclass per
concern, composed into :class:`RunConfig`.

Each field declares its flag, default and help in one place (:func:`k9bench.settings.setting`);
``eval_video_llm.py`` generates its flags from these classes and builds the config once in
``main()``. Frame defaults come from :mod:`k9bench.video`'s constants, the dataset defaults from
:mod:`k9bench.data.dataset`'s, so each value exists once. The engines (runner, backends) take the
config; values derived from several flags (``max_new_tokens`` from ``--thinking_mode``,
``max_pixels`` raised for ``--frame_size``) are filled in by :func:`resolve` with
:func:`dataclasses.replace`, never written into an object after it is built.

The raw file's ``inference.settings`` block is :func:`k9bench.settings.to_dict` of the config as
run (secrets masked); :func:`settings_docs` documents its keys.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from typing import Any

from k9bench.models.accelerator import DTYPE_CHOICES
from k9bench.data.dataset import DEFAULT_DATASET, DEFAULT_SPLIT
from k9bench.data.published import DEFAULT_THINKING_LIMIT, THINKING_LIMITS
from k9bench.download.settings import DownloadConfig
from k9bench.inference import registry
from k9bench.inference.gemini.settings import GeminiSettings
from k9bench.inference.hf.settings import HFSettings
from k9bench.inference.openai_compat.settings import VIDEO_FPS_MAX_FRAMES, OpenAISettings, frame_size_tuple
from k9bench.inference.vllm.settings import VLLMSettings
from k9bench.settings import default_of, setting
from k9bench.validators import all_or_positive_int, int_in_range, non_negative_float, non_negative_int, positive_float, positive_int, str2bool, unit_interval
from k9bench.video.sampling import DECODERS, DEFAULT_DECODER, DEFAULT_FPS, DEFAULT_MAX_FRAMES, DEFAULT_MAX_PIXELS

DEFAULT_MODEL = "Qwen/Qwen3-VL-4B-Instruct"
"""The reference's model."""

DEFAULT_MAX_NEW_TOKENS = 2048
DEFAULT_MAX_NEW_TOKENS_THINKING = THINKING_LIMITS[DEFAULT_THINKING_LIMIT]
"""``--thinking_mode``'s default limit: the reference scripts' 3,072 (``--thinking_limit paper``: the paper's 2,048)."""

DTYPES = DTYPE_CHOICES
"""Accepted ``--torch_dtype`` values (:data:`k9bench.models.accelerator.DTYPE_CHOICES`)."""

WEIGHTS_FIELDS = ("bf16", "torch_dtype", "trust_remote_code")
"""The fields of :class:`ModelSettings` that only a backend loading the weights here reads
(:attr:`k9bench.inference.registry.BackendEntry.local_weights`)."""

MAX_NEW_TOKENS_CAP = 131072
"""Hard upper bound of ``--max_new_tokens`` (the model's own context, read from its config, is checked too)."""

MAX_FRAME_PIXELS = 4096 * 4096
"""Most pixels per frame for ``--max_pixels``/``--min_pixels`` (16.8 M: far above any model's frame size)."""

MAX_SEED = 2**32 - 1
"""Seeds are 0..2**32-1 (numpy's and CUDA's range)."""

MAX_DATA_PARALLEL = 64
"""Most worker processes of ``--data_parallel``."""


def batch_size_value(text: str) -> int | str:
    """``--batch_size``: a positive integer, or ``auto`` (:func:`k9bench.inference.batching.parse_batch_size`)."""
    from k9bench.inference.batching import parse_batch_size

    try:
        return parse_batch_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# --------------------------------------------------------------------------- the sections


@dataclass(frozen=True)
class ModelSettings:
    """Which model answers, through which backend (shared by every backend), and how every backend that loads the
    weights here loads them (:data:`WEIGHTS_FIELDS`)."""

    backend: str = setting(registry.DEFAULT_BACKEND, f"model backend: {registry.choices_help()} (default: %(default)s)",
                           choices=registry.BACKEND_NAMES, result=True)
    model_name_or_path: str = setting(DEFAULT_MODEL, "Hub model id or local folder (default: %(default)s)", result=True)
    bf16: bool | None = setting(None, "load bf16 weights (default: bf16 on GPU, float32 on CPU); '--bf16 False' forces float32",
                                nargs="?", const=True, type=str2bool)
    torch_dtype: str | None = setting(None, "weight dtype, any floating torch dtype name as the reference takes it (bfloat16, "
                                      "float16 or half, float32 or float, float64 or double, float8_*...); overrides --bf16 "
                                      "(what was asked and the dtype used are recorded)", choices=DTYPES, metavar="DTYPE")
    trust_remote_code: bool = setting(False, "allow model code from the model repository", action="store_true")


@dataclass(frozen=True)
class PromptSettings:
    """What the model is told and where the instructions stand."""

    use_system_message: bool = setting(True, "True (default): the instructions are the system turn; False: the reference's "
                                       "empty system turn, the model gets no instructions at all", result=True)
    instructions_in_user_turn: bool = setting(False, "with --use_system_message False: send no system turn and open the user "
                                              "turn with the instructions (for chat templates without a system role; not the "
                                              "reference's setup)", action="store_true", result=True)
    system_prompt_file: str | None = setting(None, "use this file's text verbatim as the system prompt")

    @property
    def placement(self) -> str:
        """``system`` (instructions in the system turn), ``empty_system`` (the reference's
        ``--use_system_message False``: an empty system turn) or ``user_turn``."""
        if self.use_system_message:
            return "system"
        return "user_turn" if self.instructions_in_user_turn else "empty_system"


@dataclass(frozen=True)
class GenerationSettings:
    """How the answer is generated."""

    thinking_mode: bool = setting(False, f"Thinking model: default --max_new_tokens {THINKING_LIMITS['reference']:,} (the reference "
                                  f"scripts'), or {THINKING_LIMITS['paper']:,} (the paper's text) with --thinking_limit paper",
                                  action="store_true")
    thinking_limit: str = setting(DEFAULT_THINKING_LIMIT, "with --thinking_mode: which documented limit is the default --max_new_tokens: "
                                  + ", ".join(f"{k} ({v:,})" for k, v in THINKING_LIMITS.items())
                                  + "; the one a run used is recorded (an explicit --max_new_tokens is named by its value) "
                                  "(default: %(default)s)", choices=tuple(THINKING_LIMITS))
    max_new_tokens: int | None = setting(None, f"default {DEFAULT_MAX_NEW_TOKENS}, or the --thinking_limit's with --thinking_mode; "
                                         f"at most {MAX_NEW_TOKENS_CAP} and below the model's context (read from its config)",
                                         type=int_in_range(1, MAX_NEW_TOKENS_CAP), result=True)
    do_sample: bool | None = setting(None, "sample (True) or decode greedily (False); None: the model's generation config",
                                     cli=False, result=True)
    temperature: float | None = setting(None, "override the model's temperature", type=non_negative_float, result=True)
    top_p: float | None = setting(None, "override the model's top_p", type=unit_interval, result=True)
    top_k: int | None = setting(None, "override the model's top_k", type=non_negative_int, result=True)
    seed: int = setting(0, f"torch seed set before each batch, 0..{MAX_SEED} (default: %(default)s)",
                        type=int_in_range(0, MAX_SEED), result=True)
    batch_size: int | str = setting("auto", "questions per batch; a batch may span videos (grouped by video; 1 is the "
                                    "reference's exact computation), or auto: 1 on CPU, on a GPU the largest "
                                    "batch that fits (halved on out-of-memory; what was used is recorded) (default: %(default)s)",
                                    type=batch_size_value, metavar="N|auto")


@dataclass(frozen=True)
class FrameSettings:
    """How frames are sampled from each video (defaults: :mod:`k9bench.video`'s constants)."""

    max_frames: int = setting(DEFAULT_MAX_FRAMES, "frame budget per video; 0 = text only, no video (default: %(default)s)",
                              type=non_negative_int, result=True)
    fps: float = setting(DEFAULT_FPS, "frames per second sampled before the frame budget applies (default: %(default)s)",
                         type=positive_float, result=True)
    max_pixels: int | None = setting(DEFAULT_MAX_PIXELS, f"max pixels per resized frame, at most {MAX_FRAME_PIXELS} "
                                     "(default: %(default)s = 360*420)", type=int_in_range(1, MAX_FRAME_PIXELS), result=True)
    min_pixels: int | None = setting(None, "min pixels per resized frame, at most --max_pixels (default: qwen-vl-utils' video default)",
                                     type=int_in_range(1, MAX_FRAME_PIXELS), result=True)
    video_decoder: str = setting(DEFAULT_DECODER, "video decoder, never swapped silently (default: %(default)s)",
                                 choices=DECODERS, result=True)
    frame_cache_dir: str | None = setting(None, "store sampled frames here and reuse them across runs")
    prefetch_videos: int = setting(2, "decode this many upcoming videos in the background (default: %(default)s)", type=non_negative_int)
    audio: bool = setting(False, "also give the model each video's soundtrack (Qwen2.5-Omni/Qwen3-Omni thinkers locally, "
                          "input_audio parts by API); a video without one is a failed record (no_audio_stream)",
                          action="store_true", result=True)

    @property
    def text_only(self) -> bool:
        """No video at all (``--max_frames 0``)."""
        return self.max_frames == 0


@dataclass(frozen=True)
class DataSettings:
    """Which questions, videos and shard (``--dataset_name``/``--split``/``--drop_invalid_rows`` are
    the flags every script shares, from :class:`k9bench.data.dataset.DatasetSettings`)."""

    dataset_name: str = setting(DEFAULT_DATASET, "Hub dataset id, a local file or folder, or 'demo'", cli=False)
    split: str = setting(DEFAULT_SPLIT, "dataset split", cli=False)
    drop_invalid_rows: bool = setting(False, "drop rows that fail validation instead of stopping", cli=False)
    video_dir: str = setting("./k9bench_videos", "folder of {scene_name}.mp4 files (default: %(default)s)")
    auto_download: bool = setting(False, "fetch missing videos first (k9bench.download.stage)", action="store_true")
    download_cookies: str | None = setting(None, "with --auto_download: cookies.txt for yt-dlp (YouTube's bot checks; "
                                           "see download_videos.py --cookies)", metavar="FILE")
    download_cookies_from_browser: str | None = setting(None, "with --auto_download: read yt-dlp cookies from this browser "
                                                        "(see download_videos.py --cookies_from_browser)", metavar="BROWSER")
    download_workers: int = setting(default_of(DownloadConfig, "workers"), "with --auto_download: parallel downloads (default: %(default)s)", type=positive_int)
    start_idx: int = setting(0, "first question position (0-based, dataset order; default: 0)", type=non_negative_int)
    end_idx: int | None = setting(None, "stop before this position (default: the end)", type=non_negative_int)
    max_samples: int = setting(-1, "at most this many questions after the range (default: -1 = all; 0 is refused)", type=all_or_positive_int)
    subset: str | None = setting(None, "run only these questions: a subset file (python -m k9bench.data.subset, e.g. the paper's "
                                 "videos under 150 s), a JSON file listing idx, or a run's raw/sim/eval file; --start_idx/--end_idx/"
                                 "--max_samples then count among them. Its sha256 is in the run's fingerprint", metavar="FILE")
    num_shards: int = setting(1, "split the videos into this many shards, e.g. for a SLURM array (default: 1)", type=positive_int)
    shard_id: int = setting(0, "which shard this process runs (0-based; default: 0)", type=non_negative_int)
    data_parallel: int = setting(1, f"run N worker processes at once, one per GPU (CUDA_VISIBLE_DEVICES=i; on a CPU N processes), "
                                 f"each on one shard, then merge them into the output file; at most {MAX_DATA_PARALLEL} (default: 1)",
                                 type=int_in_range(1, MAX_DATA_PARALLEL), metavar="N")


@dataclass(frozen=True)
class OutputSettings:
    """Where the raw JSON goes and how a rerun treats it."""

    output_file: str | None = setting(None, "raw JSON path (default: eval_results/raw_<model>_mf<frames>_n<samples>.json; "
                                      ".shard<i>of<n> is added when sharded)")
    no_retry_failed: bool = setting(False, "on resume, keep failed records instead of retrying them", action="store_true")


SHARED_SECTIONS: dict[str, type] = {
    "prompt": PromptSettings,
    "generation": GenerationSettings,
    "frames": FrameSettings,
    "data": DataSettings,
    "output": OutputSettings,
}
"""The sections of :class:`RunConfig` after the backends' own -> their settings classes: every backend reads them, and
``model`` (the first section); each backend's own section comes from its registry row (:func:`sections`)."""


def sections() -> dict[str, type]:
    """Section name of :class:`RunConfig` -> its settings class, in the config's order: ``model``, then each registered
    backend's section (its :class:`~k9bench.inference.registry.BackendEntry`'s ``settings_section`` and ``settings``,
    registry order), then the shared rest."""
    backends = {e.settings_section: registry.load(e.settings) for e in registry.REGISTRY.values()}
    return {"model": ModelSettings, **backends, **SHARED_SECTIONS}


@dataclass(frozen=True)
class RunConfig:
    """Every setting of one inference run, built once in ``eval_video_llm.main``."""

    model: ModelSettings = dataclasses.field(default_factory=ModelSettings)
    """Backend and model."""
    hf: HFSettings = dataclasses.field(default_factory=HFSettings)
    """The transformers backend's flags (each registered backend has its field, named by its row's ``settings_section``)."""
    openai: OpenAISettings = dataclasses.field(default_factory=OpenAISettings)
    """The OpenAI-compatible backend's flags."""
    vllm: VLLMSettings = dataclasses.field(default_factory=VLLMSettings)
    """The in-process vLLM backend's flags."""
    gemini: GeminiSettings = dataclasses.field(default_factory=GeminiSettings)
    """The Gemini backend's flags (:mod:`k9bench.inference.gemini.settings`)."""
    prompt: PromptSettings = dataclasses.field(default_factory=PromptSettings)
    """System prompt and its placement."""
    generation: GenerationSettings = dataclasses.field(default_factory=GenerationSettings)
    """Generation settings."""
    frames: FrameSettings = dataclasses.field(default_factory=FrameSettings)
    """Frame sampling."""
    data: DataSettings = dataclasses.field(default_factory=DataSettings)
    """Questions, videos, shard."""
    output: OutputSettings = dataclasses.field(default_factory=OutputSettings)
    """Output file and resume policy."""
    adjustments: dict = dataclasses.field(default_factory=dict)
    """Settings :func:`resolve` changed from what was given: name -> ``{"from", "to", "why"}`` (recorded)."""

    def flat(self) -> dict[str, Any]:
        """Every field by flag name, over all sections (the shape ``provenance.args`` always had)."""
        return {f.name: getattr(getattr(self, section), f.name) for section in sections() for f in dataclasses.fields(getattr(self, section))}


def config_from_namespace(namespace: argparse.Namespace) -> RunConfig:
    """The run's config from ``eval_video_llm.py``'s parsed flags (called once, in ``main``): one section per
    :func:`sections` entry, so a registered backend's section is built from its row."""
    from k9bench.settings import from_namespace

    return RunConfig(**{name: from_namespace(cls, namespace) for name, cls in sections().items()})


def resolve(config: RunConfig) -> RunConfig:
    """The config with the values that depend on several flags filled in (what was adjusted is listed
    in its ``adjustments``).

    - ``model_name_or_path``: ``--api_model`` for a backend that loads no weights here, when ``--model_name_or_path``
      was left at its default (the served model names the run);
    - ``max_new_tokens``: :data:`DEFAULT_MAX_NEW_TOKENS`, or ``--thinking_limit``'s with ``--thinking_mode``; with
      ``--thinking_mode`` and an explicit ``--max_new_tokens``, ``thinking_limit`` becomes the limit of that value
      (``reference``, ``paper``, else ``own``), so that the recorded limit is the one used;
    - with ``--frame_size WxH`` for a backend that resizes to it (:attr:`k9bench.inference.registry.BackendEntry.exact_frame_size`)
      and the default ``--max_pixels``: the sampler may take up to ``2*W*H`` pixels, so that frames are scaled down
      to ``WxH``, never up;
    - for a backend whose API samples the video file itself (:attr:`~k9bench.inference.registry.BackendEntry.samples_video_itself`):
      ``max_frames`` is the whole video (:data:`VIDEO_FPS_MAX_FRAMES`), what the model sees.
    """
    adjustments: dict[str, dict] = {}
    model = config.model
    if config.openai.api_model and not registry.entry(model.backend).local_weights and model.model_name_or_path == DEFAULT_MODEL:
        model = dataclasses.replace(model, model_name_or_path=config.openai.api_model)  # --api_model names the run
    gen = config.generation
    if gen.max_new_tokens is None:
        gen = dataclasses.replace(gen, max_new_tokens=THINKING_LIMITS[gen.thinking_limit] if gen.thinking_mode else DEFAULT_MAX_NEW_TOKENS)
    elif gen.thinking_mode and gen.max_new_tokens != THINKING_LIMITS.get(gen.thinking_limit):
        used = next((name for name, value in THINKING_LIMITS.items() if value == gen.max_new_tokens), "own")
        adjustments["thinking_limit"] = {"from": gen.thinking_limit, "to": used,
                                         "why": f"--max_new_tokens {gen.max_new_tokens} is the limit used"}
        gen = dataclasses.replace(gen, thinking_limit=used)
    frames = config.frames
    exact = registry.backend_settings(config).frame_size if registry.entry(config.model.backend).exact_frame_size else None
    size = frame_size_tuple(exact)
    if size and not frames.text_only:
        needed = 2 * size[0] * size[1]
        if frames.max_pixels == DEFAULT_MAX_PIXELS and frames.max_pixels < needed:
            adjustments["max_pixels"] = {"from": frames.max_pixels, "to": needed,
                                         "why": f"--frame_size {exact}: sample at up to 2*W*H pixels, "
                                                f"then resize down to exactly {exact}"}
            frames = dataclasses.replace(frames, max_pixels=needed)
    if registry.entry(model.backend).samples_video_itself and not frames.text_only and frames.max_frames < VIDEO_FPS_MAX_FRAMES:
        adjustments["max_frames"] = {"from": frames.max_frames, "to": VIDEO_FPS_MAX_FRAMES,
                                     "why": f"--backend {model.backend}: the API samples the whole video at --fps {frames.fps:g}"}
        frames = dataclasses.replace(frames, max_frames=VIDEO_FPS_MAX_FRAMES)
    return dataclasses.replace(config, model=model, generation=gen, frames=frames, adjustments={**config.adjustments, **adjustments})


def add_backend_arguments(group: argparse._ArgumentGroup, entry: registry.BackendEntry) -> None:
    """A registered backend's flags into ``group``: its row's ``add_flags`` function, or the plain
    :func:`k9bench.settings.add_arguments` of its settings class."""
    from k9bench.settings import add_arguments

    if entry.add_flags:
        registry.load(entry.add_flags)(group)
    else:
        add_arguments(group, registry.load(entry.settings))


def inapplicable_flags(config: RunConfig) -> str | None:
    """One line naming the flags given (different from their defaults) that the chosen backend does not read, or None:
    another registered backend's own section (those its own section also has excepted), and the :data:`WEIGHTS_FIELDS`
    for a backend that loads no weights here. The one rule, read from the registry's rows, for every backend."""
    from k9bench.settings import flags_given

    chosen = registry.entry(config.model.backend)
    own = {f.name for f in dataclasses.fields(registry.load(chosen.settings))} | set(chosen.also_reads)
    ignored: dict[str, list[str]] = {}
    for name, entry in registry.REGISTRY.items():
        if entry.settings_section != chosen.settings_section:
            for flag in flags_given(registry.load(entry.settings), getattr(config, entry.settings_section)):
                if flag.lstrip("-") not in own:
                    ignored.setdefault(f"--backend {name}", []).append(flag)
    if not chosen.local_weights:
        weights = [f for f in flags_given(ModelSettings, config.model) if f.lstrip("-") in WEIGHTS_FIELDS]
        if weights:
            ignored["a backend that loads the weights here"] = weights
    if not ignored:
        return None
    parts = "; ".join(f"{', '.join(flags)} (for {owner})" for owner, flags in ignored.items())
    return f"{parts}: not read by --backend {config.model.backend}, ignored"


def settings_docs() -> dict[str, dict[str, str]]:
    """Section -> field -> help: the documentation of the raw file's ``inference.settings`` block."""
    from k9bench.settings import field_docs

    return {name: field_docs(cls) for name, cls in sections().items()}


def main(argv: list[str] | None = None) -> int:
    """Print every setting of the raw file's ``inference`` block with its help, section by section."""
    import sys

    del argv
    for section, docs in settings_docs().items():
        sys.stdout.write(f"{section}:\n")
        for name, text in docs.items():
            sys.stdout.write(f"  {name}: {text}\n")
    return 0


__all__ = [
    "DEFAULT_MAX_NEW_TOKENS", "DEFAULT_MAX_NEW_TOKENS_THINKING", "DEFAULT_MODEL", "DTYPES", "DataSettings", "FrameSettings",
    "GenerationSettings", "ModelSettings", "OutputSettings", "PromptSettings", "RunConfig", "SHARED_SECTIONS",
    "WEIGHTS_FIELDS", "add_backend_arguments", "config_from_namespace", "inapplicable_flags", "resolve", "sections", "settings_docs",
]


if __name__ == "__main__":
    raise SystemExit(main())
