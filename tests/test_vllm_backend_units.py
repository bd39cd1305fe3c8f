"""``--backend vllm`` without vLLM: its flags, the sampling and dtype mapping, the launcher's
``BACKEND=vllm``, and the report's engine cell (the chunk rule and the prompts: tests/test_vllm_prompts.py; the real engine: tests/test_vllm_inprocess.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from k9bench.inference.backend import backend_class
from k9bench.inference.stage import build_parser
from k9bench.inference.vllm.backend import VLLMBackend, _dtype
from k9bench.pipeline.env import LaunchError, read_settings
from k9bench.pipeline.stages import ShardMode

REPO = Path(__file__).resolve().parent.parent


def config(*argv: str):
    from k9bench.inference.settings import config_from_namespace, resolve

    return resolve(config_from_namespace(build_parser().parse_args(["--backend", "vllm", *argv])))


def test_flags_reach_the_settings_and_the_registry_names_the_class():
    c = config("--tensor_parallel", "2", "--gpu_memory_utilization", "0.8", "--max_model_len", "32768", "--enforce_eager")
    assert (c.vllm.tensor_parallel, c.vllm.gpu_memory_utilization, c.vllm.max_model_len, c.vllm.enforce_eager) == (2, 0.8, 32768, True)
    d = config().vllm
    assert (d.tensor_parallel, d.gpu_memory_utilization, d.max_model_len, d.enforce_eager) == (1, 0.9, None, False)
    assert backend_class("vllm") is VLLMBackend


@pytest.mark.parametrize("bad", [["--tensor_parallel", "0"], ["--gpu_memory_utilization", "1.5"], ["--gpu_memory_utilization", "0"],
                                 ["--gpu_memory_utilization", "nan"], ["--max_model_len", "-1"], ["--max_model_len", "0"]])
def test_bad_engine_flags_are_usage_errors(bad, capsys):
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--backend", "vllm", *bad])
    assert exc.value.code == 2 and bad[0] in capsys.readouterr().err


def test_dtype_and_sampling_are_mapped_from_our_flags():
    assert _dtype(config()) == "auto" and _dtype(config("--torch_dtype", "half")) == "float16"
    assert _dtype(config("--bf16")) == "bfloat16" and _dtype(config("--bf16", "False")) == "float32"
    model = {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.0}
    greedy = VLLMBackend(config("--greedy", "--max_new_tokens", "64"))
    greedy._defaults = dict(model)
    assert greedy._generation_settings() == {"do_sample": False, "max_new_tokens": 64, "temperature": 0.0, "top_p": 1.0, "top_k": -1,
                                             "repetition_penalty": 1.0}
    sampled = VLLMBackend(config("--do_sample", "--top_k", "5"))
    sampled._defaults = dict(model)
    got = sampled._generation_settings()
    assert got["do_sample"] is True and (got["temperature"], got["top_p"], got["top_k"]) == (0.7, 0.8, 5)


def test_load_without_vllm_is_one_line_naming_the_environment():
    from k9bench.inference.backend import BackendError

    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(BackendError, match="run eval_video_llm.py from the vLLM environment"):
            VLLMBackend(config()).load()
    else:
        pytest.skip("vLLM is installed here")


def _settings(tmp_path, **env):
    return read_settings({"OUT_DIR": str(tmp_path / "out"), "VIDEO_DIR": str(tmp_path / "v"), **env}, REPO)


def _inference_argv(s, tmp_path) -> list[str]:
    """The inference step's command line in the launcher's plan of ``s``."""
    from k9bench.layout import RunLayout
    from k9bench.pipeline.plan import build_steps

    layout = RunLayout(str(tmp_path / "out"), s["MODEL_NAME"], 32, 10)
    return next(step for step in build_steps(s, layout, ShardMode()) if step.name == "inference").argv


def test_launcher_backend_vllm(tmp_path):
    argv = _inference_argv(_settings(tmp_path, BACKEND="vllm", TENSOR_PARALLEL="2", ATTN_IMPL="sdpa", DTYPE="bfloat16"), tmp_path)
    assert argv[argv.index("--backend"):argv.index("--backend") + 4] == ["--backend", "vllm", "--tensor_parallel", "2"]
    assert "--attn_implementation" not in argv and argv[argv.index("--torch_dtype") + 1] == "bfloat16"
    assert "--backend" not in _inference_argv(_settings(tmp_path), tmp_path)
    with pytest.raises(LaunchError, match="BACKEND=vllm runs the model in this job"):
        _settings(tmp_path, BACKEND="vllm", SERVE_URL="http://127.0.0.1:8000/v1")
    with pytest.raises(LaunchError, match="TENSOR_PARALLEL"):
        _settings(tmp_path, TENSOR_PARALLEL="2")
    with pytest.raises(LaunchError, match="BACKEND"):
        _settings(tmp_path, BACKEND="sglang")
    with pytest.raises(LaunchError, match="BACKEND"):  # a server backend is SERVE/SERVE_URL's, never BACKEND's
        _settings(tmp_path, BACKEND="openai")


def test_launcher_backend_choices_are_the_registry_rows_that_load_weights_here(tmp_path, monkeypatch):
    import dataclasses

    from k9bench.inference import registry
    from k9bench.pipeline.env import LAUNCHER_BACKENDS

    assert LAUNCHER_BACKENDS == tuple(n for n, e in registry.REGISTRY.items() if e.local_weights) == ("hf", "vllm")
    # ATTN_IMPL follows the row's transformers_load, not the backend's name
    monkeypatch.setitem(registry.REGISTRY, "vllm", dataclasses.replace(registry.REGISTRY["vllm"], transformers_load=True))
    argv = _inference_argv(_settings(tmp_path, BACKEND="vllm", ATTN_IMPL="sdpa"), tmp_path)
    assert argv[argv.index("--attn_implementation") + 1] == "sdpa"


def test_report_shows_the_in_process_engine():
    from k9bench.report.markdown import server_text

    engine = {"engine": "vllm", "in_process": True, "version": "0.32.0", "checkpoint": "/m", "dtype": "bfloat16",
              "tensor_parallel": 2, "max_model_len": 8192, "prefix_caching": True}
    assert server_text(engine) == ("in-process; engine vllm; version 0.32.0; checkpoint /m; dtype bfloat16; tensor_parallel 2; "
                                   "max_model_len 8192; prefix_caching True")


def test_the_launcher_asks_the_registry_row_for_the_engine_and_the_gpu_split(tmp_path, monkeypatch):
    """BACKEND's engine check and TENSOR_PARALLEL versus --data_parallel follow the row's engine_module and
    tensor_parallel, not the backend's name."""
    import dataclasses

    from k9bench.inference import registry
    from k9bench.pipeline.preflight import PreflightError, check_backend_engine

    vllm_row = registry.REGISTRY["vllm"]
    assert (vllm_row.engine_module, vllm_row.tensor_parallel) == ("vllm", True)
    assert (registry.REGISTRY["hf"].engine_module, registry.REGISTRY["hf"].tensor_parallel) == ("", False)
    check_backend_engine("hf")  # nothing beyond the project's requirements: no subprocess, no refusal
    monkeypatch.setitem(registry.REGISTRY, "vllm", dataclasses.replace(vllm_row, engine_module="no_such_engine_k9"))
    with pytest.raises(PreflightError) as refused:
        check_backend_engine("vllm")
    line = str(refused.value)
    assert line.startswith(f"BACKEND=vllm: this python ({sys.executable}) cannot import no_such_engine_k9 (ModuleNotFoundError")
    assert "PYTHON=" in line and "\n" not in line
    monkeypatch.setitem(registry.REGISTRY, "vllm", dataclasses.replace(vllm_row, engine_module="json"))
    check_backend_engine("vllm")  # an engine this python has
    # a row that does not split a model: TENSOR_PARALLEL refused, one worker per GPU instead
    monkeypatch.setitem(registry.REGISTRY, "vllm", dataclasses.replace(vllm_row, tensor_parallel=False))
    with pytest.raises(LaunchError, match="TENSOR_PARALLEL goes with SERVE=vllm .* not BACKEND=vllm"):
        _settings(tmp_path, BACKEND="vllm", TENSOR_PARALLEL="2")
    argv = _inference_argv(_settings(tmp_path, BACKEND="vllm", GPUS_PER_NODE="2"), tmp_path)
    assert "--tensor_parallel" not in argv and argv[argv.index("--data_parallel") + 1] == "2"
    assert argv[argv.index("--backend") + 1] == "vllm"  # still the backend asked for, not the default
    # BACKEND=hf said outright still goes with a server (SERVE/SERVE_URL replace the default backend)
    argv = _inference_argv(_settings(tmp_path, BACKEND="hf", SERVE_URL="http://127.0.0.1:8000/v1"), tmp_path)
    assert argv[argv.index("--backend") + 1] == "openai"


def test_audio_is_refused_before_anything_loads(tmp_path, capsys):
    """``--backend vllm --audio``: one line naming the flag, exit 2, no traceback, before the engine (or vLLM's import,
    which this environment lacks: reaching it would be exit 3) and before any video is read."""
    import eval_video_llm
    from k9bench.inference import registry

    assert registry.REGISTRY["vllm"].audio is False and registry.REGISTRY["hf"].audio is True
    out = tmp_path / "raw.json"
    code = eval_video_llm.main(["--backend", "vllm", "--audio", "--model_name_or_path", str(tmp_path / "no_model"), "--dataset_name", "demo",
                                "--video_dir", str(tmp_path / "videos"), "--output_file", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    (line,) = [x for x in err.splitlines() if "--audio" in x]
    assert "--backend vllm sends the model no soundtrack" in line and "hf" in line
    assert not out.exists() and not (tmp_path / "videos").exists()
