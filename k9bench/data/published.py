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


ALL, SHORT, HUMAN100 = "all", "short", "human100"
"""The paper's question sets: every question, the videos under 150 s (Table 2's subset for Qwen3-Omni-Flash),
the 100 questions the people answered (Table 4)."""

QUESTION_SETS: dict[str, tuple[int, str]] = {
    ALL: (4744, "all 4,744 questions"),
    SHORT: (2693, "the 2,693 questions of videos under 150 s"),
    HUMAN100: (100, "the 100 questions the people answered (their ids are not published)"),
}
"""Question set -> (its size, how it is named)."""

WHOLE_VIDEO = None
"""A setup's ``frames`` for the 1 FPS rows: the whole video at one frame per second."""

PAPER_JUDGE = "gpt-4o"
"""The paper's judge (SPEC section 5); a run's judge matches when it is GPT-4o (a dated snapshot included)."""

PAPER_MAX_NEW_TOKENS = 2048
"""The paper's response limit, the thinking models' included (its text)."""

REFERENCE_THINKING_TOKENS = 3072
"""The reference scripts' ``--thinking_mode`` limit: not the paper's (SPEC section 8)."""

THINKING_LIMITS: dict[str, int] = {"reference": REFERENCE_THINKING_TOKENS, "paper": PAPER_MAX_NEW_TOKENS}
"""The two documented thinking limits by name: the reference scripts' and the paper's text."""

DEFAULT_THINKING_LIMIT = "reference"
"""The limit ``--thinking_mode`` (and the launcher's ``THINKING_MODE``) uses unless told ``paper``: the reference scripts'."""


@dataclass(frozen=True)
class Setup:
    """What a published row was made with (SPEC section 8 and its footnotes); ``None`` where the paper does not say."""

    frames: int | None = 32
    """Frames per video, uniformly sampled; :data:`WHOLE_VIDEO` (None) for the whole video at 1 FPS."""
    frame_size: str | None = None
    """``WxH`` every frame was resized to exactly (GPT-4o's 512x512), else None."""
    max_pixels: int | None = 360 * 420
    """Most pixels per frame (360x420 for the frame-sampled rows); None where the paper does not give it."""
    audio: bool = False
    """The model heard the soundtrack too (Table 2's A+V rows)."""
    questions: str = ALL
    """The question set (:data:`QUESTION_SETS`)."""
    max_new_tokens: int | None = PAPER_MAX_NEW_TOKENS
    """The response limit; None where the paper does not give it (the API models)."""
    thinking: bool = False
    """A Thinking model (its limit is the paper's 2,048, not the reference scripts' 3,072)."""
    judge_model: str = PAPER_JUDGE
    """The judge of the row's judge scores."""

    def describe(self) -> str:
        """The setup in words, e.g. ``32 frames, at most 360x420 px, video only, all 4,744 questions``."""
        parts = ["the whole video at 1 FPS" if self.frames is None else f"{self.frames} frames"]
        if self.frame_size:
            parts.append(f"resized to {self.frame_size}")
        elif self.max_pixels == 360 * 420:
            parts.append("at most 360x420 px")
        parts.append("audio + video" if self.audio else "video only")
        parts.append(QUESTION_SETS[self.questions][1])
        if self.max_new_tokens is not None:
            parts.append(f"{self.max_new_tokens:,} new tokens" + (" (the paper's thinking limit)" if self.thinking else ""))
        return ", ".join(parts)


@dataclass(frozen=True)
class PaperRow:
    """One published row: its table, model, setup and figures (MCQ accuracy in %, judge scores 0-100)."""

    table: str
    """``Table 1``, ``Table 2``, ``Table 3``, ``Table 4`` or ``Figure 3(a)``."""
    model: str
    """Model name as the paper prints it."""
    setting: str
    """The row's setting as the paper notes it (``32 frames``, ``1 FPS``, ``A+V, videos < 150 s``...)."""
    setup: Setup = field(default_factory=Setup)
    """What it was made with."""
    average: float | None = None
    """Overall MCQ accuracy (%), None for a judge-only row."""
    categories: dict = field(default_factory=dict)
    """Released category name -> accuracy (%); empty where the paper gives only the average."""
    judge: dict = field(default_factory=dict)
    """Table 3 column (:data:`JUDGE_AXES`) -> judge score (0-100); Table 4 gives ``Accuracy`` only."""
    api_model: str | None = None
    """The dated snapshot the paper names (GPT-4o's), else None."""

    @property
    def frames(self) -> int | None:
        """The frame budget (None: the whole video at 1 FPS)."""
        return self.setup.frames

    @property
    def name(self) -> str:
        """How the report names the row: ``Table 2: Gemini-2.5 Pro (A+V, videos < 150 s)``."""
        return f"{self.table}: {self.model} ({self.setting})"


