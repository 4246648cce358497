"""view.py as a reader uses it: pages rendered from traces written here (one per method, a failed row,
an older row), their content checked against the traces, and the page opened in headless Chromium."""
import json
import re
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import view  # noqa: E402

Q = "Were Scott Derrickson and Ed Wood of the same nationality?"
BASE = {"dataset": "hotpotqa", "question": Q, "answers": ["yes"], "model_calls": 9, "seconds": 12.5}

SEAKR = {**BASE, "id": "q1", "prediction": "yes", "retrievals": 1, "trace": {
    "steps": [
        {"text": "Ed Wood was an American filmmaker.", "score": 2.5, "samples": 20, "retrieved": False},
        {"text": "Scott Derrickson is Canadian.", "score": 3.4567, "samples": 19, "retrieved": True,
         "query": "Scott Derrickson nationality",
         "candidates": [{"id": "p1", "title": "Scott Derrickson", "bm25": 12.5,
                         "text": "Scott Derrickson is American.", "score": 1.2345},
                        {"id": "p2", "title": "Ed Wood (film)", "bm25": 9.125, "text": "", "score": None}],
         "chosen": "p1"},
        {"text": "Both are American, so the answer is yes.", "score": 1.1111, "samples": 20, "retrieved": False}],
    "passages": ["p1"], "step_answer": "yes", "step_score": 1.5, "read_answer": "no", "read_score": 2.75,
    "step_text": "So the answer is yes.", "read_text": "The answer is no.", "answer": "yes", "chosen": "rationales"}}
SEAKR_U = ["2.5", "3.4567", "1.2345", "+inf", "1.1111", "1.5", "2.75"]   # every U of SEAKR, in page order
SEAKR_WRONG = {**BASE, "id": "q2", "question": "Who directed Ed Wood?", "answers": ["Tim Burton"],
               "prediction": "Ed Wood", "retrievals": 0, "trace": {
                   "steps": [{"text": "So the answer is Ed Wood.", "score": 2.0, "samples": 20, "retrieved": False}],
                   "passages": [], "step_answer": "Ed Wood", "step_score": 2.0, "read_answer": "Ed Wood",
                   "read_score": 2.1, "answer": "Ed Wood", "chosen": "rationales"}}
COT = {**BASE, "id": "q1", "prediction": "no", "retrievals": 0,
       "trace": {"chain": "Scott Derrickson is Canadian. So the answer is no.", "answer": "no"}}
COT_2 = {**SEAKR_WRONG, "trace": {"chain": "So the answer is Ed Wood.", "answer": "Ed Wood"}}

CTRLA = {**BASE, "id": "q1", "prediction": "yes", "retrievals": 2, "trace": {"task": "hotpotqa", "answer": "...",
                                                                             "segments": [
    {"segment": "Scott Derrickson is an American director.", "trigger": None,
     "tokens": [" Scott", " Der", "rickson", " is", " an", " American", " director", "."],
     "scores": [1.5, -0.2, 2.0, 3.1, 2.2, 0.9, 1.7, 2.5], "unconfident_words": []},
    {"segment": "Ed Wood was born in Canada.", "trigger": "confidence",
     "tokens": [" Ed", " Wood", " was", " born", " in", " Canada", "."],
     "scores": [1.0, 0.5, 2.0, 1.0, 1.2, -1.75, 0.3], "unconfident_words": ["Canada."],
     "rounds": [{"queries": [Q, "Ed Wood birthplace"], "segment": "I cannot answer that.",
                 "passages": [{"id": "p2", "title": "Ed Wood"}]},
                {"queries": [Q, "Where was Ed Wood born?"], "segment": "Ed Wood was born in New York.",
                 "passages": [{"id": "p3", "title": "Ed Wood (film)"}]}],
     "accepted": "Ed Wood was born in New York."}]}}

