"""Issue 31 item 3: the scoring stage's refusals that need no torch come before its ~10 s import: a device
that cannot be here, flash_attention_2 where it cannot run, an --embedding_model that is a file or a folder
with no model in it. One line naming the flag, in about a second."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import evaluate_results
from k9bench.models import accelerator as acc
from k9bench.scoring import embedding
from tests.test_evaluate_results import raw_file  # noqa: F401 (fixture)

REPO = Path(__file__).resolve().parent.parent


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if " ERROR " in line or ": error: " in line]


@pytest.fixture
def no_load(monkeypatch):
    """Fails the test if sentence-transformers is reached (the model load), or torch is asked for the device."""

    def refuse(*args, **kwargs):
        raise AssertionError("reached torch before the refusal")

    monkeypatch.setattr(acc, "resolve_device", refuse)
    monkeypatch.setattr(acc, "resolve_attention", refuse)


CASES = [
    # (id, flags, env, exit, words)
    ("cuda:7, every GPU hidden", ["--device", "cuda:7"], {"CUDA_VISIBLE_DEVICES": ""}, 2, ["--device cuda:7", "no CUDA device"]),
    ("flash_attention_2 on cpu", ["--device", "cpu", "--attn_implementation", "flash_attention_2"], {}, 2,
     ["flash_attention_2", "needs a CUDA GPU (device is cpu)"]),
    ("flash_attention_2, every GPU hidden", ["--attn_implementation", "flash_attention_2"], {"CUDA_VISIBLE_DEVICES": "-1"}, 2,
     ["flash_attention_2", "needs a CUDA GPU"]),
    ("embedding model that is a file", ["--device", "cpu", "--embedding_model", "FILE"], {}, 1, ["--embedding_model", "a file, not a folder"]),
    ("embedding model folder that is empty", ["--device", "cpu", "--embedding_model", "EMPTY"], {}, 1,
     ["--embedding_model", "neither modules.json nor config.json"]),
]


@pytest.mark.parametrize("extra, env, code, words", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused_before_torch(no_load, raw_file, tmp_path, monkeypatch, capsys, extra, env, code, words):  # noqa: F811
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "model.bin").write_bytes(b"weights?")
    (tmp_path / "empty").mkdir()
    argv = [a.replace("FILE", str(tmp_path / "model.bin")).replace("EMPTY", str(tmp_path / "empty")) for a in extra]
    before = sorted(p.name for p in tmp_path.iterdir())
    assert evaluate_results.main(["--mode", "calculate", "--input_file", str(raw_file), *argv]) == code
    lines = error_lines(capsys.readouterr().err)
    assert len(lines) == 1 and all(w in lines[0] for w in words), lines
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_an_old_style_sentence_transformers_folder_is_not_refused(tmp_path):
    """A folder with modules.json and its transformer in a subfolder (no config.json at the top) is a model."""
    (tmp_path / "modules.json").write_text("[]")
    embedding.check_model_source(str(tmp_path))  # no EmbeddingError


def test_the_script_answers_without_importing_torch(raw_file, tmp_path):  # noqa: F811
    code = ("import runpy, sys; sys.argv = sys.argv[1:]\n"
            "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "finally:\n    print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')\n")
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code, str(REPO / "evaluate_results.py"), "--mode", "calculate",
                           "--input_file", str(raw_file), "--device", "cuda:7"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2 and len(error_lines(proc.stderr)) == 1, proc.stderr
    assert proc.stdout.strip().endswith("NO-TORCH") and time.monotonic() - started < 10
