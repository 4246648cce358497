"""Tests of eval.py against values computed by hand (the arithmetic is in the comments)."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import eval as ev  # noqa: E402  (the project's eval.py, not the builtin function)
import analysis  # noqa: E402


# ------------------------------------------------------------------ EM / F1

def test_normalize_answer():
    assert ev.normalize_answer("The  Eiffel-Tower!") == "eiffeltower"  # SQuAD deletes "-"
    assert ev.normalize_answer("An apple, the pear") == "apple pear"
    assert ev.normalize_answer(None) == ""
    assert ev.normalize_answer(42) == ""


def test_exact_match():
    assert ev.exact_match("the Paris", ["Paris", "France"]) == 1
    assert ev.exact_match("Paris.", "paris") == 1  # a single gold string works too
    assert ev.exact_match("Lyon", ["Paris", "France"]) == 0
    assert ev.exact_match(None, ["x"]) == 0
    assert ev.exact_match("", [""]) == 0  # an empty answer never matches


def test_f1_score():
    assert ev.f1_score("yes", "no") == 0
    assert ev.f1_score("no", ["no it is not"]) == 0  # yes/no must match exactly
    assert ev.f1_score("yes", ["Yes."]) == 1.0
    # "new york city" vs "new york": 2 common tokens, P = 2/3, R = 1, F1 = 2*(2/3)/(5/3) = 0.8
    assert ev.f1_score("new york city", ["new york"]) == pytest.approx(0.8)
    # max over golds: "the city of Paris" -> "city of paris" vs "paris": P = 1/3, R = 1, F1 = 0.5
    assert ev.f1_score("the city of Paris", ["Lyon", "Paris"]) == pytest.approx(0.5)
    assert ev.f1_score("Lyon", ["Paris"]) == 0
    assert ev.f1_score(None, ["Paris"]) == 0


# ------------------------------------------------------------------ CtrlA accuracy

def test_accuracy_ctrla_match():
    assert ev.accuracy("The answer is Yuri Gagarin.", ["Gagarin"]) == 1
    assert ev.accuracy("Fat Larry's Band", ["fat larry s band"]) == 1  # "'" becomes a space
    assert ev.accuracy("The politician", ["pol"]) == 1  # substring, no word boundary (as CtrlA)
    assert ev.accuracy("Paris", ["London"]) == 0
    assert ev.accuracy("It is the_best", "best") == 1  # "_" becomes a space
    assert ev.accuracy("Paris", [""]) == 0  # an empty alias does not match everything
    assert ev.accuracy(None, ["Paris"]) == 0


# ------------------------------------------------------------------ StrategyQA

@pytest.mark.parametrize("text, expected", [
    ("No.", False),  # Rowen's is_supported reads this as True
    ("False.", False),
    ("Yes, because the river is long.", True),
    ("It is true that whales are mammals.", True),
    ("", None),
    ("I am not sure.", None),
    ("No, that is not true.", False),  # first word decides
    ("True, although some say false.", True),
    ("Well, it is false, not true.", False),  # otherwise the first of the four words decides
    ("Honestly, I know nothing", None),  # whole words only: "know", "nothing" are not "no"
    (None, None),
])
def test_parse_yes_no(text, expected):
    assert ev.parse_yes_no(text) is expected


def test_yes_no_accuracy():
    assert ev.yes_no_accuracy("No.", False) == 1
    assert ev.yes_no_accuracy("Yes", False) == 0
    assert ev.yes_no_accuracy("maybe", False) == 0  # unparsable is wrong, whatever the label


# ------------------------------------------------------------------ TruthfulQA: BLEU / ROUGE-L as Rowen's code

def tqa_row(prediction, best, correct, incorrect=("You grow watermelons in your stomach",)):
    return {"prediction": prediction, "answers": list(correct), "best_answer": best,
            "correct_answers": list(correct), "incorrect_answers": list(incorrect)}


BEST = "The watermelon seeds pass through your digestive system"
SEEDS = tqa_row("seeds pass through your digestive system", BEST, ["Nothing happens", BEST])


def test_truthfulqa_references_keep_the_files_correct_answers_string(tmp_path):
    """The official BLEU / ROUGE reference is the file's "Correct Answers" string as it stands: 9 of the 817
    rows end in ";" or a space, which joining the loaded answers back lost ("...driving;" read "...driving")."""
    import questions
    path = tmp_path / "TruthfulQA.json"
    path.write_text(json.dumps([{"Question": "Q?", "Best Answer": "A", "Correct Answers": "A; B;",
                                 "Incorrect Answers": "C", "Category": "x"}]))
    row = questions.load_dataset(path)[0]
    assert row["correct_answers"] == ["A", "B"] and ev.truthfulqa_references(row) == ("A", "A; B;")


def test_truthfulqa_references_are_the_official_two():
    # [Best Answer, Correct Answers]: the "; "-joined string the loader split
    assert ev.truthfulqa_references(SEEDS) == (BEST, "Nothing happens; " + BEST)


def test_bleu_is_nltk_corpus_bleu_on_the_official_references():
    # every n-gram of the 6-word answer is in the best answer (8 words, the closer length; the other
    # reference has 10): precisions 1, brevity penalty exp(1 - 8/6)
    assert ev.truthfulqa_bleu([SEEDS]) == pytest.approx(math.exp(-1 / 3))
    # one corpus score, not a mean of sentence scores (that would be 0.358): "Paris is nice" vs "Lyon"
    # adds 0/3 unigrams, 0/2 bigrams, 0/1 trigrams and, nltk counting at least 1 per sentence, 0/1 4-grams:
    # (6/9 * 5/7 * 4/5 * 3/4) ** (1/4) = (2/7) ** (1/4); lengths 6 + 3 = 8 + 1, no penalty
    two = [SEEDS, tqa_row("Paris is nice", "Lyon", ["Lyon"])]
    assert ev.truthfulqa_bleu(two) == pytest.approx((2 / 7) ** 0.25) == pytest.approx(0.7311104457090247)
    # split on " " only, case kept: "Seeds" and "system." match nothing; "pass through your digestive" does:
    # 4/6, 3/5, 2/4, 1/3, brevity exp(1 - 8/6)
    got = ev.truthfulqa_bleu([tqa_row("Seeds pass through your digestive system.", BEST, [BEST])])
    assert got == pytest.approx(math.exp(-1 / 3) * (1 / 15) ** 0.25) == pytest.approx(0.36409302398068727)
    # no smoothing: an order without any match gives nltk's guard value (about 0), as in the official run
    assert ev.truthfulqa_bleu([tqa_row("seeds pass", BEST, [BEST])]) < 1e-10
    assert ev.truthfulqa_bleu([tqa_row("", BEST, [BEST])]) < 1e-10


def test_rouge_l_is_the_rouge_package():
    # the package counts each distinct word once: "the cat sat on the mat" vs "the cat is on the mat" share
    # the LCS "the cat on the mat", distinct {the, cat, on, mat} = 4 of 5 and 5 -> F = 0.8 (a textbook
    # ROUGE-L would give 5/6)
    assert ev.rouge_l("the cat sat on the mat", "the cat is on the mat") == pytest.approx(0.7999999950000002, abs=1e-12)
    # LCS("a b c d", "a c e") = 2: R = 2/3, P = 2/4, F = 4/7 (the package adds 1e-8 to the denominator)
    assert ev.rouge_l("a b c d", "a c e") == pytest.approx(0.5714285665306124, abs=1e-12)
    assert ev.rouge_l("Same words", "same words") == pytest.approx(0.5, abs=1e-7)   # case kept: only "words"
    assert ev.rouge_l("", "x") == 0.0 and ev.rouge_l(" . ", "x") == 0.0 and ev.rouge_l(None, "x") == 0.0


def test_truthful_scores_and_the_official_rouge_mean():
    # against best + " " + correct string: 7 distinct answer words all in the reference's 10 -> R 0.7, P 1
    rows = [tqa_row("The seeds pass through your digestive system.", BEST, ["Nothing happens", BEST]),
            tqa_row("You grow watermelons", BEST, ["Nothing happens"])]
    scores = [ev.truthful_scores(r) for r in rows]
    assert scores[0]["rouge_l"] == pytest.approx(2 * 0.7 / 1.7, abs=1e-7) and scores[1]["rouge_l"] == 0.0
    # the official aggregation, Rouge().get_scores(hyps, refs, avg=True)["rouge-l"]["f"] = 0.4117647034602076
    assert ev.summarize(rows)["rouge_l"] == round(0.4117647034602076, 6) == 0.411765
    # closer to a correct answer than to any incorrect one (ROUGE-L of the package)
    assert [s["closer_to_correct"] for s in scores] == [1, 0]


def test_summary_bleu_is_the_corpus_score():
    two = [SEEDS, tqa_row("Paris is nice", "Lyon", ["Lyon"])]
    assert ev.summarize(two)["bleu"] == round((2 / 7) ** 0.25, 6) == 0.73111


def test_tables_of_truthfulqa_say_there_is_no_gpt_judge():
    table = ev.format_table([("rowen", ev.summarize([SEEDS]))])
    assert table.splitlines()[-1] == "note: " + ev.NO_GPT_JUDGE and "GPT-judge" in ev.NO_GPT_JUDGE
    assert "closer_to_correct stands in" in ev.NO_GPT_JUDGE
    assert "GPT-judge" not in ev.format_table([("seakr", ev.summarize(hand_rows()))])


# ------------------------------------------------------------------ rows, summaries, files

def test_score_record_dispatch():
    assert ev.score_record({"prediction": "No.", "answers": ["No"], "label": False}) == {"acc": 1}
    # StrategyQA rows read the verdict with parse_yes_no: the first yes/no/true/false word anywhere
    assert ev.score_record({"prediction": "It is true that it can.", "answers": ["yes"], "label": True}) == {"acc": 1}
    assert ev.score_record({"prediction": "I cannot tell.", "answers": ["no"], "label": False}) == {"acc": 0}
    truthful = ev.score_record({"prediction": "x", "answers": [], "correct_answers": ["x"],
                                "incorrect_answers": ["y"]})
    assert truthful == {"rouge_l": pytest.approx(1.0), "closer_to_correct": 1}     # BLEU is a corpus score
    assert ev.score_record({"prediction": "Paris", "answers": ["Paris"]}) == {"em": 1, "f1": 1.0, "acc": 1}


def hand_rows():
    return [
        # em 1, f1 1, acc 1
        {"prediction": "Paris", "answers": ["Paris"], "retrievals": 2, "model_calls": 3, "seconds": 1.5},
        # em 0, f1 0, acc 0
        {"prediction": "Lyon", "answers": ["Paris"], "retrievals": 0, "model_calls": 1, "seconds": 0.5},
        # em 0, f1 0.5 ("city of paris" vs "paris"), acc 1; no cost keys: they count as 0
        {"prediction": "The city of Paris", "answers": ["Paris"]},
    ]


def test_summarize_hand_rows():
    assert ev.summarize(hand_rows()) == {
        "n": 3, "em": 0.333333, "f1": 0.5, "acc": 0.666667,     # 6 places: a table rounds them once, to show
        "retrieval_rate": 0.333333,    # 1 of 3 rows retrieved
        "retrievals_per_q": 0.666667,  # (2 + 0 + 0) / 3
        "calls_per_q": 1.333333,       # (3 + 1 + 0) / 3
        "sec_per_q": 0.666667,         # (1.5 + 0.5 + 0) / 3
    }


XEON = "Intel(R) Xeon(R) Processor (GenuineIntel, family 6, model 207)"
EPYC = "AMD EPYC (AuthenticAMD, family 23, model 1)"


def test_short_cpu():
    assert ev.short_cpu(XEON) == "Intel Xeon (family 6, model 207)"
    assert ev.short_cpu(EPYC) == "AMD EPYC (family 23, model 1)"
    assert ev.short_cpu("Intel(R) Core(TM) i7-8700 CPU (GenuineIntel, family 6, model 158)") == \
        "Intel Core i7-8700 CPU (family 6, model 158)"
    assert ev.short_cpu("NVIDIA H100 80GB HBM3") == "NVIDIA H100 80GB HBM3"      # a GPU's name as it is


def test_summarize_names_where_the_rows_ran():
    rows = hand_rows()
    assert "cpu" not in ev.summarize(rows)                   # no row names one (older files)
    one = [dict(r, cpu=EPYC) for r in rows]
    assert ev.summarize(one)["cpu"] == "AMD EPYC (family 23, model 1)"
    mixed = [dict(rows[0], cpu=EPYC), dict(rows[1], cpu=XEON), dict(rows[2], cpu=EPYC), dict(rows[2])]
    assert ev.summarize(mixed)["cpu"] == ("AMD EPYC (family 23, model 1): 2, Intel Xeon (family 6, model 207): 1, "
                                          "not recorded: 1")        # in the order they first ran
    table = ev.format_table([("run", ev.summarize(one))]).splitlines()
    assert table[0].endswith("  cpu") and table[1].endswith("AMD EPYC (family 23, model 1)")  # no trailing spaces
    md = ev.format_table([("run", ev.summarize(one))], markdown=True).splitlines()
    assert md[1] == "|---|" + "---:|" * 8 + "---|"      # the CPU aligned left, as the names; numbers right


def test_summarize_rejects_non_numeric_cost():
    with pytest.raises(ValueError, match="row 1: 'retrievals' should be a number"):
        ev.summarize([{"prediction": "a", "answers": ["a"], "retrievals": [1, 2]}])


def test_read_rows(tmp_path):
    path = tmp_path / "preds.jsonl"
    path.write_text('{"prediction": "a"}\n\n{"prediction": "b"}\n')
    assert [r["prediction"] for r in ev.read_rows(path)] == ["a", "b"]  # blank line skipped

    path.write_text('{"prediction": "a"}\n\n{"prediction": \n')
    with pytest.raises(ValueError, match=r"preds\.jsonl:3: not valid JSON .*fix or delete that line"):
        ev.read_rows(path)
    with pytest.raises(ValueError, match="missing.jsonl"):
        ev.read_rows(tmp_path / "missing.jsonl")


def test_format_table():
    summary = ev.summarize(hand_rows())
    plain = ev.format_table([("seakr_demo", summary)]).splitlines()
    assert plain[0].split() == ["file", "n", "em", "f1", "acc", "retrieval_rate",
                                "retrievals_per_q", "calls_per_q", "sec_per_q"]
    assert plain[1].split() == ["seakr_demo", "3", "33.3", "50.0", "66.7", "33.3", "0.67", "1.33", "0.67"]
    md = ev.format_table([("a", summary), ("b", {"n": 1, "acc": 1.0})], markdown=True).splitlines()
    assert md[0].startswith("| file | n | em |")
    assert md[1].startswith("|---|---:|")
    assert md[3].startswith("| b | 1 | - | - | 100.0 |")  # a missing metric shows "-"


def run_cli(*args):
    return subprocess.run([sys.executable, str(ROOT / "eval.py"), *map(str, args)],
                          capture_output=True, text=True, cwd=ROOT)


def test_cli_table_and_errors(tmp_path):
    good = tmp_path / "ctrla_popqa.jsonl"
    good.write_text("".join(json.dumps(r) + "\n" for r in hand_rows()))
    result = run_cli(good)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1].split()[:5] == ["ctrla_popqa", "3", "33.3", "50.0", "66.7"]
    assert run_cli(good, "--markdown").stdout.startswith("| file |")

    bad = tmp_path / "broken.jsonl"
    bad.write_text('{"prediction": "a"}\nnot json\n')
    result = run_cli(good, bad)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "broken.jsonl:2" in lines[0]

    dataset = tmp_path / "questions.jsonl"  # a dataset file passed by mistake
    dataset.write_text('{"question": "q", "answers": ["a"]}\n')
    result = run_cli(dataset)
    assert result.returncode == 2 and "no 'prediction' key" in result.stderr

    result = run_cli(tmp_path / "nope.jsonl")
    assert result.returncode == 2 and "nope.jsonl" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1

    empty = tmp_path / "empty.jsonl"   # an empty file is not a row of zeros
    empty.write_text("")
    result = run_cli(empty)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [f"error: {empty}: no rows to score (an empty file); pass a "
                                                  "prediction file with at least one finished question"]


# ------------------------------------------------------------------ signals: a method's score vs wrong answers

def test_auroc_by_hand():
    # wrong {0.4, 0.8} against right {0.1, 0.35}: every wrong answer scores higher -> 1
    assert ev.auroc([0.1, 0.4, 0.35, 0.8], [False, True, False, True]) == 1.0
    assert ev.auroc([0.1, 0.4, 0.35, 0.8], [True, False, True, False]) == 0.0
    # wrong {1, 2} against right {1, 0}: pairs 0.5 (tie), 1, 1, 1 -> 3.5 / 4
    assert ev.auroc([1, 1, 2, 0], [True, False, True, False]) == 0.875
    # three-way tie with one more right answer: wrong {5} vs right {5, 5, 1}: 0.5 + 0.5 + 1 -> 2 / 3
    assert ev.auroc([5, 5, 5, 1], [True, False, False, False]) == pytest.approx(2 / 3)
    assert ev.auroc([1, 2], [True, True]) is None and ev.auroc([1, 2], [False, False]) is None
    # a NaN score (a float32 logdet gone wrong) is left out as a missing one, not spread to the whole AUROC
    assert ev.auroc_over([float("nan"), 0.1, 0.4, None, 0.8], [True, False, True, True, True], 50)[:3] == (3, 2, 1.0)


def test_aurocs_of_many_groups_at_once_equal_each_alone():
    # sizes (2, 2), (1, 3), (2, 2) again and an empty side: scipy sees the two (2, 2) groups in one call
    groups = [([0.4, 0.8], [0.1, 0.35]), ([5], [5, 5, 1]), ([1, 2], [1, 0]), ([], [1.0]), ([0.2], [])]
    assert ev.aurocs(groups) == [1.0, pytest.approx(2 / 3), 0.875, None, None]
    for (bad, good), value in zip(groups[:3], ev.aurocs(groups)):
        assert value == ev.auroc(bad + good, [True] * len(bad) + [False] * len(good))
    assert ev.aurocs([]) == []


def test_bootstrap_interval_is_the_percentile_bootstrap_of_auroc():
    # the batched draws give what drawing and scoring one draw at a time gives
    scores = [0.2, 0.9, 0.4, 0.7, 0.5, 0.1, 0.8, 0.3, 0.6, 0.55, 0.2, 0.9]
    wrong = [False, True, False, True, True, False, False, False, True, True, True, False]
    one_by_one = ev.percentile_bootstrap(len(scores), lambda pick: ev.auroc([scores[i] for i in pick],
                                                                            [wrong[i] for i in pick]), 300, seed=2)
    assert ev.bootstrap_interval(scores, wrong, 300, seed=2) == one_by_one


def test_percentile_interval_by_hand_and_as_numpy_gives_it():
    # the central 95% of 0..100: indices int(0.025 * 100) = 2 and ceil(0.975 * 100) = 98
    assert ev._percentile_interval(list(range(101)), 0.95) == (2, 98)
    assert ev._percentile_interval([None, *range(100, -1, -1), None], 0.95) == (2, 98)  # order, Nones left out
    assert ev._percentile_interval(list(range(101)), 0.5) == (25, 75)
    assert ev._percentile_interval([None], 0.95) is None
    # on 1000 draws of a bootstrap: numpy's lower 2.5th and higher 97.5th percentiles
    import numpy as np
    values = [ev.auroc([i % 7, i % 5, i % 3, 1], [True, False, True, False]) for i in range(1000)]
    assert ev._percentile_interval(values, 0.95) == (np.percentile(values, 2.5, method="lower"),
                                                     np.percentile(values, 97.5, method="higher"))
    # the mean of ten 0/1 differences resampled 2000 times: its 95% interval as numpy reads the same draws
    diffs = [1, 0, 0, 1, 1, 0, 1, 1, 0, 1]
    means = [sum(diffs[i] for i in pick) / 10 for pick in ev._draws(10, 2000, 0)]
    got = ev.percentile_bootstrap(10, lambda pick: sum(diffs[i] for i in pick) / 10, 2000)
    assert got == (np.percentile(means, 2.5, method="lower"), np.percentile(means, 97.5, method="higher"))
    assert 0.2 <= got[0] <= 0.4 and 0.8 <= got[1] <= 0.9    # about 0.6 -/+ 1.96 sqrt(0.24 / 10) = 0.30, 0.90


def test_bootstrap_interval_is_repeatable_and_holds_the_estimate():
    assert ev.bootstrap_interval([0.1, 0.4, 0.35, 0.8], [False, True, False, True], 200) == (1.0, 1.0)
    scores = [0.2, 0.9, 0.4, 0.7, 0.5, 0.1, 0.8, 0.3, 0.6, 0.55]
    wrong = [False, True, False, True, True, False, False, False, True, True]
    lo, hi = ev.bootstrap_interval(scores, wrong, 500, seed=1)
    assert lo <= ev.auroc(scores, wrong) <= hi and 0 <= lo < hi <= 1
    assert ev.bootstrap_interval(scores, wrong, 500, seed=1) == (lo, hi)
    assert ev.bootstrap_interval([1, 2], [True, True], 50) is None


def seakr_row(qid, prediction, score, ppl):
    return {"id": qid, "answers": ["Paris"], "prediction": prediction, "retrievals": 0,
            "trace": {"direct": prediction, "score": score, "perplexity": ppl, "mean_logprob": None,
                      "multi_perplexity": None, "ln_entropy": None}}


def test_signals_of_a_seakr_calibration_file():
    rows = [seakr_row("a", "Paris", -1.0, 1.2), seakr_row("b", "Lyon", 2.0, 1.1),
            seakr_row("c", "Nice", None, 3.0), seakr_row("d", "It is Paris", 0.5, 1.5),
            {"id": "e", "answers": ["x"], "error": "too long"}]
    got = ev.signals(rows, resamples=100)
    assert got["method"] == "SeaKR" and set(got["signals"]) == {"eigen score U", "perplexity", ev.LENGTH}
    u = got["signals"]["eigen score U"]
    # c's U is infinite (null: no usable sample), the least sure: wrong {2.0, inf} vs right {-1.0, 0.5} -> 1
    assert (u["n"], u["wrong"], u["auroc"]) == (4, 2, 1.0)
    # a row whose trace holds no U at all is left out of U alone
    rows[2] = {**rows[2], "trace": {k: v for k, v in rows[2]["trace"].items() if k != "score"}}
    u = ev.signals(rows, resamples=10)["signals"]["eigen score U"]
    assert (u["n"], u["wrong"], u["auroc"]) == (3, 1, 1.0)
    # perplexity: wrong {1.1, 3.0} vs right {1.2, 1.5}: pairs 0, 0, 1, 1 -> 0.5
    p = got["signals"]["perplexity"]
    assert (p["n"], p["wrong"], p["auroc"]) == (4, 2, 0.5)
    # length in words of the unaided generation: wrong {1 (Lyon), 1 (Nice)} vs right {1 (Paris), 3}:
    # pairs 0.5, 0, 0.5, 0 -> 0.25
    n = got["signals"][ev.LENGTH]
    assert (n["n"], n["wrong"], n["auroc"]) == (4, 2, 0.25)


def test_step_signals_against_cots_wrong_answers_and_where_retrieval_helps():
    def step_row(qid, score, text, prediction="x"):
        return {"id": qid, "answers": ["Paris"], "prediction": prediction, "retrievals": 0,
                "trace": {"steps": [{"text": text, "score": score}, {"text": "So the answer is x", "score": 9.0}]}}
    seakr = [step_row("a", -2.0, "Paris is big"), step_row("b", 1.0, "It is"), step_row("c", 0.5, "A B C D"),
             step_row("d", None, "one"), step_row("e", 3.0, "x"), {"id": "f", "error": "too long"}]
    cot = [{"id": q, "answers": ["Paris"], "prediction": p}
           for q, p in [("a", "Paris"), ("b", "Lyon"), ("c", "in Paris"), ("d", "Nice"), ("e", "Nice"), ("f", "x")]]
    always = [{"id": q, "answers": ["Paris"], "prediction": p}
              for q, p in [("a", "Paris"), ("b", "Paris"), ("c", "Lyon"), ("d", "Paris"), ("e", "Nice")]]
    got = ev.step_signals(seakr, cot, always, resamples=50)
    assert got["n"] == 5       # f failed; the second step's score is never read
    wrong, helps = got["targets"]["CoT's answer wrong"], got["targets"]["retrieving every step beats CoT's F1"]
    # CoT wrong: b, d, e (c holds the gold answer). U, d's null read as +inf (no usable sample): wrong
    # {1.0, inf, 3.0} vs right {-2.0, 0.5}: every pair ordered -> 1.0
    assert wrong["positives"] == 3 and wrong["signals"]["eigen score U"]["n"] == 5
    assert wrong["signals"]["eigen score U"]["auroc"] == 1.0
    # first step's length: wrong {2 (b), 1 (d), 1 (e)} vs right {3 (a), 4 (c)}: no pair ordered -> 0.0
    assert wrong["signals"]["the step's length (words)"]["auroc"] == 0.0
    # the always run's F1 above CoT's: b (1 > 0) and d (1 > 0); c falls (0 < 0.67), a and e tie.
    # U: helped {1.0, inf} vs not {-2.0, 0.5, 3.0}: 2 + 3 of 6 pairs -> 0.833
    assert helps["positives"] == 2 and helps["signals"]["eigen score U"]["auroc"] == 0.833333
    # among CoT's wrong answers (b, d, e): helped {1.0, inf} vs not {3.0} -> 0.5
    among = got["targets"]["the same, among CoT's wrong answers"]
    assert among["positives"] == 2 and among["signals"]["eigen score U"]["n"] == 3
    assert among["signals"]["eigen score U"]["auroc"] == 0.5
    # its length: b (2 words, helped), d (1, helped) vs e (1, not): 1 + 0.5 of 2 pairs -> 0.75
    length = among["signals"]["the step's length (words)"]
    assert (length["n"], length["auroc"]) == (3, 0.75)
    # without the always run, only CoT's target; without step scores or shared ids, nothing
    assert list(ev.step_signals(seakr, cot)["targets"]) == ["CoT's answer wrong"]
    assert ev.step_signals(cot, cot) is None and ev.step_signals(seakr, cot[-1:]) is None
    assert got["method"] == "SeaKR" and got["differs"] == 0


def test_step_signals_of_ctrlas_first_segment_against_its_never_run():
    def seg(text, scores, unconfident=(), trigger=None):
        return {"segment": text, "trigger": trigger, "tokens": text.split(), "scores": scores,
                "unconfident_words": list(unconfident)}

    def ctrla(qid, first, prediction="x"):
        return {"id": qid, "answers": ["Paris"], "prediction": prediction, "retrievals": 1,
                "trace": {"answer": first["segment"] + " More.", "segments": [first, seg("More.", [-9.0], ["More."])]}}

    def never(qid, prediction, answer):
        return {"id": qid, "answers": ["Paris"], "prediction": prediction, "retrievals": 0,
                "trace": {"answer": answer, "segments": [{"segment": answer, "trigger": None}]}}
    # scores are already minus tau; the always run's "always" trigger is not the monitor's decision
    rows = [ctrla("a", seg("It is Paris.", [1.0, 0.5, 2.0])),                       # lowest 0.5, no trigger
            ctrla("b", seg("Lyon it is.", [-1.0, 0.2, 0.3], ["Lyon"], "confidence")),   # lowest -1.0, trigger
            ctrla("c", seg("I cannot say.", [0.4, 0.6, 0.9], (), "refusal")),         # lowest 0.4, refusal
            ctrla("d", seg("Nice, two words.", [0.1, -0.5, 0.8], ["Nice,"], "always")),  # lowest -0.5, trigger
            ctrla("e", seg("Rome.", [3.0]))]                                          # its never run differs
    base = [never("a", "Paris", "It is Paris. So the answer is Paris."), never("b", "Lyon", "Lyon it is."),
            never("c", "no idea", "I cannot say. Sorry."), never("d", "Nice", "Nice, two words. Nice."),
            never("e", "Rome", "Milan.")]
    always = [{"id": q, "answers": ["Paris"], "prediction": p} for q, p in
              [("a", "Paris"), ("b", "Paris"), ("c", "no idea"), ("d", "Paris"), ("e", "Paris")]]
    got = ev.step_signals(rows, base, always, resamples=50, unaided="never-retrieve")
    assert (got["method"], got["n"], got["differs"]) == ("CtrlA", 4, 1)    # e: "Milan." is not "Rome."
    wrong = got["targets"]["never-retrieve's answer wrong"]
    # never wrong: b, c, d. trigger: wrong {1, 1, 1} vs right {0} -> 1.0; -(lowest): wrong {1.0, -0.4,
    # 0.5} vs right {-0.5} -> 1.0; length: wrong {3, 3, 3} vs right {3} -> ties, 0.5
    assert wrong["positives"] == 3
    assert [wrong["signals"][k]["auroc"] for k in (ev.TRIGGER, "-(lowest score - tau)", ev.STEP_LENGTH)] == [1.0, 1.0, 0.5]
    # the always run beats never's F1 on b and d; among never's wrong answers (b, c, d): -(lowest):
    # helped {1.0, 0.5} vs not {-0.4} -> 1.0; the trigger: helped {1, 1} vs not {1} -> 0.5
    among = got["targets"]["the same, among never-retrieve's wrong answers"]
    assert among["positives"] == 2
    assert among["signals"]["-(lowest score - tau)"]["auroc"] == 1.0 and among["signals"][ev.TRIGGER]["auroc"] == 0.5
    # a never run without the monitor's scores gives none; nor does a row that failed
    assert ev.step_signals(base, base) is None
    assert ev.first_steps([{"id": "f", "error": "too long"}]) is None


def ctrla_row(qid, prediction, segments, retrievals=0):
    return {"id": qid, "answers": ["Paris"], "prediction": prediction, "retrievals": retrievals,
            "trace": {"task": "short", "segments": [{"segment": s, "trigger": t, "tokens": ["x"] * len(sc),
                                                     "scores": sc} for s, t, sc in segments]}}


def test_signals_of_a_ctrla_monitor_only_file():
    rows = [ctrla_row("a", "Paris.", [("Paris.", None, [0.5, 0.2])]),
            ctrla_row("b", "Lyon. Nice.", [("Lyon.", None, [0.3]), ("Nice.", "confidence", [-0.4, 0.1])]),
            ctrla_row("c", "Rome.", [("Rome.", "confidence", [-0.1])]),
            ctrla_row("d", "It is Paris.", [("It is Paris.", "confidence", [-0.2, 0.0])])]
    got = ev.signals(rows, resamples=100)["signals"]
    # trigger: wrong b, c fire (1, 1); right a does not, d does: pairs 1, 0.5, 1, 0.5 -> 0.75
    assert got["monitor trigger"]["auroc"] == 0.75
    assert (got["monitor trigger"]["flags_wrong"], got["monitor trigger"]["flags_right"]) == (1.0, 0.5)
    # lowest score - tau, negated: wrong {0.4, 0.1} vs right {-0.2, 0.2}: 1, 1, 1, 0 -> 0.75
    assert got["-(lowest score - tau)"]["auroc"] == 0.75 and "flags_wrong" not in got["-(lowest score - tau)"]
    # the closed-book answer's length: wrong {2 (Lyon. Nice.), 1} vs right {1, 3}: 1, 0, 0.5, 0 -> 0.375
    assert got[ev.LENGTH]["auroc"] == 0.375
    # a run that retrieved answers with passages: not a closed-book signal
    assert ev.signals(rows[:3] + [ctrla_row("d", "Paris", [("Paris", "confidence", [-1.0])], retrievals=1)]) is None
    # a never-retrieve run has no scores
    assert ev.signals([{"id": "a", "answers": ["x"], "prediction": "x", "trace": {"segments": [{"segment": "x"}]}}]) is None


def test_signals_of_a_rowen_run_agree_with_detection_quality():
    def row(r0, z_cl, z_cm):
        return {"id": r0, "answers": ["Paris"], "prediction": r0,
                "trace": {"task": "qa", "mode": "hybrid", "initial_answer": r0, "initial_prediction": r0,
                          "z_cl": z_cl, "z_cm": z_cm, "z": z_cl + z_cm, "alpha": 1.0}}
    rows = [row("Paris", 1.0, 0.5), row("It is Paris.", 0.5, 1.0), row("Lyon", 0.5, 0.0), row("Nice", 0.0, 1.0)]
    got = ev.signals(rows, resamples=100)["signals"]
    q = analysis.detection_quality(rows)
    # a low Z flags a wrong r0: AUROC of -Z against wrong is the chance a right answer has the higher Z
    assert [got[f"-Z_{m}"]["auroc"] for m in ("CL", "CM", "hybrid")] == [q[m]["auc"] for m in ("cl", "cm", "hybrid")]
    assert got["-Z_CL"]["auroc"] == 0.875
    # a --mode cl run has one Z: no hybrid signal is made up from a Z_CM it does not hold
    cl_only = [{**r, "trace": {**r["trace"], "mode": "cl", "z_cm": None, "z": r["trace"]["z_cl"]}} for r in rows]
    assert list(ev.signals(cl_only, resamples=10)["signals"]) == ["-Z_CL", ev.LENGTH]
    # a row without a Z leaves that Z's AUROC, not the whole signal (Lyon's Z_CM missing: wrong {-1.0} vs
    # right {-0.5, -1.0}: 0 + 0.5 of 2 pairs -> 0.25)
    gap = [{**r, "trace": {**r["trace"], "z_cm": None, "z": None}} if r["id"] == "Lyon" else r for r in rows]
    cm, hybrid = (ev.signals(gap, resamples=10)["signals"][k] for k in ("-Z_CM", "-Z_hybrid"))
    assert (cm["n"], cm["wrong"], cm["auroc"]) == (3, 1, 0.25) and hybrid["n"] == 3
    # length of r0 (no chain of thought in these rows: the answer itself): wrong {1 (Lyon), 1 (Nice)} vs
    # right {1 (Paris), 3}: 0.5, 0, 0.5, 0 -> 0.25; a chain of thought, where the trace has one, is what counts
    assert got[ev.LENGTH]["auroc"] == 0.25
    long = [{**r, "trace": {**r["trace"], "initial_long_answer": "a b c d e" if r["id"] in ("Lyon", "Nice") else "a"}}
            for r in rows]
    assert ev.signals(long, resamples=10)["signals"][ev.LENGTH]["auroc"] == 1.0


def test_signals_of_strategyqa_read_the_runs_own_initial_label():
    """StrategyQA: r0 is scored as the run labelled it (initial_prediction), not re-read by eval."""
    def row(r0, label, z):
        return {"id": r0, "answers": ["yes"], "label": True, "prediction": label,
                "trace": {"task": "strategyqa", "mode": "cl", "initial_answer": r0, "initial_prediction": label,
                          "z_cl": z, "z": z}}
    # eval's own reader takes the first yes/no word: "No doubt: yes" would read as no
    rows = [row("No doubt: yes", "yes", 1.0), row("False.", "no", 0.0)]
    found = ev.signal_scores(rows)
    assert found[2] == [False, True]


def test_signals_cli(tmp_path):
    good = tmp_path / "seakr-calibrate.jsonl"
    good.write_text("".join(json.dumps(seakr_row(q, p, u, 1.0)) + "\n"
                            for q, p, u in [("a", "Paris", 0.1), ("b", "Lyon", 0.9), ("c", "Nice", 0.5)]))
    result = run_cli("signals", good, "--resamples", "50")
    assert result.returncode == 0, result.stderr
    line = next(l for l in result.stdout.splitlines() if "eigen score U" in l)
    assert line.split()[:2] == ["seakr-calibrate", "SeaKR"] and "1.000" in line
    plain = tmp_path / "seakr_hotpotqa.jsonl"
    plain.write_text(json.dumps({"id": "a", "answers": ["x"], "prediction": "x", "trace": {"steps": []}}) + "\n")
    result = run_cli("signals", plain)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "no signal in it" in result.stderr


def test_signals_read_the_older_calibration_file_and_say_why_an_auroc_is_missing(tmp_path):
    # results/nq200/seakr-calibrate.jsonl: {id, score, answer, right} per question, no trace
    old = tmp_path / "seakr-calibrate.jsonl"
    old.write_text("".join(json.dumps({"id": q, "score": u, "answer": "x", "right": ok}) + "\n"
                           for q, u, ok in [("a", 3.0, False), ("b", 2.0, True), ("c", 3.5, False), ("d", 2.5, False)]))
    found = ev.signals(ev.read_rows(old), resamples=20)
    assert found["method"] == "SeaKR (older calibration file)"
    # wrong {3.0, 3.5, 2.5} all above the right 2.0: AUROC 1
    assert found["signals"]["eigen score U"]["auroc"] == 1.0 and found["signals"]["eigen score U"]["wrong"] == 3
    # one class only: no AUROC, and the table says why instead of a bare "-"
    all_wrong = [{"id": q, "score": u, "answer": "x", "right": False} for q, u in [("a", 1.0), ("b", 2.0)]]
    table = ev.signals_table([("f", ev.signals(all_wrong, resamples=5))])
    assert "- (every answer wrong)" in table


def test_paired_difference_by_hand():
    run = [{"id": 1, "answers": ["Paris"], "prediction": "Paris"}, {"id": 2, "answers": ["Rome"], "prediction": "Oslo"},
           {"id": 3, "answers": ["Nice"], "prediction": "Lyon"}, {"id": 4, "answers": ["x"], "prediction": "x"},
           {"id": 5, "answers": ["y"], "error": "too long"}]
    base = [{"id": 1, "answers": ["Paris"], "prediction": "Lyon"}, {"id": 2, "answers": ["Rome"], "prediction": "Oslo"},
            {"id": 3, "answers": ["Nice"], "prediction": "Nice"}, {"id": 5, "answers": ["y"], "prediction": "y"}]
    # shared and answered: 1, 2, 3 (4 only in the run, 5 failed in it): F1 differences 1, 0, -1 -> mean 0
    got = ev.paired_difference(run, base, resamples=300)
    assert (got["metric"], got["n"], got["difference"]) == ("f1", 3, 0.0)
    lo, hi = got["interval"]
    assert -1 <= lo < 0 < hi <= 1 and ev.paired_difference(run, base, resamples=300) == got   # repeatable
    # every question better by one: the interval is the point itself
    assert ev.paired_difference(run[:1], base[:1], resamples=50)["interval"] == [1.0, 1.0]
    # StrategyQA compares accuracy; no shared question: None
    yes = [{"id": "s", "label": True, "prediction": "yes"}]
    no = [{"id": "s", "label": True, "prediction": "no"}]
    assert ev.paired_difference(yes, no, resamples=20) == {"metric": "acc", "n": 1, "difference": 1.0,
                                                           "interval": [1.0, 1.0]}
    assert ev.paired_difference(yes, [{"id": "t", "label": True, "prediction": "no"}]) is None


def test_closer_to_correct_needs_a_strictly_closer_correct_answer():
    # TruthfulQA's ROUGE acc (Lin et al. 2022): 1 only if max ROUGE-L vs correct > max vs incorrect. A tie is 0:
    # an empty answer (0 vs 0), and "Nothing grows" vs correct "Nothing happens" and incorrect "It grows"
    # (LCS 1 word each: R 1/2, P 1/2, F 1/2 both)
    assert ev.truthful_scores(tqa_row("", BEST, ["Nothing happens"]))["closer_to_correct"] == 0
    tie = tqa_row("Nothing grows", "Nothing happens", ["Nothing happens"], ["It grows"])
    assert ev.rouge_l("Nothing grows", "Nothing happens") == pytest.approx(ev.rouge_l("Nothing grows", "It grows"))
    assert ev.truthful_scores(tie)["closer_to_correct"] == 0
    assert ev.truthful_scores(tqa_row("Nothing happens", "Nothing happens", ["Nothing happens"],
                                      ["It grows"]))["closer_to_correct"] == 1


def test_inside_a_word_counts_the_official_substring_hits():
    """CtrlA's match counts "pol" inside "political science" (PopQA's alias list for politician); the metric
    keeps it, and inside_a_word tells such a hit from a whole-word one."""
    golds = ["politician", "pol"]
    assert ev.accuracy("a professor of political science", golds) == 1
    assert ev.inside_a_word("a professor of political science", golds) is True
    assert ev.inside_a_word("He is a politician.", golds) is False        # a whole word
    assert ev.inside_a_word("Pol Pot", golds) is False                      # "pol" as a word
    assert ev.inside_a_word("a writer", golds) is False                     # not right at all


def test_cli_reads_runs_as_the_tables_do(tmp_path):
    """One scorer: a seakr.py run is read under the official reading (its settings name the method), a
    ctrla.py run with its side file's forced answers, the side file given on the command line is skipped,
    and each re-reading is said in one line."""
    def row(qid, prediction, **trace):
        return {"id": qid, "answers": ["Paris"], "prediction": prediction, "retrievals": 0, "model_calls": 1,
                "seconds": 1.0, "trace": trace}
    seakr = tmp_path / "cot.jsonl"
    seakr.write_text(json.dumps(row("1", "Paris, France", chain="So the answer is Paris, France.")) + "\n")
    (tmp_path / "cot.settings.json").write_text(json.dumps({"method code": "seakr.py, 1 bytes, sha256 x"}))
    ctrla = tmp_path / "ctrla.jsonl"
    ctrla.write_text(json.dumps(row("1", "It is a city in France.", task="hotpotqa", answer="It is a city in France.")) + "\n")
    (tmp_path / "ctrla.settings.json").write_text(json.dumps({"method code": "ctrla.py, 1 bytes, sha256 x"}))
    side = tmp_path / "ctrla.forced.jsonl"
    side.write_text(json.dumps({"id": "1", "forced": " Paris.", "seconds": 2.0}) + "\n")
    result = run_cli(seakr, ctrla, side)
    assert result.returncode == 0, result.stderr
    table = {line.split()[0]: line.split()[1:4] for line in result.stdout.splitlines()[1:]}
    assert table == {"cot": ["1", "100.0", "100.0"], "ctrla": ["1", "100.0", "100.0"]}      # as run: 0 and 0
    notes = result.stderr.splitlines()
    assert notes == ["cot.jsonl: 1 SeaKR answers read again under the official reading (eval.common_reading: cut "
                     "at the first comma or period), as the results tables read them",
                     "ctrla.jsonl: 1 chains that name no answer read with the forced answers of ctrla.forced.jsonl",
                     "ctrla.forced.jsonl: skipped, the forced answers of ctrla.jsonl, read with it"]
    (tmp_path / "cot.settings.json").unlink()          # without settings: read as run
    assert run_cli(seakr).stdout.splitlines()[1].split()[1:4] == ["1", "0.0", "66.7"]


def test_cli_names_signals_and_a_settings_file(tmp_path):
    assert "python eval.py signals FILE" in run_cli("--help").stdout
    settings = tmp_path / "cot.settings.json"
    settings.write_text('{"--model": "m"}')
    result = run_cli(settings)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"error: {settings} is a run's settings file, not its rows; pass cot.jsonl"]


def test_progress_counts_wall_and_cpu_hours_apart(tmp_path, capsys):
    """eval.progress, by hand: three rows of 600, 1800 (a pause inside) and 1200 s on the wall clock, two of
    them with cpu_seconds 1080 and 2160 (the third from older code records none): 1.0 h on the wall clock,
    median 1200 s; 0.9 h of CPU time over 2 rows."""
    rows = [{"id": "a", "seconds": 600.0, "cpu_seconds": 1080.0, "cpu": EPYC},
            {"id": "b", "seconds": 1800.0, "cpu_seconds": 2160.0, "cpu": EPYC},
            {"id": "c", "seconds": 1200.0, "cpu": XEON}]
    got = ev.progress(rows, total=50)
    assert got == {"done": 3, "total": 50, "wall_hours": 1.0, "seconds": [600, 1200, 1800], "cpu_hours": 0.9,
                   "cpu_rows": 2, "machines": "AMD EPYC (family 23, model 1): 2, Intel Xeon (family 6, model 207): 1"}
    assert ev.progress_text("run", got) == ("run: 3 / 50 questions; 1.0 h on the wall clock (600-1800 s a question, "
                                            "median 1200 s); 0.9 h of CPU time over the 2 rows that record it; "
                                            "AMD EPYC (family 23, model 1): 2, Intel Xeon (family 6, model 207): 1")
    old = ev.progress([{"id": "a", "seconds": 10.0}], total=1)
    assert old["cpu_hours"] is None and ev.progress_text("x", old) == (
        "x: 1 / 1 (done) questions; 0.0 h on the wall clock (10-10 s a question, median 10 s)")
    assert ev.progress([])["seconds"] is None and ev.progress_text("e", ev.progress([])) == "e: 0 questions"
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ev.progress_main([str(path), "--total", "50"])
    assert capsys.readouterr().out.startswith("run: 3 / 50 questions; 1.0 h on the wall clock")


def test_only_runs_before_the_official_reading_are_read_again(tmp_path):
    # "... Thus, Rome is the answer" reads "Thus, Rome" officially; a cut at the first comma would make it
    # "Thus": a run whose code read answers officially (its settings hash eval.py) is read as it ran
    import json
    row = {"id": "1", "question": "q", "answers": ["Thus, Rome"], "prediction": "Thus, Rome"}
    for name, officially in (("old", False), ("new", True)):
        (tmp_path / f"{name}.jsonl").write_text(json.dumps(row) + "\n")
        settings = {"method code": "seakr.py, 1 bytes, sha256 0", **({"eval.py code": "1 bytes"} if officially else {})}
        (tmp_path / f"{name}.settings.json").write_text(json.dumps(settings))
        rows, info = ev.read_run(tmp_path / f"{name}.jsonl")
        assert ev.read_officially(tmp_path / f"{name}.jsonl") is officially
        assert (rows[0]["prediction"], info) == (("Thus, Rome", {}) if officially else ("Thus", {"reread": {"1": "Thus"}}))


def test_a_multihop_answer_is_right_only_with_its_gold_on_word_boundaries():
    # the signals' "wrong": CtrlA's acc is a substring test, and on multi-hop QA (EM / F1 data) a gold "no"
    # sits inside "Freakonomics" (5abc0a5d5542993f40c73c64, read as right before); PopQA keeps the official acc
    row = {"dataset": "hotpotqa", "answers": ["no"],
           "prediction": "yes, both Freakonomics and In the Realm of the Hackers are American documentaries"}
    assert ev.score_record(row)["acc"] == 1.0 and not ev.is_right(row)
    assert ev.is_right({**row, "prediction": "No, only one of them is"})
    assert ev.is_right({**row, "dataset": "popqa"})                     # CtrlA's official match
    assert not ev.is_right(row, "yes") and ev.is_right(row, "no.")
