"""The package's shape (issue 12): the module table (docs/architecture.md's Modules section) lists every module,
no import cycle among k9bench modules, no ``argparse.Namespace`` below the front ends, and each
default named in the issue defined once (``run_eval.sh`` restating none).

Everything here reads the source with ``ast``; nothing is imported but ``k9bench`` itself.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import k9bench

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "k9bench"
SCRIPTS = ("eval_video_llm.py", "evaluate_results.py", "subjective_evals.py", "download_videos.py")
"""The four front-end scripts at the repository root."""


def module_name(path: Path) -> str:
    """``k9bench/inference/runner.py`` -> ``k9bench.inference.runner``; a package's ``__init__.py`` -> the package."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py")) if "__pycache__" not in p.parts}


MODULES = package_modules()


# ---------------------------------------------------------------------------------------------
# (a) the module table


def listed_modules(page: str) -> list[str]:
    """The modules the "Modules" section of docs/architecture.md lists: the first cell of each table row."""
    section = page.split("\n## Modules\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `(k9bench(?:\.\w+)*)` \|", section, flags=re.M)


def test_the_architecture_page_s_module_table_lists_every_module_and_nothing_else():
    """Issue 36: one module table, docs/architecture.md's "Modules" section (k9bench/__init__.py's copy is gone):
    every module of the package in it, once, and no name that is not a module."""
    listed = listed_modules((REPO / "docs" / "architecture.md").read_text(encoding="utf-8"))
    missing = sorted(set(MODULES) - set(listed) - {"k9bench"})
    extra = sorted(set(listed) - set(MODULES))
    twice = sorted({name for name in listed if listed.count(name) > 1})
    assert not missing and not extra and not twice, (
        f"docs/architecture.md's Modules section: missing (add a row): {missing}; not modules (remove the row): {extra}; "
        f"listed twice: {twice}")
    assert len(k9bench.__doc__.splitlines()) < 15 and "docs/architecture.md" in k9bench.__doc__  # no second table


# ---------------------------------------------------------------------------------------------
# (b) imports


@dataclass(frozen=True)
class Edge:
    """One import of a k9bench module by another."""

    source: str
    """The importing module."""
    target: str
    """The imported k9bench module."""
    line: int
    """Where."""
    module_level: bool
    """True when it runs on import (not inside a function, not under ``if TYPE_CHECKING``)."""
    function: str | None
    """The enclosing function's name, for a function-level import."""
    type_checking: bool = False
    """True for an import under ``if TYPE_CHECKING`` (never runs, but still ties the two modules together)."""


