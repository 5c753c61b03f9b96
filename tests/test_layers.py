"""The library's layers, read from its own imports (every import statement, function-local ones too), so that the
structure docs/architecture.md draws cannot silently regress: imports run down the layers only, no module imports
itself back through others, and no module of the generic layers names a concrete environment (the registry in
`core/environment.py` names them as strings)."""

import ast
from pathlib import Path

LIBRARY = Path(__file__).resolve().parents[1] / "coevolve_lib"
LAYERS = {"core": 0, "prompts": 0, "rollout": 1, "engine": 2, "profiles": 3, "envs": 3, "training": 4, "studies": 5,
          "cli": 6, "__main__": 7}
"""Each top-level part of the package and its floor: a module imports its own floor or lower ones."""
GENERIC = ("core", "rollout", "engine", "training", "studies")
"""The parts that know an environment only through `core.environment.Environment`."""


def module_name(path: Path) -> str:
    parts = path.relative_to(LIBRARY.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """The coevolve_lib modules (or packages) `path` imports."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("coevolve_lib")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("coevolve_lib"):
            for alias in node.names:  # `from coevolve_lib.engine import pool_updates` imports a module
                child = f"{node.module}.{alias.name}"
                found.add(child if (LIBRARY.parent / (child.replace(".", "/") + ".py")).exists() else node.module)
    return found


def part(module: str) -> str:
    return module.split(".")[1] if "." in module else module


GRAPH = {module_name(path): imports(path) for path in LIBRARY.rglob("*.py")}


def test_imports_run_down_the_layers():
    upward = [f"{module} -> {target}" for module, targets in GRAPH.items() for target in targets
              if part(target) in LAYERS and LAYERS[part(target)] > LAYERS[part(module)]]
    assert upward == []


def test_no_generic_module_imports_a_concrete_environment():
    named = [f"{module} -> {target}" for module, targets in GRAPH.items() if part(module) in GENERIC
             for target in targets if part(target) == "envs"]
    assert named == []


def test_no_environment_imports_another():
    """Each environment package stands alone on the layers below: what two share lives in engine/ or rollout/."""
    crossing = [f"{module} -> {target}" for module, targets in GRAPH.items() if part(module) == "envs"
                for target in targets if part(target) == "envs" and target.split(".")[2] != module.split(".")[2]]
    assert crossing == []


def test_no_import_circles():
    """Depth-first search for a module that reaches itself."""
    state, circles = {}, []

    def visit(module, trail):
        state[module] = "open"
        for target in sorted(GRAPH.get(module, ())):
            if target not in GRAPH:
                continue
            if state.get(target) == "open":
                circles.append(" -> ".join(trail[trail.index(target):] + [target]))
            elif target not in state:
                visit(target, trail + [target])
        state[module] = "done"

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])
    assert circles == []


def test_the_rules_see_the_imports_they_judge():
    """The graph is read from the code: the data engine imports the seam, the BFCL environment the engine."""
    assert "coevolve_lib.core.environment" in GRAPH["coevolve_lib.engine.data_engine"]
    assert "coevolve_lib.engine.contexts" in GRAPH["coevolve_lib.envs.bfcl.environment"]
    assert all(part(module) in LAYERS for module in GRAPH if module != "coevolve_lib"), sorted(GRAPH)
