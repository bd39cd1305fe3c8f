"""The launcher's behaviour snapshot, recorded from the bash run_eval.sh (684 lines) and docs/launcher.md
before the launcher became Python: every variable with its default, every file name, every exit code.
A change here is a change users see: make it on purpose, and say so in docs/launcher.md."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from k9bench.layout import RunLayout
from k9bench.pipeline.env import VARIABLES, OTHER_VARIABLES, read_settings
from k9bench.pipeline.plan import build_steps
from k9bench.pipeline.stages import ShardMode
from tests.pipeline_fakes import fake, launcher_env, listener  # noqa: F401 (fixtures)
from tests.test_pipeline import launch

REPO = Path(__file__).resolve().parent.parent

DEFAULTS_BEFORE = {
    # `bash run_eval.sh --help` of the bash launcher ("Defaults now"), plus its own ${VAR:-default} lines
    "MODEL_NAME": "Qwen/Qwen3-VL-4B-Instruct", "MAX_FRAMES": "32", "MAX_SAMPLES": "10", "VIDEO_DIR": "./k9bench_videos",
    "DATASET_NAME": "ogmen/K9Bench", "SPLIT": "test", "BATCH_SIZE": "auto", "DTYPE": "", "ATTN_IMPL": "",
    "EMBEDDING_MODEL": "Qwen/Qwen3-Embedding-8B", "EMBED_BATCH_SIZE": "32", "DEVICE": "auto", "THRESHOLD": "0.5",
    "JUDGE_MODEL": "gpt-4o", "JUDGE_BASE_URL": "", "OUT_DIR": "eval_results", "AUDIO": "0", "THINKING_MODE": "auto",
    "DOWNLOAD_STRICT": "0", "REPORT": "1", "PUBLISHED": "matching", "K9_FINALIZE": "0",
}
OTHER_BEFORE = ("OPENAI_API_KEY", "NUM_SHARDS", "SHARD_ID", "INFER_ARGS", "SCORE_ARGS", "JUDGE_ARGS", "PYTHON", "VENV", "K9BENCH_DIR",
                "DEMO")
DEMO_BEFORE = {"OUT_DIR": "demo_out", "DATASET_NAME": "demo", "VIDEO_DIR": "demo_out/videos", "MODEL_NAME": "demo_out/tiny-qwen3vl",
               "MAX_FRAMES": "4", "MAX_SAMPLES": "-1", "DTYPE": "float32", "ATTN_IMPL": "sdpa", "DEVICE": "cpu"}
HEADER_BEFORE = {"--job-name=k9bench-eval", "--nodes=1", "--ntasks=1", "--cpus-per-task=10", "--gpus=a40:1", "--requeue",
                 "--signal=B:USR1@100", "--open-mode=append", "--output=slurm_logs/%x-%j.out"}


def test_every_variable_keeps_its_name_and_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = read_settings({}, REPO)
    assert {name: s[name] for name in DEFAULTS_BEFORE} == DEFAULTS_BEFORE
    names = {v.name for v in VARIABLES} | {n for n, _ in OTHER_VARIABLES}
    assert set(DEFAULTS_BEFORE) | set(OTHER_BEFORE) <= names
    assert s.extra == {"INFER_ARGS": (), "SCORE_ARGS": (), "JUDGE_ARGS": (), "SERVE_ARGS": ()}
    demo = read_settings({"DEMO": "1"}, REPO)
    assert {k: demo[k] for k in DEMO_BEFORE} == DEMO_BEFORE
    assert demo.extra["INFER_ARGS"] == ("--device", "cpu", "--max_new_tokens", "24", "--greedy")
    av = read_settings({"DEMO": "1", "AUDIO": "1"}, REPO)
    assert (av["VIDEO_DIR"], av["MODEL_NAME"]) == ("demo_out/videos_av", "demo_out/tiny-qwen2_5omni")


def test_every_file_name_is_as_before(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = read_settings({"OPENAI_API_KEY": "sk-snapshot-123456"}, REPO)
    layout = RunLayout("eval_results", s["MODEL_NAME"], 32, 10)
    outputs = {step.name: [str(p) for p in step.outputs] for step in build_steps(s, layout, ShardMode())}
    tag = "Qwen3-VL-4B-Instruct_mf32_n10"
    assert outputs == {
        "download": ["k9bench_videos/download_manifest.json"],
        "inference": [f"eval_results/raw_{tag}.json"],
        "calculate": [f"eval_results/sim_{tag}.json"],
        "evaluate": [f"eval_results/eval_{tag}.json"],
        "judge": [f"eval_results/judge_{tag}.json", f"eval_results/judge_{tag}_skipped.json"],
        "report": [f"eval_results/report_{tag}/report.md"],
    }
    shards = [str(p) for step in build_steps(s, layout, ShardMode(num_shards=2)) if step.name == "merge" for p in step.inputs]
    assert shards == [f"eval_results/raw_{tag}.shard0of2.json", f"eval_results/raw_{tag}.shard1of2.json"]
    assert RunLayout("eval_results", s["MODEL_NAME"], 32, 10, audio=True).path("raw").name == f"raw_{tag}_av.json"
    header = {ln.split()[1] for ln in (REPO / "run_eval.sh").read_text().splitlines() if ln.startswith("#SBATCH")}
    assert header == HEADER_BEFORE
    text = "\n".join(p.read_text() for p in [*(REPO / "k9bench" / "pipeline").glob("*.py"), REPO / "k9bench" / "stage_table.py"])
    for marker in (".finalize_", ".run_eval.download.lock", "-merge"):
        assert marker in text, marker  # the array's markers and locks keep their names
    from k9bench.pipeline import registry  # the demo's locks are .run_eval.<entry name>.lock: demo-model, demo-videos

    assert 'f".run_eval.{e.name}.lock"' in text and {"demo-model", "demo-videos"} <= set(registry.BY_NAME)


EXIT_CODES = [
    ("a bad setting", {"THRESHOLD": "7"}, None, 2),
    ("a stage's own failure", {}, ("evaluate_results:calculate", 3), 3),
    ("judge entries skipped", {"JUDGE_BASE_URL": "listener"}, ("subjective_evals", 1), 1),
    ("SIGUSR1 outside SLURM", {}, ("eval_video_llm", signal.SIGUSR1), 138),
    ("SIGTERM", {}, ("eval_video_llm", signal.SIGTERM), 143),
    ("Ctrl-C", {}, ("eval_video_llm", signal.SIGINT), 130),
    ("done", {}, None, 0),
]


@pytest.mark.parametrize("what, env, behaviour, code", EXIT_CODES, ids=[c[0] for c in EXIT_CODES])
def test_every_exit_code_is_as_before(fake, launcher_env, listener, capsys, what, env, behaviour, code):
    import os

    launcher_env(**{k: (listener if v == "listener" else v) for k, v in env.items()})
    if behaviour is not None:
        key, value = behaviour
        if isinstance(value, signal.Signals):
            fake.hooks[key] = lambda argv: os.kill(os.getpid(), value)
        else:
            fake.codes[key] = value
    assert launch(fake, capsys)[0] == code
    assert launch(fake, capsys, "stray")[0] == 2  # arguments other than --dry_run/--help: refused
