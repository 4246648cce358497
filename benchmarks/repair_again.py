"""Rowen's Stage 3 redone alone on a finished run, with another repair prompt.

    python benchmarks/repair_again.py RUN.jsonl --repair-prompt official|correct [--output OUT] [--limit N]
        [--skip N] [--overwrite] [--cache DIR]

Stages 1-2 and the search are in each row's trace and the repair is one greedy call (rowen.repair), so a run's
Stage 3 can be redone alone, on the run's own model, precision and kernel (its settings file). The redone rows
are a run of their own (common.run: resumable, its settings checked), RUN-repair-PROMPT.jsonl beside RUN or
--output; then RUN's and their figures side by side. Redone with the prompt the run used, every repair output
must come back as stored: the check that the rebuilt prompt is the run's.
"""
from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import common  # noqa: E402
import eval as metrics  # noqa: E402
import rowen  # noqa: E402
from common import InputError  # noqa: E402

FIX = "; repair_again.py takes a finished rowen.py run file, with its .settings.json beside it"


def repaired_row(row: dict, lm, s: rowen.Settings) -> dict:
    """A finished run's row with its repair made again (rowen.repair, with s.repair_prompt): repair_prompt,
    repair_output, final_answer and prediction replaced, all else as it was. A row that did not retrieve
    (its trace holds no evidence) comes back unchanged; a failed row fails again with its error."""
    if "error" in row:
        raise InputError(row["error"])      # common.run writes it as the failed row it was
    trace = row["trace"]
    if "evidence" not in trace:
        return row
    output, final = rowen.repair(lm, row["question"], trace, s, {"main": 0, "verifier": 0})
    # the repair replaced the run's one repair call: model_calls, trace["calls"] and retrievals stay the run's
    trace = {**trace, "repair_prompt": s.repair_prompt, "repair_output": output, "final_answer": final}
    return {**row, "prediction": rowen.yes_no_label(final) if trace["task"] == "strategyqa" else final, "trace": trace}


def read_run(source: Path) -> tuple[list[dict], dict]:
    """A finished Rowen run's rows and its settings; InputError, one line, for a file that is none."""
    try:
        rows = metrics.read_rows(source)
    except ValueError as e:
        raise InputError(f"repair_again: {e}") from None
    saved = common.read_settings(source.with_suffix(".settings.json"), FIX)
    needs = {"task", "initial_long_answer", "initial_answer"}       # what repair() reads, with the evidence
    bad = [r.get("id") for r in rows
           if "id" not in r or ("evidence" in r.get("trace", {}) and not needs <= set(r["trace"]))]
    if not rows or bad or "--model" not in saved:
        where = f"row {bad[0]} holds no Rowen trace" if bad else "its settings name no --model" if rows else "no rows"
        raise InputError(f"{source}: {where}{FIX}")
    return rows, saved


def run_args(args, source: Path, saved: dict, out: Path) -> argparse.Namespace:
    """The flags the redone run records (common.run_settings): RUN ("--repair-again", and as "--data", so that
    its content is hashed as the question file), the prompt, and RUN's model, precision, kernel and device."""
    return argparse.Namespace(
        repair_again=str(source), data=str(source), repair_prompt=args.repair_prompt,
        model=saved["--model"], dtype=saved.get("--dtype", "auto"), linear=saved.get("--linear", "auto"),
        device=saved.get("--device", "auto"), plain=saved.get("--plain", False),
        limit=args.limit, skip=args.skip, output=str(out), overwrite=args.overwrite, cache=args.cache)