ROWEN = {**BASE, "id": "q1", "prediction": "Yes, both are American.", "retrievals": 2, "trace": {
    "task": "qa", "mode": "hybrid", "threshold": 1.4, "alpha": 1.0, "initial_long_answer": "Both are American.",
    "initial_answer": "Yes.", "perturbation_output": "1. Q one\n2. Q two",
    "perturbed_questions": ["Are Derrickson and Wood both American?", "Do they share a nationality?"],
    "answers": ["Yes, American.", "No."], "translations": ["德里克森和伍德都是美国人吗？", "他们国籍相同吗？"],
    "target_answers": ["是的。", "是的。"], "cl_verdicts": [True, False], "cl_verdict_texts": ["True.", "False."],
    "verifier_answers": ["Yes.", "Unsure."], "cm_verdicts": [True, None], "cm_verdict_texts": ["True", "Maybe"],
    "z_cl": 0.5, "z_cm": 0.5, "z": 1.0, "decision": True, "retrieved": True,
    "queries": ["Are Derrickson and Wood both American?", "Do they share a nationality?"],
    "evidence": ["Are Derrickson and Wood both American? Scott Derrickson: an American director."],
    "repair_output": "Yes, both are American.", "final_answer": "Yes, both are American.", "calls": {"main": 9}}}

FAILED = {**BASE, "id": "q3", "prediction": "", "retrievals": 0, "trace": {},
          "error": "prompt of 9000 tokens + 64 new ones exceeds the model's context of 8192 tokens"}
OLD = {"id": "nq-0", "score": 3.1175, "answer": "2023", "right": False}     # results/nq200: no question, no trace


def write_run(path: Path, rows, settings=None) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    if settings is not None:
        path.with_suffix(".settings.json").write_text(json.dumps(settings))
    return path


def page(tmp_path, *runs, delta=None) -> str:
    """render() of run files written here; runs: (name, rows, settings) each."""
    loaded = [view.load_run(write_run(tmp_path / f"{name}.jsonl", rows, settings)) for name, rows, settings in runs]
    return view.render(loaded, delta)


def shown(html: str, cls: str) -> list[str]:
    """The texts of the elements with this class, in page order."""
    return re.findall(rf'class="{cls}">([^<]*)<', html)


def question(html: str, qid: str) -> str:
    """The HTML of one question's <details> element."""
    end = r'</details>(?=<details class="q|</div></body>)'
    return re.search(rf'<details class="[^"]*" id="q\d+" data-id="{qid}">.*?{end}', html, re.S).group(0)


# ---------------------------------------------------------------- content, per method

def test_seakr_shows_each_u_against_delta_the_query_the_kept_passage_and_the_final_choice(tmp_path):
    html = page(tmp_path, ("seakr", [SEAKR], {"--threshold": 3.0, "--model": "smollm2-135m"}))
    assert shown(html, "u") == SEAKR_U                     # the trace's numbers, none dropped or rounded
    assert shown(html, "delta") == ["3"]                   # from the settings file
    assert "from the run&#x27;s settings" in html or "from the run's settings" in html
    assert "U &gt; delta: retrieve" in html or "U > delta: retrieve" in html           # 3.4567 > 3
    assert html.count("U &le; delta: keep the step") == 2                              # 2.5 and 1.1111
    assert "Scott Derrickson nationality" in html
    kept = re.findall(r'<tr class="kept">(.*?)</tr>', html, re.S)
    assert len(kept) == 2 and "Scott Derrickson" in kept[0] and "p1" in kept[0]      # the passage kept ...
    assert "from the rationales" in kept[1] and "chosen" in kept[1]                    # ... and the strategy
    assert shown(html, "num")[:2] == ["12.5", "9.125"]                                 # BM25 scores
    assert shown(html, "m-em") == ["1"] and shown(html, "m-f1") == ["1"]


def test_seakr_delta_not_recorded_is_said_and_can_be_given(tmp_path):
    html = page(tmp_path, ("seakr", [SEAKR], None))
    assert shown(html, "delta") == ["not recorded"] and "pass --delta" in html
    assert "No seakr.settings.json beside this file" in html
    html = page(tmp_path, ("seakr", [SEAKR], None), delta=3.01)
    assert shown(html, "delta") == ["3.01"] and "given to view.py" in html


