"""The house rules of DESIGN.md that the code itself can show: imports run one way (no file imports one
that imports it back, directly or through others), no project import hides inside a function, and no
file reaches into another's private (_name) functions."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(p.stem for p in ROOT.glob("*.py"))


def project_imports(path: Path) -> list[tuple[str, bool]]:
    """(project module imported, whether the import sits inside a function) for every import in a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    inside = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
              for n in ast.walk(f) if n is not f}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [(n, id(node) in inside) for n in names if n in MODULES]
    return found


def graph() -> dict[str, set[str]]:
    return {m: {n for n, _ in project_imports(ROOT / f"{m}.py")} - {m} for m in MODULES}


def test_no_file_imports_one_that_imports_it_back():
    g = graph()

    def reaches(start, goal, seen=()):
        return any(n == goal or (n not in seen and reaches(n, goal, (*seen, n))) for n in g[start])
    circles = sorted(m for m in MODULES if reaches(m, m))
    assert circles == [], f"files on a circle of imports: {circles} (graph: {g})"


def test_imports_run_the_way_the_readme_draws_them():
    g = graph()
    assert g["retrieval"] == set() and g["eval"] == set()      # the bottom floor: no project import
    assert g["questions"] <= {"retrieval"}
    assert g["models"] <= {"retrieval"}                          # the model files, the CPU, precision, kernels
    assert g["speed"] <= {"models", "retrieval"}                 # the fast path and the call cache: never common
    assert g["common"] <= {"speed", "models", "retrieval", "eval", "questions"}
    for method in ("seakr", "ctrla", "rowen"):
        assert g[method] <= {"common", "eval"}, method        # never another method file, nor analysis
    # what reads run files sits above the methods: it may import them, none imports it
    assert g["analysis"] <= {"seakr", "ctrla", "rowen", "common", "eval"}
    assert not any("analysis" in g[m] for m in MODULES)
    assert g["view"] <= {"eval"}


def test_no_project_import_inside_a_function():
    hidden = [(m, n) for m in MODULES for n, inside in project_imports(ROOT / f"{m}.py") if inside]
    assert hidden == []


def test_no_file_uses_another_files_private_names():
    used = []
    for m in MODULES:
        tree = ast.parse((ROOT / f"{m}.py").read_text(encoding="utf-8"))
        aliases = {a.asname or a.name: a.name for n in ast.walk(tree) if isinstance(n, ast.Import)
                   for a in n.names if a.name in MODULES}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and aliases[node.value.id] != m
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                used.append(f"{m}.py uses {aliases[node.value.id]}.{node.attr}")
            if isinstance(node, ast.ImportFrom) and node.module in MODULES and node.module != m:
                used += [f"{m}.py imports {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert used == []


# The reader's figures: each method file is its method first, read in one sitting, and no file is a tome.
# At most 700 lines each; the plumbing the methods share (layer ranges, the shared-prefix state
# reading, the features' disk cache, the data files' readers) is common.py's
MAX_METHOD_LINES = {"seakr": 700, "ctrla": 700, "rowen": 700}
MAX_FILE_LINES = 1000
MIN_METHOD_SHARE = 0.6


def method_share(path: Path) -> tuple[int, float]:
    """(lines, share of them that is the method): the lines from the first section heading ("# ---" and a
    title) up to the "Command line" heading (settings, math, prompts, model calls, the loop, the method's
    text rules); the docstring and imports before, the command line and anything after, are not."""
    lines = path.read_text(encoding="utf-8").splitlines()
    heads = [i for i, line in enumerate(lines[:-1]) if line.startswith("# ---")]
    cli = next(i for i in heads if lines[i + 1].startswith("# Command line"))
    return len(lines), (cli - heads[0]) / len(lines)


def test_each_method_file_is_its_method_first():
    figures = {m: method_share(ROOT / f"{m}.py") for m in MAX_METHOD_LINES}
    print("\n".join(f"{m}.py: {n} lines, {share:.0%} method" for m, (n, share) in figures.items()))
    assert {m: n for m, (n, _) in figures.items() if n > MAX_METHOD_LINES[m]} == {}
    assert {m: round(s, 2) for m, (_, s) in figures.items() if s < MIN_METHOD_SHARE} == {}


def test_no_project_file_is_a_tome():
    files = [*ROOT.glob("*.py"), *(ROOT / "benchmarks").glob("*.py")]
    long = {p.name: n for p in files if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES}
    assert long == {}