def repair_report(rows: list[dict], redone: list[dict], source: Path, out: Path) -> str:
    """A run's rows and the same rows with Stage 3 redone, side by side: their figures (eval.summarize, over
    the ids in both), how many repair outputs came back as stored, how many predictions changed."""
    new = {r["id"]: r for r in redone}
    rows = [r for r in rows if r["id"] in new]
    table = metrics.format_table([(source.stem, metrics.summarize(rows)),
                                  (out.stem, metrics.summarize([new[r["id"]] for r in rows]))], markdown=True)
    repaired = [r for r in rows if "evidence" in r.get("trace", {}) and "error" not in r]
    same = sum(new[r["id"]]["trace"].get("repair_output") == r["trace"].get("repair_output") for r in repaired)
    changed = sum(new[r["id"]]["prediction"] != r["prediction"] for r in rows)
    return (f"{table}\n{same} of {len(repaired)} repair outputs as stored in {source.name}; {changed} of "
            f"{len(rows)} predictions changed")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", metavar="RUN", type=Path, help="a finished rowen.py run file, its .settings.json beside it "
                                                         "(the run's model, precision and kernel are read from there)")
    p.add_argument("--repair-prompt", choices=sorted(rowen.REPAIR), required=True,
                   help="Stage 3's prompt: the official templates (official) or ours, which says r0 may be wrong "
                        "(correct)")
    p.add_argument("--output", help="the redone run (default: RUN-repair-PROMPT.jsonl beside RUN); its settings go "
                                    "beside it and a rerun resumes it only if they match")
    p.add_argument("--limit", type=int, help="only the first N rows")
    p.add_argument("--skip", type=int, default=0, help="leave out the first N of those")
    p.add_argument("--overwrite", action="store_true", help="start --output afresh instead of resuming it")
    p.add_argument("--cache", metavar="DIR",
                   help="call cache, as a method's --cache: a call stored in DIR is read back, not computed")
    args = p.parse_args(argv)
    source = args.run
    rows, saved = read_run(source)
    if args.limit is not None and args.limit < 1:
        raise InputError(f"--limit {args.limit}: give a positive number of questions, or leave --limit out")
    if not 0 <= args.skip < len(rows[:args.limit]):
        raise InputError(f"--skip {args.skip}: {len(rows[:args.limit])} rows are asked for; skip 0 to "
                         f"{len(rows[:args.limit]) - 1} of them")
    out = Path(args.output or source.with_name(f"{source.stem}-repair-{args.repair_prompt}.jsonl"))
    if out.resolve() == source.resolve():
        raise InputError(f"--output {out} is the run being repaired; pass another --output")
    common.check_writable(out)      # a writable .jsonl, as common.run checks it, but before the model loads
    redo = run_args(args, source, saved, out)
    now = common.run_settings(redo, rowen.__file__)     # the method code is rowen.py's, whose repair() runs
    for key in ("precision", "linear layers"):      # a machine that computes in others: its outputs would differ
        if saved.get(key, now[key]) != now[key]:
            raise InputError(f"{source} was computed with {key} = {saved[key]}, this machine gives "
                             f"{now[key]}; redo its repair where it ran")
    if args.cache:
        common.check_cache_dir(args.cache)
    here = common.machine(common.resolve_device(redo.device))
    if (cpus := {r.get("cpu") for r in rows} - {None, here}):
        print(f"note: {source.name} ran on {', '.join(sorted(cpus))}, this is {here}: a kernel's rounding "
              "differs between processors, so a repair output may differ for that alone", file=sys.stderr)
    asked, done = rows[:args.limit][args.skip:], set()
    # before the model loads, as common.check_inputs does for a run: a changed setting is refused, finished rows skipped
    if out.exists() and out.with_suffix(".settings.json").exists() and not args.overwrite:
        old = common.read_settings(out.with_suffix(".settings.json"))
        if (key := common.first_difference(old, now)) is not None:
            raise InputError(f"{out} was made with {key} = {old.get(key, '(unset)')}, this run has "
                             f"{now.get(key, '(unset)')}; pass another --output, or --overwrite to start it afresh")
        try:
            done = {r["id"] for r in metrics.read_rows(out)}
        except ValueError:      # a row cut short by an interruption: common.run drops it, or names the bad line
            done = set()
    if any(r["id"] not in done for r in asked):
        lm = common.load_model(redo.model, redo.dtype, redo.device, common.linear_of(redo))
        solve = functools.partial(repaired_row, lm=lm, s=rowen.Settings(repair_prompt=args.repair_prompt))
        common.run(redo, out.stem, solve, rows[:args.limit], code=rowen.__file__)   # rowen.py's repair() runs
    else:
        print(f"every row asked for is already in {out} (--overwrite starts afresh)", file=sys.stderr)
    print(repair_report(asked, metrics.read_rows(out), source, out))


if __name__ == "__main__":
    common.main_guard(main)