def test_seakr_simple_qa_ircot_and_calibration_traces(tmp_path):
    simple = {**BASE, "id": "s1", "prediction": "American", "retrievals": 1, "trace": {
        "direct": {"text": "So the answer is Canadian.", "answer": "Canadian", "score": 3.5}, "retrieved": True,
        "candidates": [{"id": "p1", "title": "Ed Wood", "answer": "American", "score": 0.25, "text": "..."},
                       {"id": "p2", "title": "Glen or Glenda", "answer": "film", "score": 0.75, "text": "..."}],
        "chosen": "p1"}}
    ircot = {**BASE, "id": "s2", "prediction": "yes", "retrievals": 1, "trace": {
        "steps": [{"query": Q, "passage": "p1", "text": "So the answer is yes."}], "passages": ["p1"], "answer": "yes"}}
    calibration = {**BASE, "id": "s3", "prediction": "no", "trace": {"direct": "No.", "score": 2.125,
                                                                     "perplexity": 1.5, "samples": 20}}
    html = page(tmp_path, ("mixed", [simple, ircot, calibration], {"--threshold": 3.0}))
    assert shown(html, "u") == ["3.5", "0.25", "0.75", "2.125"]
    assert re.search(r'<tr class="kept">.*?Ed Wood.*?American', html, re.S)
    assert "IRCoT retrieves before every step" in html and f"<q>{Q}</q>" in html
    assert "perplexity" in html and "1.5" in shown(html, "num") and "trace.retrieved" not in html
    # a calibration file alone: no delta, and the page says why rather than "the model's default"
    html = page(tmp_path, ("calibration", [calibration], {"--calibrate": True, "--threshold": None}))
    assert "a calibration run retrieves nothing and uses no delta" in html and "model's default" not in html


def test_ctrla_shades_each_word_by_its_score_and_marks_the_flagged_words(tmp_path):
    html = page(tmp_path, ("ctrla", [CTRLA], {"--query": "tvq"}))
    flagged = re.findall(r'<mark class="w flag"[^>]*>([^<]*)<sub class="ws">([^<]*)</sub>', html)
    assert flagged == [("Canada.", "-1.75")]               # marked, with its lowest token's score
    words = dict(re.findall(r'<span class="w"[^>]*>([^<]*)<sub class="ws">([^<]*)</sub>', html))
    # "Derrickson" is unconfident (-0.2, the lower of its tokens) but not new information: shaded, not marked
    assert words["Derrickson"] == "-0.2" and words["American"] == "0.9"
    assert 'background:rgba(207,34,46' in re.search(r'<span class="w" style="([^"]*)"[^>]*>Derrickson', html).group(1)
    assert shown(html, "num")[:8] == ["1.5", "-0.2", "2", "3.1", "2.2", "0.9", "1.7", "2.5"]   # token table
    assert "TVQ: a query the model wrote" in html and "Ed Wood birthplace" in html
    assert html.count('class="refusal"') == 1              # the first retrieval refused ...
    assert "rewritten by the model (Prompt B.2)" in html and "Where was Ed Wood born?" in html   # ... and was rewritten
    assert "Kept: " in html and "born in New York" in html and "Ed Wood (film)" in html


def test_ctrla_marks_the_flagged_copy_of_a_repeated_word(tmp_path):
    """'man' twice, the second unconfident and flagged: the second is marked (the first was, with its +1.1)."""
    seg = {"segment": "a man who is a man", "trigger": "confidence", "tokens": [" a", " man", " who", " is", " a",
           " man"], "scores": [0.5, 1.1, 0.4, 0.3, 0.2, -1.1], "unconfident_words": ["man"]}
    html = page(tmp_path, ("ctrla", [{**CTRLA, "trace": {**CTRLA["trace"], "segments": [seg]}}], {"--query": "tvq"}))
    assert re.findall(r'<mark class="w flag"[^>]*>([^<]*)<sub class="ws">([^<]*)</sub>', html) == [("man", "-1.1")]


def refused(n: int, queries: list, rewritten: list | None, segment: str = "I cannot answer that.") -> dict:
    """A step of today's ctrla.py whose regeneration was its question's n-th refusal: the trigger's search
    (with the refused segment), then the search of the rewritten queries (none after the 7th)."""
    rounds = [{"queries": queries, "passages": [{"id": "p2", "title": "Ed Wood"}], "segment": segment}]
    rounds += [{"queries": rewritten, "passages": [{"id": "p3", "title": "Ed Wood (film)"}]}] * (rewritten is not None)
    monitored = {k: CTRLA["trace"]["segments"][1][k] for k in ("segment", "trigger", "tokens", "scores",
                                                              "unconfident_words")}
    return {**monitored, "rounds": rounds, "refusal": n}


def ctrla_page(tmp_path, *steps, **counts) -> str:
    trace = {"task": "hotpotqa", "answer": "Ed Wood", "segments": list(steps), **counts}
    return page(tmp_path, ("ctrla", [{**CTRLA, "trace": trace}], {"--query": "tvq"}))


