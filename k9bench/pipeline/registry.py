"""The launcher's stage registry: one entry per stage, what the launcher needs to know of it.

Each :class:`StageEntry` names the stage (its name in the plan and the log), the script or tool that
runs it by hand, the package module that holds its parser, ``config_from_argv`` and Stage class (never
the root scripts: the launcher does not import them and does not touch ``sys.path``), how to build its
Stage object from a plan step, the stages it follows, the launcher variables that feed it (and the flag
each becomes), and what its exit codes mean.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Mapping

if TYPE_CHECKING:  # the plan's step type, for annotations only
    from k9bench.stage import Stage


def _download(step) -> "Stage":
    from k9bench.download.stage import DownloadStage, config_from_argv

    return DownloadStage(config_from_argv(list(step.argv)))


def _inference(step) -> "Stage":
    from k9bench.inference.stage import InferenceStage, config_from_argv

    # records made with other settings are set aside and redone (the launcher's rerun), never mixed
    return InferenceStage(config_from_argv(list(step.argv)), list(step.argv), redo_changed=True)


def _merge(step) -> "Stage":
    from k9bench.merge import MergeStage

    return MergeStage(list(step.inputs), step.outputs[0], expect_shards=len(step.inputs), argv=list(step.argv))


def _calculate(step) -> "Stage":
    from k9bench.scoring import CalculateStage, config_from_argv

    return CalculateStage(config_from_argv(list(step.argv)))


def _evaluate(step) -> "Stage":
    from k9bench.scoring import EvaluateStage, config_from_argv

    return EvaluateStage(config_from_argv(list(step.argv)))


def _judge(step) -> "Stage":
    from k9bench.judge import JudgeStage, config_from_argv

    return JudgeStage(config_from_argv(list(step.argv)))


def _report(step) -> "Stage":
    from k9bench.report import ReportStage, config_from_argv

    return ReportStage(config_from_argv(list(step.argv)))


@dataclass(frozen=True)
class StageEntry:
    """One stage as the launcher knows it."""

    name: str
    """Its name in the plan and the log (an inference shard is ``inference-shard<i>``)."""
    script: str
    """The script or ``python -m`` tool that runs it by hand (``eval_video_llm``, ``merge``...)."""
    module: str
    """The package module with its parser, ``config_from_argv`` (or ``main``)."""
    build: Callable | None = None
    """Plan step -> its Stage object (None: run as its module's ``main``)."""
    follows: tuple[str, ...] = ()
    variables: Mapping[str, str] = field(default_factory=dict)
    """Launcher variable -> the flag it becomes."""
    exits: Mapping[int, str] = field(default_factory=dict)
    """Exit code -> what it means for the run."""
    runs: str = ""
    """For a module without ``main``: its Stage class or function that runs a parsed config (by hand, as the script)."""
    incomplete_note: str = ""
    """Said when it ends "incomplete" (an exit in the step's ``incomplete_codes``); ``{output}`` is its output number
    :attr:`note_output`."""
    note_output: int = 0
    incomplete_ends_run: str = ""
    """When set, an incomplete end makes the whole run end with exit 1 (after the later stages), saying this."""
    shared_lock: str = ""
    """A lock file beside its first output that launches sharing that folder wait on (they run it one at a time)."""
    adopts_unrecorded: bool = False
    """An output made without a stage record (an older launcher, a hand run) is kept when it names the same run."""
    refresh_inputs: bool = False
    """Its inputs are found again just before it runs (the report: runs at other MAX_FRAMES, the judge file)."""
    prints_accuracy: bool = False
    """It prints the accuracy table on stdout when it runs."""


STAGES: tuple[StageEntry, ...] = (
    StageEntry("demo-model", "tiny_model", "k9bench.tiny_model", exits={0: "built"}),
    StageEntry("demo-videos", "demo", "k9bench.data.demo", exits={0: "written"}),
    StageEntry("download", "download_videos", "k9bench.download.stage", _download, runs="DownloadStage",
               variables={"DATASET_NAME": "--dataset_name", "SPLIT": "--split", "VIDEO_DIR": "--output_dir", "MAX_SAMPLES": "--max_samples"},
               exits={0: "done", 1: "some videos could not be fetched (DOWNLOAD_STRICT=0: the run goes on)", 2: "bad input"},
               shared_lock=".run_eval.download.lock",
               incomplete_note="some videos could not be fetched (see {output}); going on: their questions become failed "
                               "'missing video' records, counted as wrong. DOWNLOAD_STRICT=1 stops here instead."),
    StageEntry("inference", "eval_video_llm", "k9bench.inference.stage", _inference, follows=("download",),
               variables={"MODEL_NAME": "--model_name_or_path", "DATASET_NAME": "--dataset_name", "SPLIT": "--split",
                          "VIDEO_DIR": "--video_dir", "MAX_FRAMES": "--max_frames", "MAX_SAMPLES": "--max_samples",
                          "BATCH_SIZE": "--batch_size", "DTYPE": "--torch_dtype", "ATTN_IMPL": "--attn_implementation"},
               exits={0: "done", 1: "every question failed", 2: "bad input", 75: "stopped by a signal, progress saved"},
               adopts_unrecorded=True),
    StageEntry("merge", "merge", "k9bench.merge", _merge, follows=("inference",), exits={0: "done", 1: "a shard missing or unfinished"}),
    StageEntry("calculate", "evaluate_results", "k9bench.scoring", _calculate, follows=("inference", "merge"), runs="run_scoring",
               variables={"EMBEDDING_MODEL": "--embedding_model", "EMBED_BATCH_SIZE": "--batch_size", "DEVICE": "--device"},
               exits={0: "done", 2: "bad input"}),
    StageEntry("evaluate", "evaluate_results", "k9bench.scoring", _evaluate, follows=("calculate",), runs="run_scoring",
               variables={"THRESHOLD": "--threshold"}, exits={0: "done", 2: "bad input"}, prints_accuracy=True),
    StageEntry("judge", "subjective_evals", "k9bench.judge", _judge, follows=("evaluate",), runs="JudgeStage",
               variables={"JUDGE_MODEL": "--judge_model", "JUDGE_BASE_URL": "--base_url"},
               exits={0: "done", 1: "entries left skipped (the report is still written; rerun to retry)", 2: "bad input"},
               incomplete_note="some entries were skipped (see {output}); the report uses the judged ones; rerun to retry them",
               note_output=1, incomplete_ends_run="entries in {output} were not judged; rerun the same command to retry them"),
    StageEntry("report", "evaluate_results", "k9bench.scoring", _report, follows=("evaluate", "judge"), runs="run_scoring",
               variables={"PUBLISHED": "--published"}, exits={0: "done"}, refresh_inputs=True),
)
"""Every stage, in the order a run has them."""

BY_NAME = {entry.name: entry for entry in STAGES}
SHARD_PREFIX = "inference-shard"


def entry(step_name: str) -> StageEntry:
    """The entry of a plan step (``inference-shard3`` is an inference stage)."""
    return BY_NAME["inference" if step_name.startswith(SHARD_PREFIX) else step_name]


def script_entry(script: str) -> StageEntry:
    """The first entry run by ``script`` (evaluate_results runs three: they share module and runner)."""
    for e in STAGES:
        if e.script == script:
            return e
    raise KeyError(f"no stage runs {script!r}")


def script_module(script: str) -> ModuleType:
    """The package module of a script or tool (its parser, ``config_from_argv``, ``main``)."""
    return importlib.import_module(script_entry(script).module)


def script_main(script: str) -> Callable[[list[str]], int]:
    """``main(argv)`` of a script, from its package module: its own ``main``, else its ``config_from_argv`` then
    its Stage class run through :func:`k9bench.stage.run_stage` (what the root script does)."""
    module = script_module(script)
    if hasattr(module, "main"):
        return module.main

    def main(argv: list[str]) -> int:
        import logging

        from k9bench.stage import StageError, run_stage

        try:
            config = module.config_from_argv(list(argv))
        except StageError as exc:
            logging.getLogger(f"k9bench.{script}").error("%s", exc)
            return exc.exit_code
        from k9bench.stage import Stage

        runner = getattr(module, script_entry(script).runs)
        return run_stage(runner(config)) if isinstance(runner, type) and issubclass(runner, Stage) else runner(config)

    return main
