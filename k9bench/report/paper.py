"""A run's standing against the paper's rows (:mod:`k9bench.data.published`): which rows its setup followed,
and why; or, when none, what differs from the nearest one.

Every row shares the scoring and the prompts (:data:`~k9bench.data.published.PAPER_SETUP`: embedding model,
threshold, the reference prompts in the system turn); each row has its own :class:`~k9bench.data.published.Setup`
(frames or 1 FPS, frame size, audio, question set, response limit, judge). A run is compared with the rows of
its model (every MCQ row's setup when the paper has no row of it): the rows it matches are named with their
setup; with none, the nearest row (fewest differences, the paper's order on a tie) is named with each difference.
A judge file is compared the same way with the rows that carry judge scores (Tables 2, 3 and 4), its judge
model included; the judge does not depend on the embedding model or the threshold.
"""

from __future__ import annotations

from k9bench.data.published import (
    HUMAN,
    HUMAN100,
    PAPER_JUDGE,
    PAPER_ROWS,
    PAPER_SETUP,
    QUESTION_SETS,
    REFERENCE_THINKING_TOKENS,
    SHORT,
    PaperRow,
    Setup,
    is_fp8_checkpoint,
    normalize_model_name,
    rows_of,
)
from k9bench.report.model import (
    PLACEMENT_DIFFERENCES,
    JudgeSummary,
    RunSettings,
    reference_prompt_sha256,
)

def whole_video_frames() -> int:
    """The frame cap of ``--video_fps`` (:data:`k9bench.inference.settings.VIDEO_FPS_MAX_FRAMES`): a run at 1 fps
    with at least this many frames saw the whole video."""
    from k9bench.inference.openai_compat.settings import VIDEO_FPS_MAX_FRAMES

    return VIDEO_FPS_MAX_FRAMES


def served_checkpoint_differs(settings: RunSettings) -> str | None:
    """Why the served checkpoint is not the model the run names (an FP8 export of it, say), or None."""
    server = settings.server or {}
    root = server.get("root")
    named = settings.model_name_or_path
    if not root or not named:
        return None
    if normalize_model_name(str(root)) == normalize_model_name(str(named)) and is_fp8_checkpoint(root) == is_fp8_checkpoint(named):
        return None
    return f"the server served checkpoint {root}, not {named}"


def prompt_differences(settings: RunSettings) -> tuple[list[str], list[str]]:
    """The system prompt and its placement against the reference's (every row's)."""
    differences: list[str] = []
    unconfirmed: list[str] = []
    if settings.prompt_placement is None:
        unconfirmed.append("prompt placement not recorded")
    elif settings.prompt_placement != PAPER_SETUP.prompt_placement:
        differences.append(PLACEMENT_DIFFERENCES.get(settings.prompt_placement, f"prompt placement {settings.prompt_placement}"))
    if not settings.prompts:
        unconfirmed.append("prompts not recorded")
    for kind, prompt in settings.prompts.items():
        source = str(prompt.get("source"))
        if prompt.get("reference"):
            continue
        if source.startswith("builtin"):
            differences.append(f"{kind} in this project's own words ({source}), not the reference's")
        elif reference_prompt_sha256(kind) is None:
            unconfirmed.append(f"{kind} from {source} (no reference hash to confirm it against)")
        else:
            differences.append(f"{kind} from {source}: its SHA-256 is not the reference's")
    served = served_checkpoint_differs(settings)
    if served:
        differences.append(served)
    if settings.model_name_or_path and is_fp8_checkpoint(settings.model_name_or_path):
        differences.append(f"the FP8 checkpoint {settings.model_name_or_path} (paper: the model's own weights)")
    return differences, unconfirmed


def scoring_differences(settings: RunSettings) -> tuple[list[str], list[str]]:
    """The embedding model and threshold against the paper's (every MCQ row's)."""
    paper = PAPER_SETUP
    differences: list[str] = []
    unconfirmed: list[str] = []
    if settings.embedding_model is None:
        unconfirmed.append("embedding model not recorded")
    elif normalize_model_name(settings.embedding_model) != normalize_model_name(paper.embedding_model):
        differences.append(f"embedding model {settings.embedding_model} (paper: {paper.embedding_model})")
    if settings.threshold is None:
        unconfirmed.append("threshold not recorded")
    elif settings.threshold != paper.threshold:
        differences.append(f"threshold {settings.threshold:g} (paper: {paper.threshold:g})")
    return differences, unconfirmed


