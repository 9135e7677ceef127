"""The shape of the code: layers point down (cli -> domains -> toolkit), rooms open one-way doors
(the order written in docs/architecture.md), no import circles, imports written inside functions
included, no optional hook found by duck typing, a map whose names exist, and rooms small enough
to read."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("toolkit", "domains")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    found = {"cli": ROOT / "cli.py", "commands": ROOT / "commands.py"}
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


def imports_in(text: str, module: str, is_package: bool, sources: dict[str, Path]) -> set[str]:
    """The project modules that the source ``text`` of ``module`` imports, anywhere in its body
    (every Import / ImportFrom node: module level, functions, methods, ``if`` blocks).
    ``from a.b import c`` points at ``a.b.c`` when that is a module, else at ``a.b``."""
    edges: set[str] = set()
    for node in ast.walk(ast.parse(text, module)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module or "", node.level, module, is_package)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in sources else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in sources:  # import a.b.c.func -> the module a.b.c
                target = target.rpartition(".")[0]
            if target and target != module:
                edges.add(target)
    return edges


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports, anywhere in its body (functions included)."""
    sources = _sources()
    return {
        module: imports_in(path.read_text(), module, path.name == "__init__.py", sources)
        for module, path in sources.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as [a, b, ..., a], or None (depth-first search, three colours)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
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
    upward = sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        for t in targets
        if (m.startswith("toolkit") and not t.startswith("toolkit"))
        or (m.startswith("domains") and t in ("cli", "commands"))
    )
    assert not upward, "the toolkit imports a domain or the cli: " + ", ".join(upward)


# -- one-way doors between rooms -------------------------------------------------------------
# The order is written once, in docs/architecture.md ("The rooms' order"): one room a line, the
# top floor first; a room imports only rooms on lines below its own (rooms on one line import
# none of each other). A room is cli.py, domains/, a package under toolkit/ or a module directly
# under it (toolkit/__init__.py included).
ARCHITECTURE = ROOT / "docs" / "architecture.md"
ORDER_HEADING = "## The rooms' order"
# Imports against the order that are known and about to go, each with what removes it. An entry
# whose import is gone must leave this list (the test says so).
PENDING_DOORS: dict[str, str] = {}


def room_order(text: str | None = None) -> list[list[str]]:
    """The rooms, bottom floor first, as written in docs/architecture.md's fenced block under
    ORDER_HEADING; a line is its rooms (tokens ending in ``/`` or ``.py``) then any words."""
    text = ARCHITECTURE.read_text(encoding="utf-8") if text is None else text
    assert ORDER_HEADING in text, f"{ARCHITECTURE.name} has no {ORDER_HEADING!r} section"
    block = text.split(ORDER_HEADING, 1)[1].split("```", 2)[1]
    floors = []
    for line in block.splitlines()[1:]:  # [0] is the fence's language tag
        rooms = []
        for token in line.split():
            if not token.endswith(("/", ".py")):
                break
            rooms.append(token)
        assert rooms or not line.strip(), f"{ARCHITECTURE.name}, the rooms' order: no room in {line!r}"
        if rooms:
            floors.append(rooms)
    return floors[::-1]


def room_of(module: str) -> str:
    parts = module.split(".")
    if parts[0] in ("cli", "commands"):
        return f"{parts[0]}.py"
    if parts[0] == "domains":
        return "domains/"
    if len(parts) == 1:
        return "toolkit/__init__.py"
    return f"toolkit/{parts[1]}/" if (ROOT / "toolkit" / parts[1]).is_dir() else f"toolkit/{parts[1]}.py"


def against_the_order(graph: dict[str, set[str]], floors: list[list[str]]) -> list[str]:
    """Every import ``a -> b`` whose room is not on a floor below ``a``'s room."""
    floor = {room: i for i, rooms in enumerate(floors) for room in rooms}
    return sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        for t in targets
        if room_of(m) != room_of(t) and floor[room_of(t)] >= floor[room_of(m)]
    )


def test_the_rooms_order_names_every_room_once_and_only_rooms_that_exist():
    listed = [room for rooms in room_order() for room in rooms]
    assert len(listed) == len(set(listed)), f"a room is listed twice: {listed}"
    missing = sorted({room_of(m) for m in import_graph()} - set(listed))
    assert not missing, f"rooms missing from the order in {ARCHITECTURE.name}: {missing}"
    gone = [room for room in listed if not (ROOT / room).exists()]
    assert not gone, f"the order in {ARCHITECTURE.name} lists rooms that do not exist: {gone}"


def test_the_order_check_sees_an_import_inside_a_function():
    """A planted upward door, written inside a function, is found and named."""
    sources = _sources()
    text = "def serve():\n    if True:\n        from toolkit.studies.ui_view import prepare\n    return prepare\n"
    edges = imports_in(text, "toolkit.tracking.health", False, sources)
    assert edges == {"toolkit.studies.ui_view"}
    floors = room_order()
    assert against_the_order({"toolkit.tracking.health": edges}, floors) == [
        "toolkit.tracking.health -> toolkit.studies.ui_view"
    ]
    assert against_the_order({"toolkit.studies.study": {"toolkit.tracking.health"}}, floors) == []
    same_floor = [["toolkit/errors.py", "toolkit/checks.py"]]
    assert against_the_order({"toolkit.checks": {"toolkit.errors"}}, same_floor) == ["toolkit.checks -> toolkit.errors"]


