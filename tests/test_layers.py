"""The package's floors import only downward: the commands on top (awq2gguf's cli, awq2gguf-serve,
bench), the pipeline under them, the stages and AWQ under it. Imports inside functions count: they
tie the modules all the same."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "py" / "awq2gguf"

# Floors, top first: a module may import its own floor's modules and those of the floors below.
FLOORS = [
    ["bench"],
    ["cli", "serve"],
    ["pipeline"],
]


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ("awq2gguf", *path.relative_to(PACKAGE).with_suffix("").parts)
        out[".".join(parts[:-1] if path.name == "__init__.py" else parts)] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


GRAPH = {name: _imports(name, path, set(_modules())) for name, path in _modules().items()}


def _floor(module: str) -> int:
    """0 for the top floor, ...; the floors' count for everything under them."""
    top = module.split(".")[1] if module.count(".") else ""
    return next((i for i, names in enumerate(FLOORS) if top in names), len(FLOORS))


def test_the_import_graph_is_read():
    assert "awq2gguf.pipeline" in GRAPH["awq2gguf.cli"]
    assert "awq2gguf.awq.apply" in GRAPH["awq2gguf.pipeline"]
    assert "awq2gguf.metadata" in GRAPH["awq2gguf.serve.page"]


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_no_module_imports_a_floor_above_its_own(module):
    upward = sorted(t for t in GRAPH[module] if _floor(t) < _floor(module))
    assert not upward, f"{module} imports {upward} from a floor above it"


def test_the_commands_do_not_import_each_other():
    """bench may start awq2gguf-serve (serve.process) to measure it, but takes nothing from the
    awq2gguf command's module; awq2gguf and awq2gguf-serve share only what lies below them."""
    for module, targets in GRAPH.items():
        top = module.split(".")[1] if module.count(".") else ""
        commands = {"awq2gguf.cli"} | ({t for t in targets if t.startswith("awq2gguf.serve")} if top == "cli" else set())
        assert not targets & commands, f"{module} imports {sorted(targets & commands)}"


def test_no_import_cycle():
    seen, done = set(), set()

    def visit(module, path):
        if module in done:
            return
        assert module not in seen, f"import cycle: {' -> '.join(path[path.index(module):] + [module])}"
        seen.add(module)
        for t in sorted(GRAPH[module]):
            visit(t, path + [module])
        done.add(module)

    for module in sorted(GRAPH):
        visit(module, [])