def rounds_of(html: str) -> list[str]:
    return re.findall(r'<div class="round">(.*?)</div>', html, re.S)


def labels(round_html: str) -> list[tuple[str, str]]:
    """(label, query) of each query of one retrieval round."""
    return re.findall(r'<li><span class="small">([^<]*):</span> <q>([^<]*)</q></li>', round_html)


def test_ctrla_seventh_refusal_is_marked_and_ends_the_answer(tmp_path):
    # the 7th refusal (more than MAX_REFUSALS = 6) breaks out: one round, no rewrite searched
    html = ctrla_page(tmp_path, refused(7, [Q, "Ed Wood birthplace"], None), refusals=7, search_rounds=1)
    assert len(rounds_of(html)) == 1
    assert shown(html, "refusal") == ["refusal 7"]
    assert "Refusal 7, more than the 6 a question is allowed: the answer ends here" in html


def test_ctrla_rewrite_round_shows_no_empty_regenerated_line(tmp_path):
    html = ctrla_page(tmp_path, refused(2, [Q, "Ed Wood birthplace"], [Q, "Where was Ed Wood born?"]))
    first, second = rounds_of(html)
    assert "Regenerated:" not in second and "Nothing regenerated: the next segment is written" in second
    assert "Regenerated: <span class=\"gen\">I cannot answer that.</span>" in first
    assert shown(first, "refusal") == ["refusal 2"]
    assert "(after refusal 2: the queries are rewritten)" in second
    assert labels(second) == [("the question", Q), ("rewritten by the model (Prompt B.2)", "Where was Ed Wood born?")]
    assert html.count("Regenerated:") == 1


def test_ctrla_sixth_refusal_searches_the_bare_question_not_a_rewrite(tmp_path):
    bare = refused(6, [Q, "Ed Wood birthplace"], [Q])
    caq = refused(3, [Q + " Ed Wood was born in"], ["Ed Wood birth place"])     # a CAQ rewrite, for contrast
    html = ctrla_page(tmp_path, caq, bare)
    caq_search, caq_rewrite, first, second = rounds_of(html)
    assert labels(second) == [("the bare question (refusal 6 searches it, not a rewrite)", Q)]
    assert "(after refusal 6: the bare question, not a rewrite)" in second
    assert labels(caq_rewrite) == [("CAQ, rewritten by the model (Prompt B.2)", "Ed Wood birth place")]
    assert html.count("rewritten by the model") == 1            # the CAQ rewrite only
    assert shown(html, "refusal") == ["refusal 3", "refusal 6"]


def test_ctrla_shows_the_refusal_count_and_search_rounds(tmp_path):
    steps = [refused(1, [Q, "Ed Wood birthplace"], [Q, "Where was Ed Wood born?"]),
             refused(2, [Q, "Ed Wood birthplace"], [Q, "Ed Wood's place of birth"]),
             {"segment": "He was born in New York.", "trigger": None, "tokens": [" He"], "scores": [0.5]}]
    html = ctrla_page(tmp_path, *steps, refusals=2, search_rounds=4)
    assert shown(html, "refusals") == ["2"] and shown(html, "search-rounds") == ["4"]
    html = page(tmp_path, ("ctrla", [CTRLA], None))                # an older trace: said, not guessed
    assert shown(html, "refusals") == ["not recorded"] and shown(html, "search-rounds") == ["not recorded"]


def test_ctrla_refusal_limits_are_ctrla_pys():
    text = (ROOT / "ctrla.py").read_text(encoding="utf-8")
    assert int(re.search(r"^MAX_REFUSALS = (\d+)", text, re.M).group(1)) == view.CTRLA_MAX_REFUSALS
    assert int(re.search(r"^BARE_QUESTION_AT = (\d+)", text, re.M).group(1)) == view.CTRLA_BARE_QUESTION_AT


@pytest.mark.parametrize("text", ["[1, 2]", '"text"'])
def test_a_settings_file_that_is_not_an_object_is_a_one_line_error(tmp_path, text):
    path = write_run(tmp_path / "run.jsonl", [CTRLA])
    (tmp_path / "run.settings.json").write_text(text)
    with pytest.raises(view.InputError, match=r"run.settings.json: not a JSON object \((list|str)\); fix or delete"):
        view.load_run(path)


