"""The launcher's stages: one :class:`Step` per stage of the plan, run through the Stage contract.

A stage whose package class is wired in :data:`PACKAGE_STAGES` runs as that class (its own ``done()``,
stage block, locks and signal policy, through :func:`k9bench.stage.run_stage`). Every other stage runs
as a :class:`ScriptStage`: the script's ``main(argv)`` in this process, with the stage block the
contract asks for kept in a record beside the output (``OUT_DIR/.k9bench/<output>.stage.json``):
the result-changing settings (the script's own parse of its argv, secrets masked), the digest of each
input file (prompt files, the previous stage's output) and of each output. ``done()`` is then None
only when every output exists, is the file that stage wrote, and was made with today's settings from
today's inputs; else it says why.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from k9bench.stage import Stage, file_digest

log = logging.getLogger("k9bench.pipeline")

RECORD_DIR = ".k9bench"
"""The folder (in OUT_DIR, and in VIDEO_DIR for the download) of the stage records and superseded outputs."""

NOT_RESULT = {
    "*": {"help", "verbose", "quiet"},
    "eval_video_llm": {"batch_size", "concurrency", "max_retries", "retry_backoff", "timeout", "download_cookies",
                       "download_cookies_from_browser", "download_workers", "prefetch_videos", "frame_cache_dir", "auto_download",
                       "no_retry_failed", "data_parallel"},
    "evaluate_results": {"batch_size"},
    "subjective_evals": {"concurrency", "max_retries", "retry_backoff", "retry_backoff_max", "timeout"},
    "download_videos": {"workers", "retries", "sleep_interval", "timeout", "cookies", "cookies_from_browser", "reverify"},
}
"""Flags that change how a stage runs but not what it produces: changing them reruns nothing."""

CONTENT_FLAGS = {"eval_video_llm": ("system_prompt_file",), "subjective_evals": ("prompt_file",)}
"""Flags naming a file whose content is an input of the stage (a changed prompt file reruns it)."""


def record_path(output: Path) -> Path:
    return output.parent / RECORD_DIR / f"{output.name}.stage.json"


def script_fingerprint(script: str, argv: list[str], ignore: frozenset[str] = frozenset()) -> dict:
    """The result-changing settings of ``script`` run with ``argv``: its own parser's values, without
    :data:`NOT_RESULT`, secrets masked (a record never holds a key)."""
    from k9bench.pipeline.scripts import build_parser
    from k9bench.redact import redact

    values = vars(build_parser(script).parse_args(list(argv)))
    skip = NOT_RESULT["*"] | NOT_RESULT.get(script, set()) | set(ignore)
    clean = {k: (list(v) if isinstance(v, tuple) else v) for k, v in sorted(values.items()) if k not in skip}
    return json.loads(json.dumps(redact(clean), default=str))


def content_inputs(script: str, argv: list[str]) -> list[Path]:
    """The files named by the stage's :data:`CONTENT_FLAGS` (those that exist)."""
    from k9bench.pipeline.scripts import build_parser

    if script not in CONTENT_FLAGS:
        return []
    values = vars(build_parser(script).parse_args(list(argv)))
    out = []
    for name in CONTENT_FLAGS[script]:
        value = values.get(name)
        if value and Path(value).is_file():
            out.append(Path(value))
    return out


@dataclass
class Step:
    """One stage of a launcher run, as the plan holds it."""

    name: str
    """Its name in the plan and the log: download, inference, inference-shard<i>, merge, calculate, evaluate, judge, report."""
    script: str
    """The script or tool it runs (:mod:`k9bench.pipeline.scripts`)."""
    argv: list[str]
    outputs: list[Path]
    inputs: list[Path] = field(default_factory=list)
    """Earlier outputs this stage reads (their content is part of its record)."""
    depends: tuple[str, ...] = ()
    """Steps whose running makes this one run again."""
    companions: list[Path] = field(default_factory=list)
    """Files moved aside with the outputs when stale outputs are replaced (checkpoints, sidecars)."""
    complete_codes: tuple[int, ...] = (0,)
    """Exit codes after which the stage counts as done."""
    incomplete_codes: tuple[int, ...] = ()
    """Exit codes after which the run goes on but the stage runs again next time (skipped judge entries...)."""
    replace_stale: bool = False
    """Move stale outputs aside (never deleted) before running: for the costly ones (raw files, judge scores);
    the others are recomputed in place from inputs that are kept."""
    fingerprint_ignore: frozenset[str] = frozenset()
    run_argv: Callable[[list[str]], list[str]] | None = None
    """Rewrites argv just before it runs (the URL of a server started for it)."""
    served: bool = False
    """Runs through a server the launcher starts (SERVE=vllm): a ScriptStage, whose argv gets the URL at run time."""


