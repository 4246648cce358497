"""Whether two runs gave the same rows: a before/after check for a change that must not change results.

    python benchmarks/same_rows.py BEFORE AFTER

BEFORE and AFTER are two run files, or two folders whose run files (*.jsonl) are paired by name. Rows
are paired by id and compared whole but for the machine's record (seconds, cpu, libraries); where two
rows differ, the first differing place is named (a path into the row: trace.segments[2].scores[5]).
The settings beside each file are compared too, but for the code hashes and --output (a change of
code is the point of the check). Prints one line per file and exits 1 where any row differs.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import eval as metrics  # noqa: E402

CLOCK = ("seconds", "cpu_seconds", "cpu", "libraries")   # the machine's clock, kind and versions: not the method


def first_difference(a, b, path: str = "") -> str | None:
    """The path of the first place where a and b differ (None where they are equal)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            if key not in a or key not in b:
                return f"{path}.{key}".lstrip(".") + (" (only after)" if key not in a else " (only before)")
            if (found := first_difference(a[key], b[key], f"{path}.{key}")) is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            if (found := first_difference(x, y, f"{path}[{i}]")) is not None:
                return found
        return None if len(a) == len(b) else f"{path.lstrip('.')} (length {len(a)} -> {len(b)})"
    return None if a == b else path.lstrip(".") or "(the row)"


def settings_difference(before: Path, after: Path) -> str | None:
    """The first setting that differs, code hashes and --output left out; None if both agree or one is missing."""
    files = [p.with_suffix(".settings.json") for p in (before, after)]
    if not all(f.exists() for f in files):
        return None
    a, b = (json.loads(f.read_text(encoding="utf-8")) for f in files)
    keep = lambda s: {k: v for k, v in s.items() if "code" not in k and k != "--output"}
    return first_difference(keep(a), keep(b))


def compare(before: Path, after: Path) -> tuple[bool, str]:
    """(same, one line): the rows of two run files, paired by id."""
    rows = [{r["id"]: {k: v for k, v in r.items() if k not in CLOCK} for r in metrics.read_rows(p)}
            for p in (before, after)]
    ids = [i for i in rows[0] if i in rows[1]]
    differ = [(i, first_difference(rows[0][i], rows[1][i])) for i in ids]
    differ = [(i, where) for i, where in differ if where is not None]
    alone = len(rows[0]) + len(rows[1]) - 2 * len(ids)
    line = f"{after.name}: {len(ids) - len(differ)} of {len(ids)} rows identical (all but {', '.join(CLOCK)})"
    if alone:
        line += f"; {alone} rows in one file only"
    if differ:
        line += f"; first difference: row {differ[0][0]}, {differ[0][1]}"
    if (setting := settings_difference(before, after)) is not None:
        line += f"; settings differ at {setting}"
    return not differ and not alone and ids != [], line


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("before", type=Path, help="a run file, or a folder of run files")
    p.add_argument("after", type=Path, help="the same, after the change")
    a = p.parse_args(argv)
    if a.before.is_dir() != a.after.is_dir():
        print("error: give two run files or two folders", file=sys.stderr)
        return 2
    pairs = ([(a.before, a.after)] if not a.before.is_dir() else
             [(f, a.after / f.name) for f in sorted(a.before.glob("*.jsonl")) if (a.after / f.name).exists()])
    if not pairs:
        print(f"error: no run file of {a.before} has a namesake in {a.after}", file=sys.stderr)
        return 2
    try:
        results = [compare(x, y) for x, y in pairs]
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for _, line in results:
        print(line)
    return 0 if all(same for same, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
