"""The one list of stages and their artifacts: one :class:`StageEntry` per stage, in the order a run has them.

Each entry names the stage (its name in the plan and the log), the script or tool that runs it by hand, the
package module that holds its parser and ``config_from_argv``, everything the launcher decides about it, and
the files it writes: their names (:attr:`StageEntry.files`), their header kind, and, for the entry that owns
the kind, its schema version and its typed header class. Everything else derives from this list:
:mod:`k9bench.layout` (``STAGES``, ``RunLayout.paths()``), :mod:`k9bench.headers.kinds` (``SCHEMA_VERSIONS``,
``STAGE_KINDS``, ``HEADER_CLASSES``) and the launcher (:mod:`k9bench.pipeline.registry`, whose ``STAGES`` this is).

Nothing of k9bench is imported here (the layout and the headers read this module, and the launcher's code
imports both): what needs code is named as ``"module:name"`` (:class:`Lazy`) and imported when first used. The
launcher's own glue for the stages below (their plan steps and Stage builders) lives in
:mod:`k9bench.pipeline.registry`; a new stage can keep its own in its module (docs/architecture.md, "Add a stage").
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping


@dataclass(frozen=True)
class Lazy:
    """A function or class named ``"module:name"``, imported at its first use; calling it calls what it names."""

    ref: str

    def resolve(self) -> Any:
        module, _, name = self.ref.partition(":")
        return getattr(importlib.import_module(module), name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)


def _lazy(value: Any) -> Any:
    """A ``"module:name"`` text as a :class:`Lazy`; a callable as it is; an empty text as None."""
    return (Lazy(value) if isinstance(value, str) else value) if value else None


@dataclass(frozen=True)
class StageEntry:
    """One stage: how the launcher runs it, and what it writes. Fields that name code take a ``"module:name"``
    text (read as a :class:`Lazy`) or the callable itself."""

    name: str
    """Its name in the plan and the log (an inference shard is ``inference-shard<i>``)."""
    script: str
    """The script or ``python -m`` tool that runs it by hand (``eval_video_llm``, ``merge``...): the log's
    ``step X: <script> <argv>`` line."""
    module: str
    """The package module with its parser and ``config_from_argv`` (or, for a demo tool, its ``main``)."""
    build: Callable | str
    """Plan step -> its Stage object (every step runs as one, in this process)."""
    steps: Callable | str | None = None
    """``steps(entry, context)``: its plan step(s) from the launch settings (``k9bench.pipeline.stages.PlanContext``;
    none: the stage is not in this run). None: not a plan stage (it is :attr:`prepare`'d before the plan)."""
    prepare: Callable | str | None = None
    """Made before the plan's stages (the demo's inputs): ``prepare(entry, settings, preparing)``
    (:class:`k9bench.pipeline.prepare.Preparing`: ``say``, ``enter`` and ``run(step)``, which runs a step's Stage
    as the launcher runs every stage)."""
    checks: tuple[Callable | str, ...] = ()
    """Its preflight (:mod:`k9bench.pipeline.preflight`): each ``check(settings, environ)`` refuses in one line
    naming the variable; run once per run, before any stage, when the stage is in the plan."""
    kind: str = ""
    """The header kind of the file it writes (:mod:`k9bench.headers`); empty: it writes no typed artifact."""
    schema_version: int = 0
    """Set by the one entry that owns :attr:`kind`: the newest version of its header this code reads (and the one it
    writes). A key that old readers may ignore keeps the version; a change of meaning raises it. 0: the kind is
    another entry's (merge writes inference's ``raw``)."""
    header: Lazy | str = ""
    """The owner's typed header class, ``"module:Class"`` (a :class:`k9bench.headers.kinds.Header` subclass whose
    ``KIND`` is :attr:`kind`)."""
    files: Mapping[str, str] = field(default_factory=dict)
    """Role -> the name of a file (or folder) it writes in the :attr:`writes_to` folder: ``{tag}`` is the run tag,
    ``{n}`` the shard count and ``{{i}}`` a shard's number. A name ``<prefix>_{tag}.json`` makes ``<prefix>`` an
    artifact stage of :mod:`k9bench.layout` (``artifact_name``, ``parse_artifact_name``)."""
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
    check of DATASET_NAME, VIDEO_DIR...: ``registry.variable_flag``); otherwise the first entry with the variable does."""
    args_variable: str = ""
    """The ``*_ARGS`` variable a refusal of its argv names (checked with its own parser before anything runs)."""
    probe: Callable | str | None = None
    """``probe(entry, settings)``: a step to check :attr:`args_variable` with when the stage is not in the plan
    (JUDGE_ARGS with the judge off)."""
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
    refresh: Callable | str | None = None
    """``refresh(step, settings, layout)``: finds its inputs again just before it runs (the report: runs at other
    MAX_FRAMES, the judge file); returns a line to say, or None."""
    prints_accuracy: bool = False
    """It prints the accuracy table on stdout when it runs."""
    config_line: Callable | str | None = None
    """``config_line(settings)``: its line in the configuration block the launcher prints first (the judge: on, or
    off and why)."""
    final_note: str = ""
    """Said at the end of a complete run when it is in the plan; ``{folder}`` is its first output's folder."""

    def __post_init__(self) -> None:
        for name in ("build", "steps", "prepare", "probe", "refresh", "config_line", "header"):
            object.__setattr__(self, name, _lazy(getattr(self, name)))
        object.__setattr__(self, "checks", tuple(_lazy(c) for c in self.checks))