JUDGE_AXES = ("Logical", "Factual", "Concise", "Accuracy", "Overall")
"""Column names of the paper's Table 3, in its order."""

AXIS_KEYS = {"Logical": "Logic", "Factual": "Factuality", "Concise": "Conciseness", "Accuracy": "Accuracy", "Overall": "Overall"}
"""Table 3 column -> the judge's score key (SPEC section 2)."""

FPS1 = Setup(frames=WHOLE_VIDEO, max_pixels=None)
"""The 1 FPS rows of Table 1 and 3 (the paper gives no frame size for them)."""
FPS1_API = Setup(frames=WHOLE_VIDEO, max_pixels=None, max_new_tokens=None)
"""Gemini's 1 FPS rows (its own video input; no response limit given)."""
GPT4O = Setup(frame_size="512x512", max_pixels=None)
"""GPT-4o's rows: 32 frames resized to 512x512."""
THINKING = Setup(thinking=True)
"""The Thinking rows: 32 frames, the paper's 2,048-token limit."""


def _mcq(table: str, model: str, setting: str, setup: Setup, avg: float, *per_category: float, **kw) -> PaperRow:
    return PaperRow(table, model, setting, setup, average=avg, categories=dict(zip(CATEGORIES, per_category)), **kw)


def _judge(table: str, model: str, setting: str, setup: Setup, *scores: float, **kw) -> PaperRow:
    return PaperRow(table, model, setting, setup, judge=dict(zip(JUDGE_AXES, scores)), **kw)


GPT4O_SNAPSHOT = "gpt-4o-2024-08-06"
"""The GPT-4o snapshot of the paper's rows."""

TABLE_1: tuple[PaperRow, ...] = (
    # model, setting, setup, avg, posture, action seq., context, cause-effect, interaction
    _mcq("Table 1", "Gemini-2.5 Pro", "1 FPS", FPS1_API, 40.1, 37.7, 36.0, 44.0, 44.7, 42.3),
    _mcq("Table 1", "Qwen3-VL-235B-A22B", "1 FPS", FPS1, 36.5, 34.2, 33.5, 38.4, 39.9, 39.4),
    _mcq("Table 1", "GPT-4o", "32 frames, 512x512", GPT4O, 30.8, 29.6, 26.3, 35.0, 33.9, 33.9, api_model=GPT4O_SNAPSHOT),
    _mcq("Table 1", "InternVL-3.5-14B", "32 frames", Setup(), 33.0, 31.5, 30.3, 33.7, 35.9, 36.1),
    _mcq("Table 1", "InternVL-3.5-8B", "32 frames", Setup(), 32.2, 29.0, 27.9, 34.0, 36.0, 37.5),
    _mcq("Table 1", "Qwen3-VL-32B", "32 frames", Setup(), 31.4, 28.2, 29.3, 35.4, 31.1, 35.0),
    _mcq("Table 1", "Qwen3-VL-8B", "32 frames", Setup(), 28.8, 27.8, 26.5, 32.1, 27.6, 31.9),
    _mcq("Table 1", "Qwen3-VL-4B", "32 frames", Setup(), 27.6, 27.6, 24.1, 30.8, 28.2, 30.9),
    _mcq("Table 1", "Qwen3-VL-32B-Thinking", "32 frames", THINKING, 30.7, 27.8, 28.8, 33.7, 32.8, 32.1),
    _mcq("Table 1", "Qwen3-VL-8B-Thinking", "32 frames", THINKING, 25.3, 24.0, 21.8, 29.7, 24.9, 29.3),
    _mcq("Table 1", "Qwen3-VL-4B-Thinking", "32 frames", THINKING, 22.4, 21.2, 18.0, 28.0, 23.1, 26.2),
)
"""The paper's Table 1 (MCQ accuracy), in its row order."""

PUBLISHED_ACCURACY = TABLE_1
"""Table 1's rows (the leaderboard's ``--published all``)."""

AV_ALL = Setup(frames=WHOLE_VIDEO, max_pixels=None, max_new_tokens=None, audio=True)
AV_SHORT = Setup(frames=WHOLE_VIDEO, max_pixels=None, max_new_tokens=None, audio=True, questions=SHORT)


