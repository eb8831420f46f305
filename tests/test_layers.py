"""The package's layering, read from its imports: no layer imports a layer above it, and the
three applications (daemon, A/B tool, simulator) do not import each other."""

from __future__ import annotations

import ast
from pathlib import Path

import specmon

PACKAGE = Path(specmon.__file__).parent

#: Bottom to top. A module may import its own layer (within its own unit) and those below.
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "specmon",
        "specmon.parser",
        "specmon.arithmetic",
        "specmon.bounds",
        "specmon.jsontext",
        "specmon.config_values",
        "specmon.secrets",
        "specmon.formatting",
        "specmon.logs",
        "specmon.files",
        "specmon.process",
    ),
    ("specmon.engines",),
    ("specmon.windows", "specmon.report"),
    ("specmon.load", "specmon.settings", "specmon.state", "specmon.classes"),
    ("specmon.answer",),
    ("specmon.recommend",),
    ("specmon.sources", "specmon.web"),
    ("specmon.daemon", "specmon.measure", "specmon.sim", "specmon.tap"),
    # The pages render the daemon's views and the daemon's app serves them: the surfaces sit
    # between the daemon's state (below) and its lifecycle (above).
    ("specmon.surfaces",),
    ("specmon.daemon.app",),
    ("specmon.cli",),
    ("specmon.__main__",),
)


def unit_of(module: str) -> str:
    """The layer entry a module belongs to (the longest matching prefix)."""
    best = ""
    for layer in LAYERS:
        for unit in layer:
            if (module == unit or module.startswith(unit + ".")) and len(unit) > len(best):
                best = unit
    assert best, f"{module} is in no layer: add it to LAYERS"
    return best


def layer_of(unit: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if unit in layer)


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
    return [(line, name) for line, name in found if name.split(".")[0] == "specmon"]


def violations(root: Path = PACKAGE) -> list[str]:
    out: list[str] = []
    for path in sorted(root.rglob("*.py")):
        source = module_name(path, root)
        src_unit = unit_of(source)
        src_layer = layer_of(src_unit)
        for line, target in imports(path):
            dst_unit = unit_of(target)
            dst_layer = layer_of(dst_unit)
            where = f"{path.relative_to(root.parent)}:{line}: {source} imports {target}"
            if dst_layer > src_layer:
                out.append(f"{where} (layer {src_layer} importing layer {dst_layer})")
            elif dst_layer == src_layer and dst_unit != src_unit and src_layer > 0:
                out.append(f"{where} ({src_unit} and {dst_unit} are siblings)")
    return out


def test_no_layer_imports_a_layer_above_it() -> None:
    assert violations() == []


def cycles(root: Path = PACKAGE) -> list[list[str]]:
    """The import cycles among the package's modules (``from X import Y`` is an import of
    X.Y where that is a module, else of X), largest strongly connected parts first."""
    paths = {module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    found.add(full if full in paths else node.module)
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
        graph[name] = {m for m in found if m in paths and m != name}
    out: list[list[str]] = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = [stack.pop()]
            while part[-1] != v:
                part.append(stack.pop())
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out, key=len, reverse=True)


def test_no_module_imports_itself_through_others() -> None:
    """No import circle inside a layer either (the layer order cannot see one): issue 62 found
    daemon/metrics.py <-> daemon/metrics_epochs.py and load/curve.py <-> load/curve_sums.py."""
    assert cycles() == []


def test_the_cycle_check_finds_a_circle(tmp_path: Path) -> None:
    root = tmp_path / "specmon"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text("from specmon.b import x\n")
    (root / "b.py").write_text("from specmon import c\nx = 1\n")
    (root / "c.py").write_text("import specmon.a\n")
    (root / "d.py").write_text("from specmon.a import x\n")
    assert cycles(root) == [["specmon.a", "specmon.b", "specmon.c"]]


def test_the_check_catches_upward_and_sibling_imports(tmp_path: Path) -> None:
    """The checker itself, on a small package: the simulator importing the daemon, and the
    arithmetic importing the CLI, are both reported; a downward import is not."""
    root = tmp_path / "specmon"
    (root / "sim").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sim" / "probe.py").write_text(
        "from specmon.daemon.config import TargetConfig\nfrom specmon.report import basis\n"
    )
    (root / "arithmetic.py").write_text("import specmon.cli.main\n")
    assert violations(root) == [
        "specmon/arithmetic.py:1: specmon.arithmetic imports specmon.cli.main "
        "(layer 0 importing layer 10)",
        "specmon/sim/probe.py:1: specmon.sim.probe imports specmon.daemon.config "
        "(specmon.sim and specmon.daemon are siblings)",
    ]
