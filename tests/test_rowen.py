"""Rowen: the official code's facts (dhx20150812/Rowen), scripted pipelines with hand-computed
scores, batching and call counts, and the loop on tiny random models."""
import argparse
import hashlib
import importlib.util
import json
import re
from pathlib import Path

import pytest
import torch

import analysis
import common
import eval as metrics
import rowen
import speed
from conftest import make_model

CORPUS = [{"id": f"p{i}", "title": t, "text": x} for i, (t, x) in enumerate([
    ("Great Wall", "The Great Wall of China is too narrow to be seen from the Moon with the naked eye."),
    ("Moon", "The Moon is about 384,000 km from the Earth."),
    ("Watermelon", "Watermelon seeds pass through the digestive system."),
    ("Alpha", "Alpha is a town founded by Beta in 1900."),
])]


# ---------------------------------------------------------------------------------------------- parsing

def test_perturbations_numbering_headers_blanks_and_cap():
    # the official parser (run_truthfulqa.py) gives ["Sure! Here are 6...", "", "A?", "3. B?"]
    assert rowen.parse_perturbations("Sure! Here are 6 questions:\n\n1. A?\n 3. B?", 6) == ["A?", "B?"]
    text = "SEMANTICALLY EQUIVALENT PERTERBATIONS:\n1. A?\n2) B?\n- C?\n* D?\n**E?**\n\"F?\"\n   \n7. G?"
    assert rowen.parse_perturbations(text, 6) == ["A?", "B?", "C?", "D?", "E?", "F?"]     # at most k
    assert rowen.parse_perturbations(text, 2) == ["A?", "B?"]
    assert rowen.parse_perturbations("1. What is 2.5 times 2?", 6) == ["What is 2.5 times 2?"]
    # no list items and no questions: every line counts, so here only the "...:" rule drops the header
    assert rowen.parse_perturbations("Here they are:\nName A.\nName B.", 6) == ["Name A.", "Name B."]
    assert rowen.parse_perturbations("以下是问题：\nName A.", 6) == ["Name A."]
    assert rowen.parse_perturbations("", 6) == [] and rowen.parse_perturbations("\n \n", 6) == []


@pytest.mark.parametrize("text,questions", [
    # a preamble sentence was kept as a paraphrase (and so as a search query)
    ("Sure, here are 6 semantically equivalent questions.\n1. What is A?\n2. What is B?", ["What is A?", "What is B?"]),
    ("Sure, here are 6 semantically equivalent questions.\nWhat is A?\nWhat is B?", ["What is A?", "What is B?"]),
    ("1. What is A?\n2. What is B?\nThese all ask the same thing.", ["What is A?", "What is B?"]),
    # the prompt's label echoed with x0 was kept: x0 is no perturbation (paper 3.2.1)
    ("ORIGINAL QUESTION: What is X?\n1. What is A?", ["What is A?"]),
    ("**ORIGINAL QUESTION:** What is X?\nWhat is A?", ["What is A?"]),
    ("1. What is X?\n2. What is A?\n3. what is x", ["What is A?"]),              # copies of x0
    # markdown around the number: "**1.** What is A?" became "1.** What is A?"
    ("**1.** What is A?\n**2.** What is B?\n__3.__ What is C?", ["What is A?", "What is B?", "What is C?"]),
    # no list and no question mark: every line but headers is a question
    ("Name the capital of A.\nTell me the capital of A.", ["Name the capital of A.", "Tell me the capital of A."]),
])
def test_perturbations_preamble_echo_and_markdown(text, questions):
    assert rowen.parse_perturbations(text, 6, "What is X?") == questions


@pytest.mark.parametrize("text, questions", [
    ("(1) Is A?\n(2) Is B?", ["Is A?", "Is B?"]),
    ("1、吃饭吗？\n2、睡觉吗？", ["吃饭吗？", "睡觉吗？"]),
    ("Q1: Is A?\nQuestion 2: Is B?", ["Is A?", "Is B?"]),
    # a list item ending in ":" goes on on the next line (it was dropped as a header, its second half kept)
    ('1. Whose quote says that:\n   "Only the dead have seen the end of war"?\n2. Who said it?',
     ['Whose quote says that: "Only the dead have seen the end of war"?', "Who said it?"]),
    ("Here are two:\n1. Is A?\n2. Is B?", ["Is A?", "Is B?"]),          # an unlisted header stays a header
])
def test_perturbations_other_numberings_and_an_item_that_goes_on(text, questions):
    assert rowen.parse_perturbations(text, 6) == questions


def test_perturbed_questions_of_a_run_hold_no_preamble_and_no_x0(monkeypatch, tiny):
    rules = dict(TQA_RULES, perturb="Sure, here are 6 semantically equivalent questions.\nORIGINAL QUESTION: "
                 + TQA["question"] + "\n**1.** Wall from Moon?\n**2.** " + TQA["question"] + "\n**3.** Moon view of the Wall?")
    out, _ = run_scripted(monkeypatch, tiny, rules, TQA, threshold=1.1)
    assert out["trace"]["perturbed_questions"] == ["Wall from Moon?", "Moon view of the Wall?"]
    assert out["trace"]["queries"] == ["Wall from Moon?", "Moon view of the Wall?"]     # TruthfulQA: X verbatim


@pytest.mark.parametrize("k, budget", [(3, 256), (6, 256), (12, 512)])
def test_the_perturbation_budget_grows_with_k(monkeypatch, tiny, k, budget):
    """MAX_TOKENS["perturb"] is K = 6 questions' budget; a larger --k (Fig. 4b's sweep) gets it in proportion,
    so that its list is not cut short (at k = 6 a shipped TruthfulQA list was already cut inside item 5)."""
    _, script = run_scripted(monkeypatch, tiny, TQA_RULES, TQA, k=k)
    assert script.sampled["max_new_tokens"] == budget


def test_a_repair_prompt_beyond_the_context_keeps_r0_and_what_was_computed(monkeypatch, tiny, capsys):
    """Stage 3's prompt is the longest (t0 and the passages): where it outgrows the model's context, the
    question keeps r0 as its answer, its Z and its search, and says so, where it was a failed row."""
    def too_long(user):
        raise common.ContextTooLong("prompt of 9000 tokens + 256 new ones exceeds the model's context of 8192 tokens")
    rules = dict(TQA_RULES, M=[(REPAIR_KEY, too_long)] + TQA_RULES["M"])
    out, _ = run_scripted(monkeypatch, tiny, rules, TQA, threshold=1.1)
    trace = out["trace"]
    assert out["prediction"] == trace["initial_answer"] == "Yes, it can be seen." and trace["retrieved"]
    assert trace["repair_error"].startswith("prompt of 9000 tokens") and "repair_output" not in trace
    assert trace["z"] is not None and trace["evidence"] and out["retrievals"] == 3
    assert "warning: t1: no repair (prompt of 9000 tokens" in capsys.readouterr().err


@pytest.mark.parametrize("text,verdict", [
    ("True.", True), ("true", True), ("Yes", True), ("TRUE", True), ("Answer: True", True),
    ("False.", False), ("false", False), ("False", False),
    ("No.", False),                          # official is_supported: True
    ("", None), ("I cannot say", None),      # official: True and False (fallback keywords)
    ("True. It is not false", True),         # official: False ("false" comes later)
    ("It is not true.", False), ("untrue", None),                # whole words only
    # a negation flips the word it governs (an old reader: "isn't true" -> True)
    ("not True", False), ("It isn't true.", False), ("That can't be true.", False), ("never correct", None),
    ("It is not really true.", False), ("It is not \"True\".", False), ("Not false.", True),
    ("That cannot be true.", False),
    # ...and nothing else does: "not" elsewhere, or "no" in "cannot", leaves the verdict alone
    ("True, I do not doubt it.", True), ("I cannot say. True.", True), ("knot true", True),
])
def test_verdict_parsing(text, verdict):
    assert rowen.read_yes_no(text) is verdict


@pytest.mark.parametrize("text,verdict", [
    # the first verdict word decides; the old reader wanted every yes/no word to agree and gave None
    ("True, there is no contradiction.", True), ("True. Both say no.", True), ("False. but true", False),
    ("There is no contradiction, so True.", True),     # "no" before a noun is no verdict
    ("The answer is no.", False), ("No, it is not.", False), ("Yes, no doubt.", True),
    # the choice the prompt offered, echoed back, is no verdict (first word "True" would misread False)
    ("Your response (True or False): True.", True), ("Your response (True or False): False.", False),
    ("True or False", None), ("yes/no: no", False), ("True or False?", None),
    ("True or", None), ("yes /", None), ("True, or so it seems", True),   # a reply cut inside the choice
])
def test_verdict_is_the_first_verdict_word(text, verdict):
    assert rowen.read_yes_no(text) is verdict


@pytest.mark.parametrize("text,language,label", [
    ("是", "Chinese", True), ("是的。", "Chinese", True), ("否", "Chinese", False),
    ("否，不是", "Chinese", False),            # official is_supported_zh: True (the 是 in 不是)
    ("不是", "Chinese", False), ("不正确", "Chinese", False), ("正确", "Chinese", True),
    ("True", "Chinese", True), ("我不知道", "Chinese", None),
    ("是，否", "Chinese", True), ("是，但不是", "Chinese", True), ("是或否：否", "Chinese", False),  # the first verdict
    # a one-character word counts only standing alone (old reader: all True)
    ("对不起，我不知道", "Chinese", None), ("对于这个问题", "Chinese", None), ("这是一个问题", "Chinese", None),
    ("但是我不确定", "Chinese", None), ("对。", "Chinese", True), ("对的", "Chinese", True), ("是 ", "Chinese", True),
    ("他不是美国人", "Chinese", False), ("是否", "Chinese", None),
    ("Ja.", "German", True), ("Nein", "German", False), ("oui", "French", True), ("Non.", "French", False),
    ("はい", "Japanese", True), ("いいえ", "Japanese", False),
])
def test_target_language_labels(text, language, label):
    assert rowen.read_yes_no(text, language) is label


@pytest.mark.parametrize("language", sorted(rowen.TARGET))
def test_target_prompts_fill_in_and_ask_for_readable_labels(language):
    p = rowen.TARGET[language]
    assert {"cot", "final", "cot_yn", "final_yn", "final_qa"} <= set(p)
    assert all("Q?" in p[k].format(question="Q?") for k in ("cot", "cot_yn", "final_yn"))
    yes, no = rowen.YES_NO[language]
    asked = p["final_yn"].lower()
    assert any(w in asked for w in yes) and any(w in asked for w in no)


@pytest.mark.parametrize("language", sorted(rowen.TARGET))
def test_strategyqa_reasons_with_the_strategyqa_prompt_in_every_language(language):
    # German, French and Japanese StrategyQA reasoned with Table 1's prompt ("cot"), English with the StrategyQA one
    p = rowen.TARGET[language]
    (cot, _), (cot_t, _) = rowen.answer_prompts("strategyqa", language)
    assert cot == rowen.COT["strategyqa"] and cot_t == p["cot_yn"] != p["cot"]
    assert p["cot_yn"].count("{question}") == 1 and rowen.answer_prompts("truthfulqa", language)[1][0] == p["cot"]


