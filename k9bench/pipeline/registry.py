"""The launcher's stage registry: one entry per stage, and the one place the launcher knows its stages.

Each :class:`StageEntry` names the stage (its name in the plan and the log), the script or tool that
runs it by hand, the package module that holds its parser and ``config_from_argv`` (never the root
scripts: the launcher does not import them and does not touch ``sys.path``), and everything the
launcher decides about it: how to make its plan step(s) from the launch settings (:attr:`StageEntry.steps`),
its outputs (from :mod:`k9bench.layout`), how to build its Stage object from a step, its preflight
checks, what it prepares before the plan (the demo's model and videos), the stages whose running reruns
it, the launcher variables that feed it (and the flag each becomes), and what its exit codes mean.

Adding a stage is one entry here (and its package module). Nothing else in :mod:`k9bench.pipeline`
names a stage: the plan, the preflight, the preparation and the run iterate :data:`STAGES` and read the
entry's fields (``tests/test_pipeline_registry.py`` checks that no other module of the package holds a
stage name).
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Callable, Mapping

from k9bench.layout import RunLayout, shard_path, skipped_path
from k9bench.pipeline import preflight
from k9bench.pipeline.stages import PlanContext, Step, demo_note, inference_values

if TYPE_CHECKING:  # annotations only (LaunchSettings and Preparing are named, not imported: env and plan reach this module)
    from k9bench.stage import Stage

log = logging.getLogger("k9bench.pipeline")

SHARDED = "inference"
"""The stage a launch may shard (NUM_SHARDS, a SLURM array)."""
SHARD_PREFIX = f"{SHARDED}-shard"
"""A shard's step is ``inference-shard<i>``."""


def shard_name(i: int) -> str:
    return f"{SHARD_PREFIX}{i}"


def files(layout: RunLayout) -> dict[str, Path]:
    """This run's artifacts (:mod:`k9bench.layout`), by what holds them."""
    raw, judge = layout.path("raw"), layout.path("judge")
    return {"raw": raw, "sim": layout.path("sim"), "eval": layout.path("eval"), "judge": judge,
            "judge_skipped": skipped_path(judge), "report_dir": Path(layout.out_dir) / f"report_{layout.tag}",
            "labels": Path(layout.out_dir) / f"labels_llm_{layout.tag}.json"}


def flags(e: "StageEntry", s: "LaunchSettings") -> dict[str, str]:
    """The entry's launcher variables by the flag each becomes (``{"--split": "test"}``), in the row's order: their
    texts, which the stage's parser types (:meth:`k9bench.cli.ArgumentParser.parse_values`)."""
    return {flag: s.values[var] for var, flag in e.variables.items()}


# --------------------------------------------------------------------------- each entry's plan steps


def _download_steps(e: "StageEntry", c: "PlanContext") -> list[Step]:
    v = c.settings.values
    if c.mode.finalize or v["MAX_FRAMES"] == "0":  # MAX_FRAMES=0 is text-only: no video is read, none is fetched
        return []
    return [Step(name=e.name, script=e.script, values=flags(e, c.settings), outputs=[Path(v["VIDEO_DIR"]) / "download_manifest.json"],
                 incomplete_codes=() if v["DOWNLOAD_STRICT"] == "1" else (1,))]


def _inference_step(e: "StageEntry", c: "PlanContext", output: Path, name: str, shard: int | None) -> Step:
    return Step(name=name, script=e.script, values=inference_values(c.settings, e.variables, output, shard, c.mode.num_shards),
                extra=c.settings.extra[e.args_variable], outputs=[output], served=bool(c.settings.values["SERVE"]))


def _inference_steps(e: "StageEntry", c: "PlanContext") -> list[Step]:
    if c.mode.finalize:
        return []
    raw = files(c.layout)["raw"]
    if c.mode.num_shards == 1:
        return [_inference_step(e, c, raw, e.name, None)]
    wanted = [c.mode.shard_id] if c.mode.shard_id is not None else range(c.mode.num_shards)
    return [_inference_step(e, c, shard_path(raw, c.mode.num_shards, i), shard_name(i), i) for i in wanted]


def _merge_steps(e: "StageEntry", c: "PlanContext") -> list[Step]:
    n = c.mode.num_shards
    if n == 1:
        return []
    raw = files(c.layout)["raw"]
    shards = [shard_path(raw, n, i) for i in range(n)]
    return [Step(name=e.name, script=e.script, values={"--output_file": raw, "--expect_shards": n}, positional=tuple(map(str, shards)),
                 outputs=[raw], inputs=list(shards), depends=tuple(shard_name(i) for i in range(n)))]