def test_rooms_open_one_way_doors():
    """No import, at module level or inside a function, runs against the rooms' order."""
    upward = against_the_order(import_graph(), room_order())
    unexpected = [door for door in upward if door not in PENDING_DOORS]
    assert not unexpected, (
        f"imports against the rooms' order of {ARCHITECTURE.name} (a room imports only "
        "rooms below it): " + ", ".join(unexpected)
    )
    closed = sorted(set(PENDING_DOORS) - set(upward))
    assert not closed, f"gone, so remove them from PENDING_DOORS: {closed}"


# -- declared faces: no optional hook found by duck typing ------------------------------------
# hasattr / getattr with a literal attribute on a domain, a tracker or a selector: the hook must
# be declared on the base class (with a docstring and a default) and called plainly.
HOOK_OWNER = re.compile(r"domain|tracker|selector", re.IGNORECASE)
# Look-ups that are not hooks, with why.
NOT_HOOKS: dict[str, str] = {
    "toolkit/losses/modules/ring.py: getattr(selector, 'name')": "a loss takes any (sims, step) -> mask callable as its selector; the ring loss refuses all but "
    "the ring selector and names what it got",
}
# Hooks still found by duck typing in files being changed (issue 39, part 2); an entry whose
# look-up is gone must leave this list (the test says so).
PENDING_HOOKS: set[str] = set()


def duck_typed_hooks(text: str, where: str) -> set[str]:
    """``where: hasattr(owner, 'name')`` for each look-up by name on a domain, tracker or selector."""
    found = set()
    for node in ast.walk(ast.parse(text, where)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("hasattr", "getattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            owner = ast.unparse(node.args[0])
            if HOOK_OWNER.search(owner):
                found.add(f"{where}: {node.func.id}({owner}, {node.args[1].value!r})")
    return found


def test_the_hook_check_sees_a_duck_typed_hook():
    text = "def step(self):\n    if hasattr(self.domain, 'monitor'):\n        getattr(tracker, 'note')(1)\n"
    assert duck_typed_hooks(text, "x.py") == {"x.py: hasattr(self.domain, 'monitor')", "x.py: getattr(tracker, 'note')"}
    assert duck_typed_hooks("getattr(encoder, 'out_dim', None)", "x.py") == set()


def test_hooks_are_declared_not_found_by_duck_typing():
    found: set[str] = set()
    for path in _sources().values():
        found |= duck_typed_hooks(path.read_text(), str(path.relative_to(ROOT)))
    unexpected = sorted(found - set(NOT_HOOKS) - PENDING_HOOKS)
    assert not unexpected, (
        "optional hooks called by hasattr/getattr: declare them on the base class with a "
        "default and call them plainly: " + ", ".join(unexpected)
    )
    gone = sorted(PENDING_HOOKS - found)
    assert not gone, f"gone, so remove them from PENDING_HOOKS: {gone}"


def test_domains_do_not_import_each_other():
    graph = import_graph()
    shared = {"base", "installed", "export", "catalogues"}
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
    for path in [
        ROOT / "cli.py",
        ROOT / "commands.py",
        *(p for package in (*PACKAGES, "bench", "examples") for p in (ROOT / package).rglob("*.py")),
    ]:
        n = len(path.read_text().splitlines())
        if n > 400:
            long.append(f"{path.relative_to(ROOT)} ({n})")
    assert not long, "over 400 lines: " + ", ".join(long)


# -- the map names what exists -----------------------------------------------------------------
DOTTED = re.compile(r"(?<![\w./-])(?:cli|domains|toolkit)(?:\.[A-Za-z_]\w*)+")
PATHS = re.compile(r"`((?:cli\.py|domains|toolkit|tests|scripts|docs|recipes|bench|examples)(?:/[\w.-]*)*)`")


def _resolve_dotted(name: str) -> object:
    """The object ``name`` (``package.module.function`` / ``module.Class.method``) names,
    imported: the longest importable module prefix, then attributes."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as exc:
            if exc.name is None or not ".".join(parts[:cut]).startswith(exc.name):
                raise
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(name)


def test_every_module_and_function_the_architecture_map_names_exists():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    names = sorted({n for n in DOTTED.findall(text) if n.rsplit(".", 1)[1] not in ("py", "md", "yaml")})
    assert len(names) > 30, names  # the run path is written hop by hop
    missing = []
    for name in names:
        try:
            _resolve_dotted(name)
        except (ImportError, AttributeError) as exc:
            missing.append(f"{name} ({type(exc).__name__}: {exc})")
    assert not missing, f"{ARCHITECTURE.name} names what does not exist: " + "; ".join(missing)
    paths = sorted(set(PATHS.findall(text)))
    gone = [p for p in paths if not (ROOT / p).exists()]
    assert not gone, f"{ARCHITECTURE.name} names files that do not exist: {gone}"


CROSS_REFERENCE = re.compile(r":(?:func|mod|class|meth|data|attr):`~?((?:toolkit|domains|cli)(?:\.\w+)+)`")


def test_every_docstring_cross_reference_names_what_exists():
    """``:func:`toolkit.x.y``` and the like in the code's docstrings follow what they cite when it moves."""
    stale = []
    for path in _sources().values():
        for name in sorted(set(CROSS_REFERENCE.findall(path.read_text()))):
            try:
                _resolve_dotted(name)
            except (ImportError, AttributeError):
                stale.append(f"{path.relative_to(ROOT)}: {name}")
    assert not stale, "docstrings cite what does not exist: " + ", ".join(stale)
