"""The K9-Bench paper's published numbers (SPEC section 8), as data.

Used by the report (``evaluate_results.py --mode report --published ...``) to show
the paper's figures beside a run. Accuracies are percentages; judge scores are the
paper's per-axis means scaled to 0-100.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from k9bench import CATEGORIES

RANDOM_GUESS = 20.0
"""Accuracy (%) of guessing one of five options at random."""


@dataclass(frozen=True)
class PublishedAccuracy:
    """One row of the paper's Table 1 (MCQ accuracy, %)."""

    model: str
    """Model name as the paper prints it."""
    setting: str
    """Frame setting as the paper notes it (``32 frames`` unless noted)."""
    average: float
    """Overall accuracy (%)."""
    categories: dict = field(default_factory=dict)
    """Released category name -> accuracy (%)."""
    frames: int | None = 32
    """Frame budget when the row is frame-limited; None for 1 FPS runs."""


def _row(model: str, setting: str, frames: int | None, avg: float, *per_category: float) -> PublishedAccuracy:
    return PublishedAccuracy(model=model, setting=setting, average=avg, categories=dict(zip(CATEGORIES, per_category)), frames=frames)


PUBLISHED_ACCURACY: tuple[PublishedAccuracy, ...] = (
    # model, setting, frames, avg, posture, action seq., context, cause-effect, interaction
    _row("Gemini-2.5 Pro", "1 FPS", None, 40.1, 37.7, 36.0, 44.0, 44.7, 42.3),
    _row("Qwen3-VL-235B-A22B", "1 FPS", None, 36.5, 34.2, 33.5, 38.4, 39.9, 39.4),
    _row("GPT-4o", "32 frames, 512x512", 32, 30.8, 29.6, 26.3, 35.0, 33.9, 33.9),
    _row("InternVL-3.5-14B", "32 frames", 32, 33.0, 31.5, 30.3, 33.7, 35.9, 36.1),
    _row("InternVL-3.5-8B", "32 frames", 32, 32.2, 29.0, 27.9, 34.0, 36.0, 37.5),
    _row("Qwen3-VL-32B", "32 frames", 32, 31.4, 28.2, 29.3, 35.4, 31.1, 35.0),
    _row("Qwen3-VL-8B", "32 frames", 32, 28.8, 27.8, 26.5, 32.1, 27.6, 31.9),
    _row("Qwen3-VL-4B", "32 frames", 32, 27.6, 27.6, 24.1, 30.8, 28.2, 30.9),
    _row("Qwen3-VL-32B-Thinking", "32 frames", 32, 30.7, 27.8, 28.8, 33.7, 32.8, 32.1),
    _row("Qwen3-VL-8B-Thinking", "32 frames", 32, 25.3, 24.0, 21.8, 29.7, 24.9, 29.3),
    _row("Qwen3-VL-4B-Thinking", "32 frames", 32, 22.4, 21.2, 18.0, 28.0, 23.1, 26.2),
)
"""The paper's Table 1, in its row order."""

JUDGE_AXES = ("Logical", "Factual", "Concise", "Accuracy", "Overall")
"""Column names of the paper's Table 3, in its order."""

AXIS_KEYS = {"Logical": "Logic", "Factual": "Factuality", "Concise": "Conciseness", "Accuracy": "Accuracy", "Overall": "Overall"}
"""Table 3 column -> the judge's score key (SPEC section 2)."""


@dataclass(frozen=True)
class PublishedJudge:
    """One row of the paper's Table 3 (judge scores, 0-100)."""

    model: str
    """Model name as the paper prints it."""
    scores: dict
    """Table 3 column (see :data:`JUDGE_AXES`) -> score (0-100)."""


PUBLISHED_JUDGE: tuple[PublishedJudge, ...] = (
    PublishedJudge("Gemini-2.5 Pro", dict(zip(JUDGE_AXES, (75.9, 68.33, 78.92, 63.18, 69.15)))),
    PublishedJudge("GPT-4o", dict(zip(JUDGE_AXES, (65.96, 61.90, 81.34, 52.81, 60.99)))),
    PublishedJudge("Qwen3-VL-8B", dict(zip(JUDGE_AXES, (57.50, 52.86, 81.56, 44.42, 52.64)))),
)
"""The paper's Table 3."""

FRAME_ABLATION: dict[str, dict[int, float]] = {
    "Qwen3-VL-8B": {32: 28.8, 128: 29.9},
    "Qwen3-VL-32B": {32: 31.4, 128: 31.9},
}
"""Overall accuracy (%) by frame budget, from the paper's frame ablation (only the figures SPEC gives)."""


@dataclass(frozen=True)
class PaperSetup:
    """The setup behind the paper's Table 1 (SPEC sections 3, 4 and 8): a run that differs in any
    of these is not comparable to the published rows."""

    embedding_model: str = "Qwen/Qwen3-Embedding-8B"
    """Similarity model of the fine rule."""
    threshold: float = 0.5
    """Similarity the ground truth must exceed."""
    max_frames: int = 32
    """Frame budget per video."""
    fps: float = 1.0
    """Frames per second sampled before the budget applies."""
    max_pixels: int = 360 * 420
    """Pixels per resized frame."""
    questions: int = 4744
    """Questions of the whole benchmark."""
    use_system_message: bool = True
    """The instructions are sent as the system turn."""
    prompt_placement: str = "system"
    """Where the instructions stand (``system``; see :attr:`k9bench.report.RunSettings.prompt_placement`)."""
    audio: bool = False
    """Table 1 runs see the videos only (the paper's audio+video runs are a separate study)."""
    short_video_seconds: float = 150.0
    """The short-video subset: videos shorter than this."""
    short_video_questions: int = 2693
    """Questions of the short-video subset."""


