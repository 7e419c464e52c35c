"""The import direction of ARCHITECTURE.md: each layer imports only from the layers above it; the CLI
(``compaction.cli``) is the one composition root allowed to import every layer."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# layer -> the packages it may import from (besides itself and third-party libraries)
ALLOWED: dict[str, set[str]] = {
    "sessions": set(),
    "compaction": {"sessions"},
    "projections": {"sessions", "compaction"},
    "recovery": {"sessions", "compaction", "projections"},
    "audit": {"sessions", "compaction", "projections", "recovery"},
}
OURS = set(ALLOWED)


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def _modules() -> list[Path]:
    return sorted(p for layer in OURS for p in (SRC / layer).rglob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_layer_imports_only_from_layers_above(path: Path) -> None:
    relative = path.relative_to(SRC)
    layer = relative.parts[0]
    if relative.parts[:2] == ("compaction", "cli"):
        return  # the composition root
    wrong = [
        f"line {line}: imports {package}"
        for line, package in _imports(path)
        if package in OURS and package != layer and package not in ALLOWED[layer]
    ]
    assert not wrong, f"{relative} breaks the layering: {wrong}"


def test_every_layer_is_checked() -> None:
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    assert packages == OURS