@pytest.mark.parametrize("threshold, said", [("3.0", '"3.0"'), ([3.0], "[3.0]")])
def test_a_settings_threshold_that_is_not_a_number_is_a_one_line_error(tmp_path, threshold, said):
    # SeaKR's bars and rule compare U with the settings' --threshold: a string there was a TypeError
    with pytest.raises(view.InputError, match=re.escape(f"seakr.settings.json: --threshold is {said}, not a number")):
        page(tmp_path, ("seakr", [SEAKR], {"--threshold": threshold}))
    run, out = tmp_path / "seakr.jsonl", tmp_path / "seakr.html"
    done = subprocess.run([sys.executable, str(ROOT / "view.py"), str(run), "-o", str(out)], capture_output=True,
                          text=True, cwd=tmp_path)
    assert done.returncode == 2 and not out.exists() and done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"error: {run.with_suffix('.settings.json')}: --threshold is {said}, not a number")
    page(tmp_path, ("seakr", [SEAKR], {"--threshold": None}))     # null: the model's default, as before


def test_rowen_shows_perturbations_answers_in_two_languages_verdicts_and_z_against_the_threshold(tmp_path):
    html = page(tmp_path, ("rowen", [ROWEN], {"--target-language": "Chinese"}))
    assert shown(html, "z") == ["0.5", "0.5", "1"] and shown(html, "threshold") == ["1.4"]
    for text in ROWEN["trace"]["perturbed_questions"] + ROWEN["trace"]["answers"] + ROWEN["trace"]["translations"] \
            + ROWEN["trace"]["target_answers"] + ROWEN["trace"]["verifier_answers"]:
        assert text in html
    assert "answer r<sub>T</sub><sup>j</sup> (Chinese)" in html
    verdicts = re.findall(r'<span class="v (\w+)">', html)
    assert verdicts == ["yes", "yes", "no", "unread"]      # row 1: CL, CM; row 2: CL, CM (None: unreadable)
    assert "Z &lt; threshold: retrieve and repair" in html
    assert ROWEN["trace"]["evidence"][0] in html and "Repair output" in html


def test_a_failed_row_and_an_old_row_render_what_they_have_and_name_what_is_missing(tmp_path):
    html = page(tmp_path, ("old", [SEAKR_WRONG, FAILED, OLD], None))
    failed = question(html, "q3")
    assert "This question failed: prompt of 9000 tokens" in failed and 'class="mark wrong"' in failed
    old = question(html, "nq-0")
    assert "Not in this row: question, answers, prediction, trace." in old
    assert "answer = " in old and "2023" in old and "3.1175" in old       # its own fields are still shown
    # a SeaKR trace without step_text / read_text renders, and a trace lacking a field says so
    partial = {**SEAKR_WRONG, "id": "q4", "trace": {"steps": SEAKR_WRONG["trace"]["steps"]}}
    html = page(tmp_path, ("partial", [partial], None))
    assert "trace.step_answer" in html and "trace.chosen" in html


# ---------------------------------------------------------------- the list, the filter, two runs

def test_filter_hides_right_answers_and_questions_without_retrieval(tmp_path):
    html = page(tmp_path, ("seakr", [SEAKR, SEAKR_WRONG], None))
    assert re.search(r'<details class="q all-right retrieved" id="q1" data-id="q1">', html)
    assert re.search(r'<details class="q some-wrong" id="q2" data-id="q2">', html)
    # the checkboxes come before the list; checked, they hide these classes (the browser test clicks them)
    assert html.index('id="only-wrong"') < html.index('class="questions"')
    assert "#only-wrong:checked~.questions .q.all-right{display:none}" in html
    assert "#only-retrieved:checked~.questions .q:not(.retrieved){display:none}" in html


def test_two_runs_of_the_same_questions_side_by_side(tmp_path):
    html = page(tmp_path, ("seakr", [SEAKR, SEAKR_WRONG], None), ("cot", [COT, COT_2], None))
    q1 = question(html, "q1")
    summary = re.search(r"<summary>(.*?)</summary>", q1, re.S).group(1)
    cells = re.findall(r'<span class="cell (\w+)">', summary)
    assert cells == ["right", "wrong"] and "yes" in summary and "no" in summary   # where they part
    assert 'class="q some-wrong retrieved differ"' in q1
    assert 'class="q some-wrong"' in question(html, "q2")                         # both wrong: no "differ"
    assert q1.count('<div class="col">') == 2 and "One chain of thought, no retrieval" in q1
    assert 'id="only-differ"' in html and "seakr vs cot" in html


