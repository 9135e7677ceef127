"""The shape of the code: layers point down (cli -> domains -> toolkit), no import circles,
including imports written inside functions, and rooms small enough to read."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("toolkit", "domains")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    found = {"cli": ROOT / "cli.py"}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _resolve(name: str, level: int, here: str, is_package: bool) -> str:
    if not level:
        return name
    base = here.split(".") if is_package else here.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports, anywhere in its body (functions included).
    ``from a.b import c`` points at ``a.b.c`` when that is a module, else at ``a.b``."""
    sources = _sources()
    graph: dict[str, set[str]] = {}
    for module, path in sources.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(node.module or "", node.level, module, path.name == "__init__.py")
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in sources else base for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in sources:  # import a.b.c.func -> the module a.b.c
                    target = target.rpartition(".")[0]
                if target and target != module:
                    edges.add(target)
        graph[module] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as [a, b, ..., a], or None (depth-first search, three colours)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_cycle_finder_finds_a_planted_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circles_anywhere():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_layers_point_down():
    graph = import_graph()
    upward = sorted(f"{m} -> {t}" for m, targets in graph.items() for t in targets
                    if (m.startswith("toolkit") and not t.startswith("toolkit"))
                    or (m.startswith("domains.") and t == "cli"))
    assert not upward, "the toolkit imports a domain or the cli: " + ", ".join(upward)


def test_domains_do_not_import_each_other():
    graph = import_graph()
    shared = {"base", "registry", "export", "packaged"}
    crossing = []
    for module, targets in graph.items():
        parts = module.split(".")
        if parts[0] != "domains" or len(parts) < 3:
            continue
        for target in targets:
            t = target.split(".")
            if t[0] == "domains" and len(t) >= 2 and t[1] not in shared and t[1] != parts[1]:
                crossing.append(f"{module} -> {target}")
    assert not crossing, ", ".join(crossing)


def test_the_toolkit_ground_floor_stays_small():
    top = sorted(p.name for p in (ROOT / "toolkit").glob("*.py"))
    assert len(top) <= 8, f"{len(top)} modules directly under toolkit/: {top}"


def test_no_source_file_over_400_lines():
    long = []
    for path in [ROOT / "cli.py", *(p for package in (*PACKAGES, "bench", "examples") for p in (ROOT / package).rglob("*.py"))]:
        n = len(path.read_text().splitlines())
        if n > 400:
            long.append(f"{path.relative_to(ROOT)} ({n})")
    assert not long, "over 400 lines: " + ", ".join(long)