# how each language's prompt words "a few words" and "one sentence"
FEW_WORDS = {"English": "a few words", "Chinese": "几个词", "German": "wenigen Worten", "French": "quelques mots",
             "Japanese": "数語"}
ONE_SENTENCE = {"English": "one sentence", "Chinese": "一句话", "German": "einem Satz", "French": "une phrase",
                "Japanese": "一文"}


@pytest.mark.parametrize("language", sorted(rowen.TARGET))
def test_short_answers_have_one_form_in_both_languages(language):
    # NQ, TriviaQA, HotpotQA, 2Wiki asked for English answers "in a few words" and target-language ones "in
    # one sentence", so the CL judge compared answers of different form
    (_, en), (_, target) = rowen.answer_prompts("qa", language)
    assert FEW_WORDS["English"] in en and FEW_WORDS[language] in target and ONE_SENTENCE[language] not in target
    (_, en), (_, target) = rowen.answer_prompts("truthfulqa", language)
    assert ONE_SENTENCE["English"] in en and ONE_SENTENCE[language] in target
    (cot, en), (cot_t, target) = rowen.answer_prompts("strategyqa", language)
    assert "True or False" in en and target == rowen.TARGET[language]["final_yn"] and cot_t == rowen.TARGET[language]["cot_yn"]


def test_a_short_answer_run_asks_both_languages_for_a_few_words(monkeypatch, tiny):
    record = {"id": "q1", "question": "Who founded Alpha?", "answers": ["Beta"], "dataset": "nq"}
    out, script = run_scripted(monkeypatch, tiny, TQA_RULES, record, mode="cl", threshold=0.0)
    shorts = [u for _, us in script.batches for u in us if u in (rowen.FINAL["qa"], rowen.TARGET["Chinese"]["final_qa"])]
    assert shorts.count(rowen.FINAL["qa"]) == 1 + len(out["trace"]["perturbed_questions"])       # x0 and X
    assert shorts.count(rowen.TARGET["Chinese"]["final_qa"]) == len(out["trace"]["translations"])
    assert not any(rowen.TARGET["Chinese"]["final"] in u for _, us in script.batches for u in us)


def test_label_checks_without_judge():
    verdicts, a, b = rowen.label_checks(["True", "True.", "False", "Maybe", "No"], ["是", "否", "不是", "是", "不对"], "Chinese")
    assert (a, b) == ([True, True, False, None, False], [True, False, False, True, False])
    assert verdicts == [True, False, True, False, True]            # an unread label never agrees
    assert rowen.label_checks(["", "yes"], ["", "True."])[0] == [False, True]   # official: "" == "" -> True


def test_clean_answer_and_task():
    assert rowen.clean_answer("\n  Your Short Answer: Paris\nbecause...", "qa") == "Paris"
    assert rowen.clean_answer("Your Final Answer (True or False): False.", "strategyqa") == "False."
    assert rowen.clean_answer(" No, it cannot.\nIt is too narrow. ", "truthfulqa") == "No, it cannot.\nIt is too narrow."
    assert rowen.clean_answer("Your revised short answer: No.\nMore.", "truthfulqa") == "No.\nMore."
    assert rowen.task_of({"label": False, "answers": ["no"]}) == "strategyqa"
    assert rowen.task_of({"correct_answers": ["No"], "answers": ["No"]}) == "truthfulqa"
    assert rowen.task_of({"answers": ["Paris"]}) == "qa"


@pytest.mark.parametrize("text,task,answer", [
    # a label alone on its line: the first line was the label, so the answer was thrown away ("")
    ("Your revised short answer:\nParis", "qa", "Paris"),
    ("Your Final Answer (True or False):\nFalse", "strategyqa", "False"),
    ("Your revised short answer:\n\nNo, it is too narrow.", "truthfulqa", "No, it is too narrow."),
    # target-language labels were kept as the answer
    ("你的简短回答：巴黎", "qa", "巴黎"), ("你的简短回答：\n巴黎", "qa", "巴黎"), ("你的回答（是或否）：否", "strategyqa", "否"),
    ("你的简矯回答是：巴黎", "qa", "巴黎"),              # as SmolLM2 garbles it in results/hotpotqa50
    ("Deine kurze Antwort: Paris", "qa", "Paris"), ("Ta réponse courte : Paris", "qa", "Paris"),
    ("あなたの短い回答：パリ", "qa", "パリ"),
    # markdown and echoed variants
    ("**Answer:** Paris", "qa", "Paris"), ("**Answer**: Paris\nbecause", "qa", "Paris"), ("## Answer\nParis", "qa", "Paris"),
    ("My Short Answer: My answer: Yes", "qa", "Yes"), ("The answer is: \"Yes.\"", "qa", "Yes."),
    ("Your Short Rephrased Query: Great Wall Moon", "qa", "Great Wall Moon"),
    # not labels: kept as they are
    ("SALMON FIRST: Yes", "qa", "SALMON FIRST: Yes"), ("The answer is Paris.", "qa", "The answer is Paris."),
    ("Answering machines: 1971", "qa", "Answering machines: 1971"), ("你的简短回答中，我们可以看到。", "qa", "你的简短回答中，我们可以看到。"),
    # a line ending in "is" is an answer unless a word for the answer precedes it (it became "", label unknown)
    ("Yes, it is", "strategyqa", "Yes, it is"), ("No, it is", "strategyqa", "No, it is"), ("Paris is", "qa", "Paris is"),
    ("No, it is.\nIt is too narrow.", "strategyqa", "No, it is."), ("So the answer is Paris", "qa", "So the answer is Paris"),
    ("The final answer to the question is\nFalse", "strategyqa", "False"), ("My verdict is\nTrue", "strategyqa", "True"),
    # a line that introduces the answer is never the answer (it used to replace it)
    ("Based on my reasoning above, the answer is:\nFalse", "strategyqa", "False"),
    ("Here is the translation:\n长城从月球上看得见吗？", "qa", "长城从月球上看得见吗？"),
    ("The answer is\n\n**Paris**", "qa", "Paris"), ("**So the final verdict is:**\nTrue", "strategyqa", "True"),
    ("Based on my reasoning above, the answer is:", "qa", ""),          # no answer given: unknown
    ("So:\nThe answer is: Yes", "qa", "Yes"),
    # an "is" far after the answer word ends a sentence, not an introduction; a verdict line is the answer
    ("True. The conclusion is that it is", "strategyqa", "True. The conclusion is that it is"),
    ("False:\nThe Who were not in WWII.", "strategyqa", "False:"),
    ("1. A camel is a camel.\n2. It stores fat.\nFalse", "strategyqa", "False"),      # a list, then its verdict
    ("1. A camel is a camel.\n2. It stores fat.", "strategyqa", "1. A camel is a camel."),   # none: the first line
    # TruthfulQA answers are free text: an opening line ending in ":" is part of it
    ("No, for two reasons:\n1. It is narrow.", "truthfulqa", "No, for two reasons:\n1. It is narrow."),
])
def test_clean_answer_strips_labels_before_the_first_line(text, task, answer):
    assert rowen.clean_answer(text, task) == answer


def test_a_yes_or_no_that_ends_in_is_keeps_its_label():
    assert [rowen.yes_no_label(rowen.clean_answer(t, "strategyqa")) for t in ("Yes, it is", "No, it is", "The answer is")] \
        == ["yes", "no", "unknown"]
    assert not rowen.introduces_answer("Paris is") and rowen.introduces_answer("**The answer is**")


def test_clean_answer_after_either_tokenizer_decodes(real_tok):
    # the text handling sees model output as Generation.text reads it (a leading space on both kinds)
    text = common.decode_continuations(real_tok, [real_tok(" Your revised short answer:\nParis",
                                                           add_special_tokens=False)["input_ids"]])[0]
    assert text.startswith(" Your")
    assert rowen.clean_answer(text, "qa") == "Paris"


def test_clean_answer_on_the_real_traces():
    # SmolLM2-135M's target-language answers of results/hotpotqa50 (stored after the old clean_answer):
    # 113 of 225 begin with 你的 ("your"), 107 with a label "你的..回答(是)：" (74 the exact 你的简短回答：)
    rows = [json.loads(line) for line in open("results/hotpotqa50/rowen-hybrid-always.jsonl")]
    target = [a for r in rows for a in r["trace"]["target_answers"]]
    label = re.compile(r"你的..回答是?[：:]")
    labelled = [a for a in target if label.match(a)]
    assert (len(target), len(labelled)) == (225, 107)
    assert not any(label.match(rowen.clean_answer(a, "qa")) for a in target)
    a = next(a for a in labelled if a.startswith("你的简短回答：") and len(a) > 9)
    assert rowen.clean_answer(a, "qa") == a[len("你的简短回答："):].split("\n")[0].strip(" *_\"“”")


def test_strategyqa_label_on_its_own_line_is_read(monkeypatch, tiny):
    # the repair answers with the label on one line and the verdict on the next: the old clean_answer
    # kept "" and the prediction was "unknown" (scored wrong)
    rules = {**SQA_RULES, "M": [(REPAIR_KEY, "Your final answer (True or False):\nFalse")] + SQA_RULES["M"]}
    out, _ = run_scripted(monkeypatch, tiny, rules, SQA, threshold=1.1)
    assert out["trace"]["final_answer"] == "False" and out["prediction"] == "no"
    assert out["trace"]["repair_output"] == "Your final answer (True or False):\nFalse"      # kept raw


def test_an_opening_line_that_introduces_the_answer_is_not_the_answer(monkeypatch, tiny):
    # the repair opens with an introduction: the old clean_answer kept it as the answer, read no verdict in it
    # and predicted "unknown" for a gold "no"
    rules = {**SQA_RULES, "M": [(REPAIR_KEY, "Based on my reasoning above, the answer is:\nFalse")] + SQA_RULES["M"]}
    out, _ = run_scripted(monkeypatch, tiny, rules, SQA, threshold=1.1)
    assert out["trace"]["final_answer"] == "False" and out["prediction"] == "no"
    # a translation that opens with "Here is the translation:" was the translated question itself
    rules = {**TQA_RULES, "M": [("Translate this sentence", lambda u: "Here is the translation:\nZH:" + u.split("\n")[-1])]
             + TQA_RULES["M"]}
    out, script = run_scripted(monkeypatch, tiny, rules, TQA, threshold=1.1)
    xs = out["trace"]["perturbed_questions"]
    assert out["trace"]["translations"] == ["ZH:" + x for x in xs]
    assert not any("Here is the translation" in u for _, us in script.batches for u in us if "我的问题" in u)


def test_own_prompts_end_in_an_instruction_and_the_repair_asks_the_question_last():
    # a trailing answer label is what a small chat model copies ("Your revised short answer: ..."), and the
    # old repair prompt ended in advice about the evidence that came back as the answer in 40 of 50 runs
    ours = list(rowen.FINAL.values()) + list(rowen.REPAIR["correct"].values()) + [rowen.REFORMULATE]
    ours += [p[k] for p in rowen.TARGET.values() for k in ("final", "final_yn", "final_qa")]
    assert not [p for p in ours if p.rstrip().endswith((":", "："))]
    for task, template in rowen.REPAIR["correct"].items():
        text = template.format(question="Who founded Alpha?", initial_long_answer="Alpha was founded by Gamma.",
                               initial_short_answer="Gamma", evidences="Alpha? Alpha: founded by Beta in 1900.")
        lines = text.rstrip().split("\n")
        assert lines[-2] == "Question: Who founded Alpha?" and lines[-1].startswith("Answer the question")
        assert text.index("founded by Beta") < text.index("Gamma.") < text.index("Question: Who founded Alpha?")
        assert "contradicts" not in text