def _calculate_steps(e: "StageEntry", c: "PlanContext") -> list[Step]:
    f = files(c.layout)
    return [Step(name=e.name, script=e.script, inputs=[f["raw"]], outputs=[f["sim"]], depends=e.reruns_after,
                 values={"--mode": "calculate", "--input_file": [f["raw"]], "--output_file": f["sim"], **flags(e, c.settings)},
                 extra=c.settings.extra[e.args_variable])]


def _evaluate_steps(e: "StageEntry", c: "PlanContext") -> list[Step]:
    f = files(c.layout)
    return [Step(name=e.name, script=e.script, inputs=[f["sim"]], outputs=[f["eval"]], depends=e.reruns_after,
                 values={"--mode": "evaluate", "--input_file": [f["sim"]], "--output_file": f["eval"], **flags(e, c.settings)})]


def _judge_values(e: "StageEntry", s: "LaunchSettings", f: dict[str, Path]) -> dict[str, object]:
    # --fail_on_skipped: entries left skipped end the run with exit 1 (after the report), and the next run retries them
    given = {flag: text for flag, text in flags(e, s).items() if text}  # no JUDGE_BASE_URL: the OpenAI API
    return {"--evaluations": f["eval"], "--output": f["judge"], "--skipped": f["judge_skipped"], **given, "--fail_on_skipped": True}


def _judge_steps(e: "StageEntry", c: "PlanContext") -> list[Step]:
    if not c.settings.judge_on:
        return []
    f = files(c.layout)
    # no reruns_after: its own done() (its requests' content, issue 31) says when evaluate's rerun changed them
    return [Step(name=e.name, script=e.script, inputs=[f["eval"]], outputs=[f["judge"], f["judge_skipped"]],
                 values=_judge_values(e, c.settings, f), extra=c.settings.extra[e.args_variable], incomplete_codes=(1,))]


def _judge_probe(e: "StageEntry", s: "LaunchSettings") -> Step:
    """JUDGE_ARGS is checked even while the judge is off: a step that only parses."""
    return Step(name=e.name, script=e.script, outputs=[], values={"--evaluations": Path("eval.json")}, extra=s.extra[e.args_variable])


def _judge_config(s: "LaunchSettings") -> str:
    if not s.judge_on:
        return "off (no OPENAI_API_KEY or JUDGE_BASE_URL)"
    key = "set" if s.environ.get("OPENAI_API_KEY") else "not set"
    return f"{s.values['JUDGE_MODEL']} at {s.values['JUDGE_BASE_URL'] or 'the OpenAI API'} (OPENAI_API_KEY {key})"


def _label_steps(e: "StageEntry", c: "PlanContext") -> list[Step]:
    """LABEL=1: the LLM labeller of the wrong answers (k9bench.people.labeller, docs/people.md), on the judge's endpoint."""
    if c.settings.values["LABEL"] != "1":
        return []
    f = files(c.layout)
    given = {flag: text for flag, text in flags(e, c.settings).items() if text}
    return [Step(name=e.name, script=e.script, inputs=[f["eval"]], outputs=[f["labels"]], incomplete_codes=(1,),
                 values={"--evaluations": f["eval"], "--output": f["labels"], **given})]


def _report_steps(e: "StageEntry", c: "PlanContext") -> list[Step]:
    """The report over this run and every run of the same model and questions at other MAX_FRAMES
    (found again just before it runs: :func:`_refresh_report`)."""
    if c.settings.values["REPORT"] != "1":
        return []
    f = files(c.layout)
    step = Step(name=e.name, script=e.script, inputs=[f["eval"]], outputs=[f["report_dir"] / "report.md"],
                depends=e.reruns_after)
    _refresh_report(step, c.settings, c.layout)
    return [step]


