"""The launcher's steps: one :class:`Step` per stage of the plan (what the registry's entry made of the
launch settings), what steps are made of (the shard mode, the inference command line, the demo's note),
and the note a stage that ended "incomplete" leaves for the next run.

Every step runs as its entry's Stage object (:func:`k9bench.pipeline.registry.make_stage`), in this
process, through :func:`k9bench.stage.run_stage`: the Stage writes its own stage block into its artifact
and its ``done()`` reads it back. A step's ``argv`` is the record of how to run it by hand (the log's
``step X: <script> <argv>`` line), written out from what its Stage's settings are built from: the step's
:attr:`Step.values` (by flag, typed where the launcher decides them) and the user's ``*_ARGS`` (free-form, so
only the stage's own parser reads them).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from k9bench.data.published import DEFAULT_THINKING_LIMIT
from k9bench.inference.registry import DEFAULT_BACKEND, REGISTRY
from k9bench.layout import RunLayout

# (LaunchSettings, k9bench.pipeline.env's, is named in annotations only: env reaches the registry, which imports this module)

RECORD_DIR = ".k9bench"
"""The folder (in OUT_DIR) of the launcher's notes on its stages (:func:`incomplete_marker`)."""

SERVED_URL = "http://127.0.0.1:0/v1"
"""Stands for the URL of the server SERVE=vllm starts (known once it runs; not part of any record)."""


@dataclass(frozen=True)
class ShardMode:
    """How this run shards inference (from NUM_SHARDS/SHARD_ID or the SLURM array: :mod:`k9bench.pipeline.slurm`)."""

    num_shards: int = 1
    shard_id: int | None = None
    """Only this shard (an array task, or SHARD_ID); None: every shard in turn."""
    finalize: bool = False
    """K9_FINALIZE=1: merge and score only (the array's merge job)."""
    in_array: bool = False

    @property
    def shard_only(self) -> bool:
        """This launch runs one shard of several (an array task, SHARD_ID): the merge job (or K9_FINALIZE=1)
        does the rest."""
        return self.num_shards > 1 and self.shard_id is not None and not self.finalize


@dataclass(frozen=True)
class PlanContext:
    """What an entry's :attr:`~k9bench.pipeline.registry.StageEntry.steps` makes its steps from."""

    settings: "LaunchSettings"
    layout: RunLayout
    mode: ShardMode


@dataclass
class Step:
    """One stage of a launcher run, as the plan holds it."""

    name: str
    """Its name in the plan and the log: its registry entry's name (an inference shard: ``inference-shard<i>``)."""
    script: str
    """The script or tool that runs it by hand (:attr:`k9bench.pipeline.registry.StageEntry.script`)."""
    outputs: list[Path]
    values: Mapping[str, Any] = field(default_factory=dict)
    """What the launcher sets, by the stage's flag (``{"--max_frames": "8", "--output_file": Path(...), "--greedy": True}``):
    its Stage's settings are built from these with the stage's own parser
    (:meth:`k9bench.cli.ArgumentParser.parse_values`), the launcher variables' texts through their flags' types."""
    extra: tuple[str, ...] = ()
    """The user's ``*_ARGS`` for it: free-form, so the stage's own parser reads them (over :attr:`values`: they win)."""
    positional: tuple[str, ...] = ()
    """Positional arguments of a stage without a settings parser (merge's shard files, the tiny model's folder)."""
    inputs: list[Path] = field(default_factory=list)
    """Earlier outputs this stage reads (their content is part of its record)."""
    depends: tuple[str, ...] = ()
    """Steps whose running makes this one run again."""
    complete_codes: tuple[int, ...] = (0,)
    """Exit codes after which the stage counts as done."""
    incomplete_codes: tuple[int, ...] = ()
    """Exit codes after which the run goes on but the stage runs again next time (skipped judge entries...)."""
    served: bool = False
    """Runs through the server the launcher starts (SERVE=vllm): its Stage is built again, with the server's
    URL, once the server answers (:meth:`with_url`)."""

    @property
    def argv(self) -> list[str]:
        """Its command line by hand (the log's ``step X: <script> <argv>`` line, the record of how to rerun it):
        :attr:`positional`, then :attr:`values` written out (:func:`argv_of`), then :attr:`extra`."""
        return [*self.positional, *argv_of(self.values), *self.extra]

    def with_url(self, placeholder: str, url: str) -> "Step":
        """This step with each value ``placeholder`` replaced by ``url`` (the started server's)."""
        return dataclasses.replace(self, values={k: url if v == placeholder else v for k, v in self.values.items()})


