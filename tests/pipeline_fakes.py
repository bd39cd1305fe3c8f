"""Shared helpers of the launcher's in-process tests: a clean launcher environment and stand-in stages.

The stand-ins replace the work of each stage (:func:`use_fakes` swaps each registry entry's ``build`` for a
:class:`FakeStage`), so that the plan, reruns, locks, signals and SLURM wiring are tested in milliseconds;
what decides a rerun (the outputs, the input files, the settings fingerprint) is still the real Stage's.
The real chain runs in tests/test_pipeline_demo.py and tests/test_launcher.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import threading
from pathlib import Path

import pytest

from k9bench.pipeline import registry
from k9bench.stage import Stage, file_digest

REPO = Path(__file__).resolve().parent.parent

LAUNCHER_VARS = ("OPENAI_API_KEY", "JUDGE_BASE_URL", "JUDGE_MODEL", "MODEL_NAME", "MAX_FRAMES", "MAX_SAMPLES", "VIDEO_DIR", "OUT_DIR",
                 "DATASET_NAME", "SPLIT", "NUM_SHARDS", "SHARD_ID", "DEMO", "VENV", "INFER_ARGS", "SCORE_ARGS", "JUDGE_ARGS",
                 "THRESHOLD", "DEVICE", "DTYPE", "ATTN_IMPL", "BATCH_SIZE", "EMBED_BATCH_SIZE", "EMBEDDING_MODEL", "AUDIO",
                 "THINKING_MODE", "DOWNLOAD_STRICT", "REPORT", "PUBLISHED", "K9_FINALIZE", "SERVE", "SERVE_URL", "SERVE_ARGS",
                 "TENSOR_PARALLEL", "GPUS", "GPUS_PER_NODE", "HF_TOKEN", "CUDA_VISIBLE_DEVICES")


def comparable_eval(path: Path) -> dict:
    """An eval file without what legitimately differs between runs (times, paths, provenance)."""
    data = json.loads(Path(path).read_text())
    keep = ("eval_mode", "threshold", "accuracy", "correct_count", "total_count", "category_wise_accuracy", "statistics")
    out = {k: data.get(k) for k in keep}
    out["records"] = [{k: v for k, v in r.items() if k != "timestamp"} for r in data["individual_results"]]
    return out


def checkpoint_lines(path: Path) -> int:
    """The records a checkpoint holds so far (0 before it exists)."""
    try:
        return sum(1 for line in path.read_text().splitlines() if line.strip())
    except FileNotFoundError:
        return 0


def option(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


class FakeScripts:
    """Stand-in work of every stage (the ``runner(script, argv)`` of a :class:`FakeStage`): writes each script's
    outputs (their content names the argv), records each call."""

    def __init__(self):
        self.calls: list[tuple[str, list[str]]] = []
        self.codes: dict[str, int] = {}
        """script or ``script:mode`` -> the exit code to return (after writing the outputs)."""
        self.hooks: dict[str, object] = {}

    def names(self) -> list[str]:
        out = []
        for script, argv in self.calls:
            if script == "evaluate_results":
                out.append({"calculate": "calculate", "evaluate": "evaluate", "report": "report"}[option(argv, "--mode")])
            else:
                out.append({"download_videos": "download", "eval_video_llm": "inference", "subjective_evals": "judge",
                            "merge": "merge", "tiny_model": "demo-model", "demo": "demo-videos"}.get(script, script))
        return out

    def __call__(self, script: str, argv: list[str]) -> int:
        self.calls.append((script, list(argv)))
        key = f"{script}:{option(argv, '--mode')}" if script == "evaluate_results" else script
        hook = self.hooks.get(key)
        if hook is not None:
            hook(argv)
        body = json.dumps({"script": script, "argv": argv, "call": len(self.calls)})
        if script == "download_videos":
            folder = Path(option(argv, "--output_dir"))
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "download_manifest.json").write_text(body)
        elif script in ("eval_video_llm", "merge") or key in ("evaluate_results:calculate", "evaluate_results:evaluate"):
            Path(option(argv, "--output_file")).write_text(body)
        elif key == "evaluate_results:report":
            folder = Path(option(argv, "--report_dir"))
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "report.md").write_text(body)
        elif script == "subjective_evals":
            Path(option(argv, "--output")).write_text(body)
            Path(option(argv, "--skipped")).write_text("[]")
        elif script == "tiny_model":
            Path(argv[0]).mkdir(parents=True)
            (Path(argv[0]) / "config.json").write_text("{}")
        return self.codes.get(key, 0)


class FakeStage(Stage):
    """A step's real Stage (built by its registry entry) for its inputs and fingerprint; its work is the
    stand-in runner's (``runner(script, argv)``), and its stage block is kept beside its first output."""

    def __init__(self, step, real: Stage, runner):
        self.step, self.real, self.runner, self.name = step, real, runner, step.name

    def outputs(self) -> list[Path]:
        return list(self.step.outputs)

    def folder_outputs(self) -> set[Path]:
        return self.real.folder_outputs()

    def inputs(self) -> list[Path]:
        return [Path(p) for p in self.real.inputs()]

    def fingerprint(self) -> dict:
        from k9bench.redact import redact

        return json.loads(json.dumps(redact(self.real.fingerprint()), default=str))  # a record never holds a key

    def input_digests(self) -> dict[str, str]:
        return {str(p): file_digest(p) for p in self.inputs() if p.is_file()}

    def record_file(self) -> Path:
        first = self.step.outputs[0]
        return first.parent / ".k9bench" / f"{first.name}.fake-stage.json"

    def recorded(self) -> dict | None:
        try:
            return json.loads(self.record_file().read_text())
        except (OSError, ValueError):
            return None

    def run(self) -> int:
        code = self.runner(self.step.script, list(self.step.argv))
        for out in self.step.outputs:  # what the runner did not write (a stage it does not know: any new entry)
            if not out.exists():
                if out in self.folder_outputs():
                    out.mkdir(parents=True)
                else:
                    out.write_text(json.dumps({"script": self.step.script, "argv": self.step.argv}))
        if code == 0:
            self.record_file().parent.mkdir(parents=True, exist_ok=True)
            self.record_file().write_text(json.dumps(self.stage_block()))
        else:
            self.record_file().unlink(missing_ok=True)
        return code