def _refresh_report(step: Step, s: "LaunchSettings", layout: RunLayout) -> str | None:
    """Fill in the report's inputs as they are now: the frame-budget runs beside this one, the judge
    file when there is one. Returns the line to say when other runs are in the plot."""
    f = files(layout)
    evals = [f["eval"]]
    if f["eval"].is_file():
        try:
            from k9bench.report import frame_sweep_files

            evals = list(frame_sweep_files(f["eval"])) or evals
        except Exception as exc:  # noqa: BLE001 (any unreadable neighbour: report this run alone, and say so)
            log.info("step %s: could not look for runs at other MAX_FRAMES in %s (%s); reporting this run alone",
                     step.name, layout.out_dir, exc)
    values: dict[str, object] = {"--mode": "report", "--input_file": list(evals), "--report_dir": f["report_dir"],
                                 **flags(entry(step.name), s)}
    inputs = list(evals)
    if f["judge"].is_file() and f["judge"].stat().st_size:
        values["--judge_files"] = [f["judge"]]
        inputs.append(f["judge"])
    if f["labels"].is_file():  # the LLM labeller's labels (LABEL=1): the report's failure-mode chart
        values["--failure_labels"] = [f["labels"]]
        inputs.append(f["labels"])
    if s.demo:
        what, meaning, _ = demo_note(s)
        values["--note"] = [f"DEMO run: {what}; {meaning}."]
    step.values, step.inputs = values, inputs
    others = len(evals) - 1
    return f"with {others} run(s) of the same model and questions at other MAX_FRAMES (frame-budget plot)" if others else None


# --------------------------------------------------------------------------- each entry's Stage object


def _parsed(parser, step: Step):
    """The step's values and the user's ``*_ARGS`` through the stage's own parser (a Namespace that only the
    stage's own ``*_from_namespace`` reads)."""
    return parser.parse_values(step.values, step.extra)


def _download(step: Step) -> "Stage":
    from k9bench.download.stage import DownloadStage, build_parser, run_from_namespace

    return DownloadStage(run_from_namespace(_parsed(build_parser(), step), step.argv))


def _inference(step: Step) -> "Stage":
    from k9bench.inference.stage import InferenceStage, build_parser, checked_config_from_namespace

    # records made with other settings are set aside and redone (the launcher's rerun), never mixed
    return InferenceStage(checked_config_from_namespace(_parsed(build_parser(), step)), step.argv, redo_changed=True)


def _merge(step: Step) -> "Stage":
    from k9bench.merge import MergeStage

    return MergeStage(list(step.inputs), step.outputs[0], expect_shards=len(step.inputs), argv=step.argv)


def _calculate(step: Step) -> "Stage":
    from k9bench.scoring.stages import CalculateStage, build_parser, config_from_namespace

    return CalculateStage(config_from_namespace(_parsed(build_parser(), step), step.argv))


def _evaluate(step: Step) -> "Stage":
    from k9bench.scoring.stages import EvaluateStage, build_parser, config_from_namespace

    return EvaluateStage(config_from_namespace(_parsed(build_parser(), step), step.argv))


def _judge(step: Step) -> "Stage":
    from k9bench.judge.settings import build_parser, config_from_namespace
    from k9bench.judge.stage import JudgeStage

    return JudgeStage(config_from_namespace(_parsed(build_parser(), step), step.argv))


def _label(step: Step) -> "Stage":
    from k9bench.people.labeller import LabellerStage, build_parser, config_from_namespace

    return LabellerStage(config_from_namespace(_parsed(build_parser(), step)))


def _report(step: Step) -> "Stage":
    from k9bench.report.stage import ReportStage, build_parser, config_from_namespace

    return ReportStage(config_from_namespace(_parsed(build_parser(), step)))


def _demo_model(step: Step) -> "Stage":
    from k9bench.pipeline.prepare import DemoModelStage

    return DemoModelStage(step)


def _demo_videos(step: Step) -> "Stage":
    from k9bench.pipeline.prepare import DemoVideosStage

    return DemoVideosStage(step)


def _prepare_model(e: "StageEntry", s: "LaunchSettings", p) -> None:
    from k9bench.pipeline.prepare import prepare_model

    prepare_model(e, s, p)


def _prepare_videos(e: "StageEntry", s: "LaunchSettings", p) -> None:
    from k9bench.pipeline.prepare import prepare_videos

    prepare_videos(e, s, p)


# --------------------------------------------------------------------------- the entries


