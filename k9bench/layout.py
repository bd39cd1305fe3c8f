"""Artifact names: every file a run writes is named here, and nowhere else.

The launcher (``run_eval.sh``) asks this module for its file names
(``python -m k9bench.layout --model M --max_frames F --max_samples N``) instead of building
them itself; the scripts use the same functions for their defaults. Names are only names:
readers (the report, the merge) take a run's settings from the files' contents, not from them.

Layout of one run ``<tag> = <model short name>_mf<frames>_n<samples>`` in ``OUT_DIR`` (an
audio+video run, ``--audio`` / ``AUDIO=1``, is tagged ``<model short name>_mf<frames>_n<samples>_av``,
so it never shares a file with the video-only run of the same model and budget)::

    raw_<tag>.json               eval_video_llm.py        (+ raw_<tag>.json.partial.jsonl checkpoint while running)
    raw_<tag>.shard<i>of<n>.json one task of a sharded run
    sim_<tag>.json               evaluate_results.py --mode calculate
    eval_<tag>.json              evaluate_results.py --mode evaluate
    judge_<tag>.json             subjective_evals.py      (+ judge_<tag>_skipped.json, .meta.json)
    report_<tag>/                evaluate_results.py --mode report

``python -m k9bench.layout --check_env`` is the launcher's preflight: it reads the launcher's
environment values, fills in the defaults the scripts' own flags define (so no default is
restated in ``run_eval.sh``), checks every value and the output folders before anything runs,
and prints the settings as shell assignments, or one line naming the variable and exit 2.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from k9bench.validators import positive_int, unit_interval

STAGES = ("raw", "sim", "eval", "judge")
"""Artifact stages, in pipeline order (the file-name prefixes)."""


def short_model_name(model: str) -> str:
    """The part of a model id after the last ``/`` (the launcher's file-name form)."""
    return str(model).rstrip("/").rsplit("/", 1)[-1]


AUDIO_SUFFIX = "_av"
"""The tag suffix of an audio+video run (the model hears the videos' soundtracks too)."""


def run_tag(model: str, max_frames: int, max_samples: int, audio: bool = False) -> str:
    """``<model short name>_mf<frames>_n<samples>`` (``..._av`` with ``audio``): names one run's artifacts."""
    return f"{short_model_name(model)}_mf{max_frames}_n{max_samples}{AUDIO_SUFFIX if audio else ''}"


def artifact_name(stage: str, model: str, max_frames: int, max_samples: int, audio: bool = False) -> str:
    """``<stage>_<tag>.json``, e.g. ``raw_Qwen3-VL-4B-Instruct_mf32_n10.json`` (``..._n10_av.json`` with ``audio``)."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}; one of {', '.join(STAGES)}")
    return f"{stage}_{run_tag(model, max_frames, max_samples, audio)}.json"


def shard_path(output: str | Path, num_shards: int, shard_id: int) -> Path:
    """``x.json`` -> ``x.shard{i}of{n}.json`` for a sharded run (unchanged when not sharded or already so named)."""
    output = Path(output)
    tag = f"shard{shard_id}of{num_shards}"
    if num_shards <= 1 or tag in output.name:
        return output
    suffix = output.suffix or ".json"
    stem = output.name[: -len(output.suffix)] if output.suffix else output.name
    return output.with_name(f"{stem}.{tag}{suffix}")


def next_stage_path(input_path: str | Path, stage: str) -> Path:
    """The default output of ``stage`` beside ``input_path``: a ``raw_``/``sim_``/``eval_`` prefix is
    replaced (``raw_X.json`` -> ``sim_X.json``); other names get ``_<stage>`` before the suffix
    (``judge`` drops the ``.json`` of any suffix, as subjective_evals.py always did)."""
    p = Path(input_path)
    for prefix in ("raw_", "sim_", "eval_"):
        if p.name.startswith(prefix):
            rest = p.name[len(prefix):]
            if stage == "judge":
                rest = rest[:-5] if rest.endswith(".json") else rest
                return p.with_name(f"judge_{rest}.json")
            return p.with_name(f"{stage}_{rest}")
    if stage == "judge":
        stem = p.name[:-5] if p.name.endswith(".json") else p.name
        return p.with_name(f"judge_{stem}.json")
    return p.with_name(f"{p.stem}_{stage}{p.suffix or '.json'}")


def skipped_path(judge_output: str | Path) -> Path:
    """``<judge output stem>_skipped.json`` beside the judge output."""
    p = Path(judge_output)
    stem = p.name[:-5] if p.name.endswith(".json") else p.name
    return p.with_name(f"{stem}_skipped.json")


def checkpoint_path(final: str | Path) -> Path:
    """The append-only checkpoint log beside a final artifact: ``x.json`` -> ``x.json.partial.jsonl``."""
    p = Path(final)
    return p.with_name(p.name + ".partial.jsonl")


_NAME_RE = re.compile(r"^(?P<stage>raw|sim|eval|judge)_(?P<model>.+?)_mf(?P<frames>-?\d+)_n(?P<samples>-?\d+)(?P<av>_av)?(?P<rest>[._].*)?$")


@dataclass(frozen=True)
class ArtifactName:
    """What a launcher-style file name says. Only a label: readers take settings from contents."""

    stage: str
    """``raw``, ``sim``, ``eval`` or ``judge``."""
    model: str
    """The model's short name."""
    max_frames: int
    """The frame budget in the name."""
    max_samples: int
    """The question count asked for in the name."""
    audio: bool = False
    """The name carries the audio+video suffix ``_av``."""


def parse_artifact_name(path: str | Path) -> ArtifactName | None:
    """The parts of ``<stage>_<model>_mf<F>_n<N>[...].json``, or None for any other name."""
    name = Path(path).name
    stem = name[:-5] if name.endswith(".json") else name
    match = _NAME_RE.match(stem)
    if not match:
        return None
    return ArtifactName(stage=match["stage"], model=match["model"], max_frames=int(match["frames"]), max_samples=int(match["samples"]),
                        audio=bool(match["av"]))


@dataclass(frozen=True)
class RunLayout:
    """Every path of one launcher run in ``out_dir``."""

    out_dir: str
    """The run's output folder (``OUT_DIR``)."""
    model: str
    """Model id or path (``MODEL_NAME``)."""
    max_frames: int
    """Frame budget (``MAX_FRAMES``)."""
    max_samples: int
    """Question count asked for (``MAX_SAMPLES``)."""
    audio: bool = False
    """The model hears the soundtracks too (``AUDIO=1``): every name gets the ``_av`` tag."""

    @property
    def tag(self) -> str:
        return run_tag(self.model, self.max_frames, self.max_samples, self.audio)

    def path(self, stage: str) -> Path:
        return Path(self.out_dir) / artifact_name(stage, self.model, self.max_frames, self.max_samples, self.audio)

    def shell_vars(self, num_shards: int = 1) -> dict[str, str]:
        """The launcher's variables: MODEL_SHORT TAG RAW SIM EVAL JUDGE JUDGE_SKIPPED REPORT_DIR SHARD_PATTERN."""
        raw = self.path("raw")
        judge = self.path("judge")
        return {
            "MODEL_SHORT": short_model_name(self.model),
            "TAG": self.tag,
            "RAW": str(raw),
            "SIM": str(self.path("sim")),
            "EVAL": str(self.path("eval")),
            "JUDGE": str(judge),
            "JUDGE_SKIPPED": str(skipped_path(judge)),
            "REPORT_DIR": str(Path(self.out_dir) / f"report_{self.tag}"),
            # the launcher substitutes the shard number for {i}
            "SHARD_PATTERN": str(raw.with_name(f"raw_{self.tag}.shard{{i}}of{num_shards}.json")),
        }


# ---------------------------------------------------------------------------------------------
# The launcher's preflight (run_eval.sh)


class LauncherError(ValueError):
    """A launcher setting that cannot work; the message names the environment variable."""


def _device(text: str) -> str:
    """``auto``, ``cpu``, ``mps``, ``cuda`` or ``cuda:N``, and CUDA only where a CUDA device exists."""
    if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"expected auto, cpu, mps, cuda or cuda:N, got {text!r}")
    if text.startswith("cuda"):
        import torch  # only for an explicit CUDA request

        if not torch.cuda.is_available():
            raise argparse.ArgumentTypeError("no CUDA device is available here")
        index = int(text.split(":")[1]) if ":" in text else 0
        if index >= torch.cuda.device_count():
            raise argparse.ArgumentTypeError(f"only {torch.cuda.device_count()} CUDA device(s) here")
    return text