def _table2(model: str, setting: str, setup: Setup, *figures: float) -> PaperRow:
    # posture, action seq., context, cause-effect, interaction, avg, then the five judge columns
    return PaperRow("Table 2", model, setting, setup, average=figures[5], categories=dict(zip(CATEGORIES, figures[:5])),
                    judge=dict(zip(JUDGE_AXES, figures[6:])))


TABLE_2: tuple[PaperRow, ...] = (
    _table2("Gemini-2.5 Pro", "A+V, 1 FPS", AV_ALL, 35.6, 38.3, 44.8, 49.6, 44.6, 41.9, 77.41, 69.98, 79.57, 64.97, 70.81),
    _table2("Gemini-2.5 Pro", "video only, 1 FPS", FPS1_API, 37.7, 36.0, 44.0, 44.7, 42.3, 40.1, 75.9, 68.33, 78.92, 63.18, 69.15),
    _table2("Gemini-2.5 Pro", "A+V, 1 FPS, videos < 150 s", AV_SHORT,
            38.44, 37.82, 45.15, 50.0, 45.04, 42.37, 77.94, 71.13, 80.41, 65.77, 71.54),
    _table2("Qwen3-Omni-Flash", "A+V, 1 FPS, videos < 150 s", AV_SHORT,
            36.5, 33.7, 37.9, 42.3, 40.2, 37.3, 73.82, 67.62, 82.11, 60.56, 67.92),
)
"""The paper's Table 2 (audio + video): MCQ accuracy and judge scores."""

TABLE_3: tuple[PaperRow, ...] = (
    # model, setting, setup, logical, factual, concise, accuracy, overall
    _judge("Table 3", "Gemini-2.5 Pro", "1 FPS", FPS1_API, 75.9, 68.33, 78.92, 63.18, 69.15),
    _judge("Table 3", "Qwen3-VL-235B-A22B", "1 FPS", FPS1, 74.29, 67.07, 81.40, 60.78, 67.96),
    _judge("Table 3", "GPT-4o", "32 frames, 512x512", GPT4O, 65.96, 61.90, 81.34, 52.81, 60.99, api_model=GPT4O_SNAPSHOT),
    _judge("Table 3", "Qwen3-VL-8B", "32 frames", Setup(), 57.50, 52.86, 81.56, 44.42, 52.64),
    _judge("Table 3", "Qwen3-VL-32B", "32 frames", Setup(), 61.94, 56.20, 79.90, 47.60, 55.73),
    _judge("Table 3", "InternVL-3.5-8B", "32 frames", Setup(), 68.80, 63.09, 81.52, 54.49, 62.85),
    _judge("Table 3", "InternVL-3.5-14B", "32 frames", Setup(), 68.29, 63.26, 82.10, 54.31, 62.70),
    _judge("Table 3", "Qwen3-VL-32B-Thinking", "32 frames", THINKING, 65.67, 60.01, 79.97, 52.52, 60.18),
    _judge("Table 3", "Qwen3-VL-8B-Thinking", "32 frames", THINKING, 68.63, 63.41, 80.26, 46.21, 63.27),
)
"""The paper's Table 3 (GPT-4o judge, five axes scaled to 0-100); no row for Qwen3-VL-4B or -4B-Thinking."""

PUBLISHED_JUDGE = TABLE_3
"""Table 3's rows."""

HUMAN = "human"
"""Table 4's people (no model)."""

TABLE_4: tuple[PaperRow, ...] = (
    PaperRow("Table 4", "Qwen3-VL-32B", "32 frames, 100 questions", Setup(questions=HUMAN100), judge={"Accuracy": 48.4}),
    PaperRow("Table 4", "InternVL-3.5-14B", "32 frames, 100 questions", Setup(questions=HUMAN100), judge={"Accuracy": 54.3}),
    PaperRow("Table 4", "Gemini-2.5 Pro", "A+V, 1 FPS, 100 questions",
             Setup(frames=WHOLE_VIDEO, max_pixels=None, max_new_tokens=None, audio=True, questions=HUMAN100), judge={"Accuracy": 63.9}),
    PaperRow("Table 4", HUMAN, "three people, free-form answers, 100 questions", Setup(questions=HUMAN100), judge={"Accuracy": 69.9}),
)
"""The paper's Table 4 (humans vs models on 100 questions): the judge's Accuracy axis (0-100), not MCQ accuracy."""