def _frames_text(row: PaperRow) -> str:
    return "the whole video at 1 FPS" if row.setup.frames is None else f"{row.setup.frames} frames"


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def setup_differences(settings: RunSettings, row: PaperRow) -> tuple[list[str], list[str]]:
    """``(differences, unconfirmed)`` of a run's own setup against one row's (frames, fps, frame size, audio,
    questions, response limit)."""
    setup = row.setup
    differences: list[str] = []
    unconfirmed: list[str] = []
    if settings.text_only:
        differences.append(f"text only, no video (paper: {_frames_text(row)})")
    else:
        frames = settings.max_frames
        whole = frames is not None and frames >= whole_video_frames() and settings.fps == PAPER_SETUP.fps
        if frames is None:
            unconfirmed.append("frames not recorded")
        elif setup.frames is None and not whole:
            differences.append(f"frames {frames:g} (paper: the whole video at 1 FPS)")
        elif setup.frames is not None and frames != setup.frames:
            differences.append(f"frames {frames:g} (paper: {setup.frames})")
        if settings.fps is None:
            unconfirmed.append("fps not recorded")
        elif settings.fps != PAPER_SETUP.fps:
            differences.append(f"fps {settings.fps:g} (paper: {PAPER_SETUP.fps:g})")
        if setup.frame_size:
            if settings.frame_size != setup.frame_size:
                have = f"frame size {settings.frame_size}" if settings.frame_size else "frames not resized to a fixed size"
                differences.append(f"{have} (paper: every frame resized to {setup.frame_size})")
        elif setup.max_pixels is not None:
            if settings.frame_size:
                differences.append(f"frames resized to {settings.frame_size} (paper: at most {setup.max_pixels} = 360x420 pixels)")
            elif settings.max_pixels is None:
                unconfirmed.append("max_pixels not recorded")
            elif settings.max_pixels != setup.max_pixels:
                differences.append(f"max_pixels {settings.max_pixels:g} (paper: {setup.max_pixels} = 360x420)")
    if settings.audio and not setup.audio:
        differences.append(f"audio+video: the model heard the soundtracks (paper's {row.table}: video only)")
    elif setup.audio and settings.audio is False:
        differences.append(f"video only (paper's {row.table}: audio + video)")
    elif setup.audio and settings.audio is None:
        unconfirmed.append("audio not recorded")
    want, named = QUESTION_SETS[setup.questions]
    if settings.questions != want:
        differences.append(f"{_plural(settings.questions, 'question')} (paper: {want:,})")
    if setup.questions == SHORT and settings.long_videos:
        differences.append(f"{_plural(settings.long_videos, 'question')} of videos of {PAPER_SETUP.short_video_seconds:g} s "
                           f"or more (paper: {named})")
    if setup.questions == HUMAN100 and settings.questions == want:
        unconfirmed.append("the paper's 100 question ids are not published: the same questions cannot be confirmed")
    if setup.max_new_tokens is not None:
        have_tokens = settings.max_new_tokens
        if have_tokens is None:
            if setup.thinking:
                unconfirmed.append(f"max_new_tokens not recorded (paper: {setup.max_new_tokens:,} for thinking models)")
        elif have_tokens != setup.max_new_tokens:
            why = ": the reference scripts' thinking limit" if settings.thinking and have_tokens == REFERENCE_THINKING_TOKENS else ""
            differences.append(f"max_new_tokens {have_tokens:,}{why} (paper: {setup.max_new_tokens:,})")
    return differences, unconfirmed


def judge_model_differences(judge_model: str | None) -> tuple[list[str], list[str]]:
    """A judge file's judge model against the paper's GPT-4o."""
    if not judge_model:
        return [], ["judge model not recorded"]
    key = normalize_model_name(judge_model)
    if key != normalize_model_name(PAPER_JUDGE):
        return [f"judge {judge_model} (paper: GPT-4o)"], []
    return [], []


def _candidates(model: str | None, rows: list[PaperRow]) -> tuple[list[PaperRow], bool]:
    """The rows of the run's model, or (False) every row's setup when the paper has none of it."""
    own = rows_of(model, tuple(rows)) if model else []
    if own:
        return own, True
    others = [r for r in rows if r.model != HUMAN]
    return sorted(others, key=lambda r: r.setup != Setup()), False  # the plain 32-frame setup first on a tie


def shown_name(row: PaperRow, own: bool) -> str:
    """A row as the report names it: ``Table 1: Qwen3-VL-8B (32 frames)``, or for a model the paper has no row
    of, the setup it stands for (``Table 1's 32 frames setup``)."""
    return row.name if own else f"{row.table}'s {row.setting} setup"


