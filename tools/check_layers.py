"""Check the layer rules of docs/architecture.md from the code's own imports.

    python tools/check_layers.py          # prints the violations and circles; exit 1 if any

Every ``import``/``from ... import`` of an ``sdr`` module is read with :mod:`ast` (also
those inside functions; not those under ``if TYPE_CHECKING:``, which never run). Layers,
bottom to top: core, runtime, models, drivers, face; a module may import its own layer
and the layers below. Circles are searched among all of them, lazy ones included (a
function-level import that only dodges a circle is still one); a module importing its own
package (``sdr.simulator.x`` -> ``sdr.simulator``) is not an edge.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"sdr": "sdr", "sdr.backends": "backends", "sdr.simulator": "simulator"}
LAYERS = ("core", "runtime", "models", "drivers", "face")
PUBLIC_SURFACE = {"sdr"}  # sdr/__init__.py re-exports the runtime's names for users


def layer_of(module: str) -> str:
    for prefix, layer in (
        ("sdr.cli", "face"),
        ("sdr.torch", "face"),  # the torch.distributed backend, over the hierarchical comm
        ("sdr.runtime", "runtime"),
        ("sdr.simulator", "models"),
        ("sdr.backends", "drivers"),
    ):
        if module == prefix or module.startswith(prefix + "."):
            return layer
    return "core"


def modules(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for name, folder in FOLDERS.items():
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            dotted = ".".join([name, *parts])
            if name == "sdr" and parts[:1] in (["backends"], ["simulator"]):
                continue
            found[dotted] = path
    return found


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(path: Path, known: set[str]) -> tuple[set[str], set[str]]:
    """(every sdr module imported, those imported at module level)."""
    tree = ast.parse(path.read_text(), str(path))
    every: set[str] = set()
    top: set[str] = set()

    def resolve(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    def visit(node: ast.AST, at_top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                for other in child.orelse:
                    visit(other, at_top)
                continue
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                names = [child.module] + [f"{child.module}.{a.name}" for a in child.names]
            for name in names:
                target = resolve(name)
                if target is not None:
                    every.add(target)
                    if at_top:
                        top.add(target)
            inner = at_top and not isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            visit(child, inner)

    visit(tree, True)
    return every, top


def check(root: Path = ROOT) -> list[str]:
    found = modules(root)
    known = set(found)
    problems = []
    graph: dict[str, set[str]] = {}
    for module, path in found.items():
        every, _top = imports(path, known)
        # a package and its own modules are one family, not dependencies
        graph[module] = {
            t
            for t in every
            if t != module and not t.startswith(module + ".") and not module.startswith(t + ".")
        }
        if module in PUBLIC_SURFACE:
            continue
        mine = LAYERS.index(layer_of(module))
        for target in sorted(every):
            theirs = LAYERS.index(layer_of(target))
            if theirs > mine:
                problems.append(
                    f"{module} ({LAYERS[mine]}) imports {target} ({LAYERS[theirs]}): upward"
                )
    problems += [f"import circle: {' -> '.join(c)}" for c in circles(graph)]
    return problems


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return out


def main() -> int:
    problems = check()
    for line in problems:
        print(line)
    print(f"{len(modules())} modules, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