def _max_frames(text: str) -> int:
    value = int(text)
    if value != 0 and value < 2:
        raise argparse.ArgumentTypeError(f"expected 0 (text only) or at least 2 (frame counts are rounded to even numbers), got {text!r}")
    return value


def _max_samples(text: str) -> int:
    value = int(text)
    if value != -1 and value < 1:
        raise argparse.ArgumentTypeError(f"expected -1 (all questions) or a positive integer, got {text!r}")
    return value


def _batch_size(text: str) -> int | str:
    """A positive integer or ``auto`` (eval_video_llm.py's own flag type decides too)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1 or auto, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _zero_one(text: str) -> str:
    if text not in ("0", "1"):
        raise argparse.ArgumentTypeError(f"expected 0 or 1, got {text!r}")
    return text


def _url(text: str) -> str:
    if not re.match(r"https?://[^/\s]+", text):
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL, got {text!r}")
    return text


@dataclass(frozen=True)
class LauncherSetting:
    """One environment variable of ``run_eval.sh`` and the script flag that receives it."""

    name: str
    """The environment variable."""
    script: str
    """The script (module name) whose flag takes the value; its default is the launcher's."""
    flag: str
    """That flag."""
    check: Callable[[str], object] | None = None
    """The launcher's own check of the text, on top of the flag's type and choices."""
    default: str | None = None
    """The launcher's own default, where it has one (the SPEC's launcher table); else the flag's."""
    check_first: bool = False
    """Run :attr:`check` before the flag's own type, so its message (naming the variable's values) wins."""