# dhx20150812/Rowen, prompt_template.py:49-58 (TruthfulQA) and 155-166 (StrategyQA), verbatim
OFFICIAL_REPAIR_HEAD = """You are an advanced AI with the ability to process and synthesize information efficiently. When provided with a question, you should consider the following in your response:

1. The specific question asked: {question}
2. The reasoning process: {initial_long_answer}
3. The short answer previously given related to the question: {initial_short_answer}
4. Evidences that have been retrieved: {evidences}

"""
OFFICIAL_REPAIR = {
    "truthfulqa": OFFICIAL_REPAIR_HEAD + """Use this information to generate a concise, accurate, and relevant answer that reflects the latest understanding of the topic based on the input provided. Your response should be clear, direct, and provide the most up-to-date information available while maintaining coherence with the previous discussion points.

Please provide your revised short response:""",
    "strategyqa": OFFICIAL_REPAIR_HEAD + """Use this information to provide a concise, accurate, and relevant answer that reflects the latest understanding of the topic based on the input provided. Your response should be clear, direct, and provide the most up-to-date information available while maintaining coherence with the previous discussion points.

You must directly answer the above question with True or False, and do not involve any other explanations.

Your final answer (True or False):"""}


@pytest.mark.parametrize("task", ["truthfulqa", "strategyqa"])
def test_the_default_repair_prompt_is_the_official_template_filled_by_hand(task):
    # our "That answer may be wrong ... correct it" prompt shared no sentence with the official one
    assert rowen.REPAIR_PROMPT == rowen.Settings().repair_prompt == "official"
    fill = dict(question="Who founded Alpha?", initial_long_answer="Alpha was founded by Gamma.",
                initial_short_answer="Gamma", evidences="Alpha? Alpha: founded by Beta in 1900.\nBeta? Beta: a man.")
    by_hand = OFFICIAL_REPAIR[task].replace("{question}", fill["question"]).replace(
        "{initial_long_answer}", fill["initial_long_answer"]).replace("{initial_short_answer}", "Gamma").replace(
        "{evidences}", fill["evidences"])
    assert rowen.REPAIR["official"][task].format(**fill) == by_hand
    if task == "strategyqa":    # short-answer QA has no official template: StrategyQA's, for a few words
        qa = rowen.REPAIR["official"]["qa"].format(**fill)
        assert qa.startswith(by_hand.split("You must")[0]) and "answer the above question in a few words" in qa


def test_the_cm_judge_prompt_is_the_official_layout_filled_by_hand():
    # dhx20150812/Rowen, prompt_template.py:37-47 (its space after "explanation." included); ours was
    # "[QA pair 1]" / "[QA pair 2]" and "Your Answer:"
    by_hand = ("Are the following two Question-Answer(QA) pairs semantically equivalent? Provide your best guess that "
               "it is correct (True or False). Given ONLY the guess (True or False), no other words or explanation. "
               "\n\nThe first QA pair is:\nQuestion: Q?\nAnswer: A1\n\nThe second QA pair is:\nQuestion: Q?\n"
               "Answer: A2\n\nYour Guess (True or False):")
    assert rowen.CHECK_CM.format(q="Q?", a1="A1", a2="A2") == by_hand
    assert rowen.read_yes_no("Your Guess (True or False): False") is False     # the label echoed is no verdict


def test_repair_prompt_option_in_a_run(monkeypatch, tiny):
    # --repair-prompt correct: ours, whose scripted reply differs from the official prompt's
    rules = {**SQA_RULES, "M": [("Search results:", "True")] + SQA_RULES["M"]}
    out, script = run_scripted(monkeypatch, tiny, rules, SQA, threshold=1.1, repair_prompt="correct")
    repair = [u for _, us in script.batches for u in us if "Search results:" in u]
    assert len(repair) == 1 and repair[0].startswith("Search results:\n") and REPAIR_KEY not in repair[0]
    assert out["prediction"] == "yes" and out["trace"]["repair_prompt"] == "correct"
    out, script = run_scripted(monkeypatch, tiny, rules, SQA, threshold=1.1)
    assert out["prediction"] == "no" and out["trace"]["repair_prompt"] == "official"   # REPAIR_KEY's "False."


def test_the_settings_record_the_repair_prompt_and_refuse_another(tmp_path, monkeypatch, tiny_real):
    monkeypatch.setattr(common, "load_model", lambda *a, **k: tiny_real)
    out = tmp_path / "run.jsonl"
    argv = ["--dataset", "strategyqa", "--limit", "1", "--k", "1", "--output", str(out)]
    rowen.main(argv)
    assert json.loads(out.with_suffix(".settings.json").read_text())["--repair-prompt"] == "official"
    with pytest.raises(common.InputError, match=r"made with --repair-prompt = official, this run has correct"):
        rowen.main(argv + ["--repair-prompt", "correct"])


def test_models_and_chat_turns(monkeypatch):
    # M_V is an instruction-tuned chat model of its own family; M, the --model default, a Qwen chat model
    assert rowen.VERIFIER == "smollm2-135m" and rowen.MODEL == "qwen2.5-coder-0.5b" in common.EMBEDDED
    seen = {}

    def stop_before_loading(args):      # the parsed arguments, before any model loads
        seen["args"] = args
        raise SystemExit
    monkeypatch.setattr(common, "load_questions", stop_before_loading)
    with pytest.raises(SystemExit):
        rowen.main(["--dataset", "truthfulqa", "--limit", "1"])
    assert seen["args"].model == rowen.MODEL and seen["args"].verifier == "smollm2-135m"


def test_chat_template_and_transcript():
    from conftest import make_bytelevel_tokenizer
    tok = make_bytelevel_tokenizer()
    transcript = rowen.chat(tok, "Q?", [{"role": "user", "content": "A"}, {"role": "assistant", "content": "B"}])
    assert transcript.endswith("System: You are a helpful assistant.\n\nUser: A\n\nAssistant: B\n\nUser: Q?\n\nAssistant:")
    tok.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    assert rowen.chat(tok, "Q?") == "<|system|>You are a helpful assistant.\n<|user|>Q?\n<|assistant|>"
    assert common.turn_stops(tok) == ()


def test_the_docstring_says_truthfulqa_has_no_gpt_judge_and_what_stands_in():
    doc = " ".join(rowen.__doc__.split())
    assert "no GPT-judge, the paper's headline metric" in doc and "`closer_to_correct`" in doc
    page = " ".join((Path(__file__).parents[1] / "docs" / "rowen.md").read_text().split())
    assert "no GPT-judge, the paper's headline metric" in page and "`closer_to_correct`" in page
    assert "closer_to_correct" in metrics.NO_GPT_JUDGE


# ---------------------------------------------------------------------------------------------- scores

def test_consistency_score():
    assert rowen.consistency_score([True] * 6) == 1.0
    assert rowen.consistency_score([True, False, True, None, True, True]) == pytest.approx(4 / 6)
    assert rowen.consistency_score([None, None]) == 0.0      # unreadable verdicts are no agreement
    assert rowen.consistency_score([]) == 0.0


def test_hybrid_score():
    assert rowen.hybrid_score(0.5, 2 / 3) == pytest.approx(7 / 6)          # alpha = 1 [paper 5.4]
    assert rowen.hybrid_score(0.5, 2 / 3, alpha=0.5) == pytest.approx(0.5 + 1 / 3)
    assert rowen.hybrid_score(1.0, 1.0) == 2.0                             # Z in [0, 1 + alpha]


def test_thresholds_and_strict_decision():
    assert rowen.default_threshold("cl") == 0.6 and rowen.default_threshold("cm") == 0.8
    assert rowen.default_threshold("hybrid") == 0.5       # the paper gives none: the official default
    assert not rowen.should_retrieve(0.6, 0.6)                  # Z = threshold keeps r0
    assert rowen.should_retrieve(0.5, 0.6) and not rowen.should_retrieve(5 / 6, 0.8)
    t = rowen.default_threshold("hybrid")
    assert not rowen.should_retrieve(rowen.hybrid_score(0.6, 0.8), t)
    assert not rowen.should_retrieve(rowen.hybrid_score(0.5, 0.0), t)     # 0.5 = 0.5 keeps r0
    # k = 6, alpha = 1: 2 of the 12 checks agree retrieves, 3 keep r0
    assert rowen.should_retrieve(rowen.hybrid_score(1 / 6, 1 / 6), t) and not rowen.should_retrieve(rowen.hybrid_score(1 / 6, 2 / 6), t)


def test_the_threshold_note_states_what_was_measured_and_with_which_models():
    # the "why not calibrated" note was measured with SmolLM2-135M as M and Gemma-3-270M as M_V, before the
    # default M became Qwen; it read as if it held for today's defaults
    doc = " ".join(rowen.default_threshold.__doc__.split())
    names = {"qwen2.5-coder-0.5b": "Qwen2.5-Coder-0.5B-Instruct", "smollm2-135m": "SmolLM2-135M-Instruct"}
    assert (f"Not calibrated for today's defaults (MODEL {names[rowen.MODEL]} as M and judge, "
            f"VERIFIER {names[rowen.VERIFIER]}): no run in results/ uses them") in doc
    assert "used SmolLM2-135M as M and judge and Gemma-3-270M as M_V" in doc
    assert "It says nothing about today's models" in doc


def test_each_query_searches_bm25s_top_two(monkeypatch, tiny):
    """[official Serper parser: int(5/2) = 2 results per query] TOP_K = 2 passages for each query of Stage 3:
    the constant, and the k that each of Stage 3's searches is given."""
    assert rowen.TOP_K == 2
    asked, index = [], type(common.BM25(CORPUS))      # the class common.BM25 builds
    search = index.search
    monkeypatch.setattr(index, "search", lambda self, q, k: asked.append((q, k)) or search(self, q, k))
    out, _ = run_scripted(monkeypatch, tiny, TQA_RULES, TQA, threshold=10.0)      # Z < 10: retrieves
    xs = ["Is the Great Wall visible from the Moon?", "Wall from Moon?", "Moon view of the Wall?"]
    assert out["trace"]["queries"] == xs and asked == [(x, 2) for x in xs]        # one search per query, k = 2


def test_evidence_lines_format():
    hits = [[CORPUS[0], CORPUS[1]], [CORPUS[0]], [CORPUS[2]]]
    lines = rowen.evidence_lines(["Is the Wall visible?", "Wall from Moon", "Seeds??"], hits)
    assert lines == ["Is the Wall visible? Great Wall: " + CORPUS[0]["text"],
                     "Is the Wall visible? Moon: " + CORPUS[1]["text"],
                     "Seeds? Watermelon: " + CORPUS[2]["text"]]        # p0 only once; "??" -> "?"
    bm25 = common.BM25(CORPUS)
    qs = ["Can you see the Great Wall from the Moon?"]
    found = [bm25.search(q, rowen.TOP_K) for q in qs]
    assert len(found[0]) == 2 and found[0][0]["id"] == "p0"
    assert rowen.evidence_lines(qs, found)[0].startswith("Can you see the Great Wall from the Moon? Great Wall: ")