def _resolve(source: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = source.split(".") if is_package else source.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(source: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The k9bench modules one import statement loads (``from k9bench.x import y`` is ``k9bench.x.y``
    when ``y`` is a module, else ``k9bench.x``)."""
    out = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            name = alias.name
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name:
                out.append(name)
        return out
    base = _resolve(source, is_package, node)
    if not (base == "k9bench" or base.startswith("k9bench.")):
        return out
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        out.append(sub if sub in MODULES else base)
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_edges() -> list[Edge]:
    """Every import of a k9bench module inside the package, module-level and function-level."""
    edges: list[Edge] = []
    for source, path in MODULES.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))

        def visit(node: ast.AST, function: str | None, runtime: bool, typing_only: bool = False) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    visit(child, getattr(child, "name", "<lambda>"), runtime, typing_only)
                elif isinstance(child, ast.If) and _is_type_checking(child):
                    for stmt in child.body:
                        visit(ast.Module(body=[stmt], type_ignores=[]), function, False, True)
                    for stmt in child.orelse:
                        visit(ast.Module(body=[stmt], type_ignores=[]), function, runtime, typing_only)
                elif isinstance(child, (ast.Import, ast.ImportFrom)):
                    for target in _targets(source, is_package, child):
                        if target != source:
                            edges.append(Edge(source, target, child.lineno, runtime and function is None, function,
                                              typing_only and function is None))
                else:
                    visit(child, function, runtime, typing_only)

        visit(tree, None, True)
    return edges


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of nodes (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = dfs(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = dfs(node)
            if found:
                return found
    return None


EDGES = import_edges()


def test_the_import_parser_sees_both_kinds_of_import():
    """The check below is only as good as the graph: it holds the imports we know of."""
    pairs = {(e.source, e.target, e.module_level, e.type_checking) for e in EDGES}
    assert ("k9bench.stage", "k9bench.settings", True, False) in pairs  # module level
    assert ("k9bench.cli", "k9bench.redact", False, False) in pairs  # inside ArgumentParser.parse_args
    assert ("k9bench.download.ytdlp", "k9bench.download.settings", False, True) in pairs  # under if TYPE_CHECKING
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_among_module_level_imports():
    """Module-level imports, those under ``if TYPE_CHECKING`` included: a circle there is still a circle
    of concerns (the type names one module needs live in the other), only hidden from the interpreter."""
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for edge in EDGES:
        if edge.module_level or edge.type_checking:
            graph[edge.source].add(edge.target)
    cycle = find_cycle(graph)
    assert cycle is None, "module-level import cycle: " + " -> ".join(cycle or [])


MAX_MODULE_LINES = 600


def test_no_module_over_600_lines():
    """Modules are cut along their seams: about 500 lines, never more than 600 (scripts and bench too)."""
    files = list(MODULES.values()) + [REPO / s for s in SCRIPTS] + sorted((REPO / "bench").glob("*.py"))
    long = {str(p.relative_to(REPO)): n for p in files if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_run_eval_sh_is_a_thin_wrapper():
    """The launcher is Python (``python -m k9bench.pipeline``); run_eval.sh only finds the interpreter."""
    text = (REPO / "run_eval.sh").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 60
    assert "<<" not in text, "no here-document (no Python inside the shell script)"
    assert "k9bench.pipeline" in text


def test_function_level_imports_name_real_modules():
    """A lazy import hides a broken name until the function runs: each one resolves to a module."""
    for edge in EDGES:
        assert edge.target in MODULES, edge


def test_library_modules_never_import_the_front_end_helpers_on_import():
    """k9bench.cli is for the command line: imported only inside a module's own build_parser()/main()."""
    bad = [e for e in EDGES if e.target == "k9bench.cli" and (e.module_level or e.function not in FRONT_END_FUNCTIONS)]
    assert not bad, bad


# ---------------------------------------------------------------------------------------------
# (c) no argparse.Namespace below the front ends

FRONT_END_MODULES = ("k9bench.cli",)
"""Modules that are front-end helpers as a whole."""

FRONT_END_FUNCTIONS = ("main", "build_parser")
"""A module's own command line (``python -m k9bench.x``)."""

NAMESPACE_CONVERTERS = re.compile(r"^(from_namespace|\w+_from_namespace)$")
"""The one step where parsed flags become a settings object (:func:`k9bench.settings.from_namespace`
and the inference package's ``config_from_namespace``)."""


def namespace_uses(path: Path) -> list[tuple[int, str | None, str]]:
    """``(line, function, code)`` of every ``argparse.Namespace`` mention and every ``args.x`` or
    ``getattr(args, ...)`` outside the allowed front-end functions."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str | None, str]] = []

    def allowed(functions: list[str]) -> bool:
        return any(f in FRONT_END_FUNCTIONS or NAMESPACE_CONVERTERS.match(f) for f in functions)

    def visit(node: ast.AST, functions: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            inner = functions + [child.name] if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else functions
            hit = None
            if isinstance(child, ast.Attribute) and isinstance(child.value, ast.Name):
                if (child.value.id == "argparse" and child.attr == "Namespace") or child.value.id == "args":
                    hit = ast.unparse(child)
            elif isinstance(child, ast.Name) and child.id == "Namespace":
                hit = "Namespace"
            elif (isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and child.func.id in ("getattr", "vars")
                  and child.args and isinstance(child.args[0], ast.Name) and child.args[0].id == "args"):
                hit = ast.unparse(child)
            if hit and not allowed(inner):
                found.append((child.lineno, inner[-1] if inner else None, hit))
            visit(child, inner)

    visit(tree, [])
    return found


def test_the_namespace_scan_finds_what_it_should():
    sample = REPO / "tests" / "_namespace_scan_sample.py"
    try:
        sample.write_text("import argparse\n\ndef run(args: argparse.Namespace):\n    return args.x, getattr(args, 'y')\n\n"
                          "def main(argv=None):\n    args = argparse.ArgumentParser().parse_args(argv)\n    return args.x\n")
        found = namespace_uses(sample)
    finally:
        sample.unlink(missing_ok=True)
    assert [(line, fn) for line, fn, _ in found] == [(3, "run"), (4, "run"), (4, "run")]


KNOWN_NAMESPACE_USES = {
}
"""Library modules that still take a Namespace: expected failures (strict, so a fix shows)."""


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(reason=KNOWN_NAMESPACE_USES[n], strict=True)) if n in KNOWN_NAMESPACE_USES else n
    for n in sorted(n for n in MODULES if n not in FRONT_END_MODULES)
])
def test_no_namespace_in_library_modules(name):
    uses = namespace_uses(MODULES[name])
    assert not uses, f"{MODULES[name].relative_to(REPO)}: argparse.Namespace below the front end: {uses}"


# ---------------------------------------------------------------------------------------------
# (d) each default named in issue 12 defined once

ISSUE_12_DEFAULTS = (("max_frames", 32), ("judge_model", "gpt-4o"))
"""(setting, default value) pairs the issue found restated in several places."""

NOT_DEFAULTS = ("k9bench/data/published.py",)
"""Files whose values are facts, not defaults (the paper's setup: 32 frames)."""


def default_definitions(setting_name: str, value: object) -> list[str]:
    """Where ``value`` is given as ``setting_name``'s default: a constant named after the setting
    (``DEFAULT_MAX_FRAMES = 32``, ``max_frames: int = 32``), a ``setting(32, ...)`` field of that name, an
    ``add_argument("--max_frames", default=32)``, a parameter default or a keyword argument of that name."""
    files = [p for p in MODULES.values() if str(p.relative_to(REPO)) not in NOT_DEFAULTS] + [REPO / s for s in SCRIPTS]
    out = []

    def is_value(node: ast.AST | None) -> bool:
        return isinstance(node, ast.Constant) and type(node.value) is type(value) and node.value == value

    def named(name: str) -> bool:
        return setting_name in name.lower()

    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        where = str(path.relative_to(REPO))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names = [t.id if isinstance(t, ast.Name) else t.attr if isinstance(t, ast.Attribute) else "" for t in targets]
                if any(named(n) for n in names):
                    if is_value(node.value):
                        out.append(f"{where}:{node.lineno}")
                    elif (isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name) and node.value.func.id == "setting"
                          and node.value.args and is_value(node.value.args[0])):
                        out.append(f"{where}:{node.lineno}")
            elif isinstance(node, ast.Call):
                flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                for kw in node.keywords:
                    if kw.arg == "default" and is_value(kw.value) and any(named(f) for f in flags):
                        out.append(f"{where}:{node.lineno}")
                    elif kw.arg and named(kw.arg) and is_value(kw.value):
                        out.append(f"{where}:{node.lineno}")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                positional = node.args.posonlyargs + node.args.args
                pairs = list(zip(positional[len(positional) - len(node.args.defaults):], node.args.defaults))
                pairs += [(a, d) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults) if d is not None]
                for arg, default in pairs:
                    if named(arg.arg) and is_value(default):
                        out.append(f"{where}:{node.lineno}")
    return out


@pytest.mark.parametrize("setting_name, value", ISSUE_12_DEFAULTS)
def test_issue_12_defaults_are_defined_once(setting_name, value):
    places = default_definitions(setting_name, value)
    assert len(places) == 1, f"{setting_name} default {value!r} defined in {places or 'no place'} (want exactly one)"


def test_the_results_folder_is_named_once():
    """``eval_results`` (OUT_DIR's default, a hand run's folder) is one constant, k9bench.layout.RESULTS_DIR."""
    files = list(MODULES.values()) + [REPO / s for s in SCRIPTS]
    places = [f"{p.relative_to(REPO)}:{node.lineno}" for p in files
              for node in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
              if isinstance(node, ast.Constant) and isinstance(node.value, str)
              and (node.value == "eval_results" or node.value.startswith("eval_results/"))]
    assert [p.split(":")[0] for p in places] == ["k9bench/layout.py"], places


def test_run_eval_sh_restates_none_of_them():
    code = [(n, line) for n, line in enumerate((REPO / "run_eval.sh").read_text().splitlines(), 1)
            if line.strip() and not line.lstrip().startswith("#")]
    for setting_name, value in ISSUE_12_DEFAULTS:
        pattern = re.compile(rf"(?<![\w.-]){re.escape(str(value))}(?![\w.-])")
        hits = [f"{n}: {line.strip()}" for n, line in code if pattern.search(line)]
        assert not hits, f"run_eval.sh restates the {setting_name} default {value!r}: {hits}"
    header = (REPO / "run_eval.sh").read_text().split("#SBATCH", 1)[0]
    assert "gpt-4o" not in header  # the help names the flag whose default applies, not the value


def test_no_import_circle_counting_imports_inside_functions():
    """Issue 28: every import counts, those inside functions and under ``if TYPE_CHECKING`` too (what
    ``tools/import_circles.py`` counts): a lazy import that closes a circle still ties the two modules."""
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for edge in EDGES:
        graph[edge.source].add(edge.target)
    pairs = sorted({tuple(sorted((a, b))) for a, targets in graph.items() for b in targets if a in graph.get(b, ())})
    assert not pairs, "import circles: " + "; ".join(f"{a} <-> {b}" for a, b in pairs)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])