LAUNCHER_SETTINGS: tuple[LauncherSetting, ...] = (
    LauncherSetting("MODEL_NAME", "eval_video_llm", "--model_name_or_path"),
    LauncherSetting("MAX_FRAMES", "eval_video_llm", "--max_frames", _max_frames),
    LauncherSetting("MAX_SAMPLES", "eval_video_llm", "--max_samples", _max_samples, default="10"),
    LauncherSetting("VIDEO_DIR", "eval_video_llm", "--video_dir"),
    LauncherSetting("DATASET_NAME", "eval_video_llm", "--dataset_name"),
    LauncherSetting("SPLIT", "eval_video_llm", "--split"),
    LauncherSetting("BATCH_SIZE", "eval_video_llm", "--batch_size", _batch_size, check_first=True),
    LauncherSetting("DTYPE", "eval_video_llm", "--torch_dtype"),
    LauncherSetting("ATTN_IMPL", "eval_video_llm", "--attn_implementation"),
    LauncherSetting("EMBEDDING_MODEL", "evaluate_results", "--embedding_model"),
    LauncherSetting("EMBED_BATCH_SIZE", "evaluate_results", "--batch_size", positive_int),
    LauncherSetting("DEVICE", "evaluate_results", "--device", _device),
    LauncherSetting("THRESHOLD", "evaluate_results", "--threshold", unit_interval),
    LauncherSetting("JUDGE_MODEL", "subjective_evals", "--judge_model"),
    LauncherSetting("JUDGE_BASE_URL", "subjective_evals", "--base_url", _url),
    LauncherSetting("OUT_DIR", "", "", default="eval_results"),
    # 1 passes eval_video_llm.py --audio (a switch) and names the artifacts ..._av
    LauncherSetting("AUDIO", "", "", _zero_one, default="0"),
)

OUTPUT_FOLDERS = ("OUT_DIR", "VIDEO_DIR")
"""Folders the launcher writes into (artifacts; downloaded videos): checked before anything runs."""


def _flag_action(script: str, flag: str, parsers: dict) -> argparse.Action:
    """The argparse action of ``flag`` in ``script``'s own parser (imported lazily; the scripts'
    imports are light, --help stays instant)."""
    if script not in parsers:
        import importlib

        root = str(Path(__file__).resolve().parent.parent)
        if root not in sys.path:
            sys.path.insert(0, root)
        parsers[script] = importlib.import_module(script).build_parser()
    for action in parsers[script]._actions:
        if flag in action.option_strings:
            return action
    raise KeyError(f"{script}.py has no flag {flag}")


def _refusal(name: str, text: str, kind: object, exc: Exception) -> LauncherError:
    """One line naming the variable: ``THRESHOLD must be a number in [0, 1], got '5'``."""
    if isinstance(exc, argparse.ArgumentTypeError):
        why = str(exc)
        if why.startswith("expected "):
            return LauncherError(f"{name} must be {why[len('expected '):]}")
        return LauncherError(f"{name}={text}: {why}")
    expected = {int: "an integer", float: "a number"}.get(kind, "a valid value")  # type: ignore[call-overload]
    return LauncherError(f"{name} must be {expected}, got {text!r}")


def check_setting(setting: LauncherSetting, text: str, parsers: dict | None = None) -> None:
    """Check one value as its script's flag would parse it (type, choices), then the launcher's own rule."""
    parsers = {} if parsers is None else parsers
    action = _flag_action(setting.script, setting.flag, parsers) if setting.script else argparse.Action([], setting.name)
    for kind in ((setting.check, action.type) if setting.check_first else (action.type, setting.check)):
        if kind is None:
            continue
        try:
            kind(text)
        except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
            raise _refusal(setting.name, text, kind, exc) from None
    if action.choices is not None and text not in action.choices:
        raise LauncherError(f"{setting.name} must be one of {', '.join(map(str, action.choices))}, got {text!r}")