@dataclass(frozen=True)
class StageEntry:
    """One stage as the launcher knows it."""

    name: str
    """Its name in the plan and the log (an inference shard is ``inference-shard<i>``)."""
    script: str
    """The script or ``python -m`` tool that runs it by hand (``eval_video_llm``, ``merge``...): the log's
    ``step X: <script> <argv>`` line."""
    module: str
    """The package module with its parser and ``config_from_argv`` (or, for a demo tool, its ``main``)."""
    build: Callable[[Step], "Stage"]
    """Plan step -> its Stage object (every step runs as one, in this process)."""
    steps: Callable[["StageEntry", "PlanContext"], list[Step]] | None = None
    """Launch settings -> its plan step(s) (none: the stage is not in this run). None: not a plan stage
    (it is :attr:`prepare`'d before the plan)."""
    prepare: Callable[["StageEntry", "LaunchSettings", "Preparing"], None] | None = None
    """Made before the plan's stages (the demo's inputs): ``prepare(entry, settings, preparing)``
    (:class:`k9bench.pipeline.prepare.Preparing`: ``say``, ``enter`` and ``run(step)``, which runs a step's Stage
    as the launcher runs every stage)."""
    checks: tuple[Callable[["LaunchSettings", dict], None], ...] = ()
    """Its preflight (:mod:`k9bench.pipeline.preflight`): each ``check(settings, environ)`` refuses in one line
    naming the variable; run once per run, before any stage, when the stage is in the plan."""
    writes_to: str = "OUT_DIR"
    """The variable naming the folder of its outputs (for the preflight's writable-output refusal)."""
    follows: tuple[str, ...] = ()
    """The stages it comes after."""
    reruns_after: tuple[str, ...] = ()
    """Stages whose running makes this one run again (beyond its own ``done()``)."""
    in_shard_runs: bool = False
    """It runs in a one-shard launch (an array task, SHARD_ID): download and inference only."""
    variables: Mapping[str, str] = field(default_factory=dict)
    """Launcher variable -> the flag it becomes (the one record of it: the launcher's value checks, its
    defaults table and the plan's steps all read it here)."""
    types_shared: bool = False
    """Its flags give the variables it shares with other stages their type, choices and default (the launcher's
    check of DATASET_NAME, VIDEO_DIR...: :func:`variable_flag`); otherwise the first entry with the variable does."""
    args_variable: str = ""
    """The ``*_ARGS`` variable a refusal of its argv names (checked with its own parser before anything runs)."""
    probe: Callable[["StageEntry", "LaunchSettings"], Step] | None = None
    """A step to check :attr:`args_variable` with when the stage is not in the plan (JUDGE_ARGS with the judge off)."""
    exits: Mapping[int, str] = field(default_factory=dict)
    """Exit code -> what it means for the run."""
    incomplete_note: str = ""
    """Said when it ends "incomplete" (an exit in the step's ``incomplete_codes``); ``{output}`` is its output number
    :attr:`note_output`."""
    note_output: int = 0
    incomplete_ends_run: str = ""
    """When set, an incomplete end makes the whole run end with exit 1 (after the later stages), saying this."""
    shared_lock: str = ""
    """A lock file beside its first output that launches sharing that folder wait on (they run it one at a time)."""
    refresh: Callable[[Step, "LaunchSettings", RunLayout], str | None] | None = None
    """Finds its inputs again just before it runs (the report: runs at other MAX_FRAMES, the judge file); returns a
    line to say, or None."""
    prints_accuracy: bool = False
    """It prints the accuracy table on stdout when it runs."""
    config_line: Callable[["LaunchSettings"], str] | None = None
    """Its line in the configuration block the launcher prints first (the judge: on, or off and why)."""
    final_note: str = ""
    """Said at the end of a complete run when it is in the plan; ``{folder}`` is its first output's folder."""