def test_settings_and_summary_are_at_the_top(tmp_path):
    run = write_run(tmp_path / "seakr.jsonl", [SEAKR, SEAKR_WRONG], {"--threshold": 3.0, "--model": "smollm2-135m"})
    run.with_suffix(".summary.json").write_text(json.dumps({"n": 2, "em": 0.5, "f1": 0.5, "retrieval_rate": 0.5}))
    html = view.render([view.load_run(run)])
    top = html[:html.index('class="questions"')]
    assert "smollm2-135m" in top and "--threshold" in top
    assert shown(top, "s-em") == ["50"] and shown(top, "s-n") == ["2"]


def test_an_answer_the_results_table_reads_again_is_shown_beside_the_one_run(tmp_path):
    # run_all's figures.json names the answers its table cut where they run on; the page keeps the run's
    # answer and mark, and shows the answer as the table reads it with its own mark and score
    ran_on = {**SEAKR_WRONG, "prediction": "Tim Burton.Human: Who wrote it?"}
    (tmp_path / "figures.json").write_text(json.dumps({"reread": {"ircot": {"q2": "Tim Burton"},
                                                                  "cot": 3}}))   # an older file's count
    html = page(tmp_path, ("ircot", [SEAKR, ran_on], None), ("cot", [COT, COT_2], None))
    q2 = question(html, "q2")
    assert "Tim Burton.Human: Who wrote it?" in q2
    again = re.findall(r'<p class="reread">(.*?)</p>', q2, re.S)
    assert len(again) == 1 and "<b>Tim Burton</b>" in again[0] and "right" in again[0]
    assert shown(q2, "m-em") == ["0", "1", "0"]         # ircot as run, as the table reads it; cot
    assert "reads this answer again" not in question(html, "q1")
    top = html[:html.index('class="questions"')]
    assert top.count("The results table reads 1 of these answers again") == 1


def test_a_ctrla_chains_forced_answer_is_shown_from_its_trace_or_its_side_file(tmp_path):
    # a run made with the forced answer in its loop holds it in the trace; an earlier run has it in
    # RUN.forced.jsonl beside it, and run_all's figures.json names the answer its table reads
    inloop = {**CTRLA, "trace": {**CTRLA["trace"], "forced": " no"}}
    html = page(tmp_path, ("ctrla", [inloop], None))
    assert "The chain named no answer; forced, as DRAGIN's evaluation does" in html
    assert "So the answer is<b> no</b>" in html and "computed after the run" not in html
    (tmp_path / "ctrla-never.forced.jsonl").write_text(json.dumps({"id": "q1", "forced": " no.", "seconds": 1.0}) + "\n")
    (tmp_path / "figures.json").write_text(json.dumps({"forced_answers": {"ctrla-never": {"q1": "no"}}}))
    html = page(tmp_path, ("ctrla-never", [CTRLA], None))
    assert "So the answer is<b> no.</b></span> <small>(computed after the run: ctrla-never.forced.jsonl)" in html
    again = re.findall(r'<p class="reread">(.*?)</p>', question(html, "q1"), re.S)
    assert len(again) == 1 and "<b>no</b>" in again[0] and "wrong" in again[0]
    assert "the forced answers of ctrla-never.forced.jsonl, where the chain named none" in again[0]
    assert shown(question(html, "q1"), "m-em") == ["1", "0"]     # "yes" as run, "no" as the table reads it


def test_the_page_is_self_contained(tmp_path):
    html = page(tmp_path, ("seakr", [SEAKR], None), ("ctrla", [CTRLA], None))
    for needle in ("<script", "<link", "<img", "src=", "@import", "url(", "http://", "https://"):
        assert needle not in html, needle


# ---------------------------------------------------------------- the command line

def test_command_writes_the_page_and_a_malformed_line_is_one_line_error(tmp_path):
    run = write_run(tmp_path / "seakr.jsonl", [SEAKR])
    out = tmp_path / "run.html"
    cmd = [sys.executable, str(ROOT / "view.py"), str(run), "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0 and out.exists() and out.as_uri() in done.stdout
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(SEAKR) + "\n{not json\n")
    done = subprocess.run(cmd[:2] + [str(bad), "-o", str(tmp_path / "bad.html")], capture_output=True, text=True,
                          cwd=tmp_path)
    assert done.returncode == 2 and not (tmp_path / "bad.html").exists()
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"error: {bad}:2: not valid JSON")