FIGURE_3A: tuple[PaperRow, ...] = tuple(
    PaperRow("Figure 3(a)", model, f"{frames} frames", Setup(frames=frames), average=acc)
    for model, points in (("Qwen3-VL-8B", ((32, 28.8), (64, 29.5), (128, 29.9))), ("Qwen3-VL-32B", ((32, 31.4), (64, 30.7), (128, 31.9))))
    for frames, acc in points
)
"""The paper's frame ablation (overall MCQ accuracy %; the 64-frame points from the text's +0.7 and -0.7)."""

FRAME_ABLATION: dict[str, dict[int, float]] = {
    model: {row.frames: row.average for row in FIGURE_3A if row.model == model} for model in dict.fromkeys(r.model for r in FIGURE_3A)
}
"""Model -> frames -> overall accuracy (%), from :data:`FIGURE_3A`."""

PAPER_ROWS: tuple[PaperRow, ...] = (*TABLE_1, *TABLE_2, *TABLE_3, *TABLE_4, *FIGURE_3A)
"""Every published row, in the paper's order."""

DURATION_EDGES: tuple[float, ...] = (180.0, 300.0)
"""Figure 3(c): models other than Gemini (A+V) lose accuracy from 3-5 minute videos on, so duration bins
need edges at these seconds (the paper does not give its bins)."""


@dataclass(frozen=True)
class PaperSetup:
    """What every row of the paper shares (SPEC sections 3, 4 and 8): a run that differs in any of these
    is comparable to no row. Each row's own setup is its :class:`Setup`."""

    embedding_model: str = "Qwen/Qwen3-Embedding-8B"
    """Similarity model of the fine rule."""
    threshold: float = 0.5
    """Similarity the ground truth must exceed."""
    max_frames: int = 32
    """Frame budget per video of the frame-sampled rows."""
    fps: float = 1.0
    """Frames per second sampled before the budget applies."""
    max_pixels: int = 360 * 420
    """Pixels per resized frame of the frame-sampled rows."""
    questions: int = QUESTION_SETS[ALL][0]
    """Questions of the whole benchmark."""
    use_system_message: bool = True
    """The instructions are sent as the system turn."""
    prompt_placement: str = "system"
    """Where the instructions stand (``system``; see :attr:`k9bench.report.RunSettings.prompt_placement`)."""
    audio: bool = False
    """Table 1 runs see the videos only (Table 2 holds the audio + video rows)."""
    short_video_seconds: float = 150.0
    """The short-video subset: videos shorter than this."""
    short_video_questions: int = QUESTION_SETS[SHORT][0]
    """Questions of the short-video subset."""


PAPER_SETUP = PaperSetup()
"""What every row shares."""

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
    """A comparable key for a model name: short form, lower case, no ``-Instruct``, ``-HF``, ``-FP8`` or date
    suffix, no spaces, dots, dashes or notes.

    ``Qwen/Qwen3-VL-4B-Instruct`` and the paper's ``Qwen3-VL-4B`` give the same key, and so do
    ``OpenGVLab/InternVL3_5-8B-HF`` and ``InternVL-3.5-8B``, ``gpt-4o-2024-08-06`` and ``GPT-4o``;
    ``Qwen3-VL-4B-Thinking`` stays distinct.
    """
    short = str(name).rstrip("/").rsplit("/", 1)[-1]
    short = re.sub(r"\(.*?\)", "", short)
    key = re.sub(r"[\s_.]+", "-", short.strip().lower()).strip("-")
    key = re.sub(r"-\d{4}-\d{2}-\d{2}$", "", key)
    for suffix in ("-fp8", "-hf", "-instruct"):
        key = key[: -len(suffix)] if key.endswith(suffix) else key
    return key.replace("-", "")


def is_fp8_checkpoint(name: str) -> bool:
    """True for an FP8 export of a model (``Qwen/Qwen3-VL-32B-Instruct-FP8``): not the weights of the paper's rows."""
    return str(name).rstrip("/").lower().endswith("-fp8")


def rows_of(model_name: str, rows: tuple[PaperRow, ...] = PAPER_ROWS) -> list[PaperRow]:
    """The published rows of a run's model (matched by :func:`normalize_model_name`), in the paper's order."""
    key = normalize_model_name(model_name)
    return [row for row in rows if normalize_model_name(row.model) == key]


def find_published_accuracy(model_name: str) -> PaperRow | None:
    """The Table 1 row for a run's model (matched by :func:`normalize_model_name`), if the paper has one."""
    found = rows_of(model_name, TABLE_1)
    return found[0] if found else None