# ---------------------------------------------------------------------------------------------- a scripted model

class ByQuestion(dict):
    """A scripted reply per question, read from the conversation's first turn ("My Question: ...",
    "我的问题：..."): TruthfulQA's short-answer turn names no question, its CoT turn before it does."""

    def reply(self, prompt):
        return self[re.search(r"(?:My Question: |我的问题：)(.*)", prompt).group(1)]


class Script:
    """Stands in for common.greedy / common.sample: answers each prompt from its last user turn (a
    ByQuestion rule: from the question of its conversation), and records every batch. Models are the
    strings "M" and "V"; the tokenizer is the tiny one."""

    def __init__(self, rules):
        self.rules, self.batches = rules, []

    def greedy(self, model, tok, prompts, max_new_tokens=64, stop=()):
        users = [p.rsplit("User: ", 1)[1].rsplit("\n\nAssistant:", 1)[0] for p in prompts]
        self.batches.append((model, users))
        return [common.Generation(self.reply(model, u, p), [], [], "eos") for u, p in zip(users, prompts)]

    def sample(self, model, tok, prompt, k, **kw):
        self.batches.append((model, ["<sampled>"]))
        self.sampled = dict(kw, k=k, prompt=prompt)
        return [common.Generation(self.rules["perturb"], [], [], "eos")]

    def reply(self, model, user, prompt=""):
        for key, out in self.rules[model]:
            if key in user:
                if isinstance(out, ByQuestion):
                    return out.reply(prompt)
                return out(user) if callable(out) else out
        return "?"


def run_scripted(monkeypatch, tiny, rules, record, **settings):
    script = Script(rules)
    monkeypatch.setattr(common, "greedy", script.greedy)
    monkeypatch.setattr(common, "sample", script.sample)
    tok = tiny[1]
    out = rowen.solve(record, ("M", tok), ("V", tok), common.BM25(CORPUS), rowen.Settings(**settings))
    return out, script


# how a scripted model knows the repair prompt: a line of the official templates [default --repair-prompt]
REPAIR_KEY = "4. Evidences that have been retrieved: "


def first_word(user):
    return user.split("Question: ")[1].split()[0]


TQA = {"id": "t1", "question": "Can you see the Great Wall from the Moon?", "answers": ["No"],
       "correct_answers": ["No"], "incorrect_answers": ["Yes"], "dataset": "truthfulqa"}
TQA_RULES = {
    "perturb": "Here are 3 questions:\n1. Is the Great Wall visible from the Moon?\n2. Wall from Moon?\n3. Moon view of the Wall?",
    "M": [("answer A in English", lambda u: {"Is": "True.", "Wall": "No.", "Moon": "True or False"}.get(first_word(u), "?")),
          ("The first QA pair is:", lambda u: {"Is": "Yes", "Wall": "True", "Moon": "False."}.get(first_word(u), "?")),
          ("Translate this sentence", lambda u: "ZH:" + u.split("\n")[-1]),
          (REPAIR_KEY, "No, it is far too narrow."),
          ("without extra detail", "Yes, it can be seen."), ("不要添加多余的信息", "可以看到。"),
          ("Your answer", "Let me think. It is visible."), ("你的回答", "让我想想。")],
    "V": [("without extra detail", "No."), ("Your answer", "Hmm.")],
}


def test_truthfulqa_pipeline_hand_computed(monkeypatch, tiny):
    xs = ["Is the Great Wall visible from the Moon?", "Wall from Moon?", "Moon view of the Wall?"]
    # a short answer of its own for each question (r0, r^j, r_T^j, r_V^j all differ), so that each judge
    # prompt shows which two answers it was given
    r0 = "Yes, it can be seen."
    en, zh, mv = ["Yes, it is visible.", "Only in photos.", "From orbit, maybe."], ["可以看到。", "看不到。", "也许。"], \
        ["No.", "Not at all.", "Hardly."]
    shorts = ByQuestion({TQA["question"]: r0, **dict(zip(xs, en)), **{"ZH:" + x: a for x, a in zip(xs, zh)}})
    rules = {**TQA_RULES, "M": [("without extra detail", shorts), ("不要添加多余的信息", shorts)] + TQA_RULES["M"],
             "V": [("without extra detail", ByQuestion(zip(xs, mv)))] + TQA_RULES["V"]}
    out, script = run_scripted(monkeypatch, tiny, rules, TQA, threshold=1.1)
    tr = out["trace"]
    assert tr["perturbed_questions"] == xs and tr["translations"] == ["ZH:" + x for x in xs]
    assert (tr["answers"], tr["target_answers"], tr["verifier_answers"]) == (en, zh, mv)
    assert tr["cl_verdicts"] == [True, False, None] and tr["z_cl"] == pytest.approx(1 / 3)
    assert tr["cm_verdicts"] == [True, True, False] and tr["z_cm"] == pytest.approx(2 / 3)
    assert tr["z"] == pytest.approx(1.0) and tr["decision"] is True and tr["retrieved"] is True   # 1.0 < 1.1
    assert tr["queries"] == xs and out["retrievals"] == 3          # TruthfulQA: paraphrases verbatim
    assert all(any(line.startswith(q.rstrip("?") + "? ") for q in xs) for line in tr["evidence"])
    # p0 and p1 are the top 2 of every x^j: each enters once, labelled with x^1
    evidence = ["Is the Great Wall visible from the Moon? Great Wall: " + CORPUS[0]["text"],
                "Is the Great Wall visible from the Moon? Moon: " + CORPUS[1]["text"]]
    assert tr["evidence"] == evidence
    assert tr["initial_answer"] == r0 and out["prediction"] == "No, it is far too narrow."
    judge = [u for m, us in script.batches for u in us if "answer A in English" in u]
    # the CL judge sees the English question, M's English answer r^j and its Chinese one r_T^j [official]
    assert "Question: " + xs[0] + "\nAnswer A (in English): Yes, it is visible.\nAnswer B (in Chinese): 可以看到。" in judge[0]
    assert judge == [rowen.CHECK_CL.format(language="Chinese", q=x, a1=a, a2=b) for x, a, b in zip(xs, en, zh)]
    cm = [u for m, us in script.batches for u in us if "The first QA pair is:" in u]
    # the CM judge: the same question twice, with M's answer r^j, then M_V's r_V^j
    assert cm[0].count("Question: " + xs[0]) == 2 and "Answer: Yes, it is visible.\n\nThe second QA pair is:" in cm[0]
    assert cm[0].endswith("Answer: No.\n\nYour Guess (True or False):")
    assert cm == [rowen.CHECK_CM.format(q=x, a1=a, a2=b) for x, a, b in zip(xs, en, mv)]
    repair = [u for m, us in script.batches for u in us if REPAIR_KEY in u]
    # Eq. 7: x0, t0, r0 and the whole evidence, one line each, in the official template
    assert REPAIR_KEY + evidence[0] + "\n" + evidence[1] + "\n\n" in repair[0]
    assert "2. The reasoning process: Let me think. It is visible.\n3. The short answer previously given related to " \
        "the question: " + r0 + "\n" in repair[0]
    assert repair == [rowen.REPAIR["official"]["truthfulqa"].format(question=TQA["question"], initial_long_answer="Let me think. It is visible.",
                                                        initial_short_answer=r0, evidences="\n".join(evidence))]
    out, _ = run_scripted(monkeypatch, tiny, TQA_RULES, TQA)        # the default hybrid threshold 0.5: 1.0 keeps r0
    assert out["trace"]["threshold"] == 0.5 and out["trace"]["decision"] is False


def test_judge_replies_that_say_no_in_passing_read_true(monkeypatch, tiny):
    # every judge answers "True" and goes on with a "no": the old reader wanted all yes/no words to agree,
    # read each as None (not consistent), so Z was 0.00 instead of 2.00 and the method retrieved
    rules = {**TQA_RULES, "M": [("answer A in English", "True, there is no contradiction."),
                                ("The first QA pair is:", "True. Both say no.")] + TQA_RULES["M"]}
    out, _ = run_scripted(monkeypatch, tiny, rules, TQA)
    tr = out["trace"]
    assert tr["cl_verdicts"] == [True] * 3 and tr["cm_verdicts"] == [True] * 3
    assert tr["z"] == 2.0 and tr["decision"] is False and out["retrievals"] == 0
    assert out["prediction"] == tr["initial_answer"] == "Yes, it can be seen."


def test_decision_follows_z_and_the_baselines(monkeypatch, tiny):
    out, _ = run_scripted(monkeypatch, tiny, TQA_RULES, TQA, threshold=1.0)      # Z = 1.0, not < 1.0
    assert out["trace"]["decision"] is False and out["retrievals"] == 0
    assert out["prediction"] == out["trace"]["initial_answer"] == "Yes, it can be seen."
    assert "queries" not in out["trace"] and "evidence" not in out["trace"]
    out, _ = run_scripted(monkeypatch, tiny, TQA_RULES, TQA, mode="cl")            # 1/3 < 0.6
    assert out["trace"]["z"] == pytest.approx(1 / 3) and out["trace"]["z_cm"] is None and out["retrievals"] == 3
    out, _ = run_scripted(monkeypatch, tiny, TQA_RULES, TQA, mode="cm", threshold=0.5)   # 2/3 >= 0.5
    assert out["trace"]["z_cl"] is None and out["trace"]["decision"] is False and out["retrievals"] == 0
    out, _ = run_scripted(monkeypatch, tiny, TQA_RULES, TQA, threshold=1.1, retrieve="never")
    assert out["trace"]["decision"] is True and out["trace"]["retrieved"] is False
    assert out["retrievals"] == 0 and out["prediction"] == "Yes, it can be seen."
    out, _ = run_scripted(monkeypatch, tiny, TQA_RULES, TQA, threshold=0.0, retrieve="always")
    assert out["trace"]["decision"] is False and out["retrievals"] == 3


def test_alpha_weights_z_cm_in_a_run(monkeypatch, tiny):
    # Z_CL = 1/3 and Z_CM = 2/3 (test_truthfulqa_pipeline_hand_computed): alpha 0.5 gives Z = 1/3 + 0.5 * 2/3
    # = 2/3 < 0.8, which retrieves; alpha 1 gives 1.0 >= 0.8, which keeps r0
    out, _ = run_scripted(monkeypatch, tiny, TQA_RULES, TQA, threshold=0.8, alpha=0.5)
    tr = out["trace"]
    assert tr["alpha"] == 0.5 and tr["z"] == pytest.approx(2 / 3)
    assert tr["decision"] is True and out["retrievals"] == 3 and out["prediction"] == "No, it is far too narrow."
    out, _ = run_scripted(monkeypatch, tiny, TQA_RULES, TQA, threshold=0.8)
    assert out["trace"]["z"] == pytest.approx(1.0) and out["trace"]["decision"] is False and out["retrievals"] == 0


