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


def _installed_only_env() -> dict:
    """The environment of a user outside the checkout: nothing on PYTHONPATH, so ``k9bench`` is
    importable only through its installation (``pip install -e .``, requirements-dev.txt)."""
    import os

    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}


@pytest.mark.parametrize("module", ["k9bench.layout", "k9bench.prefetch", "k9bench.data.demo", "k9bench.prompts"])
def test_the_package_tools_run_from_any_folder(tmp_path, module):
    """Issue 25 item 3: after the README's install step, ``cd /tmp && python -m k9bench.layout --help`` works."""
    args = [sys.executable, "-m", module, "--help"] if module != "k9bench.prompts" else [sys.executable, "-m", module, "from-reference", "--help"]
    proc = subprocess.run(args, cwd=tmp_path, env=_installed_only_env(), capture_output=True, text=True, timeout=60)
    assert "No module named 'k9bench'" not in proc.stderr, (
        "k9bench is not installed in this environment: run `pip install -r requirements-dev.txt` (or `pip install -e .`) "
        "from the repository root")
    assert proc.returncode == 0 and "usage:" in proc.stdout, proc.stderr
    assert not list(tmp_path.iterdir())  # --help writes nothing where it is run


def test_the_installed_package_finds_its_data_files(tmp_path):
    """The prompts and the demo set are read as package data, from wherever the package is installed."""
    code = ("from k9bench.prompts import load_prompt; from k9bench.data.demo import demo_rows; "
            "print(len(load_prompt('system_prompt')[0]) > 0, len(load_prompt('judge_prompt')[0]) > 0, len(demo_rows()))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=_installed_only_env(), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True", "12"]


@pytest.mark.slow
def test_a_built_wheel_holds_every_subpackage_and_data_file(repo_root, tmp_path):
    """pyproject's package data: a wheel (what a non-editable install gets) carries the prompt texts,
    the demo set and every subpackage of the checkout."""
    import shutil
    import zipfile

    src = tmp_path / "src"  # a copy, so that the build leaves nothing in the checkout
    shutil.copytree(repo_root / "k9bench", src / "k9bench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(repo_root / "pyproject.toml", src)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--disable-pip-version-check",
                           "-q", "-w", str(tmp_path), str(src)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("k9bench-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"k9bench/prompts/system_prompt.txt", "k9bench/prompts/judge_prompt.txt", "k9bench/data/demo.jsonl"} <= names
    packages = {str(p.parent.relative_to(repo_root)) + "/__init__.py" for p in (repo_root / "k9bench").rglob("__init__.py")}
    assert packages <= names, sorted(packages - names)
    assert not any(n.startswith(("tests/", "bench/")) for n in names)
