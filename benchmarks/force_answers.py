"""DRAGIN's forced answers for CtrlA run files made before ctrla.py forced them itself.

    python benchmarks/force_answers.py RUN.jsonl --model M [--dtype ...] [--linear ...] [--device ...]

ctrla.solve forces a multi-hop chain's answer itself (ctrla.force_answer: the chain, " So the answer is" and
20 greedy tokens, as DRAGIN's evaluation does, src/eval.py regenerate_answer). Runs made before that (the
baseline table's HotpotQA CtrlA rows at 062262b) get the same pass afterwards: each multi-hop row whose chain
names no answer gets force_answer's continuation in a side file, RUN.forced.jsonl, with its own settings
beside it; the run file is never changed; eval.read_run (and so eval.py and benchmarks/run_all.py) reads the
two together. Resumable: a row already in the side file is not computed again.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import common  # noqa: E402
import ctrla  # noqa: E402
import eval as metrics  # noqa: E402
from common import InputError  # noqa: E402


def to_force(path: Path, model: str) -> list[dict]:
    """The rows of a run file that need a forced answer (see force_run); InputError for a bad file."""
    try:
        rows = metrics.read_rows(path)
        side = metrics.side_file(path)
        done = {r["id"] for r in metrics.read_rows(side)} if side.exists() else set()
    except ValueError as e:
        raise InputError(f"force_answers: {e}") from None
    if not rows or any("trace" not in r or "question" not in r for r in rows):
        raise InputError(f"{path}: not a CtrlA run file (rows with question and trace)")
    settings = path.with_name(path.stem + ".settings.json")
    saved = common.read_settings(settings) if settings.exists() else {}
    if (run_model := saved.get("--model")) not in (None, model):
        raise InputError(f"{path}: the run's model is {run_model}; pass --model {run_model}")
    todo = [r for r in rows if metrics.needs_forcing(r) and r["id"] not in done]
    print(f"{path}: {len(rows)} rows, {len(todo)} to force ({len(done)} already in {metrics.side_file(path).name})",
          file=sys.stderr)
    return todo


def side_settings(args) -> None:
    """The side file's own settings, RUN.forced.settings.json (common.run_settings: the model, precision,
    kernel, every project file's hash), written before its first row; a side file begun with other settings
    is refused (its rows would mix two computations)."""
    path = metrics.side_file(args.run).with_suffix(".settings.json")
    now = common.run_settings(args, ctrla.__file__)
    if path.exists():
        old = common.read_settings(path)
        if (key := common.first_difference(old, now)) is not None:
            raise InputError(f"{path.name}: its forced answers were computed with {key} = {old.get(key, '(unset)')}, "
                             f"this run has {now.get(key, '(unset)')}; pass the same settings, or remove "
                             f"{metrics.side_file(args.run).name} and its settings to start afresh")
    path.write_text(json.dumps(now, indent=1) + "\n")


def force_run(model, tok, path: Path, todo: list[dict], where: str) -> Path:
    """Each row of `todo` gets ctrla.force_answer's continuation, written as {id, forced, seconds, cpu} to the
    side file as it comes (cpu: `where`, the machine that computes it: common.machine)."""
    side = metrics.side_file(path)
    with open(side, "a", encoding="utf-8") as f:
        for r in todo:
            start = time.perf_counter()
            forced = ctrla.force_answer(model, tok, r["trace"]["task"], r["question"], r["trace"]["answer"])
            f.write(json.dumps({"id": r["id"], "forced": forced, "seconds": round(time.perf_counter() - start, 3),
                                "cpu": where}) + "\n")
            f.flush()
    return side


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path, help="a ctrla.py run file on HotpotQA or 2WikiMultihopQA")
    common.add_common_args(p, dataset="hotpotqa")
    args = p.parse_args(argv)
    common.check_inputs(args)       # --dtype, --linear, --device
    todo = to_force(args.run, args.model)
    if todo:
        side_settings(args)
        model, tok = common.load_model(args.model, args.dtype, args.device)
        side = force_run(model, tok, args.run, todo, common.machine(common.resolve_device(args.device)))
        print(f"wrote {side}", file=sys.stderr)


if __name__ == "__main__":
    common.main_guard(main)