_R, _P = "k9bench.pipeline.registry:", "k9bench.pipeline.preflight:"
_K = "k9bench.headers.kinds:"

STAGES: tuple[StageEntry, ...] = (
    StageEntry("demo-model", "tiny_model", "k9bench.tiny_model", "k9bench.pipeline.prepare:DemoModelStage",
               prepare="k9bench.pipeline.prepare:prepare_model", exits={0: "built"}),
    StageEntry("demo-videos", "demo", "k9bench.data.demo", "k9bench.pipeline.prepare:DemoVideosStage",
               prepare="k9bench.pipeline.prepare:prepare_videos", exits={0: "written"}),
    StageEntry("download", "download_videos", "k9bench.download.stage", _R + "build_download", _R + "download_steps", in_shard_runs=True,
               checks=(_P + "dataset",), kind="manifest", schema_version=1, header=_K + "ManifestHeader",
               files={"manifest": "download_manifest.json"}, writes_to="VIDEO_DIR",
               variables={"DATASET_NAME": "--dataset_name", "SPLIT": "--split", "VIDEO_DIR": "--output_dir", "MAX_SAMPLES": "--max_samples"},
               exits={0: "done", 1: "some videos could not be fetched (DOWNLOAD_STRICT=0: the run goes on)", 2: "bad input"},
               shared_lock=".run_eval.download.lock",
               incomplete_note="some videos could not be fetched (see {output}); going on: their questions become failed "
                               "'missing video' records, counted as wrong. DOWNLOAD_STRICT=1 stops here instead."),
    StageEntry("inference", "eval_video_llm", "k9bench.inference.stage", _R + "build_inference", _R + "inference_steps",
               follows=("download",), in_shard_runs=True, checks=(_P + "dataset", _P + "model", _P + "engines"),
               kind="raw", schema_version=1, header=_K + "RawHeader",
               files={"raw": "raw_{tag}.json", "shards": "raw_{tag}.shard{{i}}of{n}.json"}, args_variable="INFER_ARGS", types_shared=True,
               variables={"MODEL_NAME": "--model_name_or_path", "DATASET_NAME": "--dataset_name", "SPLIT": "--split",
                          "VIDEO_DIR": "--video_dir", "MAX_FRAMES": "--max_frames", "MAX_SAMPLES": "--max_samples",
                          "BATCH_SIZE": "--batch_size", "DTYPE": "--torch_dtype", "ATTN_IMPL": "--attn_implementation"},
               exits={0: "done", 1: "every question failed", 2: "bad input", 75: "stopped by a signal, progress saved"}),
    StageEntry("merge", "merge", "k9bench.merge", _R + "build_merge", _R + "merge_steps", follows=("inference",), kind="raw",
               exits={0: "done", 1: "a shard missing or unfinished"}),
    StageEntry("calculate", "evaluate_results", "k9bench.scoring", _R + "build_calculate", _R + "calculate_steps",
               follows=("inference", "merge"), reruns_after=("inference", "merge"), checks=(_P + "embedding_model",),
               kind="sim", schema_version=1, header=_K + "SimHeader", files={"sim": "sim_{tag}.json"}, args_variable="SCORE_ARGS",
               variables={"DEVICE": "--device", "EMBEDDING_MODEL": "--embedding_model", "EMBED_BATCH_SIZE": "--batch_size"},
               exits={0: "done", 2: "bad input"}),
    StageEntry("evaluate", "evaluate_results", "k9bench.scoring", _R + "build_evaluate", _R + "evaluate_steps", follows=("calculate",),
               reruns_after=("calculate",), kind="eval", schema_version=1, header=_K + "EvalHeader", files={"eval": "eval_{tag}.json"},
               args_variable="SCORE_ARGS", variables={"THRESHOLD": "--threshold"}, exits={0: "done", 2: "bad input"}, prints_accuracy=True),
    StageEntry("judge", "subjective_evals", "k9bench.judge", _R + "build_judge", _R + "judge_steps", follows=("evaluate",),
               checks=(_P + "judge_endpoint",), kind="judge", schema_version=1, header=_K + "JudgeHeader",
               files={"judge": "judge_{tag}.json", "judge_skipped": "judge_{tag}_skipped.json"},  # the header: judge_<tag>.json.meta.json
               args_variable="JUDGE_ARGS", probe=_R + "judge_probe", config_line=_R + "judge_config",
               variables={"JUDGE_MODEL": "--judge_model", "JUDGE_BASE_URL": "--base_url"},
               exits={0: "done", 1: "entries left skipped (the report is still written; rerun to retry)", 2: "bad input"},
               incomplete_note="some entries were skipped (see {output}); the report uses the judged ones; rerun to retry them",
               note_output=1, incomplete_ends_run="entries in {output} were not judged; rerun the same command to retry them"),
    StageEntry("llm-label", "python -m k9bench.people llm-label", "k9bench.people.labeller", "k9bench.people.labeller:build",
               "k9bench.people.labeller:steps", follows=("judge",), checks=("k9bench.people.labeller:check", _P + "judge_endpoint"), kind="failure_labels",
               schema_version=1, header="k9bench.people.labels:LabelsHeader", files={"llm_labels": "labels_llm_{tag}.json"},
               variables={"JUDGE_MODEL": "--labeller_model", "JUDGE_BASE_URL": "--base_url"},
               exits={0: "done", 1: "answers left unlabelled (the report uses the labelled ones; rerun to retry)", 2: "bad input"},
               incomplete_note="some wrong answers were not labelled (see {output}); rerun to retry them"),  # LABEL=1, docs/people.md
    StageEntry("report", "evaluate_results", "k9bench.scoring", _R + "build_report", _R + "report_steps", follows=("evaluate", "judge", "llm-label"),
               reruns_after=("evaluate", "judge", "llm-label"), kind="report", schema_version=1, header=_K + "ReportHeader",
               files={"report": "report_{tag}"},  # a folder: report.md, report.json (the header), plots, index.html
               args_variable="SCORE_ARGS", variables={"PUBLISHED": "--published"}, exits={0: "done"}, refresh=_R + "refresh_report",
               final_note="results page: {folder}/index.html"),  # the page the report stage writes beside report.md (docs/view.md)
)
"""Every stage, in the order a run has them."""


