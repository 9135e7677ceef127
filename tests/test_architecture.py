"""The shape of the code: layers point down (cli -> domains -> toolkit), rooms open one-way doors
(the order written in docs/architecture.md), no import circles, imports written inside functions
included, no optional hook found by duck typing, the rules of the rooms (a file format never opens
the tracking store, no domain writes a toolkit module's names, the command line reaches the
domains through commands.py only, one command line), a map whose names exist, and rooms small
enough to read."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("toolkit", "domains", "command_line")


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
        or (m.startswith("domains") and (t in ("cli", "commands") or t.startswith("command_line")))
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
    if parts[0] == "command_line":
        return "command_line/"
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


# -- rules of the rooms that an import order cannot say ------------------------------------------
# A file format reads and writes files: it never opens the tracking store (mlflow, or the
# modules of toolkit/tracking that hold the store, one run or the store's health). Looking a run
# up in the store belongs to the store's side (toolkit.tracking.store.run_artifact) or to the
# command that asks (domains.export.encoder_path).
FILE_FORMATS = ("toolkit.tracking.encoder_file", "toolkit.checkpoint")
TRACKING_STORE = ("toolkit.tracking.store", "toolkit.tracking.tracker", "toolkit.tracking.health", "mlflow")


def _imported_names(text: str, module: str, is_package: bool) -> set[str]:
    """Every module name ``text`` imports (project or not), anywhere in its body."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(text, module)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module or "", node.level, module, is_package)
            names |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return names


def store_imports(text: str, module: str, is_package: bool = False) -> list[str]:
    """The tracking-store modules (or mlflow) that ``text`` imports."""
    return sorted(
        name
        for name in _imported_names(text, module, is_package)
        if any(name == store or name.startswith(store + ".") for store in TRACKING_STORE)
    )


def test_the_store_check_sees_a_file_format_opening_the_store():
    text = (
        "def _download(run_id):\n    from toolkit.tracking.store import reading_client\n    import mlflow.exceptions\n"
    )
    assert store_imports(text, "toolkit.tracking.encoder_file") == [
        "mlflow.exceptions",
        "toolkit.tracking.store",
        "toolkit.tracking.store.reading_client",
    ]
    assert store_imports("from toolkit import checkpoint as ckpt\n", "toolkit.tracking.encoder_file") == []


def test_a_file_format_never_opens_the_tracking_store():
    found = []
    for module, path in _sources().items():
        if any(module == f or module.startswith(f + ".") for f in FILE_FORMATS):
            found += [
                f"{module} -> {name}" for name in store_imports(path.read_text(), module, path.name == "__init__.py")
            ]
    assert not found, (
        "a file format opens the tracking store (move the look-up to the store or the command): " + ", ".join(found)
    )


# A domain declares what it brings (its datasets on the Domain face, its components through a
# registry's declared ``register``) and never writes a module of the toolkit: no assignment to,
# item assignment into, deletion from, or mutating method call on a name it imported from toolkit/.
MUTATING_METHODS = {
    "update",
    "setdefault",
    "append",
    "extend",
    "insert",
    "add",
    "pop",
    "popitem",
    "clear",
    "remove",
    "discard",
}


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def toolkit_writes(text: str, where: str) -> list[str]:
    """``where: <source>`` for each write into a name imported from toolkit/ (``from toolkit.x
    import NAME``, ``import toolkit.x [as y]``)."""
    tree = ast.parse(text, where)
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "toolkit":
            bound |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "toolkit":
                    bound.add(alias.asname or "toolkit")
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in MUTATING_METHODS and _root_name(node.func.value) in bound:
                found.append(f"{where}: {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            if node.args and _root_name(node.args[0]) in bound:
                found.append(f"{where}: {ast.unparse(node)}")
        for target in targets:
            if isinstance(target, (ast.Attribute, ast.Subscript)) and _root_name(target) in bound:
                found.append(f"{where}: {ast.unparse(node).splitlines()[0]}")
    return found


def test_the_write_check_sees_a_domain_writing_a_toolkit_global():
    text = (
        "from toolkit.studies.needs import PLACED\nimport toolkit.data.catalogue as cat\nimport toolkit\n"
        "from domains.vision.folders import DEFAULT_FOLDERS\n"
        "PLACED.update(DEFAULT_FOLDERS)\ncat.DATASETS['x'] = 1\ntoolkit.data.BUILDERS = {}\n"
        "def f():\n    setattr(cat, 'BUILDERS', {})\n    DEFAULT_FOLDERS.update({})\n    seen = {}\n    seen['a'] = 1\n"
    )
    assert sorted(toolkit_writes(text, "x.py")) == [
        "x.py: PLACED.update(DEFAULT_FOLDERS)",
        "x.py: cat.DATASETS['x'] = 1",
        "x.py: setattr(cat, 'BUILDERS', {})",
        "x.py: toolkit.data.BUILDERS = {}",
    ]


def test_no_domain_writes_a_toolkit_module():
    found = []
    for module, path in _sources().items():
        if module.startswith("domains"):
            found += toolkit_writes(path.read_text(), str(path.relative_to(ROOT)))
    assert not found, (
        "a domain writes a toolkit module's names (declare it on the Domain face, or pass it to the toolkit "
        "from commands.py): " + ", ".join(found)
    )


def test_the_command_line_reaches_the_domains_only_through_commands():
    """cli.py and command_line/ (the click wiring) import no module under domains/: commands.py is
    the one place the command line meets the domains."""
    graph = import_graph()
    found = sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        if m == "cli" or m.startswith("command_line")
        for t in targets
        if t.startswith("domains")
    )
    assert not found, "the command line imports a domain module (go through commands.py): " + ", ".join(found)


# One command line: click, wired in cli.py and command_line/. bench/ and scripts/ are tools run by
# hand (each parses its own arguments with argparse) and tests/ are tests: they are not searched.
def test_no_argument_parser_outside_the_command_line():
    found = []
    for module, path in [*_sources().items(), *((p.stem, p) for p in (ROOT / "examples").rglob("*.py"))]:
        if any(
            name.split(".")[0] in ("argparse", "optparse", "getopt")
            for name in _imported_names(path.read_text(), module, False)
        ):
            found.append(str(path.relative_to(ROOT)))
    assert not found, "an argument parser outside cli.py (add a click command to command_line/): " + ", ".join(found)


def test_domains_do_not_import_each_other():
    graph = import_graph()
    shared = {"base", "installed", "export"}
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
DOTTED = re.compile(r"(?<![\w./-])(?:cli|command_line|commands|domains|toolkit)(?:\.[A-Za-z_]\w*)+")
PATHS = re.compile(
    r"`((?:cli\.py|commands\.py|command_line|domains|toolkit|tests|scripts|docs|recipes|bench|examples)(?:/[\w.-]*)*)`"
)


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
