"""README.md and docs/*.md name only what exists: every --flag in the parser of the script it is
given to, every launcher variable in run_eval.sh (the architecture page's module table is checked by
tests/test_package_layout.py), every relative link and anchor; the README stays short and its test command is the one CI runs."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import re
from functools import lru_cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]

# The scripts whose flags the pages may name, as the pages spell them.
ROOT_SCRIPTS = ("download_videos.py", "eval_video_llm.py", "evaluate_results.py", "subjective_evals.py")
MODULES = ("k9bench.merge", "k9bench.tiny_model", "k9bench.data.demo", "k9bench.layout", "k9bench.prefetch", "k9bench.prompts",
           "k9bench.pipeline", "k9bench.data.subset", "k9bench.view", "k9bench.people")

# The script a page documents: its flags outside a command line belong to it.
PAGE_SCRIPT = {
    "download.md": "download_videos.py",
    "inference.md": "eval_video_llm.py",
    "dataset.md": "eval_video_llm.py",
    "scoring.md": "evaluate_results.py",
    "judge.md": "subjective_evals.py",
}

# Other programs whose command lines the pages show: their flags are not ours to check.
FOREIGN_PROGRAMS = {"sbatch", "vllm", "pip", "pytest", "hf", "unshare", "sh", "ip", "mkdir", "export", "git",
                    "sglang.launch_server", "http.server", "venv", "for", "do"}
# Flags of those programs that the pages name in prose, each with its program.
FOREIGN_FLAGS = {
    "--signal": "sbatch", "--open-mode": "sbatch", "--kill-on-invalid-dep": "sbatch", "--array": "sbatch",
    "--gpus": "sbatch", "--dependency": "sbatch", "--requeue": "sbatch", "--time": "sbatch", "--gres": "sbatch",
    "--enable-prefix-caching": "vllm", "--no-enable-prefix-caching": "vllm", "--limit-mm-per-prompt": "vllm",
    "--max-model-len": "vllm", "--max-num-seqs": "vllm", "--media-io-kwargs": "vllm",
    "--allowed-local-media-path": "vllm", "--served-model-name": "vllm", "--api-key": "vllm",
    "--tensor-parallel-size": "vllm", "--pipeline-parallel-size": "vllm", "--mm-encoder-tp-mode": "vllm",
    "--disable-radix-cache": "sglang", "--repo-type": "hf", "--local-dir": "hf", "--enable-expert-parallel": "vllm",
    "--trust-request-mm-kwargs": "vllm", "--enforce-eager": "vllm",
}

FLAG = re.compile(r"(?<![\w-])--[A-Za-z][A-Za-z0-9_-]*")
SCRIPT_REF = re.compile(
    r"(?:(?<![\w/])bench/)?\b(bench_\w+\.py)\b"
    r"|\b(download_videos\.py|eval_video_llm\.py|evaluate_results\.py|subjective_evals\.py)\b"
    r"|\bk9bench[./](merge|tiny_model|demo|layout|prefetch|prompts)\b"
    r"|(?:^|[\s`(])(?:python3? -m |-m )([\w.]+)"
    r"|^\s*(?:[A-Z][A-Z0-9_]*=\S*\s+)*([\w.-]+)"
)


class _Captured(BaseException):
    """Raised in place of parsing, carrying the parser a main() built."""

    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__()
        self.parser = parser


def _parser_of_main(main) -> argparse.ArgumentParser:
    """The parser main() builds, for the modules that have no build_parser()."""
    original = argparse.ArgumentParser.parse_known_args

    def capture(self, args=None, namespace=None):
        raise _Captured(self)

    argparse.ArgumentParser.parse_known_args = capture
    try:
        main(["--help"])
    except _Captured as captured:
        return captured.parser
    finally:
        argparse.ArgumentParser.parse_known_args = original
    raise AssertionError(f"{main.__module__}.main() never parsed its arguments")


def _load_file(path: Path):
    spec = importlib.util.spec_from_file_location(f"_docs_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@lru_cache(maxsize=None)
def flags_of(script: str) -> frozenset[str]:
    """Every option string of a script's parser ('eval_video_llm.py', 'bench_video.py', 'k9bench.merge')."""
    if script.endswith(".py"):
        path = REPO / script if (REPO / script).is_file() else REPO / "bench" / script
        assert path.is_file(), f"the docs name {script}, which does not exist"
        module = _load_file(path)
    else:
        module = importlib.import_module(script)
        if not hasattr(module, "build_parser") and not hasattr(module, "main"):  # a package run as python -m
            module = importlib.import_module(f"{script}.__main__")
    parser = module.build_parser() if hasattr(module, "build_parser") else _parser_of_main(module.main)
    parsers, flags = [parser], set()
    while parsers:  # subcommands' flags too (python -m k9bench.prompts from-reference --output_dir)
        current = parsers.pop()
        for action in current._actions:
            flags.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
    return frozenset(flags)


