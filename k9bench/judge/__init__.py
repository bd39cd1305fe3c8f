"""LLM-as-judge scoring of free-form answers (SPEC section 5), the reference's way by default.

One request per question: our judge prompt (``k9bench/prompts/judge_prompt.txt``, or a file given
verbatim) filled with the question, the text of the right option and the model's answer. The judge
replies with a ``CoT:`` line and a dictionary of five scores; the last ``{...}`` block is read as the
reference reads it (:mod:`k9bench.judge.parse`). Only ``model`` and ``messages`` are sent unless
``--temperature``/``--max_tokens`` are given.

- :mod:`k9bench.judge.settings`: the settings dataclasses, ``build_parser``, ``config_from_argv``, the prompt check;
- :mod:`k9bench.judge.parse`: a reply -> five scores (``--strict_scores``: the earlier refusal of 0, 11, ``true``);
- :mod:`k9bench.judge.tasks`: an evaluations file -> one task per answered record;
- :mod:`k9bench.judge.score`: one task -> one request -> an entry or a skipped entry; the summary;
- :mod:`k9bench.judge.cache`: a request's key by content (what decides reuse) and the store of paid replies;
- :mod:`k9bench.judge.run`: the resumable run: earlier files, the checkpointed loop, the final files;
- :mod:`k9bench.judge.stage`: :class:`JudgeStage`, the :class:`k9bench.stage.Stage` the script and the launcher run.

Use::

    from k9bench.judge import JudgeStage, config_from_argv
    from k9bench.stage import run_stage
    exit_code = run_stage(JudgeStage(config_from_argv(["--evaluations", "eval.json"])))
"""

from __future__ import annotations

from k9bench.judge.parse import AXES, SCORE_RANGE, TABLE3_AXES, Judgement, JudgeParseError, parse_judgement
from k9bench.judge.run import PriorState, RunResult, load_prior, run_judge, unreachable_after
from k9bench.judge.score import MAX_REPLY_CHARS, Outcome, axis_means, format_summary, judge_task, summarize
from k9bench.judge.settings import (
    DEFAULT_JUDGE_MODEL,
    MISSING_MODEL_ANSWER,
    PLACEHOLDERS,
    JudgeConfig,
    JudgeInputError,
    JudgeRunSettings,
    JudgeSettings,
    RequestSettings,
    RunPaths,
    build_parser,
    check_prompt_template,
    config_from_argv,
    judge_fingerprint,
    render_prompt,
    resolve_paths,
    sidecar_path,
    temperature_value,
)
from k9bench.judge.stage import EndpointUnreachable, JudgeStage
from k9bench.judge.tasks import JudgeTask, TaskSet, build_tasks, cross_check, option_text, task_from_record, with_missing_answers

__all__ = [
    "AXES", "DEFAULT_JUDGE_MODEL", "MAX_REPLY_CHARS", "MISSING_MODEL_ANSWER", "PLACEHOLDERS", "SCORE_RANGE", "TABLE3_AXES",
    "EndpointUnreachable", "JudgeConfig", "JudgeInputError", "JudgeParseError", "JudgeRunSettings", "JudgeSettings",
    "JudgeStage", "JudgeTask", "Judgement", "Outcome", "PriorState", "RequestSettings", "RunPaths", "RunResult", "TaskSet",
    "axis_means", "build_parser", "build_tasks", "check_prompt_template", "config_from_argv", "cross_check", "format_summary",
    "judge_fingerprint", "judge_task", "load_prior", "option_text", "parse_judgement", "render_prompt", "resolve_paths",
    "run_judge", "sidecar_path", "summarize", "task_from_record", "temperature_value", "unreachable_after",
    "with_missing_answers",
]
