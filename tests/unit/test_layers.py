"""The import direction of the layers: base <- services <- tools, and no service imports another.

Every module's imports (at any depth: function-level imports count too) are read with `ast`, so
a wrong-way import fails here even where no test happens to execute it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Package -> (folder, layer). A module may import packages of a lower layer, and its own.
PACKAGES = {
    "framebus": (REPO / "services" / "base" / "framebus", 0),
    "framebus_decoder": (REPO / "services" / "decoder" / "framebus_decoder", 1),
    "framebus_inferencer": (REPO / "services" / "inferencer" / "framebus_inferencer", 1),
    "framebus_tracker": (REPO / "services" / "tracker" / "framebus_tracker", 1),
    "framebus_live": (REPO / "services" / "live" / "framebus_live", 1),
    "framebus_alerts": (REPO / "services" / "alerts" / "framebus_alerts", 1),
    "framebus_clips": (REPO / "services" / "clips" / "framebus_clips", 1),
    "framebus_tools": (REPO / "tools" / "framebus_tools", 2),
}


def imported_packages(source: str) -> set[str]:
    """The top-level names of the framebus packages a module's source imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found.update(n.split(".")[0] for n in names if n.split(".")[0] in PACKAGES)
    return found


def wrong_way_imports(package: str) -> list[str]:
    """`module -> package` for every import of `package`'s modules that goes the wrong way."""
    folder, layer = PACKAGES[package]
    wrong = []
    for path in sorted(folder.rglob("*.py")):
        for other in imported_packages(path.read_text()) - {package}:
            if PACKAGES[other][1] >= layer:
                wrong.append(f"{path.relative_to(REPO)} imports {other}")
    return wrong


def test_imported_packages_when_function_level_import_then_it_counts() -> None:
    source = "import os\ndef f():\n    from framebus_tools.cli import main\n"
    assert imported_packages(source) == {"framebus_tools"}


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_layers_when_package_imports_then_only_lower_layers(package: str) -> None:
    assert PACKAGES[package][0].is_dir()
    assert wrong_way_imports(package) == []
