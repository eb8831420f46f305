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