def use_fakes(monkeypatch, runner, real: tuple[str, ...] = ()) -> None:
    """Every registry entry but those named in ``real`` runs as a :class:`FakeStage` of ``runner``."""
    def faked(build):
        def make(step):
            return FakeStage(step, build(step), runner)

        make.real_build = build  # a second use_fakes (another runner, other real stages) starts from the real ones
        return make

    entries = []
    for e in registry.STAGES:
        build = getattr(e.build, "real_build", e.build)
        entries.append(dataclasses.replace(e, build=build if e.name in real else faked(build)))
    entries = tuple(entries)
    monkeypatch.setattr(registry, "STAGES", entries)
    monkeypatch.setattr(registry, "BY_NAME", {e.name: e for e in entries})


@pytest.fixture
def fake(monkeypatch):
    """Every stage's work through :class:`FakeScripts` (:func:`use_fakes`)."""
    runner = FakeScripts()
    use_fakes(monkeypatch, runner)
    return runner


@pytest.fixture
def listener():
    """A loopback port that accepts connections (a judge endpoint for the preflight's probe)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    stop = threading.Event()

    def accept():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}/v1"
    stop.set()
    thread.join()
    server.close()


@pytest.fixture
def launcher_env(monkeypatch, tmp_path):
    """A clean launcher environment in ``tmp_path``: demo set, an existing model folder and embedding folder.
    Returns a function that sets more variables."""
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    for name in list(os.environ):
        if name.startswith("SLURM_"):
            monkeypatch.delenv(name)
    model = tmp_path / "models" / "tiny-m"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    embed = tmp_path / "models" / "embed"
    embed.mkdir()
    base = {"K9BENCH_DIR": str(REPO), "MODEL_NAME": str(model), "DATASET_NAME": "demo", "MAX_SAMPLES": "-1", "MAX_FRAMES": "4",
            "VIDEO_DIR": str(tmp_path / "videos"), "OUT_DIR": str(tmp_path / "out"), "EMBEDDING_MODEL": str(embed),
            "DEVICE": "cpu", "K9BENCH_NO_PROGRESS": "1"}
    monkeypatch.chdir(tmp_path)

    given: set[str] = set()

    def set_env(**values: str) -> dict:
        """The base settings plus ``values``; what an earlier call set and this one does not is unset."""
        for key in given - set(values):
            monkeypatch.delenv(key, raising=False)
        given.clear()
        given.update(values)
        for key, value in {**base, **values}.items():
            monkeypatch.setenv(key, value)
        return {**base, **values}

    set_env()
    return set_env


TAG = "tiny-m_mf4_n-1"