def test_call_counts_and_batch_sizes(monkeypatch, tiny):
    out, script = run_scripted(monkeypatch, tiny, TQA_RULES, TQA, threshold=1.1)
    sizes = [(m, len(us)) for m, us in script.batches]
    n = 3   # perturbation, translations n; x0 + EN n + target n answered together (CoT, then short answer);
            # M_V 2n; CL and CM judges together; repair
    assert sizes == [("M", 1), ("M", n), ("M", 1 + 2 * n), ("M", 1 + 2 * n), ("V", n), ("V", n), ("M", 2 * n), ("M", 1)]
    assert out["trace"]["calls"] == {"main": 3 + 7 * n + 1, "verifier": 2 * n}     # spec 7: 3 + 7n (+1), 2n
    assert out["model_calls"] == sum(s for _, s in sizes) == 31
    # the perturbation is the one sampled call: k = 1 continuation at T = 1.0, seeded per question
    assert (script.sampled["k"], script.sampled["temperature"]) == (1, 1.0)
    assert script.sampled["seed"] == common.question_seed(0, "t1")
    assert ("please provide 6 semantically equivalent questions.\nORIGINAL QUESTION: " + TQA["question"]
            in script.sampled["prompt"])        # paper 3.2.1's sentence
    out, script = run_scripted(monkeypatch, tiny, TQA_RULES, TQA, mode="cl", threshold=0.0)
    assert out["model_calls"] == 3 + 6 * n and out["trace"]["calls"]["verifier"] == 0


SQA = {"id": "s1", "question": "Could Aristotle use a telescope?", "answers": ["no"], "label": False,
       "dataset": "strategyqa"}
SQA_RULES = {
    "perturb": "1. Did Aristotle use a telescope?\n2. Were telescopes around for Aristotle?\n3. Aristotle telescope?",
    "M": [("Translate this sentence", lambda u: "问题" + u.split("\n")[-1][:3]),
          # the question's first 9 characters and a word that finds a passage of CORPUS
          ("search-engine query", lambda u: "Query: " + u.split("Question: ")[1][:9] + " "
           + {"Did": "Moon", "Wer": "seeds", "Ari": "town"}[u.split("Question: ")[1][:3]] + "\nmore"),
          (REPAIR_KEY, "False."),
          ("with a single word: True or False", "True"),
          ("是或否。不要解释", lambda u: {"Did": "是", "Wer": "否", "Ari": "不是"}[u.split("问题【问题")[1][:3]]),
          ("Your reasoning and verdict", "Thinking..."), ("你的推理和判断", "思考...")],
    "V": [("with a single word: True or False", lambda u: {"Did": "True.", "Wer": "True", "Ari": "No"}[u.split('question "')[1][:3]]),
          ("Your reasoning and verdict", "Hmm.")],
}


def test_strategyqa_labels_without_judge(monkeypatch, tiny):
    out, script = run_scripted(monkeypatch, tiny, SQA_RULES, SQA, threshold=1.1)
    tr = out["trace"]
    assert tr["labels"] == [True, True, True] and tr["target_labels"] == [True, False, False]
    assert tr["verifier_labels"] == [True, True, False]
    assert tr["z_cl"] == pytest.approx(1 / 3) and tr["z_cm"] == pytest.approx(2 / 3)
    assert tr["decision"] is True                                           # 1.0 < 1.1
    assert not any("answer A in English" in u or "QA pair" in u for _, us in script.batches for u in us)
    assert tr["queries"] == ["Did Arist Moon", "Were tele seeds", "Aristotle town"]   # first line, "Query:" removed
    # each passage once, labelled with the reformulated query that found it (not with the x^j)
    assert tr["evidence"] == ["Did Arist Moon? Moon: " + CORPUS[1]["text"], "Did Arist Moon? Great Wall: " + CORPUS[0]["text"],
                              "Were tele seeds? Watermelon: " + CORPUS[2]["text"], "Aristotle town? Alpha: " + CORPUS[3]["text"]]
    assert tr["initial_answer"] == "True" and tr["final_answer"] == "False." and out["prediction"] == "no"
    n = 3   # main: 3 + 5n + n reformulations + 1 repair; verifier 2n [spec 7]
    assert tr["calls"] == {"main": 3 + 6 * n + 1, "verifier": 2 * n}
    # the verifier's final prompt is filled in (official bug: a literal "{question}")
    assert not any("{question}" in u for _, us in script.batches for u in us)


def test_no_parsable_perturbation_falls_back_to_the_question(monkeypatch, tiny):
    rules = dict(TQA_RULES, perturb="Sure:\n\n")
    out, _ = run_scripted(monkeypatch, tiny, rules, TQA, mode="cm")
    assert out["trace"]["perturbed_questions"] == [TQA["question"]]
    assert out["trace"]["cm_verdicts"] == [None] and out["trace"]["z"] == 0.0 and out["retrievals"] == 1


# ---------------------------------------------------------------------------------------------- tiny models

SMALL = {k: 6 for k in rowen.MAX_TOKENS}


@pytest.fixture()
def verifier(tiny):
    return make_model(len(tiny[1]), seed=1), tiny[1]


def test_batched_stage_calls_match_one_by_one(monkeypatch, tiny, verifier):
    real = common.greedy
    batches = []

    def spy(model, tok, prompts, **kw):
        outs = real(model, tok, prompts, **kw)
        batches.append((model, prompts, kw, [o.text for o in outs]))
        return outs
    monkeypatch.setattr(common, "greedy", spy)
    monkeypatch.setattr(common, "sample", lambda *a, **kw: [common.Generation("1. ab?\n2. Can you?\n3. Xyz qq?", [], [], "eos")])
    s = rowen.Settings(max_tokens=dict(SMALL, cot=10, short=8), threshold=10.0)
    out = rowen.solve(TQA, tiny, verifier, common.BM25(CORPUS), s)
    stages = [b for b in batches if len(b[1]) > 1]
    # translations, x0 + EN + target CoT and short answers, M_V x2, CL + CM judges
    assert [len(b[1]) for b in stages] == [3, 7, 7, 3, 3, 6]
    for model, prompts, kw, texts in stages:
        assert [real(model, tiny[1], p, **kw).text for p in prompts] == texts
    assert out["model_calls"] == sum(len(b[1]) for b in batches) + 1          # + the sampled perturbation


def test_end_to_end_on_tiny_models(tiny, verifier):
    bm25 = common.BM25(CORPUS)
    for task_record in (TQA, SQA):
        for threshold in (0.0, 10.0):
            s = rowen.Settings(max_tokens=SMALL, k=3, threshold=threshold)
            out = rowen.solve(task_record, tiny, verifier, bm25, s)
            tr = out["trace"]
            for key in ("perturbation_output", "perturbed_questions", "answers", "translations", "target_answers",
                        "cl_verdicts", "verifier_answers", "cm_verdicts", "z_cl", "z_cm", "z", "decision",
                        "initial_answer", "initial_long_answer", "final_answer", "calls"):
                assert key in tr, key
            assert 1 <= len(tr["perturbed_questions"]) <= 3
            assert tr["z"] == pytest.approx(tr["z_cl"] + tr["z_cm"])
            assert tr["decision"] == (tr["z"] < threshold) == tr["retrieved"] == (threshold == 10.0)
            if tr["decision"]:
                assert out["retrievals"] == len(tr["queries"]) == len(tr["perturbed_questions"])
                # the random models' queries find no passage (evidence empty): the scripted tests
                # (test_truthfulqa_pipeline_hand_computed, test_strategyqa_labels_without_judge) check the evidence
            else:
                assert out["retrievals"] == 0 and out["prediction"] in (tr["initial_answer"], "yes", "no", "unknown")
            assert out["model_calls"] == sum(tr["calls"].values()) > 0
            if task_record is SQA:
                assert out["prediction"] in ("yes", "no", "unknown")
    again = rowen.solve(TQA, tiny, verifier, bm25, rowen.Settings(max_tokens=SMALL, k=3, threshold=10.0))
    assert again["trace"]["perturbation_output"] == rowen.solve(
        TQA, tiny, verifier, bm25, rowen.Settings(max_tokens=SMALL, k=3, threshold=10.0))["trace"]["perturbation_output"]


def test_cli_on_tiny_models(tmp_path, monkeypatch, tiny, verifier):
    for name, (model, tok) in {"m": tiny, "v": verifier}.items():
        model.save_pretrained(tmp_path / name)
        tok.save_pretrained(tmp_path / name)
    data = tmp_path / "tqa.json"
    data.write_text(json.dumps([{"Question": TQA["question"], "Best Answer": "No", "Correct Answers": "No; No, it is too narrow",
                                 "Incorrect Answers": "Yes", "Category": "Misconceptions"}]))
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(p) for p in CORPUS))
    monkeypatch.setattr(rowen, "MAX_TOKENS", SMALL)
    out = tmp_path / "out.jsonl"
    rowen.main(["--data", str(data), "--corpus", str(corpus), "--model", str(tmp_path / "m"), "--verifier",
                str(tmp_path / "v"), "--k", "2", "--output", str(out), "--device", "cpu", "--retrieve", "always"])
    row = json.loads(out.read_text().splitlines()[0])
    assert row["retrievals"] >= 1 and row["model_calls"] == sum(row["trace"]["calls"].values())
    assert {"z_cl", "z_cm", "z", "decision", "queries", "evidence"} <= set(row["trace"])
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert {"bleu", "rouge_l", "closer_to_correct", "retrieval_rate", "calls_per_q"} <= set(summary)
    assert summary["retrieval_rate"] == 1.0


def test_run_name_keeps_settings_apart():
    def name(**kw):
        defaults = dict(mode="hybrid", retrieve="adaptive", threshold=None, k=6, alpha=1.0,
                        target_language="Chinese", verifier=rowen.VERIFIER, repair_prompt="official")
        return rowen.run_name(argparse.Namespace(**{**defaults, **kw}))
    assert name() == "rowen-hybrid"
    assert name(mode="cl", retrieve="never", verifier="x/y") == "rowen-cl-never"     # cl uses no verifier
    assert name(threshold=1.2, target_language="German", k=4) == "rowen-hybrid-t1.2-k4-german"
    assert name(alpha=0.5) == "rowen-hybrid-a0.5"
    assert name(threshold=1.2, k=4, alpha=1.5, target_language="German") == "rowen-hybrid-t1.2-k4-a1.5-german"
    assert name(mode="cm", target_language="German", verifier="org/Model-7B") == "rowen-cm-v-Model-7B"
    # ours (the repair prompt of the runs in results/) is named; the official default is not
    assert name(retrieve="always", repair_prompt="correct") == "rowen-hybrid-always-repair-correct"


# ---------------------------------------------------------------------------------------------- embedded models