# --------------------------------------------------------------------------- what derives from the list


class TableView(Mapping):
    """A read-only mapping worked out from :data:`STAGES` each time it is read (an entry added is seen at once)."""

    def __init__(self, work_out: Callable[[], dict]):
        self._work_out = work_out

    def __getitem__(self, key: Any) -> Any:
        return self._work_out()[key]

    def __iter__(self) -> Iterator:
        return iter(self._work_out())

    def __len__(self) -> int:
        return len(self._work_out())

    def __repr__(self) -> str:
        return repr(self._work_out())


def schema_versions() -> dict[str, int]:
    """Kind -> the newest header version this code reads (its owner's :attr:`StageEntry.schema_version`)."""
    return {e.kind: e.schema_version for e in STAGES if e.kind and e.schema_version}


def stage_kinds() -> dict[str, str]:
    """Stage name -> the kind of file it writes."""
    return {e.name: e.kind for e in STAGES if e.kind}


def header_classes() -> dict[str, Any]:
    """Kind -> its typed header class (imported now)."""
    return {e.kind: e.header.resolve() for e in STAGES if e.kind and e.header}


_ARTIFACT = re.compile(r"^(\w+)_\{tag\}\.json$")


def artifact_stages() -> dict[str, str]:
    """Artifact prefix -> the stage that writes ``<prefix>_<tag>.json`` in OUT_DIR (``raw``, ``sim``, ``eval``,
    ``judge``), in pipeline order."""
    out: dict[str, str] = {}
    for e in STAGES:
        for name in e.files.values() if e.writes_to == "OUT_DIR" else ():
            match = _ARTIFACT.match(name)
            if match:
                out.setdefault(match[1], e.name)
    return out


def run_files(tag: str, num_shards: int = 1) -> dict[str, str]:
    """Role -> the name of every file (or folder) a run tagged ``tag`` writes in OUT_DIR."""
    return {role: name.format(tag=tag, n=num_shards) for e in STAGES if e.writes_to == "OUT_DIR" for role, name in e.files.items()}