STAGES: tuple[StageEntry, ...] = (
    StageEntry("demo-model", "tiny_model", "k9bench.tiny_model", _demo_model, prepare=_prepare_model, exits={0: "built"}),
    StageEntry("demo-videos", "demo", "k9bench.data.demo", _demo_videos, prepare=_prepare_videos, exits={0: "written"}),
    StageEntry("download", "download_videos", "k9bench.download.stage", _download, _download_steps, in_shard_runs=True,
               checks=(preflight.dataset,), writes_to="VIDEO_DIR",
               variables={"DATASET_NAME": "--dataset_name", "SPLIT": "--split", "VIDEO_DIR": "--output_dir", "MAX_SAMPLES": "--max_samples"},
               exits={0: "done", 1: "some videos could not be fetched (DOWNLOAD_STRICT=0: the run goes on)", 2: "bad input"},
               shared_lock=".run_eval.download.lock",
               incomplete_note="some videos could not be fetched (see {output}); going on: their questions become failed "
                               "'missing video' records, counted as wrong. DOWNLOAD_STRICT=1 stops here instead."),
    StageEntry("inference", "eval_video_llm", "k9bench.inference.stage", _inference, _inference_steps, follows=("download",),
               in_shard_runs=True, checks=(preflight.dataset, preflight.model, preflight.engines), args_variable="INFER_ARGS", types_shared=True,
               variables={"MODEL_NAME": "--model_name_or_path", "DATASET_NAME": "--dataset_name", "SPLIT": "--split",
                          "VIDEO_DIR": "--video_dir", "MAX_FRAMES": "--max_frames", "MAX_SAMPLES": "--max_samples",
                          "BATCH_SIZE": "--batch_size", "DTYPE": "--torch_dtype", "ATTN_IMPL": "--attn_implementation"},
               exits={0: "done", 1: "every question failed", 2: "bad input", 75: "stopped by a signal, progress saved"}),
    StageEntry("merge", "merge", "k9bench.merge", _merge, _merge_steps, follows=("inference",),
               exits={0: "done", 1: "a shard missing or unfinished"}),
    StageEntry("calculate", "evaluate_results", "k9bench.scoring", _calculate, _calculate_steps, follows=("inference", "merge"),
               reruns_after=("inference", "merge"), checks=(preflight.embedding_model,), args_variable="SCORE_ARGS",
               variables={"DEVICE": "--device", "EMBEDDING_MODEL": "--embedding_model", "EMBED_BATCH_SIZE": "--batch_size"},
               exits={0: "done", 2: "bad input"}),
    StageEntry("evaluate", "evaluate_results", "k9bench.scoring", _evaluate, _evaluate_steps, follows=("calculate",),
               reruns_after=("calculate",), args_variable="SCORE_ARGS", variables={"THRESHOLD": "--threshold"},
               exits={0: "done", 2: "bad input"}, prints_accuracy=True),
    StageEntry("judge", "subjective_evals", "k9bench.judge", _judge, _judge_steps, follows=("evaluate",),
               checks=(preflight.judge_endpoint,), args_variable="JUDGE_ARGS", probe=_judge_probe, config_line=_judge_config,
               variables={"JUDGE_MODEL": "--judge_model", "JUDGE_BASE_URL": "--base_url"},
               exits={0: "done", 1: "entries left skipped (the report is still written; rerun to retry)", 2: "bad input"},
               incomplete_note="some entries were skipped (see {output}); the report uses the judged ones; rerun to retry them",
               note_output=1, incomplete_ends_run="entries in {output} were not judged; rerun the same command to retry them"),
    StageEntry("llm-label", "python -m k9bench.people llm-label", "k9bench.people.labeller", _label, _label_steps, follows=("judge",),
               checks=(preflight.judge_endpoint,), variables={"JUDGE_MODEL": "--labeller_model", "JUDGE_BASE_URL": "--base_url"},
               exits={0: "done", 1: "answers left unlabelled (the report uses the labelled ones; rerun to retry)", 2: "bad input"},
               incomplete_note="some wrong answers were not labelled (see {output}); rerun to retry them"),
    StageEntry("report", "evaluate_results", "k9bench.scoring", _report, _report_steps, follows=("evaluate", "judge"),
               reruns_after=("evaluate", "judge"), args_variable="SCORE_ARGS", variables={"PUBLISHED": "--published"},
               exits={0: "done"}, refresh=_refresh_report,
               final_note="results page: {folder}/index.html"),  # the page the report stage writes beside report.md (docs/view.md)
)
"""Every stage, in the order a run has them."""

BY_NAME = {entry.name: entry for entry in STAGES}


def entry(step_name: str) -> StageEntry:
    """The entry of a plan step (``inference-shard3`` is an inference stage)."""
    return BY_NAME[SHARDED if step_name.startswith(SHARD_PREFIX) else step_name]


def script_entry(script: str) -> StageEntry:
    """The first entry run by ``script`` (evaluate_results runs three: they share module and parser)."""
    for e in STAGES:
        if e.script == script:
            return e
    raise KeyError(f"no stage runs {script!r}")


def script_module(script: str) -> ModuleType:
    """The package module of a script or tool (its parser, ``config_from_argv``)."""
    return importlib.import_module(script_entry(script).module)


def variable_flag(name: str) -> tuple[str, str] | None:
    """``(script, flag)`` of the stage flag that types launcher variable ``name`` (its type, choices, default):
    that of the entry marked :attr:`~StageEntry.types_shared` when it takes the variable, else of the first entry
    that does; None when no stage takes it."""
    takers = [e for e in STAGES if name in e.variables]
    if not takers:
        return None
    owner = next((e for e in takers if e.types_shared), takers[0])
    return owner.script, owner.variables[name]


def make_stage(step: Step) -> "Stage":
    """The Stage object that runs ``step`` (its entry's :attr:`~StageEntry.build`)."""
    return entry(step.name).build(step)