@pytest.mark.slow
def test_one_question_on_embedded_models(tmp_path, monkeypatch):
    monkeypatch.setattr(rowen, "MAX_TOKENS", {"cot": 32, "short": 16, "perturb": 48, "translate": 24,
                                              "check": 4, "repair": 24, "reformulate": 16})
    out = tmp_path / "rowen.jsonl"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # 2 CPU cores shared with other jobs: 47 s with one thread, 207 s with two
    try:
        rowen.main(["--dataset", "truthfulqa", "--limit", "1", "--k", "2", "--output", str(out)])
    finally:
        torch.set_num_threads(threads)
    row = json.loads(out.read_text().splitlines()[0])
    tr = row["trace"]
    assert isinstance(row["prediction"], str) and row["prediction"]
    assert 1 <= len(tr["perturbed_questions"]) <= 2 and len(tr["verifier_answers"]) == len(tr["perturbed_questions"])
    assert tr["decision"] == (tr["z"] < 0.5) and row["model_calls"] == sum(tr["calls"].values())


def test_modes_re_read_from_one_hybrid_always_run():
    def row(qid, z_cl, z_cm, task="qa"):
        return {"id": qid, "answers": ["x"], "prediction": "repaired", "retrievals": 2, "model_calls": 40,
                "seconds": 1.0, "trace": {"task": task, "z_cl": z_cl, "z_cm": z_cm, "alpha": 1.0, "retrieved": True,
                                          "queries": ["q1", "q2"], "initial_answer": "r0",
                                          "final_answer": "repaired"}}
    # thresholds 0.6 (CL), 0.8 (CM), 0.5 (hybrid): Z_CL 0.5 retrieves, Z_CM 1.0 does not, 1.5 does not
    modes = analysis.modes_from_run([row("a", 0.5, 1.0), row("b", 0.0, 0.0)])
    assert [r["prediction"] for r in modes["cl"]] == ["repaired", "repaired"]
    assert [r["prediction"] for r in modes["cm"]] == ["r0", "repaired"]
    assert [r["prediction"] for r in modes["hybrid"]] == ["r0", "repaired"]
    assert [r["prediction"] for r in modes["never"]] == ["r0", "r0"]
    assert [r["retrievals"] for r in modes["cm"]] == [0, 2]
    # any threshold: hybrid Z = 1.5 and 0.0
    sweep = {t: [r["prediction"] for r in analysis.at_threshold([row("a", 0.5, 1.0), row("b", 0.0, 0.0)], "hybrid", t)]
             for t in (0.0, 1.0, 1.5, 1.6)}
    assert sweep == {0.0: ["r0", "r0"], 1.0: ["r0", "repaired"], 1.5: ["r0", "repaired"], 1.6: ["repaired"] * 2}
    # Z exactly at the threshold keeps r0; StrategyQA answers are read as yes / no
    sq = row("c", 0.6, 0.8, task="strategyqa")
    sq["trace"].update(initial_answer="No.", final_answer="Yes, it can.")
    modes = analysis.modes_from_run([sq])
    assert modes["cl"][0]["prediction"] == "no" and modes["hybrid"][0]["prediction"] == "no"
    with pytest.raises(common.InputError):
        analysis.modes_from_run([{**row("d", 0.1, None), "id": "d"}])


def test_modes_from_cli_reads_the_first_rows(tmp_path, capsys):
    def row(qid, z, initial):
        return {"id": qid, "answers": ["Paris"], "prediction": "Paris", "retrievals": 2, "model_calls": 40,
                "seconds": 1.0, "trace": {"task": "qa", "z_cl": z, "z_cm": z, "alpha": 1.0, "retrieved": True,
                                          "queries": ["q1", "q2"], "initial_answer": initial, "final_answer": "Paris"}}
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [row("a", 1.0, "Rome"), row("b", 0.0, "Paris"),
                                                           row("c", 0.0, "Oslo")]))
    analysis.main(["modes", str(path), "--limit", "2"])
    out = capsys.readouterr().out
    # hybrid Z 2.0 keeps r0 "Rome" (wrong), Z 0 repairs to "Paris": EM 50; never: Rome, Paris: EM 50
    assert "| rowen-hybrid | 2 | 50.0 |" in out and "| rowen-never | 2 | 50.0 |" in out
    assert "detection on 2 questions, 1 initial answers wrong" in out
    assert "Z_cl: AUC 0.0" in out      # the right r0 has the lower Z


def test_detection_quality_auc_and_flag_rates():
    def row(r0, z_cl, z_cm):
        return {"id": r0, "answers": ["Paris"], "trace": {"task": "qa", "initial_answer": r0, "z_cl": z_cl,
                                                          "z_cm": z_cm, "alpha": 1.0}}
    rows = [row("Paris", 1.0, 0.5), row("It is Paris.", 0.5, 1.0), row("Lyon", 0.5, 0.0), row("Nice", 0.0, 1.0)]
    q = analysis.detection_quality(rows)
    assert (q["n"], q["wrong"]) == (4, 2)
    # Z_CL: right {1.0, 0.5} vs wrong {0.5, 0.0}: pairs 1, 1, 0.5, 1 -> 3.5 / 4
    assert q["cl"]["auc"] == 0.875
    # Z_CM: right {0.5, 1.0} vs wrong {0.0, 1.0}: 1, 0, 1, 0.5 -> 0.625; threshold 0.8 retrieves 1 of 2 each
    assert q["cm"] == {"auc": 0.625, "threshold": 0.8, "retrieve_wrong": 0.5, "retrieve_right": 0.5}
    # hybrid: right {1.5, 1.5} vs wrong {0.5, 1.0}: all pairs won; threshold 0.5 retrieves none (0.5 is not < 0.5)
    assert q["hybrid"] == {"auc": 1.0, "threshold": 0.5, "retrieve_wrong": 0.0, "retrieve_right": 0.0}
    with pytest.raises(common.InputError):
        analysis.detection_quality([row("Paris", 1.0, None)])


def test_modes_and_detection_take_alpha_from_each_trace(tmp_path, capsys):
    # a run with alpha 0.5: Z_CL 0.0, Z_CM 0.8 gives hybrid Z 0.4 < 0.5 (retrieve); alpha 1.0 gave 0.8 (keep r0)
    def row(qid, z_cl, z_cm, initial, alpha=0.5):
        return {"id": qid, "answers": ["Paris"], "prediction": "Paris", "retrievals": 2, "model_calls": 40,
                "seconds": 1.0, "trace": {"task": "qa", "mode": "hybrid", "z_cl": z_cl, "z_cm": z_cm,
                                          "z": z_cl + alpha * z_cm, "alpha": alpha, "retrieved": True,
                                          "queries": ["q1", "q2"], "initial_answer": initial, "final_answer": "Paris"}}
    rows = [row("a", 0.0, 0.8, "Rome"), row("b", 0.5, 0.0, "Paris")]
    assert analysis.mode_score(rows[0]["trace"], "hybrid") == pytest.approx(0.4)
    assert [r["prediction"] for r in analysis.modes_from_run(rows)["hybrid"]] == ["Paris", "Paris"]   # a repaired, b kept
    # detection: right r0 (b) has hybrid Z 0.5, wrong r0 (a) 0.4: AUC 1 (with alpha 1.0: 0.8 > 0.5, AUC 0)
    q = analysis.detection_quality(rows)
    assert q["hybrid"] == {"auc": 1.0, "threshold": 0.5, "retrieve_wrong": 1.0, "retrieve_right": 0.0}
    # the signals table reads the same Z, as the run recorded it
    assert metrics.signal_scores(rows)[1]["-Z_hybrid"] == [pytest.approx(-0.4), pytest.approx(-0.5)]
    # analysis.py modes: the run's alpha (its traces'), never rowen.ALPHA
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    analysis.main(["modes", str(path)])
    out = capsys.readouterr().out
    assert "| rowen-hybrid | 2 | 100.0 |" in out
    assert "Z_hybrid: AUC 1.0; below threshold 0.5 it retrieves 1.0 of wrong and 0.0 of right answers" in out
    # rows of runs with different alphas are each read with their own
    mixed = [row("a", 0.0, 0.8, "Rome", alpha=1.0), row("b", 0.5, 0.0, "Paris")]
    assert [analysis.mode_score(r["trace"], "hybrid") for r in mixed] == [pytest.approx(0.8), pytest.approx(0.5)]


def test_settings_name_the_threshold_the_run_used(tmp_path, monkeypatch, tiny_real):
    """A run on the mode's default threshold records it (hybrid: 0.5), so a rerun with another one is
    refused naming the value, not "None"."""
    monkeypatch.setattr(common, "load_model", lambda *a, **k: tiny_real)
    out = tmp_path / "run.jsonl"
    argv = ["--dataset", "strategyqa", "--limit", "1", "--k", "1", "--output", str(out)]
    rowen.main(argv)
    settings = json.loads(out.with_suffix(".settings.json").read_text())
    assert settings["--threshold"] == rowen.default_threshold("hybrid") == 0.5
    with pytest.raises(common.InputError, match=r"made with --threshold = 0.5, this run has 0.7"):
        rowen.main(argv + ["--threshold", "0.7"])


def test_threshold_for_rate_by_hand():
    # scores 0.5, 1, 1, 1.5, 2: candidates 0.5 (none below), the midpoints 0.75, 1.25, 1.75 and 2.5 (all)
    found = analysis.threshold_for_rate([1.0, 0.5, 2.0, 1.0, 1.5], 0.2)
    assert found["table"] == [[0.5, 0.0], [0.75, 0.2], [1.25, 0.6], [1.75, 0.8], [2.5, 1.0]]
    assert (found["threshold"], found["rate"]) == (0.75, 0.2)
    assert analysis.threshold_for_rate([1.0, 0.5, 2.0, 1.0, 1.5], 0.5)["threshold"] == 1.25   # 0.6 is nearest
    # a tie between two rates goes to the lower one (retrieving less): 0.25 lies between 0 and 0.5
    assert analysis.threshold_for_rate([1.0, 2.0], 0.25) == {"threshold": 1.0, "rate": 0.0,
                                                          "table": [[1.0, 0.0], [1.5, 0.5], [2.5, 1.0]]}
    # k = 6: 5/6 + 1/2 and 2/3 + 2/3 are one score, whatever their last bits; between 7/6 and 4/3 the cut is 1.25
    zs = [5 / 6 + 1 / 2, 2 / 3 + 2 / 3, 7 / 6]
    found = analysis.threshold_for_rate(zs, 0.3)
    assert [t for t, _ in found["table"]] == [pytest.approx(7 / 6), 1.25, pytest.approx(4 / 3 + 0.5)]
    assert found["threshold"] == 1.25 and found["rate"] == pytest.approx(1 / 3)
    # a midpoint whose 2 decimals would leave the interval stays unrounded: 1.0 and 1.0001
    assert analysis.threshold_for_rate([1.0, 1.0001], 0.5)["threshold"] == pytest.approx(1.00005)
    assert analysis.threshold_for_rate([], 0.2) is None
    # ties are counted in questions, not in float distances: 0.3 - 0.2 and 0.2 - 0.1 differ in their last bits
    assert analysis.threshold_for_rate([0, 1, 1] + [2] * 7, 0.2)["rate"] == 0.1              # not 0.3
    assert analysis.threshold_for_rate([0] * 9 + [1] * 2 + [2] * 39, 0.2)["rate"] == 0.18    # not 0.22