@pytest.mark.parametrize("where, said", [("gone/q.png", "no folder"), (".", "a folder, not a file")])
def test_an_unwritable_screenshot_path_is_a_one_line_error_before_anything_is_written(tmp_path, where, said):
    run, out, png = write_run(tmp_path / "seakr.jsonl", [SEAKR]), tmp_path / "run.html", tmp_path / where
    done = subprocess.run([sys.executable, str(ROOT / "view.py"), str(run), "-o", str(out), "--screenshot", str(png)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and not out.exists()
    assert done.stderr.startswith(f"error: --screenshot {png}: {said}")


# ---------------------------------------------------------------- a real browser

def png_looks_blank(data: bytes) -> bool:
    """A PNG of one flat colour: its filtered pixel stream holds a handful of byte values; a page with
    text, bars and shading holds many."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    chunks, at = [], 8
    while at < len(data):
        size, kind = struct.unpack(">I4s", data[at:at + 8])
        if kind == b"IDAT":
            chunks.append(data[at + 8:at + 8 + size])
        at += 12 + size
    return width < 100 or height < 100 or len(set(zlib.decompress(b"".join(chunks)))) < 16


def test_png_looks_blank_tells_a_flat_image_from_a_drawn_one():
    def png(rows):   # 120 x 120 RGB, filter byte 0 on each row
        raw = b"".join(b"\0" + bytes(r) for r in rows)
        ihdr = struct.pack(">IIBBBBB", 120, 120, 8, 2, 0, 0, 0)
        def chunk(kind, body):
            return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    assert png_looks_blank(png([[255] * 360] * 120))
    assert not png_looks_blank(png([[(x * y) % 256 for x in range(360)] for y in range(120)]))


@pytest.mark.skipif(view.chromium_missing() is not None, reason=f"no headless Chromium: {view.chromium_missing()}")
def test_the_page_in_headless_chromium_from_a_file_url(tmp_path):
    from selenium.webdriver.common.by import By
    out = tmp_path / "run.html"
    out.write_text(page(tmp_path, ("seakr", [SEAKR, SEAKR_WRONG, FAILED, OLD], None), ("ctrla", [CTRLA], None)))
    with view.chromium() as driver:
        driver.get(out.as_uri())
        assert driver.find_element(By.TAG_NAME, "h1").text == "seakr vs ctrla"
        assert [m for m in driver.get_log("browser") if m["level"] in ("SEVERE", "WARNING")] == []
        assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0  # loads nothing
        first = driver.find_element(By.ID, "q1")
        body = first.find_element(By.CLASS_NAME, "body")
        assert not body.is_displayed()
        first.find_element(By.TAG_NAME, "summary").click()          # a question expands
        assert body.is_displayed() and "U = 3.4567" in body.text and "Canada." in body.text
        wrong = driver.find_element(By.ID, "q2")
        driver.find_element(By.CSS_SELECTOR, "label[for=only-wrong]").click()
        assert not first.is_displayed() and wrong.is_displayed()    # right in every run: hidden
        driver.find_element(By.CSS_SELECTOR, "label[for=only-wrong]").click()
        driver.find_element(By.CSS_SELECTOR, "label[for=only-retrieved]").click()
        assert first.is_displayed() and not wrong.is_displayed()
        assert not png_looks_blank(driver.get_screenshot_as_png())
    png = tmp_path / "q.png"
    assert view.screenshot(out, png, "q1") == "q1"                  # the README's command
    assert not png_looks_blank(png.read_bytes())


@pytest.mark.skipif(view.chromium_missing() is not None, reason=f"no headless Chromium: {view.chromium_missing()}")
def test_a_screenshot_that_cannot_be_written_is_an_input_error(tmp_path):
    # main checks the path first; screenshot() itself, called alone, says so too (was a FileNotFoundError)
    out = tmp_path / "run.html"
    out.write_text(page(tmp_path, ("seakr", [SEAKR], None)))
    with pytest.raises(view.InputError, match=r"--screenshot .*q\.png: cannot write it \(No such file or directory\)"):
        view.screenshot(out, tmp_path / "gone" / "q.png", "q1")
