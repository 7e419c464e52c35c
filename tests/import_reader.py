"""Every module a Python source file imports, read from its syntax tree (the layer test's reader).

Besides ``import a.b`` and ``from a.b import c`` anywhere in the file (``TYPE_CHECKING`` blocks and
function bodies included), it reads relative imports (resolved against the module's own package,
a package's ``__init__`` being that package), ``importlib.import_module("...")`` (also through a
name bound by ``from importlib import import_module``, and with a literal ``package=`` for a
relative name), ``__import__("...")`` and the module names of a lazy ``_HOMES`` table (name ->
home module, the way a package facade loads its public names on first use). ``from a import b``
names the submodule ``a.b`` when it exists, else ``a`` itself.

An import whose module name is computed at run time cannot be read: it is returned as a
:class:`Blind` spot, for the caller to refuse or to allow by name.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Callable, Iterator
from dataclasses import dataclass

HOMES_TABLE = "_HOMES"
"""The name of a lazy facade's table of public names -> the module each is loaded from."""


@dataclass(frozen=True)
class Import:
    line: int
    module: str
    """The absolute dotted name of the imported module."""
    how: str
    """The statement or call that imports it, for the messages: ``import``, ``from``, ``from .``,
    ``import_module``, ``__import__`` or the homes table."""


@dataclass(frozen=True)
class Blind:
    """An import the reader cannot resolve: a computed name, or a relative name that climbs out."""

    line: int
    reason: str


@dataclass(frozen=True)
class Reading:
    imports: list[Import]
    blind: list[Blind]


Exists = Callable[[str], bool]
"""Whether a dotted name is a module or package of the tree being read."""


def read_imports(source: str, module: str, *, is_package: bool, exists: Exists) -> Reading:
    """What ``source``, the code of ``module`` (a package's ``__init__`` when ``is_package``), imports."""
    tree = ast.parse(source)
    package = module if is_package else module.rpartition(".")[0]
    reader = _Reader(package, exists, *_importlib_names(tree))
    for node in ast.walk(tree):
        reader.visit_node(node)
    reader.imports.sort(key=lambda found: (found.line, found.module))
    reader.blind.sort(key=lambda spot: spot.line)
    return Reading(reader.imports, reader.blind)


def _importlib_names(tree: ast.AST) -> tuple[set[str], set[str]]:
    """The names bound to the ``importlib`` module and to its ``import_module``, in any scope."""
    modules, functions = {"importlib"}, {"import_module"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {alias.asname for alias in node.names if alias.name == "importlib" and alias.asname}
        elif isinstance(node, ast.ImportFrom) and node.module == "importlib" and node.level == 0:
            functions |= {alias.asname or alias.name for alias in node.names if alias.name == "import_module"}
    return modules, functions


class _Reader:
    def __init__(self, package: str, exists: Exists, modules: set[str], functions: set[str]) -> None:
        self.package = package
        self.exists = exists
        self.importlib_modules = modules
        self.import_module_names = functions
        self.imports: list[Import] = []
        self.blind: list[Blind] = []

    def visit_node(self, node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            self.imports += [Import(node.lineno, alias.name, "import") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            self._from(node)
        elif isinstance(node, ast.Call):
            self._call(node)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            self._homes(node)

    def _from(self, node: ast.ImportFrom) -> None:
        how = "from ." if node.level else "from"
        base = self._resolve("." * node.level + (node.module or ""), self.package, node.lineno)
        if base is not None:
            names = [alias.name for alias in node.names]
            self.imports += [
                Import(node.lineno, module, how) for module in self._with_submodules(base, names)
            ]

    def _with_submodules(self, base: str, names: list[str]) -> Iterator[str]:
        """``from base import names``: each name that is a submodule, else ``base`` itself."""
        modules = [
            f"{base}.{name}" if name != "*" and self.exists(f"{base}.{name}") else base for name in names
        ]
        yield from dict.fromkeys(modules)

    def _resolve(self, name: str, package: str | None, line: int) -> str | None:
        if not name.startswith("."):
            return name
        if not package:
            self.blind.append(Blind(line, f"relative import {name!r} outside a package"))
            return None
        try:
            return importlib.util.resolve_name(name, package)
        except ImportError:
            self.blind.append(Blind(line, f"relative import {name!r} climbs above {package!r}"))
            return None

    def _call(self, node: ast.Call) -> None:
        if self._is_import_module(node.func):
            self._import_module(node)
        elif _called_name(node.func) == "__import__":
            self._dunder_import(node)

    def _is_import_module(self, func: ast.expr) -> bool:
        if isinstance(func, ast.Name):
            return func.id in self.import_module_names
        return isinstance(func, ast.Attribute) and func.attr == "import_module"

    def _import_module(self, node: ast.Call) -> None:
        name, package = _argument(node, 0, "name"), _argument(node, 1, "package")
        anchor = _text(package) if package is not None else None
        if _text(name) is None or (package is not None and anchor is None):
            self.blind.append(Blind(node.lineno, "import_module of a computed name"))
            return
        module = self._resolve(str(_text(name)), anchor, node.lineno)
        if module is not None:
            self.imports.append(Import(node.lineno, module, "import_module"))

    def _dunder_import(self, node: ast.Call) -> None:
        name = _text(_argument(node, 0, "name"))
        level = _literal(_argument(node, 4, "level"), 0)
        fromlist = _literal(_argument(node, 3, "fromlist"), ())
        names = [fromlist] if isinstance(fromlist, str) else fromlist
        if name is None or not isinstance(level, int) or not isinstance(names, list | tuple):
            self.blind.append(Blind(node.lineno, "__import__ of a computed name"))
            return
        base = self._resolve("." * level + name, self.package, node.lineno)
        if base is not None:
            modules = {base, *self._with_submodules(base, [str(n) for n in names])}
            self.imports += [Import(node.lineno, module, "__import__") for module in sorted(modules)]

    def _homes(self, node: ast.Assign | ast.AnnAssign) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if not any(isinstance(t, ast.Name) and t.id == HOMES_TABLE for t in targets):
            return
        if not isinstance(node.value, ast.Dict):
            self.blind.append(Blind(node.lineno, f"{HOMES_TABLE} is not a literal table"))
            return
        for home in node.value.values:
            module = _text(home)
            if module is None:
                self.blind.append(Blind(home.lineno, f"{HOMES_TABLE} names a computed module"))
            else:
                self.imports.append(Import(home.lineno, module, HOMES_TABLE))


def _called_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


def _argument(node: ast.Call, position: int, keyword: str) -> ast.expr | None:
    if position < len(node.args):
        return node.args[position]
    return next((k.value for k in node.keywords if k.arg == keyword), None)


def _text(node: ast.expr | None) -> str | None:
    """The string a node spells out literally, else None."""
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


_COMPUTED = object()


def _literal(node: ast.expr | None, default: object) -> object:
    """The value a node spells out literally, ``default`` when absent, a marker when computed."""
    if node is None:
        return default
    try:
        return ast.literal_eval(node)
    except ValueError:
        return _COMPUTED
