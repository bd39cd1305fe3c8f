"""Every script answers --help fast (heavy imports stay inside functions) and has the usual shape."""

import ast
import subprocess
import sys
import time

import pytest

SCRIPTS = ["download_videos.py", "eval_video_llm.py", "evaluate_results.py", "subjective_evals.py"]
HEAVY = ("torch", "transformers", "sentence_transformers", "yt_dlp", "openai", "av", "decord", "datasets", "matplotlib")


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_is_fast_and_imports_nothing_heavy(repo_root, script):
    probe = (
        "import sys, runpy\n"
        f"sys.argv = [{script!r}, '--help']\n"
        "try:\n"
        f"    runpy.run_path({script!r}, run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    code = e.code\n"
        f"heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        "print('HEAVY=' + ','.join(heavy), file=sys.stderr)\n"
        "sys.exit(code or 0)\n"
    )
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", probe], cwd=repo_root, capture_output=True, text=True, timeout=60)
    elapsed = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr
    assert "usage:" in proc.stdout
    assert "HEAVY=\n" in proc.stderr or proc.stderr.rstrip().endswith("HEAVY="), proc.stderr
    assert elapsed < 2.0, f"{script} --help took {elapsed:.2f}s"


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_shape(repo_root, script):
    tree = ast.parse((repo_root / script).read_text())
    assert ast.get_docstring(tree) and "python" in ast.get_docstring(tree)  # usage examples up top
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert {"build_parser", "main"} <= names