def argv_of(values: Mapping[str, Any]) -> list[str]:
    """Values by flag as a command line: ``True`` is the bare flag, ``False``/None leave it out, a list gives one
    argument per item, anything else its text."""
    argv: list[str] = []
    for flag, value in values.items():
        if value is True:
            argv.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, (list, tuple)):
            argv += [flag, *map(str, value)]
        else:
            argv += [flag, str(value)]
    return argv


def incomplete_marker(step: Step) -> Path:
    """Where the launcher notes that a stage ended "incomplete" (judge entries skipped...): its next run retries."""
    return step.outputs[0].parent / RECORD_DIR / f"{step.outputs[0].name}.incomplete"


def mark_incomplete(step: Step, code: int | None) -> None:
    """Note (``code``) or clear (None) that the stage's last run left work to retry."""
    marker = incomplete_marker(step)
    if code is None:
        marker.unlink(missing_ok=True)
        return
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(f"{code}\n")


# --------------------------------------------------------------------------- what steps are made of


def video_transport() -> str:
    """The transport that sends our sampled frames as a video to a vLLM/SGLang server."""
    from k9bench.inference.openai_compat.settings import TRANSPORTS

    return "video" if "video" in TRANSPORTS else "video_url"


def inference_values(s: "LaunchSettings", variables: Mapping[str, str], output: Path, shard: int | None,
                     num_shards: int) -> dict[str, Any]:
    """The inference step's values by flag (:attr:`Step.values`): its entry's ``variables`` (launcher variable ->
    flag) and what the launcher decides (the output, the backend, the shard)."""
    v = s.values
    served = bool(v["SERVE"] or v["SERVE_URL"])
    backend = REGISTRY[v["BACKEND"]]
    # DTYPE goes to a backend that loads the weights here, ATTN_IMPL to one that transformers loads
    left_out = {"DTYPE", "ATTN_IMPL"} if served else set() if backend.transformers_load else {"ATTN_IMPL"}
    values: dict[str, Any] = {flag: v[var] for var, flag in variables.items() if var not in left_out and v[var] != ""}
    values["--output_file"] = output
    if served:
        values |= {"--backend": "openai", "--base_url": v["SERVE_URL"] or SERVED_URL, "--api_model": v["MODEL_NAME"],
                   "--video_transport": video_transport()}
    else:
        if v["BACKEND"] != DEFAULT_BACKEND:
            values["--backend"] = v["BACKEND"]
        if backend.tensor_parallel:  # one model copy over the job's GPUs
            values["--tensor_parallel"] = v["TENSOR_PARALLEL"] or v["GPUS"] or "1"
    values |= {"--thinking_mode": s.thinking, "--audio": s.audio}
    if s.thinking and v["THINKING_LIMIT"] != DEFAULT_THINKING_LIMIT:  # eval_video_llm.py's default
        values["--thinking_limit"] = v["THINKING_LIMIT"]
    if shard is not None:
        values |= {"--num_shards": num_shards, "--shard_id": shard}
    if v["GPUS_PER_NODE"] and int(v["GPUS_PER_NODE"]) > 1 and not served and not backend.tensor_parallel:
        values["--data_parallel"] = v["GPUS_PER_NODE"]
    return values


def demo_note(s: "LaunchSettings") -> tuple[str, str, bool]:
    """(what runs, what the scores mean, random weights?) for the demo's banner and report note."""
    v = s.values
    model = v["MODEL_NAME"]
    random = s.demo_build_model or (Path(model, "config.json").is_file() and Path(model).name.startswith("tiny-"))
    who = f"a tiny RANDOM-WEIGHT model ({model})" if random else f"MODEL_NAME={model}"
    n = int(v["MAX_SAMPLES"])
    if v["DATASET_NAME"] == "demo":
        questions = (f"all {s.demo_questions} questions of the synthetic demo set" if n == -1 or n >= s.demo_questions
                     else f"the first {n} of the {s.demo_questions} synthetic demo questions")
    elif n == -1:
        questions = f"every question of DATASET_NAME={v['DATASET_NAME']}"
    else:
        questions = f"the first {n} question{'' if n == 1 else 's'} of DATASET_NAME={v['DATASET_NAME']}"
    from k9bench.report.model import model_display_name  # a venv path would fill five lines of every figure's stamp

    what = f"{who} answers {questions}, scored with EMBEDDING_MODEL={model_display_name(v['EMBEDDING_MODEL'])}"
    meaning = ("its answers are gibberish, so these scores are MEANINGLESS (they only show that the pipeline works)" if random
               else "a demo-sized run: these scores are not comparable to the paper's")
    return what, meaning, random