def check_output_folder(name: str, folder: str) -> None:
    """``folder`` is a writable folder or can be made as one; nothing is left behind (a nameless
    probe file is opened and closed in the nearest existing folder)."""
    if not folder:
        raise LauncherError(f"{name} is empty; give a folder")
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise LauncherError(f"{name}={folder} is a file, not a folder")
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir():
        raise LauncherError(f"{name}={folder} cannot be created: {probe} is not a folder")
    try:
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as exc:
        raise LauncherError(f"{name}={folder} is not writable ({probe}: {exc.strerror or exc})") from None


def setting_default(setting: LauncherSetting, parsers: dict | None = None) -> object:
    """The launcher's own default, else the default of the script flag that takes the value."""
    if setting.default is not None or not setting.script:
        return setting.default
    return _flag_action(setting.script, setting.flag, {} if parsers is None else parsers).default


def _looks_local(model: str) -> bool:
    """A model given as a local path (``./m``, ``/m``, ``~/m``) rather than a Hub id."""
    return model.startswith((".", "/", "~"))


def launcher_settings(env: Mapping[str, str], *, model_to_build: bool = False) -> dict[str, str]:
    """The launcher's settings from ``env``: an unset or empty variable takes its script flag's
    default ("" when that default is None: the flag is then not passed). Raises
    :class:`LauncherError` (one line naming the variable) on the first value that cannot work.
    A MODEL_NAME given as a local path must exist, unless ``model_to_build`` (the demo builds it)."""
    parsers: dict = {}
    out: dict[str, str] = {}
    for setting in LAUNCHER_SETTINGS:
        text = env.get(setting.name, "")
        if text:
            check_setting(setting, text, parsers)
            out[setting.name] = text
        else:
            default = setting_default(setting, parsers)
            out[setting.name] = "" if default is None else str(default)
    model = out["MODEL_NAME"]
    if not model_to_build and _looks_local(model) and not Path(model).expanduser().exists():
        raise LauncherError(f"MODEL_NAME={model}: no such folder (a local model path; a Hub id looks like org/name)")
    for name in OUTPUT_FOLDERS:
        check_output_folder(name, out[name])
    if out["DATASET_NAME"] == "demo":
        from k9bench.demo import demo_rows

        out["DEMO_QUESTIONS"] = str(len(demo_rows()))
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the launcher's file names (or, with ``--check_env``, its checked settings) as shell
    assignments: ``eval "$(python -m k9bench.layout ...)"``."""
    parser = argparse.ArgumentParser(prog="python -m k9bench.layout", description="Print a run's artifact paths as shell variables.")
    parser.add_argument("--check_env", action="store_true",
                        help="check run_eval.sh's environment values and output folders; print them with the scripts' defaults "
                             "filled in, or one line naming the culprit (on stdout) and exit 2")
    parser.add_argument("--model_to_build", action="store_true", help="with --check_env: MODEL_NAME is a folder the launcher builds (DEMO)")
    parser.add_argument("--defaults", action="store_true", help="list the launcher's variables with their script flags and defaults")
    parser.add_argument("--out_dir")
    parser.add_argument("--model")
    parser.add_argument("--max_frames", type=int)
    parser.add_argument("--max_samples", type=int)
    parser.add_argument("--num_shards", type=int, default=1)
    parser.add_argument("--audio", action="store_true", help="an audio+video run: the tag ends in _av")
    args = parser.parse_args(argv)
    if args.defaults:
        parsers: dict = {}
        lines = ["Defaults now (the launcher's own, else the script flag's):"]
        for setting in LAUNCHER_SETTINGS:
            default = setting_default(setting, parsers)
            shown = "(not passed: the script decides)" if default is None else str(default)
            where = "run_eval.sh" if setting.default is not None or not setting.script else f"{setting.script}.py {setting.flag}"
            lines.append(f"  {setting.name:<17}{shown:<36} {where}")
        print("\n".join(lines))
        return 0
    if args.check_env:
        try:
            values = launcher_settings(os.environ, model_to_build=args.model_to_build)
        except LauncherError as exc:
            print(exc)
            return 2
    else:
        missing = [f"--{k}" for k in ("out_dir", "model", "max_frames", "max_samples") if getattr(args, k) is None]
        if missing:
            parser.error(f"the following arguments are required: {', '.join(missing)}")
        layout = RunLayout(out_dir=args.out_dir, model=args.model, max_frames=args.max_frames, max_samples=args.max_samples,
                           audio=args.audio)
        values = layout.shell_vars(args.num_shards)
    for key, value in values.items():
        print(f"{key}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