PAPER_SETUP = PaperSetup()
"""The paper's Table 1 setup."""

REFERENCE_SYSTEM_PROMPT_SHA256 = "392d2ea2400ae21fa6b1011f2f3bde6d8521e6edd3dc56103bd81d0d7e49155e"
"""SHA-256 (UTF-8) of the reference scripts' inference system prompt: 490 characters, no trailing
newline. Normalisation: one trailing newline of the text compared is ignored (a prompt file that ends
in a newline matches), nothing else."""

REFERENCE_JUDGE_PROMPT_SHA256 = "7a769edca037e5dff97c586648000366919f2b36b367f5e7d874d1934029bd7e"
"""SHA-256 (UTF-8) of the reference scripts' judge prompt in our template form, filled with the literal
strings ``{question}``, ``{correct_answer}`` and ``{model_output}`` (that is,
``template.format(question="{question}", correct_answer="{correct_answer}", model_output="{model_output}")``):
1,928 characters ending in one newline. No other normalisation."""

REFERENCE_PROMPT_SHA256: frozenset = frozenset({REFERENCE_SYSTEM_PROMPT_SHA256, REFERENCE_JUDGE_PROMPT_SHA256})
"""Both hashes. Our built-in prompts are our own wording (never the reference's); a prompt given as a
file is the reference's only when :func:`is_reference_prompt` says so (``python -m k9bench.prompts
from-reference`` writes such files from a copy of the reference script), otherwise it is unconfirmed."""

CONFIRMED_PROMPTS = "reference prompts (confirmed)"
"""How a run whose prompts are the reference's is described in its record and report."""

JUDGE_FIELDS = ("question", "correct_answer", "model_output")
"""The judge template's placeholders, in the order the prompt gives them."""


def filled_judge_template(template: str) -> str | None:
    """``template`` filled with its own placeholders' names (the form :data:`REFERENCE_JUDGE_PROMPT_SHA256`
    hashes); None when it is not a template of exactly those fields (unknown or positional fields,
    conversions, format specs, bad braces)."""
    import string

    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError:
        return None
    for _literal, name, spec, conversion in parsed:
        if name is not None and (name not in JUDGE_FIELDS or spec or conversion):
            return None
    return template.format(**{name: "{" + name + "}" for name in JUDGE_FIELDS})


def reference_digest(kind: str, text: str) -> str | None:
    """The SHA-256 of ``text`` as the reference hash of prompt ``kind`` (``system_prompt`` or
    ``judge_prompt``) is taken: one trailing newline dropped for the system prompt; the judge
    template filled with its placeholders' names (None when it is no such template)."""
    import hashlib

    if kind == "system_prompt":
        body = text[:-1] if text.endswith("\n") else text
    elif kind == "judge_prompt":
        body = filled_judge_template(text)
        if body is None:
            return None
    else:
        raise KeyError(f"unknown prompt kind {kind!r}")
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def is_reference_prompt(kind: str, text: str | None) -> bool:
    """True when prompt ``text`` of ``kind`` (``system_prompt``, ``judge_prompt``) is the reference's,
    by :data:`REFERENCE_SYSTEM_PROMPT_SHA256` / :data:`REFERENCE_JUDGE_PROMPT_SHA256` (read when
    called) and the normalisation of :func:`reference_digest`."""
    want = {"system_prompt": REFERENCE_SYSTEM_PROMPT_SHA256, "judge_prompt": REFERENCE_JUDGE_PROMPT_SHA256}.get(kind)
    return bool(want) and text is not None and reference_digest(kind, text) == want


def reference_prompts_confirmed(system_prompt: str | None = None, judge_prompt: str | None = None) -> bool:
    """True when every prompt text given is the reference's (at least one must be given): the run is
    described as :data:`CONFIRMED_PROMPTS`."""
    given = [(k, t) for k, t in (("system_prompt", system_prompt), ("judge_prompt", judge_prompt)) if t is not None]
    return bool(given) and all(is_reference_prompt(k, t) for k, t in given)


def normalize_model_name(name: str) -> str:
    """A comparable key for a model name: short form, lower case, no ``-Instruct``, no spaces or notes.

    ``Qwen/Qwen3-VL-4B-Instruct`` and the paper's ``Qwen3-VL-4B`` give the same key;
    ``Qwen3-VL-4B-Thinking`` stays distinct.
    """
    short = str(name).rstrip("/").rsplit("/", 1)[-1]
    short = re.sub(r"\(.*?\)", "", short)
    key = re.sub(r"[\s_.]+", "-", short.strip().lower())
    key = re.sub(r"-instruct$", "", key)
    return key.strip("-")


def find_published_accuracy(model_name: str) -> PublishedAccuracy | None:
    """The Table 1 row for a run's model (matched by :func:`normalize_model_name`), if the paper has one."""
    key = normalize_model_name(model_name)
    for row in PUBLISHED_ACCURACY:
        if normalize_model_name(row.model) == key:
            return row
    return None