class ScriptStage(Stage):
    """A stage run as its script's ``main(argv)``, its stage block kept in a record beside the output."""

    def __init__(self, step: Step):
        self.step = step
        self.name = step.name
        self._fingerprint: dict | None = None

    def outputs(self) -> list[Path]:
        return list(self.step.outputs)

    def inputs(self) -> list[Path]:
        return [*self.step.inputs, *content_inputs(self.step.script, self.step.argv)]

    def fingerprint(self) -> dict:
        if self._fingerprint is None:
            self._fingerprint = script_fingerprint(self.step.script, self.step.argv, self.step.fingerprint_ignore)
        return self._fingerprint

    def record_file(self) -> Path:
        return record_path(self.step.outputs[0])

    def recorded(self) -> dict | None:
        try:
            data = json.loads(self.record_file().read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return None
        return data if isinstance(data, dict) else None

    def done(self) -> str | None:
        reason = super().done()
        if reason:
            return reason
        block = self.recorded() or {}
        if block.get("state") != "done":
            return f"its last run did not complete (exit {block.get('exit')})"
        for path, digest in (block.get("outputs") or {}).items():
            if not Path(path).is_file() or file_digest(path) != digest:
                return f"{path} changed since this stage wrote it"
        return None

    def input_digests(self) -> dict[str, str]:
        return {str(p): file_digest(p) for p in self.inputs() if Path(p).is_file()}

    def write_record(self, code: int, complete: bool) -> None:
        from k9bench.artifact_io import write_json_atomic

        block = self.stage_block()
        block.update(state="done" if complete else "incomplete", exit=code, written_at=time.strftime("%Y-%m-%dT%H:%M:%S"),
                     outputs={str(p): file_digest(p) for p in self.step.outputs if Path(p).is_file()})
        path = self.record_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, block)

    def run(self) -> int:
        from k9bench.pipeline.scripts import run_main

        argv = self.step.run_argv(self.step.argv) if self.step.run_argv else self.step.argv
        return run_main(self.step.script, argv)


def _factories() -> dict[str, Callable[[Step], Stage]]:
    from k9bench.pipeline.registry import STAGES

    return {e.name: e.build for e in STAGES if e.build is not None}


PACKAGE_STAGES: dict[str, Callable[[Step], Stage]] = _factories()
"""Steps run as their package's Stage class (built from the step's argv by the package's own
``config_from_argv``, :mod:`k9bench.pipeline.registry`): the class writes and reads its own stage block. A
step not listed (or run with ``run_argv``, e.g. through a server started for it) runs as a :class:`ScriptStage`."""

_judge = PACKAGE_STAGES["judge"]
"""The judge's factory (tests wire it alone)."""


def make_stage(step: Step) -> Stage:
    """The Stage object that runs ``step``."""
    from k9bench.pipeline.registry import entry

    factory = PACKAGE_STAGES.get(entry(step.name).name)
    if factory is not None and step.run_argv is None and not step.served:
        return factory(step)
    return ScriptStage(step)


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


def supersede(paths: list[Path], out_dir: Path) -> list[tuple[Path, Path]]:
    """Move the existing ``paths`` aside into ``OUT_DIR/.k9bench/superseded/<time>/`` (never deleted)."""
    moved = []
    folder = out_dir / RECORD_DIR / "superseded" / time.strftime("%Y%m%d-%H%M%S")
    for path in paths:
        if path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / path.name
            os.replace(path, target)
            moved.append((path, target))
    return moved


def raw_mismatch(path: Path, *, model: str, dataset: str, split: str, audio: bool) -> str | None:
    """What differs between an existing raw file (made without a record: another tool, an older launcher)
    and this run's MODEL_NAME, DATASET_NAME, SPLIT and AUDIO; None when nothing it records differs."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        return f"cannot be read ({exc})"
    if not isinstance(data, dict):
        return None
    inference = data.get("inference") or {}
    ds = inference.get("dataset") or {}
    heard = (inference.get("frames") or {}).get("audio", inference.get("audio"))
    pairs = (("MODEL_NAME", data.get("model_name_or_path"), model), ("DATASET_NAME", ds.get("source"), dataset),
             ("SPLIT", ds.get("split"), split), ("AUDIO", None if heard is None else int(heard), int(audio)))
    diffs = [f"{name}={have!r} there, {want!r} now" for name, have, want in pairs if have is not None and have != want]
    return "; ".join(diffs) or None