def standing(settings: RunSettings, model: str | None, rows: list[PaperRow], shared: tuple[list[str], list[str]]
             ) -> tuple[list[PaperRow], PaperRow | None, list[str], list[str], bool]:
    """``(matched rows, nearest row, differences, unconfirmed, own)`` of a run among ``rows``; ``shared`` are the
    differences that hold against every row (scoring, prompts); ``own``: the rows are the run's model's."""
    candidates, own = _candidates(model, rows)
    scored = []
    for row in candidates:
        diffs, unsure = setup_differences(settings, row)
        scored.append((len(diffs), row, diffs, unsure))
    if not scored:
        return [], None, list(shared[0]), list(shared[1]), own
    matched = [row for n, row, _, _ in scored if n == 0]
    best = min(scored, key=lambda item: item[0])  # min keeps the first on a tie: the paper's order
    _, nearest, diffs, unsure = best
    if not own:
        matched = matched[:1]  # another model's rows: the first row of that setup names the setup
    if matched:
        unsure = [u for n, row, _, us in scored if row in matched for u in us]
        unsure = list(dict.fromkeys(unsure))
        diffs = []
    return matched, nearest, [*shared[0], *diffs], [*shared[1], *unsure], own


def mcq_rows() -> list[PaperRow]:
    """The rows with MCQ accuracy (Tables 1 and 2, Figure 3(a))."""
    return [r for r in PAPER_ROWS if r.average is not None]


def judge_rows() -> list[PaperRow]:
    """The rows with judge scores (Tables 2, 3 and 4)."""
    return [r for r in PAPER_ROWS if r.judge]


def run_model(settings: RunSettings, model: str | None = None) -> str | None:
    """The name a run's rows are looked up by: the model as given to eval_video_llm.py, else its short name."""
    return settings.model_name_or_path or model


def compare_with_paper(settings: RunSettings, model: str | None = None) -> tuple[list[str], list[str]]:
    """Set ``settings.paper_rows`` / ``nearest_row`` / ``paper_why`` and return ``(differences, unconfirmed)``
    against the MCQ rows (see the module doc)."""
    scoring, prompts = scoring_differences(settings), prompt_differences(settings)
    shared = ([*scoring[0], *prompts[0]], [*scoring[1], *prompts[1]])
    matched, nearest, differences, unconfirmed, own = standing(settings, run_model(settings, model), mcq_rows(), shared)
    settings.paper_rows = [row.name for row in matched] if own else []
    settings.nearest_row = shown_name(nearest, own) if nearest else None
    settings.nearest_table = (matched[0] if matched else nearest).table if (matched or nearest) else None
    settings.paper_why = [f"{shown_name(row, own)}: {row.setup.describe()}" + ("" if own else " (the paper has no row of this model)")
                          for row in matched]
    return differences, unconfirmed


def compare_judge(judge: JudgeSummary, settings: RunSettings | None) -> None:
    """Set the judge summary's standing against the judge rows: the judged run's setup and prompts, the judge
    model and the judge prompt (a judge without a matched eval file: by its model alone, unconfirmed)."""
    model_diffs, model_unsure = judge_model_differences(judge.judge_model)
    prompt_diffs: list[str] = []
    prompt_unsure: list[str] = []
    if judge.prompt is None:
        prompt_unsure.append("judge prompt not recorded")
    elif not judge.prompt.get("reference"):
        source = str(judge.prompt.get("source"))
        (prompt_diffs if source.startswith("builtin") or reference_prompt_sha256("judge_prompt") else prompt_unsure).append(
            f"judge_prompt from {source}, not confirmed the reference's")
    if settings is None:
        rows = rows_of(judge.model or judge.label, tuple(judge_rows()))
        judge.paper_rows = []
        judge.nearest_row = rows[0].name if rows else None
        judge.differences = [*model_diffs, *prompt_diffs]
        judge.unconfirmed = [*model_unsure, *prompt_unsure, "no eval file of the judged run in the report: its setup is unknown"]
        return
    run_prompts = prompt_differences(settings)
    shared = ([*run_prompts[0], *model_diffs, *prompt_diffs], [*run_prompts[1], *model_unsure, *prompt_unsure])
    matched, nearest, differences, unconfirmed, own = standing(settings, run_model(settings, judge.model), judge_rows(), shared)
    judge.paper_rows = [row.name for row in matched] if own else []
    judge.nearest_row = shown_name(nearest, own) if nearest else None
    judge.differences, judge.unconfirmed = differences, unconfirmed


def snapshot_caveat(settings: RunSettings) -> list[str]:
    """A run of a moving API alias (``gpt-4o``) whose paper rows name a dated snapshot: the mark that its replies
    come from whatever the alias serves today (it does not make the run incomparable)."""
    named = settings.model_name_or_path
    if not named:
        return []
    snapshots = {row.api_model for row in rows_of(named) if row.api_model}
    if snapshots and str(named).lower() not in snapshots:
        return [f"{named} is a moving alias: the paper's rows used the dated snapshot {', '.join(sorted(snapshots))}"]
    return []


def row_named(name: str | None) -> PaperRow | None:
    """The published row of this :attr:`~k9bench.data.published.PaperRow.name`."""
    return next((row for row in PAPER_ROWS if row.name == name), None)


__all__ = ["compare_judge", "compare_with_paper", "judge_rows", "mcq_rows", "row_named", "served_checkpoint_differs",
           "setup_differences"]