def all_flags() -> frozenset[str]:
    return frozenset().union(*(flags_of(s) for s in (*ROOT_SCRIPTS, *MODULES)))


def _owner(ref: re.Match) -> str | None:
    """The script (or foreign program) a SCRIPT_REF match names; None when it names nothing known."""
    bench, root, module, dash_m, program = ref.groups()
    if bench:
        return bench
    if root:
        return root
    if module:
        return f"k9bench.{module}"
    if dash_m:
        if dash_m.startswith("k9bench."):
            return dash_m if dash_m in MODULES else None
        return dash_m  # python -m pytest / sglang.launch_server / http.server / venv
    if program in FOREIGN_PROGRAMS:
        return program
    return None


def _command_flags(segment: str):
    """(owner, flag) for one command segment; owner None when the segment names no program."""
    owner = None
    pos = 0
    for ref in SCRIPT_REF.finditer(segment):
        found = _owner(ref)
        if found is None:
            continue
        for flag in FLAG.findall(segment[pos:ref.start()]):
            yield owner, flag
        owner, pos = found, ref.end()
    for flag in FLAG.findall(segment[pos:]):
        yield owner, flag


def _split_commands(line: str) -> list[str]:
    return [part for part in re.split(r"&&|\|\||;|\||\$\(|\)", line) if part.strip()]


def _prose_flags(block: str, first_line: int, default: str | None):
    """(line number, owner, flag) in a prose block: a sentence's flags belong to the last script it
    named before them, else to the page's script; an inline code span holding a command line is read
    as one."""
    offset = 0
    block = re.sub(r"\]\([^)]*\)", "]", block)  # link targets are not flags
    for sentence in re.split(r"(?<=[.!?])\s+(?=[`A-Z(*])", block):
        start = block.index(sentence, offset)
        offset = start + len(sentence)
        context = default
        items = []  # (position in sentence, owner, flag)
        pos = 0
        for span in re.finditer(r"`([^`]+)`", sentence):
            items += [(pos + m.start(), context, m.group()) for m in FLAG.finditer(sentence[pos:span.start()])]
            text = span.group(1)
            if not text.startswith("-") and any(_owner(r) for r in SCRIPT_REF.finditer(text)):
                last = None
                for segment in _split_commands(text):
                    items += [(span.start(), owner or context, flag) for owner, flag in _command_flags(segment)]
                    for ref in SCRIPT_REF.finditer(segment):
                        last = _owner(ref) or last
                if last in (*ROOT_SCRIPTS, *MODULES) or (last or "").startswith("bench_"):
                    context = last
            else:
                items += [(span.start(), context, flag) for flag in FLAG.findall(text)]
            pos = span.end()
        items += [(pos + m.start(), context, m.group()) for m in FLAG.finditer(sentence[pos:])]
        for where, owner, flag in items:
            yield first_line + block[: start + where].count("\n"), owner, flag


def named_flags(page: Path):
    """(line number, owner or None, flag) for every --flag the page names."""
    default = PAGE_SCRIPT.get(page.name)
    lines = page.read_text().splitlines()
    in_code, lang, pending, pending_no = False, "", "", 0
    block, block_start = [], 0

    def flush():
        if block:
            yield from _prose_flags("\n".join(block), block_start, default)
            block.clear()

    for no, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            yield from flush()
            in_code, lang = (not in_code), line.strip()[3:]
            continue
        if in_code:
            if lang == "python":
                continue
            code, _, comment = line.partition(" #")
            if code.lstrip().startswith("#"):
                code, comment = "", code
            if pending:
                code, no = pending + " " + code, pending_no
            if code.rstrip().endswith("\\"):
                pending, pending_no = code.rstrip()[:-1], no
                continue
            pending = ""
            for segment in _split_commands(code):
                for owner, flag in _command_flags(segment):
                    yield no, owner or default, flag
            for flag in FLAG.findall(comment):
                yield no, default, flag
            continue
        # prose: a paragraph is one block; each table row and list item is a block of its own
        stripped = line.strip()
        if not stripped or stripped.startswith(("|", "- ", "#")) or re.match(r"\d+\. ", stripped):
            yield from flush()
        if not stripped:
            continue
        if stripped.startswith("|"):
            for cell in stripped.split("|"):
                yield from _prose_flags(cell, no, default)
            continue
        if not block:
            block_start = no
        block.append(line)
    yield from flush()


