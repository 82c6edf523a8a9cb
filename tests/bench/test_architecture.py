"""The layout's rules, read from the source: no import cycle among the project's modules, nor
among bench's folders (imports inside functions count: a lazy import that dodges a circle is
still a circle); posenc and kernels never import each other (nor bench); the report runs where
Triton is absent; no module over MAX_LINES lines without its docstring saying why."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bench", "posenc", "posenc_kernels")
MAX_LINES = 330  # "about 300"


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict) -> set[str]:
    """The project modules `name` imports, anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:  # a name inside a module: the module
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    for name in graph:  # importing a.b.c runs a/__init__ and a/b/__init__ first: not a cycle
        graph[name] = {t for t in graph[name] if not name.startswith(t + ".")}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_among_the_projects_modules():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _folder(module: str) -> str:
    """bench's folder (or top-level module) a module belongs to: bench.run.eta -> bench.run."""
    return ".".join(module.split(".")[:2])


def test_no_import_cycle_among_benchs_folders():
    """config makes plans, run sweeps them, report reads rows: none imports its way back (the
    plan's types and the dtypes live in leaves: bench/plans.py, bench/registry.py)."""
    folders: dict[str, set[str]] = {}
    for name, targets in _graph().items():
        if name.startswith("bench."):
            edges = {_folder(t) for t in targets if t.startswith("bench.")} - {_folder(name)}
            folders.setdefault(_folder(name), set()).update(edges)
    assert _cycles(folders) == []


BLOCK_TRITON = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("triton", "posenc_kernels"):
            raise ImportError(f"{name} is blocked")
sys.meta_path.insert(0, Block())
from bench.report.build import main
main([sys.argv[1], "--out", sys.argv[2]])
assert not [m for m in sys.modules if m.split(".")[0] in ("triton", "posenc_kernels")]
"""


def test_the_report_runs_where_triton_is_absent(tmp_path):
    run = ROOT / "results" / "reference" / "decode-cpu"  # has triton rows
    proc = subprocess.run(
        [sys.executable, "-c", BLOCK_TRITON, str(run), str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "triton" in (tmp_path / "report.md").read_text()


def test_posenc_and_kernels_never_import_each_other_nor_the_harness():
    for name, targets in _graph().items():
        top = name.split(".")[0]
        if top in ("posenc", "posenc_kernels"):
            others = {t.split(".")[0] for t in targets} - {top}
            assert not others, f"{name} imports {sorted(others)}"


def test_no_kernel_module_is_over_600_lines():
    for name, path in _modules().items():
        if name.startswith("posenc_kernels"):
            assert len(path.read_text().splitlines()) <= 600, name


def test_long_modules_say_why():
    for name, path in _modules().items():
        lines = path.read_text().splitlines()
        if len(lines) > MAX_LINES:
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            assert "Why this file is long:" in doc, f"{name}: {len(lines)} lines"