def test_a_redone_stage_3_reads_its_verifier_from_its_source_run_and_failed_rows_are_left_out(tmp_path, monkeypatch):
    # benchmarks/repair_again.py's settings name --repair-again, not --verifier: the pair (and so the calibrated
    # hybrid threshold) is the source run's; a failed question is left out of `modes`, and said
    (tmp_path / "src.settings.json").write_text(json.dumps({"--model": "m", "--verifier": "v"}))
    (tmp_path / "redo.settings.json").write_text(json.dumps({"--model": "m", "--repair-again": str(tmp_path / "src.jsonl")}))
    assert analysis.run_models(tmp_path / "redo.jsonl") == ("m", "v")
    assert analysis.run_models(tmp_path / "none.jsonl") == (None, None)
    shipped = Path(__file__).parents[1] / "results" / "strategyqa50-qwen2.5-coder-1.5b"
    rows = [json.loads(line) for line in (shipped / "rowen-hybrid-always-repair-official.jsonl").read_text().splitlines()]
    (tmp_path / "run.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows + [{"id": "x", "error": "boom"}]))
    (tmp_path / "run.settings.json").write_text((shipped / "rowen-hybrid-always.settings.json").read_text())
    text = analysis.report(tmp_path / "run.jsonl")
    assert text.startswith("1 failed question left out") and "below threshold 0.92" in text
    # the shipped redo names its source from the project's root: read from any directory, the same pair
    # (from elsewhere it gave (M, None), and so the default 0.5 where the pair's 0.92 applies)
    redo = shipped / "rowen-hybrid-always-repair-official.jsonl"
    at_root = analysis.run_models(redo)
    monkeypatch.chdir(tmp_path)
    assert analysis.run_models(redo) == at_root == ("qwen2.5-coder-1.5b", "smollm2-135m")

def test_calibrated_pair_gets_its_threshold_and_the_paper_rate_is_read_from_z(tmp_path, capsys):
    pair = ("qwen2.5-coder-1.5b", "smollm2-135m")
    assert rowen.default_threshold("hybrid", *pair, "truthfulqa") == rowen.CALIBRATED[("truthfulqa", *pair)] == 1.25
    assert rowen.default_threshold("cl", *pair, "truthfulqa") == 0.6 and rowen.default_threshold("cm", *pair) == 0.8
    assert rowen.default_threshold("hybrid", "qwen2.5-coder-0.5b", "smollm2-135m", "truthfulqa") == 0.5  # not calibrated
    # read at alpha 1, k 6, Chinese: with another alpha (Z tops out at 1 + alpha: 1.25 at 0.25 would retrieve
    # unless every check agrees), k or language, the official 0.5, said in one line
    assert rowen.CALIBRATED_AT == (1.0, 6, "Chinese")
    assert rowen.default_threshold("hybrid", *pair, "truthfulqa", scoring=(1.0, 6, "Chinese")) == 1.25
    for scoring in ((0.25, 6, "Chinese"), (1.0, 4, "Chinese"), (1.0, 6, "German")):
        assert rowen.default_threshold("hybrid", *pair, "truthfulqa", scoring=scoring) == 0.5
    rowen.default_threshold("hybrid", *pair, "truthfulqa", say=True, scoring=(0.25, 6, "Chinese"))
    assert "hybrid threshold 0.5, the official default: rowen.CALIBRATED's 1.25 on truthfulqa" in capsys.readouterr().err
    assert rowen.PAPER_RATES == {"truthfulqa": 0.23, "strategyqa": 0.20}                     # Table 5, Ratio

    def row(qid, z_cl, z_cm, task="truthfulqa"):
        return {"id": qid, "answers": ["x"], "trace": {"task": task, "z_cl": z_cl, "z_cm": z_cm, "alpha": 1.0,
                                                       "initial_answer": "x"}}
    # hybrid Z 0, 1, 1.5, 2 (x2): 23% of 5 lies nearest 1 of 5 below the cut 0.5
    rows = [row("a", 0.0, 0.0), row("b", 0.5, 0.5), row("c", 1.0, 0.5), row("d", 1.0, 1.0), row("e", 1.0, 1.0)]
    cal = analysis.rate_calibration(rows)
    assert (cal["threshold"], cal["rate"], cal["target"], cal["n"]) == (0.5, 0.2, 0.23, 5)
    assert analysis.rate_calibration([row("a", 0.0, 0.0, task="strategyqa")], 0.9)["target"] == 0.9
    assert analysis.rate_calibration([row("a", 0.0, 0.0, task="qa")]) is None          # no paper rate for it
    assert analysis.rate_calibration([row("a", 0.0, None)]) is None                     # no Z_CM: a CL run
    # --modes-from reads the pair from the run's settings: the calibrated pair's hybrid threshold applies
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    path.with_suffix(".settings.json").write_text(json.dumps({"--model": pair[0], "--verifier": pair[1]}))
    assert analysis.run_models(path) == pair and analysis.run_models(tmp_path / "none.jsonl") == (None, None)
    analysis.main(["modes", str(path)])
    out = capsys.readouterr().out
    assert f"Z_hybrid: AUC None; below threshold {rowen.CALIBRATED[('truthfulqa', *pair)]:g} it retrieves" in out
    assert ("hybrid threshold at the paper's 23% retrieval rate (threshold_for_rate over 5 questions' Z, "
            "no answer read): 0.5, retrieving on 20%") in out


@pytest.mark.parametrize("calibrated_on", ["strategyqa", "truthfulqa"])
def test_a_run_takes_its_own_tasks_calibrated_threshold_or_the_official_one(tmp_path, monkeypatch, capsys, tiny_real,
                                                                            calibrated_on):
    # a StrategyQA run of a pair calibrated on StrategyQA takes that value; of a pair calibrated on TruthfulQA
    # only, the official 0.5 with a note (the old lookup by (M, M_V) alone gave it TruthfulQA's value)
    monkeypatch.setattr(common, "load_model", lambda *a, **k: tiny_real)
    monkeypatch.setitem(rowen.CALIBRATED, (calibrated_on, rowen.MODEL, rowen.VERIFIER), 0.9)
    monkeypatch.setattr(rowen, "CALIBRATED_AT", (rowen.ALPHA, 1, rowen.TARGET_LANGUAGE))   # as if read at --k 1
    out = tmp_path / "run.jsonl"
    rowen.main(["--dataset", "strategyqa", "--limit", "1", "--k", "1", "--output", str(out)])
    err, pair = capsys.readouterr().err, f"on strategyqa for M {rowen.MODEL} with M_V {rowen.VERIFIER}"
    expected = 0.9 if calibrated_on == "strategyqa" else 0.5
    if calibrated_on == "strategyqa":
        assert f"hybrid threshold 0.9: calibrated {pair} (rowen.CALIBRATED, in-sample; the official default is 0.5)" in err
    else:
        assert (f"note: hybrid threshold 0.5, the official default: none is calibrated {pair} (rowen.CALIBRATED has "
                "truthfulqa: another task's value is never used)") in err
    assert json.loads(out.with_suffix(".settings.json").read_text())["--threshold"] == expected
    assert json.loads(out.read_text().splitlines()[0])["trace"]["threshold"] == expected


def test_strategyqa_rows_are_read_at_strategyqa_s_threshold():
    # hybrid Z 1.0 lies between StrategyQA's 0.92 (keep r0) and TruthfulQA's 1.25 (repair): the old lookup
    # by (M, M_V) read StrategyQA rows at 1.25
    pair = ("qwen2.5-coder-1.5b", "smollm2-135m")
    row = {"id": "s", "answers": ["no"], "label": False, "prediction": "yes", "retrievals": 2, "model_calls": 40,
           "seconds": 1.0, "trace": {"task": "strategyqa", "z_cl": 0.5, "z_cm": 0.5, "alpha": 1.0, "retrieved": True,
                                     "queries": ["q1", "q2"], "initial_answer": "No", "final_answer": "Yes"}}
    assert analysis.modes_from_run([row], *pair)["hybrid"][0]["prediction"] == "no"
    assert analysis.detection_quality([row], *pair)["hybrid"]["threshold"] == 0.92
    assert analysis.modes_from_run([{**row, "trace": {**row["trace"], "task": "truthfulqa"}}], *pair)["hybrid"][0][
        "prediction"] == "Yes"                                              # TruthfulQA's 1.25: repaired
    assert rowen.default_threshold("hybrid", *pair) == 0.5                 # no task: never a task's value


@pytest.mark.parametrize("task,rate_of_the_other", [("truthfulqa", None), ("strategyqa", 0.40)])
def test_each_calibrated_threshold_is_read_from_its_own_tasks_z(task, rate_of_the_other):
    """CALIBRATED's values are rate_calibration over their own task's --never-retrieve run (Z only, in-sample:
    the same 50 questions the results report); TruthfulQA's 1.25 retrieves on 40% of StrategyQA's 50."""
    pair = ("qwen2.5-coder-1.5b", "smollm2-135m")
    path = f"results/{task}50-{pair[0]}/rowen-hybrid-never.jsonl"
    rows = metrics.read_rows(path)
    assert analysis.run_models(path) == pair and analysis.rows_task(rows) == task and len(rows) == 50
    assert analysis.rate_calibration(rows)["threshold"] == rowen.CALIBRATED[(task, *pair)]
    if rate_of_the_other is not None:
        zs = [analysis.mode_score(r["trace"], "hybrid") for r in rows]
        assert sum(z < rowen.CALIBRATED[("truthfulqa", *pair)] for z in zs) / 50 == rate_of_the_other
        assert sum(z < rowen.CALIBRATED[(task, *pair)] for z in zs) / 50 == 0.14


# ---------------------------------------------------------------------------------------------- Stage 3 again

def repair_tool():
    """benchmarks/repair_again.py, a script, as a module: its rowen and common are the ones imported here."""
    spec = importlib.util.spec_from_file_location("repair_again", Path(__file__).parents[1] / "benchmarks" / "repair_again.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_repair_rebuilds_from_a_written_trace_the_prompt_solve_sent(monkeypatch, tiny):
    out, script = run_scripted(monkeypatch, tiny, SQA_RULES, SQA, threshold=1.1)
    sent = [(m, us) for m, us in script.batches if any(REPAIR_KEY in u for u in us)]
    trace = json.loads(json.dumps(out["trace"], ensure_ascii=False))     # as a run file holds it
    again = Script(SQA_RULES)
    monkeypatch.setattr(common, "greedy", again.greedy)
    calls = {"main": 0, "verifier": 0}
    assert rowen.repair(("M", tiny[1]), SQA["question"], trace, rowen.Settings(), calls) == ("False.", "False.")
    assert again.batches == sent and len(sent) == 1 and calls["main"] == 1


class PerQuestion(Script):
    """Script whose perturbation depends on the question: SQA's retrieves at threshold 1.1 (Z = 1.0), any other's
    questions all begin with "Did", whose labels agree in every language and model (Z = 2.0), so it keeps r0."""

    def sample(self, model, tok, prompt, k, **kw):
        self.batches.append((model, ["<sampled>"]))
        return [common.Generation(self.rules["perturb"] if SQA["question"] in prompt else "1. Did A?\n2. Did B?",
                                  [], [], "eos")]


def test_repair_again_redoes_stage_3_of_a_run_file(tmp_path, monkeypatch, tiny, capsys):
    data, corpus, src = tmp_path / "sqa.json", tmp_path / "corpus.jsonl", tmp_path / "run.jsonl"
    data.write_text(json.dumps([{"question": SQA["question"], "answer": False},
                                {"question": "Did Plato own a horse?", "answer": True}]))
    corpus.write_text("\n".join(json.dumps(p) for p in CORPUS))
    monkeypatch.setattr(common, "load_model", lambda name, *a, **k: ("V" if name == rowen.VERIFIER else "M", tiny[1]))
    rules = {**SQA_RULES, "M": [("Search results:", "True")] + SQA_RULES["M"]}    # ours says True, the official False

    def main(argv, out, command=rowen.main):     # (the user turns M was asked, the rows of the file `out`)
        script = PerQuestion(rules)
        monkeypatch.setattr(common, "greedy", script.greedy)
        monkeypatch.setattr(common, "sample", script.sample)
        command(argv)
        return [u for _, us in script.batches for u in us], metrics.read_rows(out)
    again = lambda argv, out: main(argv, out, repair_tool().main)
    source_asked, source = main(["--data", str(data), "--corpus", str(corpus), "--k", "3", "--threshold", "1.1",
                                 "--repair-prompt", "correct", "--output", str(src)], src)
    assert ["evidence" in r["trace"] for r in source] == [True, False] and source[0]["prediction"] == "yes"
    same = lambda a, b: {k: v for k, v in a.items() if k not in ("seconds", "cpu_seconds", "cpu")} == \
        {k: v for k, v in b.items() if k not in ("seconds", "cpu_seconds", "cpu")}

    # the consistency check: with the run's own prompt, the same prompt goes out and every row comes back as it was
    capsys.readouterr()
    asked, rows = again([str(src), "--repair-prompt", "correct", "--output", str(tmp_path / "c.jsonl")],
                        tmp_path / "c.jsonl")
    assert asked == [u for u in source_asked if u.startswith("Search results:")] and len(asked) == 1
    assert all(same(a, b) for a, b in zip(rows, source)) and len(rows) == 2
    assert "1 of 1 repair outputs as stored in run.jsonl; 0 of 2 predictions changed" in capsys.readouterr().out

    # the official prompt, one row first: only the repair's fields change
    off = tmp_path / "run-repair-official.jsonl"                   # the default name
    asked, rows = again([str(src), "--repair-prompt", "official", "--limit", "1"], off)
    assert len(asked) == 1 and REPAIR_KEY in asked[0] and asked[0].startswith("You are an advanced AI")
    assert rows[0]["prediction"] == "no" and {k: v for k, v in rows[0]["trace"].items() if source[0]["trace"][k] != v} == \
        {"repair_prompt": "official", "repair_output": "False.", "final_answer": "False."}
    assert same({**rows[0], "prediction": "yes", "trace": source[0]["trace"]}, source[0])
    # a resume skips the done row (a row cut short by an interruption is dropped); the row that did not retrieve
    # is copied without a call
    off.write_text(off.read_text() + '{"id": "strategyqa-1", "predic')
    asked, rows = again([str(src), "--repair-prompt", "official"], off)
    assert asked == [] and rows[0]["trace"]["repair_output"] == "False." and same(rows[1], source[1]) and len(rows) == 2
    assert "0 of 1 repair outputs as stored in run.jsonl; 1 of 2 predictions changed" in capsys.readouterr().out
    settings = json.loads(off.with_suffix(".settings.json").read_text())
    assert settings["--repair-again"] == str(src) and settings["--repair-prompt"] == "official"
    assert settings["question file"].endswith(hashlib.sha256(src.read_bytes()).hexdigest()[:16])   # the run's content
    assert settings["method code"].startswith("rowen.py, ") and settings["--model"] == rowen.MODEL
    with pytest.raises(common.InputError, match=r"made with --repair-prompt = official, this run has correct"):
        again([str(src), "--repair-prompt", "correct", "--output", str(off)], off)
    with pytest.raises(common.InputError, match="is the run being repaired"):
        again([str(src), "--repair-prompt", "official", "--output", str(src)], src)
    with pytest.raises(common.InputError, match=r"a run file's name ends in .jsonl; pass --output .*off-0\.5\.jsonl$"):
        again([str(src), "--repair-prompt", "official", "--output", str(tmp_path / "off-0.5")], src)
    # a failed row stays failed, with its error
    failed = tmp_path / "failed.jsonl"
    failed.write_text(json.dumps(source[0]) + "\n" + json.dumps({**source[1], "prediction": "", "trace": {},
                                                                 "error": "too long"}) + "\n")
    failed.with_suffix(".settings.json").write_text(src.with_suffix(".settings.json").read_text())
    _, rows = again([str(failed), "--repair-prompt", "official"], tmp_path / "failed-repair-official.jsonl")
    assert rows[0]["prediction"] == "no" and rows[1]["error"] == "too long" and rows[1]["prediction"] == ""


def test_repair_again_on_a_tiny_model_gives_back_the_stored_outputs(tmp_path, monkeypatch, tiny_real):
    # real decoding, either tokenizer: the rebuilt chat prompt is token for token the one the run sent
    monkeypatch.setattr(common, "load_model", lambda *a, **k: tiny_real)
    monkeypatch.setattr(rowen, "MAX_TOKENS", SMALL)
    src, again = tmp_path / "run.jsonl", tmp_path / "again.jsonl"
    rowen.main(["--dataset", "strategyqa", "--limit", "2", "--k", "1", "--retrieve", "always", "--repair-prompt", "correct",
                "--output", str(src)])
    served = speed.CACHE_STATS["served"]
    for _ in range(2):       # the second time from the call cache (--cache), as other runs
        repair_tool().main([str(src), "--repair-prompt", "correct", "--cache", str(tmp_path / "cache"),
                            "--overwrite", "--output", str(again)])
        old, new = metrics.read_rows(src), metrics.read_rows(again)
        assert [r["trace"]["repair_output"] for r in new] == [r["trace"]["repair_output"] for r in old]
        assert [r["prediction"] for r in new] == [r["prediction"] for r in old] and len(new) == 2
    assert speed.CACHE_STATS["served"] == served + 2


# ---------------------------------------------------------------- the command line

class Parsed(Exception):
    """Raised where main() has parsed its flags and named its run, before it reads an input or loads a model."""


def parsed(monkeypatch, argv: list[str]):
    """(args, run name) main() builds from argv, stopped at its input check."""
    def stop(args, method=None, *a, **k):
        raise Parsed(args, method)
    monkeypatch.setattr(common, "check_inputs", stop)
    with pytest.raises(Parsed) as got:
        rowen.main(argv)
    return got.value.args


@pytest.mark.parametrize("mode", ["never", "always"])
def test_retrieve_mode_is_one_value_and_the_old_flags_are_gone(monkeypatch, mode):
    """--retrieve MODE gives its run name and one "--retrieve" entry in the recorded settings (as SeaKR's
    and CtrlA's); adaptive is the default; the old flags (--never-retrieve, --always-retrieve) are errors now."""
    new, name = parsed(monkeypatch, ["--retrieve", mode])
    assert new.retrieve == mode and name == f"rowen-hybrid-{mode}"
    flags = common.run_settings(new, rowen.__file__)
    assert flags["--retrieve"] == mode and not {"--never-retrieve", "--always-retrieve"} & set(flags)
    assert parsed(monkeypatch, [])[0].retrieve == "adaptive"
    with pytest.raises(SystemExit):
        rowen.main([f"--{mode}-retrieve"])


def test_help_lists_the_methods_flags_before_the_engineering_ones(capsys):
    with pytest.raises(SystemExit):
        rowen.main(["--help"])
    out = capsys.readouterr().out.split("\n\n", 1)[1]          # after the usage line
    groups = [line for line in out.splitlines() if line.endswith(":") and not line.startswith(" ")]
    assert groups[-3:] == ["Rowen:", "questions and passages:", "engineering:"]
    assert out.index("\nRowen:\n") < out.index("--retrieve {") < out.index("\nengineering:\n") < out.index("--model MODEL")
    # the default thresholds in the help are THRESHOLDS', the table default_threshold reads
    assert "default: 0.6 cl, 0.8 cm, 0.5 hybrid (rowen.THRESHOLDS)" in " ".join(out.split())


def test_modes_from_points_to_analysis(tmp_path):
    """Reading a run file moved to analysis.py: the old flag names the command that does it now."""
    with pytest.raises(common.InputError, match=r"--modes-from moved: python analysis.py modes RUN.jsonl --limit 3$"):
        rowen.main(["--modes-from", "RUN.jsonl", "--limit", "3"])


def test_repair_again_points_to_its_tool(monkeypatch):
    """Stage 3 redone alone moved to benchmarks/repair_again.py: the old flag names its command, with the flags
    given that it takes, and that command parses (here it stops at the missing run file), no model loaded."""
    monkeypatch.setattr(common, "load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(common.InputError, match=r"^--repair-again moved: python benchmarks/repair_again.py RUN.jsonl "
                                                r"--repair-prompt official$"):
        rowen.main(["--repair-again", "RUN.jsonl"])
    with pytest.raises(common.InputError) as moved:
        rowen.main(["--repair-again", "RUN.jsonl", "--repair-prompt", "correct", "--limit", "3", "--skip", "1",
                    "--output", "o.jsonl", "--overwrite", "--cache", "calls", "--seed", "2"])
    command = "python benchmarks/repair_again.py RUN.jsonl --repair-prompt correct --output o.jsonl --limit 3 " \
              "--skip 1 --cache calls --overwrite"
    assert str(moved.value) == f"--repair-again moved: {command}"
    with pytest.raises(common.InputError, match="RUN.jsonl: no such file"):
        repair_tool().main(command.split()[2:])


@pytest.mark.parametrize("retrieve", ["never", "always"])
def test_a_threshold_with_never_or_always_is_said_to_set_only_the_traced_decision(monkeypatch, capsys, tiny, retrieve):
    """--threshold with --retrieve never or always: one stderr note says that retrieval does not depend on it and
    that it only sets the decision the trace records; two thresholds' rows differ in just that (and the
    threshold the trace names)."""
    note = (f"note: with --retrieve {retrieve}, retrieval does not depend on --threshold 1.1: it only sets the "
            "decision the trace records (Z < 1.1: whether Rowen would retrieve)\n")
    parsed(monkeypatch, ["--retrieve", retrieve, "--threshold", "1.1"])
    assert capsys.readouterr().err == note
    parsed(monkeypatch, ["--retrieve", retrieve])
    parsed(monkeypatch, ["--threshold", "1.1"])
    assert "note:" not in capsys.readouterr().err
    a, _ = run_scripted(monkeypatch, tiny, TQA_RULES, TQA, threshold=1.1, retrieve=retrieve)      # Z = 1.0
    b, _ = run_scripted(monkeypatch, tiny, TQA_RULES, TQA, threshold=0.5, retrieve=retrieve)
    assert {k for k in a["trace"] if a["trace"][k] != b["trace"][k]} == {"threshold", "decision"}
    assert {**a, "trace": None} == {**b, "trace": None} and a["trace"]["decision"] != b["trace"]["decision"]