def _problems(page: Path) -> list[str]:
    problems = []
    for no, owner, flag in named_flags(page):
        ours = owner is None or owner in (*ROOT_SCRIPTS, *MODULES) or owner.startswith("bench_")
        if flag in FOREIGN_FLAGS or not ours:  # another program's flag (sbatch, vllm, python -m vllm.entrypoints...)
            continue
        if owner is None:
            if flag not in all_flags():
                problems.append(f"{page.name}:{no}: {flag} is a flag of no script")
        elif flag not in flags_of(owner):
            problems.append(f"{page.name}:{no}: {flag} is not a flag of {owner}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_flag_a_page_names_exists(page):
    assert not _problems(page), "\n".join(_problems(page))


def test_the_docs_name_the_scripts_and_pages_the_issue_asks_for():
    for name in ("download.md", "inference.md", "scoring.md", "judge.md", "artifacts.md", "launcher.md",
                 "reproducing-the-paper.md", "architecture.md", "install.md"):
        assert (DOCS / name).is_file(), name
    seen = {owner for page in PAGES for _, owner, _ in named_flags(page)}
    assert set(ROOT_SCRIPTS) <= seen, set(ROOT_SCRIPTS) - seen


def test_flag_check_catches_a_wrong_flag(tmp_path):
    page = tmp_path / "inference.md"
    page.write_text("Use `--max_frame 8`.\n\n```bash\npython evaluate_results.py --mode all --max_frames 4\n```\n"
                    "`download_videos.py --workers 2` and `--cookies x`.\n")
    assert _problems(page) == [
        "inference.md:1: --max_frame is not a flag of eval_video_llm.py",
        "inference.md:4: --max_frames is not a flag of evaluate_results.py",
    ]


def test_readme_is_short_and_its_test_command_is_what_ci_runs():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines (at most 200)"
    start = lines.index("## Run the tests")
    fence = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
    command = lines[fence + 1].strip()
    assert command == "python -m pytest"
    ci = (REPO / ".ci" / "run").read_text()
    assert f"'ip link set lo up && {command}'" in ci
    assert "python3 -m venv" in ci and "--system-site-packages" not in ci
    assert "-r requirements-dev.txt" in ci


def _launcher_variables(page: Path) -> set[str]:
    text = page.read_text()
    names = set()
    if page.name == "launcher.md":
        names |= set(re.findall(r"`([A-Z][A-Z0-9_]{2,})(?:=[^`]*)?`", text))
    for line in text.splitlines():
        if "run_eval.sh" in line:
            names |= set(re.findall(r"(?:^|[\s`(])([A-Z][A-Z0-9_]{2,})=", line))
    return names


@lru_cache(maxsize=None)
def _launcher_source() -> str:
    """The launcher: run_eval.sh and the package it runs (python -m k9bench.pipeline and the modules it reads)."""
    return "\n".join([(REPO / "run_eval.sh").read_text(), *(p.read_text() for p in sorted((REPO / "k9bench").rglob("*.py")))])


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_launcher_variable_the_docs_name_is_known_to_the_launcher(page):
    source = _launcher_source()
    missing = sorted(name for name in _launcher_variables(page) if not re.search(rf"\b{name}\b", source))
    assert not missing, f"{page.name} names launcher variables the launcher does not know: {missing}"


def test_launcher_page_lists_every_variable_of_the_launcher_help():
    """Every variable ``bash run_eval.sh --help`` lists (k9bench.pipeline.env's tables) is described."""
    env = importlib.import_module("k9bench.pipeline.env")
    documented = {v.name for v in env.VARIABLES} | {name for name, _ in env.OTHER_VARIABLES}
    assert {"MODEL_NAME", "OUT_DIR", "JUDGE_ARGS", "VENV"} <= documented
    page = (DOCS / "launcher.md").read_text()
    missing = sorted(name for name in documented if f"`{name}`" not in page)
    assert not missing, f"docs/launcher.md does not describe {missing}"


def _slug(heading: str) -> str:
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_and_anchors_resolve(page):
    text = page.read_text()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: link to {target}: no such file"
        if anchor and dest.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", dest.read_text(), flags=re.M)
            assert anchor in {_slug(h) for h in headings}, f"{page.name}: link to {target}: no such heading"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_files_the_docs_name_exist(page):
    text = page.read_text()
    for name in set(re.findall(r"`((?:[\w.-]+/)*[\w-]+\.(?:py|sh|txt))`", text)):
        if name.endswith(".txt") and "/" not in name and not name.startswith("requirements"):
            continue  # a user's file, such as cookies.txt
        candidates = [REPO / name, REPO / "bench" / name, REPO / "k9bench" / name]
        assert any(c.exists() for c in candidates), f"{page.name} names {name}, which does not exist"
