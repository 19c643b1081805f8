"""No module imports from a stage above its own, not even inside a function (a lazy import that hides
an upward edge still makes the lower stage depend on the upper one).

Stages, lowest first: the base modules (gnnscale/*.py below every stage) -> graph -> sampling ->
partition -> nn -> distributed -> features -> inference -> train -> loader -> the command line (and the
package root, whose ``load_model`` is a front door to nn)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "gnnscale"

STAGES = ("base", "graph", "sampling", "partition", "nn", "distributed", "features", "inference", "train", "loader",
          "cli")
BASE_MODULES = {"batch_stream", "devices", "files", "intrinsics", "keys", "prefetch", "settings", "threading_layer", "torch_keys"}
CLI_MODULES = {"__init__", "__main__", "cli", "launch", "compile"}


def stage_of(module: str) -> str:
    """The stage of a dotted module name inside gnnscale (``gnnscale.sampling.keys`` -> ``sampling``)."""
    parts = module.split(".")
    assert parts[0] == "gnnscale", module
    if len(parts) == 1:
        return "cli"  # the package root
    top = parts[1]
    if top in STAGES[1:-1] and (PACKAGE / top).is_dir():
        return top
    if top in BASE_MODULES:
        return "base"
    if top in CLI_MODULES or top.startswith("cli_"):
        return "cli"
    raise AssertionError(f"{module}: no stage for gnnscale.{top}; add it to STAGES or the module sets "
                         "in tests/test_layering.py")


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (PACKAGE.parent / rel).with_suffix(".py").is_file() or (PACKAGE.parent / rel / "__init__.py").is_file()


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every gnnscale module ``path`` imports, at any depth of its syntax tree: (line, module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                # ``from gnnscale.x import y``: y is a module where one exists, else a name in gnnscale.x.
                sub = f"{base}.{alias.name}"
                found.append((node.lineno, sub if is_module(sub) else base))
        elif (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))
              and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))
    return [(line, name) for line, name in found if name == "gnnscale" or name.startswith("gnnscale.")]


def upward_edges() -> list[str]:
    edges = []
    for path in sorted(PACKAGE.rglob("*.py")):
        here = module_name(path)
        own = STAGES.index(stage_of(here))
        for line, target in imported_modules(path):
            their = STAGES.index(stage_of(target))
            if their > own:
                edges.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {here} ({STAGES[own]}) imports "
                             f"{target} ({STAGES[their]})")
    return edges


def test_no_module_imports_from_a_stage_above_its_own():
    edges = upward_edges()
    assert not edges, "upward imports:\n" + "\n".join(edges)


def test_base_pieces_are_taken_from_the_base():
    # The hash and the prefetching stage once lived in a stage (partition took mix64 from sampling, the
    # loader its Prefetcher from train): what is left in sampling.keys is DGS's own draw ranges.
    users = [f"{path.relative_to(PACKAGE.parent)}:{line}" for path in sorted(PACKAGE.rglob("*.py"))
             if stage_of(module_name(path)) != "sampling"
             for line, target in imported_modules(path) if target == "gnnscale.sampling.keys"]
    assert users == []


def test_no_lazy_module_getattr():
    # A module-level __getattr__ is how a lazy import hides an edge from the import statements at the top.
    hiding = [str(p.relative_to(PACKAGE.parent)) for p in sorted(PACKAGE.rglob("*.py"))
              if any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in ast.parse(p.read_text()).body)]
    assert hiding == []


@pytest.mark.parametrize("source, expected", [
    ("def f():\n    from gnnscale.train.api import fit\n", ["gnnscale.train.api"]),
    ("from gnnscale.sampling import keys\n", ["gnnscale.sampling.keys"]),
    ("from gnnscale.sampling import derive_key\n", ["gnnscale.sampling"]),
    ("import importlib\nimportlib.import_module('gnnscale.cli')\n", ["gnnscale.cli"]),
    ("from . import model_file\n", ["gnnscale.nn.model_file"]),
])
def test_imports_are_found_at_any_depth(tmp_path, monkeypatch, source, expected):
    # The checker itself: an import inside a function, a submodule by from-import, a package name,
    # importlib and a relative import are all edges.
    path = PACKAGE / "nn" / "layers.py"
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: source)
    assert [name for _, name in imported_modules(path)] == expected
