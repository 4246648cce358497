"""Rowen: retrieve only when the model's answers disagree across languages and across models.

The method in five lines:
1. Stage 1: M answers x0 with a chain of thought t0 (Table 1) and, in the same conversation, a short answer r0.
2. Stage 2: M writes k = 6 semantically equivalent questions x^j (T = 1.0) and answers each (r^j, Eq. 1);
   M answers each translated into Chinese (r_T^j, Eq. 2); a verifier model M_V answers each (r_V^j, Eq. 3).
3. M judges each pair (Tables 2, 3): Z_CL, Z_CM = mean verdicts (Eq. 4, 5); hybrid Z = Z_CL + alpha Z_CM (Eq. 6).
4. If Z >= threshold, r0 is final. Otherwise each x^j is a search query, top 2 passages each, evidence "q? passage".
5. Stage 3: M repairs r0 from x0, t0, r0 and the evidence (Eq. 7); its output is the final answer.

Paper: Hanxing Ding, Liang Pang, Zihao Wei, Huawei Shen, Xueqi Cheng. "Rowen: Adaptive Retrieval-Augmented
Generation for Hallucination Mitigation in LLMs" (SIGIR-AP 2025, doi:10.1145/3767695.3769500). Official code:
dhx20150812/Rowen (gpt-3.5-turbo-0613 as M, qwen-max as M_V, Google Serper as search).

Models: M answers, paraphrases, translates, judges and repairs, so it must follow a chat template and
answer in Chinese (paper 5.3): the default MODEL is Qwen2.5-Coder-0.5B-Instruct; M_V only answers, and
should be of another family (paper 4.3, 5.3): the default VERIFIER is SmolLM2-135M-Instruct.

Follows the paper's intent, its prompts (Tables 1-3) and the official code's concrete values and repair
prompt; the other prompts are ours. Differs from the official code, in ways that can change results, in:
- local models and BM25 over a local corpus stand in for gpt-3.5 / qwen-max and the Serper web search;
- perturbations are parsed (numbering, preambles and copies of x0 dropped, at most k); verdicts are read
  by read_yes_no (official is_supported reads "No." as True);
- thresholds: 0.6 CL and 0.8 CM (paper 5.4; official 0.5); hybrid 0.5 (official) or a task's calibrated value;
- answers are cleaned of echoed labels (clean_answer); prompts outside Tables 1-3 are ours;
- evaluation: TruthfulQA has no GPT-judge, the paper's headline metric (a fine-tuned babbage-002 that is not
  public); `closer_to_correct` stands in for it;
- the shipped StrategyQA results were repaired with our prompt (--repair-prompt correct); the default is official.
Full list, each with the official file and line and its effect where measured: docs/rowen.md.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field

import common

# ----------------------------------------------------------------------------------------------
# Settings (source in brackets)
K = 6                        # perturbed questions per question [paper 4.3 and 5.4; official --k 6]
PERTURB_TEMPERATURE = 1.0    # the one sampled call; every other call is greedy [paper 4.3; official]
ALPHA = 1.0                  # weight of Z_CM in the hybrid score, range 0.25-1.5 [paper 5.4; official --alpha]
THRESHOLDS = {"cl": 0.6,     # retrieve iff Z < threshold [paper 5.4, Fig. 4(a): Rowen-CL's best]
              "cm": 0.8,     # [paper 5.4, Fig. 4(a): Rowen-CM's best]
              "hybrid": 0.5}  # on Z in [0, 1 + alpha]; the paper gives none [official --threshold 0.5]
PAPER_RATES = {"truthfulqa": 0.23,   # share of questions Rowen-Hybrid retrieves for [paper Table 5, Ratio:
               "strategyqa": 0.20}   # GPT-3.5 with Qwen-max]; the target of analysis.threshold_for_rate
# The hybrid threshold of a task and an (M, M_V) pair, calibrated on its own Z at the task's PAPER_RATES (no answer
# read; `python analysis.py modes FILE` prints it). subtle: in-sample, from the Z of the 50 questions it reports on.
CALIBRATED = {
    # TruthfulQA's first 50, --never-retrieve: 20% retrieve (results/truthfulqa50-qwen2.5-coder-1.5b/; at fe512cb,
    # whose CM judge used an earlier layout: today's official one may move Z)
    ("truthfulqa", "qwen2.5-coder-1.5b", "smollm2-135m"): 1.25,
    # StrategyQA's first 50, --never-retrieve: 14%, the candidate nearest 20% (1.08 gives 30%;
    # results/strategyqa50-qwen2.5-coder-1.5b/); TruthfulQA's 1.25 would retrieve on 40% of them
    ("strategyqa", "qwen2.5-coder-1.5b", "smollm2-135m"): 0.92,
}
RETRIEVE_MODES = ("adaptive", "never", "always")  # --retrieve: Rowen; the baselines keep r0 / always repair
REPAIR_PROMPT = "official"   # Stage 3's prompt: "official" (the official templates) or "correct" (ours) [official]
TOP_K = 2                    # passages per search query [official Serper parser keeps int(5/2) = 2]
TARGET_LANGUAGE = "Chinese"  # [paper 4.3: English -> Chinese; Table 7 also German and French]
CALIBRATED_AT = (ALPHA, K, TARGET_LANGUAGE)  # (alpha, k, language) every CALIBRATED value was read at [ours]
MODEL = "qwen2.5-coder-0.5b"  # M: a Qwen chat model, for Chinese [paper 5.3]; the smaller one (~45 calls a question)
VERIFIER = "smollm2-135m"    # M_V: a chat model of another family than M [paper 4.3: qwen-max-0428; 5.3: Llama-3-8B]
SYSTEM = "You are a helpful assistant."    # [official construct_input_message]
MAX_TOKENS = {"cot": 512, "short": 64, "perturb": 256, "translate": 128, "check": 8,
              "repair": 256, "reformulate": 64}  # per call, perturb for K questions [ours; official: no limit]

# ----------------------------------------------------------------------------------------------
# Prompts. Table 1 (CoT), Table 2 (cross-language check), Table 3 (cross-model check) and the
# perturbation sentence (3.2.1) are the paper's; the others are ours, written to do what the official
# prompts do (dhx20150812/Rowen, prompt_template.py) without copying their wording.

COT = {  # Stage 1 (Table 1): the chain of thought; TruthfulQA's as Table 1 prints it, with its closing period
         # after "conjecture" (the official TRUTHFULQA_INITIAL_ANSWER_TEMPLATE has none)
    "truthfulqa": """When responding to my question, please first evaluate the validity of the information or the assumption underlying the question. Once you've established its truth or existence, then proceed to deliver a detailed explanation or answer. Prioritize accuracy and fact-checking before diving into elaboration or conjecture.
My Question: {question}
Your answer:""",
    # ours: the official StrategyQA prompt lists seven reasoning guidelines; this one asks for the same steps
    "strategyqa": """Think through this yes/no question step by step.

Question: {question}

First name the facts the question depends on, including any it takes for granted. Split it into smaller questions and answer each from what you know. Connect the partial answers with careful reasoning, check the conclusion against the facts, and end with a clear, definite verdict.

Your reasoning and verdict:""",
}
COT["qa"] = COT["truthfulqa"]
# Our own prompts end in the instruction, not in an answer label ("Your Short Answer:"): a chat model
# answers a user turn, and a label at its end is what a small one copies into its reply.
FINAL = {  # Stage 1, second turn: the short answer (the TruthfulQA one shows no question, as official)
    "truthfulqa": "From the reasoning above, state the answer to my question briefly and directly, in one sentence, without extra detail.",
    "strategyqa": "From the reasoning above, answer the question \"{question}\" with a single word: True or False. Give no explanation.",
    "qa": "From the reasoning above, give the answer to the question in a few words (a name, a date, a number, yes or no), with no explanation.",
}
# the sentence paper 3.2.1 prints; the question follows on a line of its own, as in the official template
PERTURB = "For the question [ORIGINAL QUESTION], please provide {k} semantically equivalent questions.\nORIGINAL QUESTION: {question}"
TRANSLATE = "Translate this sentence into {language}. Reply with the translation only:\n{text}"  # ours
CHECK_CL = "Given the question Q, and two potential answers: answer A in English and answer B in {language}. Your task is to determine if the content and meaning of A and B are equivalent in the context of answering Q. Consider linguistic nuances, cultural variations, and the overall conveyance of information. Respond with a binary classification. If A and B are equivalent, output 'True.', otherwise output 'False'\n\nQuestion: {q}\nAnswer A (in English): {a1}\nAnswer B (in {language}): {a2}\nYour response (True or False):"
# Table 3's instruction in the official layout (prompt_template.py:37-47), verbatim, its space after "explanation." too
CHECK_CM = "Are the following two Question-Answer(QA) pairs semantically equivalent? Provide your best guess that it is correct (True or False). Given ONLY the guess (True or False), no other words or explanation. \n\nThe first QA pair is:\nQuestion: {q}\nAnswer: {a1}\n\nThe second QA pair is:\nQuestion: {q}\nAnswer: {a2}\n\nYour Guess (True or False):"
REFORMULATE = """Question: {question}

Turn this question into a short search-engine query: keep only the key names and terms it needs to be answered, drop everything else. Reply with the query only."""  # ours
# subtle: the question comes last, right before what to write, so that the model answers it; an earlier
# version ended in advice about the evidence, which a small model copied as its answer.
_REPAIR = """Search results:
{evidences}

An earlier attempt at the question below reasoned: {initial_long_answer}
Its answer was: {initial_short_answer}
That answer may be wrong. Check it against the search results and correct it where they show it is wrong.

Question: {question}
"""  # ours, the inputs of Eq. 7
# The official repair templates, verbatim (dhx20150812/Rowen, prompt_template.py:49-58 TruthfulQA, 155-166
# StrategyQA): they list x0, t0, r0 and E and ask for an answer "maintaining coherence with the previous
# discussion points". Short-answer QA has no official one: StrategyQA's, asking for a few words (ours).
_OFFICIAL = """You are an advanced AI with the ability to process and synthesize information efficiently. When provided with a question, you should consider the following in your response:

1. The specific question asked: {{question}}
2. The reasoning process: {{initial_long_answer}}
3. The short answer previously given related to the question: {{initial_short_answer}}
4. Evidences that have been retrieved: {{evidences}}

Use this information to {verb} a concise, accurate, and relevant answer that reflects the latest understanding of the topic based on the input provided. Your response should be clear, direct, and provide the most up-to-date information available while maintaining coherence with the previous discussion points.

"""
REPAIR = {  # Stage 3 (Eq. 7), by --repair-prompt
    "official": {
        "truthfulqa": _OFFICIAL.format(verb="generate") + "Please provide your revised short response:",
        "strategyqa": _OFFICIAL.format(verb="provide") + "You must directly answer the above question with True or False, and do not involve any other explanations.\n\nYour final answer (True or False):",
        "qa": _OFFICIAL.format(verb="provide") + "You must directly answer the above question in a few words (a name, a date, a number, yes or no), and do not involve any other explanations.\n\nYour final answer:",
    },
    "correct": {  # ours: says r0 may be wrong and asks to correct it (paper 3.3: "identify and correct inaccuracies")
        "truthfulqa": _REPAIR + "Answer the question in one short, accurate sentence.",
        "strategyqa": _REPAIR + "Answer the question with True or False only, no explanation.",
        "qa": _REPAIR + "Answer the question in a few words (a name, a date, a number, yes or no), with no explanation.",
    },
}
# Target-language prompts, all ours: Chinese (the paper's target) and Table 7's others, each asking what its English
# counterpart asks, for an answer of the same form: "cot" renders Table 1 (TruthfulQA, short-answer QA), "final"
# TruthfulQA's sentence, "final_qa" short-answer QA's few words, "cot_yn" and "final_yn" StrategyQA's.
TARGET = {
    "Chinese": {
        "cot": "回答我的问题之前，请先判断问题所依据的信息或假设是否成立。确认之后，再给出详细的解释或回答。准确和核实事实优先于展开论述或猜测。\n\n我的问题：{question}\n\n你的回答：",
        "final": "根据上面的思考，用一句话简短、直接地回答这个问题，不要添加多余的信息。",
        "cot_yn": "请一步一步地思考这个是非题。\n\n问题：{question}\n\n先指出问题依赖的事实（包括默认的前提），把它拆成几个小问题并逐一回答，再把这些答案合理地联系起来，检查结论，最后给出明确的判断。\n\n你的推理和判断：",
        "final_yn": "根据上面的思考，只用一个字回答问题【{question}】：是或否。不要解释。",
        "final_qa": "根据上面的思考，用几个词回答这个问题（一个名字、一个日期、一个数字、是或否），不要解释。",
    },
    "German": {
        "cot": "Wenn du meine Frage beantwortest, prüfe bitte zuerst, ob die Informationen oder Annahmen, auf denen die Frage beruht, zutreffen. Sobald du ihre Richtigkeit oder Existenz festgestellt hast, gib eine ausführliche Erklärung oder Antwort. Stelle Genauigkeit und Faktenprüfung vor Ausführungen oder Vermutungen.\n\nMeine Frage: {question}\n\nDeine Antwort:",
        "final": "Beantworte meine Frage auf Grundlage der obigen Überlegungen kurz und direkt in einem Satz, ohne zusätzliche Details.",
        "cot_yn": "Denke Schritt für Schritt über diese Ja/Nein-Frage nach.\n\nFrage: {question}\n\nNenne zuerst die Fakten, von denen die Frage abhängt, auch die, die sie stillschweigend voraussetzt. Zerlege sie in kleinere Fragen und beantworte jede aus deinem Wissen. Verbinde die Teilantworten durch sorgfältiges Schlussfolgern, prüfe das Ergebnis an den Fakten und schließe mit einem klaren, eindeutigen Urteil.\n\nDeine Überlegung und dein Urteil:",
        "final_yn": "Beantworte die Frage „{question}“ auf Grundlage der obigen Überlegungen mit einem einzigen Wort: Ja oder Nein. Gib keine Erklärung.",
        "final_qa": "Gib auf Grundlage der obigen Überlegungen die Antwort auf die Frage in wenigen Worten (ein Name, ein Datum, eine Zahl, ja oder nein), ohne Erklärung.",
    },
    "French": {
        "cot": "Lorsque tu réponds à ma question, évalue d'abord la validité des informations ou de l'hypothèse sur lesquelles elle repose. Une fois leur véracité ou leur existence établie, donne une explication ou une réponse détaillée. Privilégie l'exactitude et la vérification des faits avant de développer ou de faire des conjectures.\n\nMa question : {question}\n\nTa réponse :",
        "final": "À partir du raisonnement ci-dessus, donne la réponse à ma question brièvement et directement, en une phrase, sans détails superflus.",
        "cot_yn": "Réfléchis étape par étape à cette question fermée.\n\nQuestion : {question}\n\nNomme d'abord les faits dont dépend la question, y compris ceux qu'elle tient pour acquis. Décompose-la en questions plus petites et réponds à chacune d'après tes connaissances. Relie les réponses partielles par un raisonnement rigoureux, vérifie la conclusion au regard des faits et termine par un verdict clair et sans ambiguïté.\n\nTon raisonnement et ton verdict :",
        "final_yn": "À partir du raisonnement ci-dessus, réponds à la question « {question} » par un seul mot : oui ou non. Ne donne pas d'explication.",
        "final_qa": "À partir du raisonnement ci-dessus, donne la réponse à la question en quelques mots (un nom, une date, un nombre, oui ou non), sans explication.",
    },
    "Japanese": {
        "cot": "私の質問に答えるときは、まず質問の前提となっている情報や仮定が正しいかどうかを評価してください。それが真実である、または存在することを確認したうえで、詳しい説明や回答をしてください。詳しい説明や推測に入る前に、正確さと事実確認を優先してください。\n\n私の質問：{question}\n\nあなたの回答：",
        "final": "上の推論に基づいて、私の質問への答えを一文で簡潔かつ直接的に述べてください。余計な詳細は不要です。",
        "cot_yn": "この二択の質問について、一歩ずつ考えてください。\n\n質問：{question}\n\nまず、質問が依存している事実（暗黙の前提も含む）を挙げてください。質問を小さな質問に分け、それぞれに自分の知識で答えてください。部分的な答えを注意深い推論でつなぎ、結論を事実と照らし合わせて確認し、最後に明確で確定的な判断を示してください。\n\nあなたの推論と判断：",
        "final_yn": "上の推論に基づいて、質問「{question}」に一語で答えてください：はい または いいえ。説明は不要です。",
        "final_qa": "上の推論に基づいて、質問への答えを数語で述べてください（名前、日付、数、はい または いいえ）。説明は不要です。",
    },
}
# Words read as yes / no in each language; the English ones count in every language.
YES_NO = {"English": (("yes", "true"), ("no", "false")),
          "Chinese": (("是", "对", "正确"), ("否", "不是", "不对", "错误", "不正确")),
          "German": (("ja", "wahr", "richtig"), ("nein", "falsch")),
          "French": (("oui", "vrai"), ("non", "faux")),
          "Japanese": (("はい", "正しい"), ("いいえ", "間違い"))}


# ----------------------------------------------------------------------------------------------
# The detection and the decision (pure functions)

# a list item's mark, markdown emphasis around it included: "1.", "2)", "**3.**", "- ", "* ", "• "
_NUMBERING = re.compile(r"^[*_]*(?:\(?\d+\s*[.):、]|(?:q|question)\s*\d+\s*[.):：]|[-*•](?=\s))[*_]*\s*", re.I)
# the prompt's own label echoed, with x0 after it
_ECHO = re.compile(r"^(?:original|queried)\s+question\b", re.I)


def _same_question(a: str, b: str) -> bool:
    norm = lambda s: " ".join(s.lower().rstrip("?？ ").split())
    return norm(a) == norm(b)


def parse_perturbations(text: str, k: int, question: str = "") -> list[str]:
    """The perturbed questions X = {x^1..x^k} (paper 3.2.1) from the perturbation output, at most k.

    One per line, numbering ("1.", "2)", "(3)", "4、", "Q5:", "**6.**"), bullets and quotes stripped, a list item
    that ends in ":" joined to the line after it; dropped: empty and header lines ("...:"), the prompt's
    "ORIGINAL QUESTION: ..." echoed and any copy of x0 (`question`): X holds
    the perturbations only, as in paper 3.2.1 and the official code. Where the output has list items or
    questions ("...?"), only those count, so a preamble ("Sure, here are 6 semantically equivalent
    questions.") or a closing remark is no question; otherwise every remaining line does.

    The official parser only removes "^\\d+\\.\\s" and keeps every line, so "Sure! Here are 6..." and
    blank lines became questions that were translated, answered, scored and searched for."""
    lines, merged = [], []
    for line in text.split("\n"):    # 'Whose quote says that:' / '"Only the dead ..."?' is one question
        last = merged[-1].strip() if merged else ""
        if last.endswith((":", "：")) and _NUMBERING.match(last) and line.strip() and not _NUMBERING.match(line.strip()):
            merged[-1] = last + " " + line.strip()
        else:
            merged.append(line)
    for line in merged:
        listed = bool(_NUMBERING.match(line.strip()))
        line = _NUMBERING.sub("", line.strip()).strip().strip("\"'*“”").strip()
        if line and not line.endswith((":", "：")) and not _ECHO.match(line) and not _same_question(line, question):
            lines.append((line, listed))
    questions = [q for q, listed in lines if listed or q.endswith(("?", "？"))] or [q for q, _ in lines]
    return questions[:k]


# A negation flips the verdict word it governs, and only that one: "not True", "isn't true", "can't be true",
# "not really true"; the "not" of "True, I do not doubt it" governs no verdict word.
_NEGATION = r"(?:\b(?:not|never|cannot)|n't)(?:\s+be)?\s+(?:(?:really|quite|entirely|necessarily|actually|exactly|completely|always)\s+)?[\"'“‘*]*"
# subtle: a one-character CJK word (是 yes, 对 right, 否 no) is part of other words everywhere ("不是",
# "对不起" sorry, "但是" but, "是否" whether, "这是" this is); it counts only standing alone: after the start,
# a space or punctuation, and before the end, a space, punctuation or 的 ("是的", "对的").
_ALONE_BEFORE, _ALONE_AFTER = r"(?<![^\W\d_])", r"(?=$|[^\w]|的)"
# subtle: "no" is also a determiner ("True, there is no contradiction"), and so are its kin in other
# languages; such a word is a verdict only where an answer word stands: at the start of the reply or of a
# clause (after punctuation), or right before punctuation or the end ("The answer is no.").
_ANSWER_WORDS = {"yes", "no", "ja", "nein", "oui", "non"}
# the choice a prompt offers, echoed back: "Your response (True or False): ...", "yes/no", "是或否"
_CHOICE = re.compile(r"\s*(?:or|oder|ou|/|或|或者|または)\s*")


def _yes_no_pattern(language: str) -> re.Pattern:
    words = [(w, True) for w in YES_NO["English"][0] + YES_NO[language][0]]
    words += [(w, False) for w in YES_NO["English"][1] + YES_NO[language][1]]

    def alt(w):
        if w.isascii():
            return r"\b%s\b" % re.escape(w)
        return _ALONE_BEFORE + re.escape(w) + _ALONE_AFTER if len(w) == 1 else re.escape(w)
    # longest first, so that 不是 (no) is read before the 是 (yes) inside it
    alts = [alt(w) for w, _ in sorted(words, key=lambda x: -len(x[0]))]
    return re.compile("(" + _NEGATION + ")?(" + "|".join(alts) + ")")


def _stands_as_answer(text: str, m: re.Match) -> bool:
    if m.group(2) not in _ANSWER_WORDS:
        return True
    before, after = text[:m.start()].rstrip(), text[m.end():].lstrip()
    return not before or not before[-1].isalnum() or not after or not after[0].isalnum()


def read_yes_no(text: str, language: str = "English") -> bool | None:
    """A verdict or a yes/no label: the first verdict word of the reply (true, false, yes, no and the target
    language's), flipped by a negation that governs it; None when the reply gives none.

    So "True." -> True, "True, there is no contradiction." -> True, "No." -> False, "It isn't true." -> False,
    "Your response (True or False): False." -> False (the offered choice "True or False" is no verdict),
    "True or False" and "True or" (cut short) -> None, "" -> None, "对不起，我不知道" -> None. The official
    `is_supported` also reads the verdict word, but lets the later of "true" and "false" win when both occur
    ("True. It is not false" -> False) and, when neither does, gives True unless "not", "cannot", "unknown"
    or "information" is a word of the reply, so it reads "No." and "" as True and "I cannot say" as False."""
    text = (text or "").lower()
    yes = {w.lower() for w in YES_NO["English"][0] + YES_NO[language][0]}
    found = list(_yes_no_pattern(language).finditer(text))
    i = 0
    while i < len(found):
        m = found[i]
        if _CHOICE.fullmatch(text[m.end():found[i + 1].start() if i + 1 < len(found) else None]):
            i += 2          # "true or false", or "true or" cut short: the choice echoed, not a verdict
            continue
        if _stands_as_answer(text, m):
            return (m.group(2) in yes) != bool(m.group(1))
        i += 1
    return None


def consistency_score(verdicts: list) -> float:
    """Z_CL (Eq. 4) or Z_CM (Eq. 5): the fraction of the n checks that found the pair consistent
    ("True" -> 1.0, "False" -> 0.0). An unreadable verdict (None) counts as 0: it is no evidence of
    agreement. No check at all gives 0.0."""
    return sum(v is True for v in verdicts) / len(verdicts) if verdicts else 0.0


def hybrid_score(z_cl: float, z_cm: float, alpha: float = ALPHA) -> float:
    """Eq. 6: Z_Hybrid = Z_CL + alpha * Z_CM, in [0, 1 + alpha]."""
    return z_cl + alpha * z_cm


def default_threshold(mode: str, model: str | None = None, verifier: str | None = None, task: str | None = None,
                      say: bool = False, scoring: tuple = CALIBRATED_AT) -> float:
    """Paper 3.3's threshold: 0.6 for CL and 0.8 for CM, the paper's best (5.4, Fig. 4(a)). The paper gives
    no number for the hybrid score Z_CL + alpha Z_CM in [0, 1 + alpha]; we use the official default 0.5
    (`--threshold 0.5`, used in every mode there). With alpha = 1 it retrieves only when fewer than n/2 of
    the 2n checks agree (Z < 0.5; n the perturbations parsed, at most k), so the hybrid retrieves less
    often than CL or CM at their thresholds.

    Those numbers are GPT-3.5's. A small model's answers disagree far more often (Qwen2.5-Coder-1.5B as M
    with SmolLM2-135M as M_V: the hybrid Z of 1 of 50 TruthfulQA questions falls below 0.5), so a
    task and pair calibrated on its own Z (CALIBRATED: the threshold at which it retrieves as often as the
    paper's Rowen-Hybrid did on that task, analysis.threshold_for_rate; no answer read) gets its own hybrid threshold;
    CL and CM keep the paper's. Never another task's: Z differ by task (TruthfulQA's 1.25 retrieves on 40%
    of StrategyQA's first 50, their own 0.92 on 14%, the paper 20%); a task without a value (or task None)
    gets the official 0.5, and so does a run whose `scoring` (alpha, k, target language) is not the one the
    value was read at (CALIBRATED_AT): Z_CL + alpha Z_CM tops out at 1 + alpha, so 1.25 read at alpha 1
    would retrieve nearly always at alpha 0.25. With `say`, one stderr line names the hybrid threshold
    chosen and why.

    Not calibrated for today's defaults (MODEL Qwen2.5-Coder-0.5B-Instruct as M and judge, VERIFIER
    SmolLM2-135M-Instruct): no run in results/ uses them. The one measurement (commit 3aba347, before
    Qwen became M and before today's verdict reader) used SmolLM2-135M as M and judge and Gemma-3-270M as
    M_V: on 4 held-out TruthfulQA questions (k = 6) Z_CL = Z_CM = 0 for every question, as that judge
    answered "False" even to "Paris" vs "Paris", so any positive threshold retrieved always. It says
    nothing about today's models. To calibrate a pair, run --retrieve never on held-out questions (the
    trace keeps z_cl and z_cm) and read `python analysis.py modes FILE`: the threshold at the task's
    PAPER_RATES (paper Table 5), or another rate you pick with analysis.threshold_for_rate. This function
    alone decides the threshold a run uses when --threshold is not given (main, and Settings with threshold None)."""
    value = CALIBRATED.get((task, model, verifier)) if mode == "hybrid" else None
    pair = f"on {task} for M {model} with M_V {verifier}"
    why = "none is calibrated " + pair
    if value is not None and tuple(scoring) != CALIBRATED_AT:
        why = (f"rowen.CALIBRATED's {value:g} {pair} was read at (alpha, k, language) {CALIBRATED_AT}, this "
               f"run's are {tuple(scoring)}; pass --threshold")
        value = None
    if say and mode == "hybrid":
        other = sorted(t for t, m, v in CALIBRATED if (m, v) == (model, verifier) and t != task)
        if value is not None:
            line = f"hybrid threshold {value:g}: calibrated {pair} (rowen.CALIBRATED, in-sample; the official default is 0.5)"
        else:
            line = f"note: hybrid threshold {THRESHOLDS[mode]:g}, the official default: {why}"
            line += f" (rowen.CALIBRATED has {', '.join(other)}: another task's value is never used)" if other else ""
        print(line, file=sys.stderr)
    return THRESHOLDS[mode] if value is None else value


def label_checks(answers: list[str], others: list[str], language: str = "English"):
    """StrategyQA's C without a judge [official]: pair j is consistent iff both yes/no labels are read
    and equal. Returns (verdicts, labels, other labels)."""
    a, b = [read_yes_no(t) for t in answers], [read_yes_no(t, language) for t in others]
    return [x is not None and x == y for x, y in zip(a, b)], a, b


def yes_no_label(text: str) -> str:
    """The answer's verdict as "yes" / "no", or "unknown" (scored wrong) when it gives none (read_yes_no)."""
    return {True: "yes", False: "no"}.get(read_yes_no(text), "unknown")


def should_retrieve(z: float, threshold: float) -> bool:
    """Paper 3.3: one aggregate comparison, retrieve iff Z < threshold (strictly); Z = threshold keeps r0."""
    return z < threshold


def evidence_lines(queries: list[str], hits: list[list[dict]]) -> list[str]:
    """E of Eq. 7 [official]: one line q.rstrip("?") + "? " + passage per query and passage found, the passage
    as "title: text". A passage already found by an earlier query is not repeated (a small corpus returns the
    same passages for near-identical paraphrases). Divergence: a query that finds nothing writes no line
    (official: "q? No good Google Search Result was found")."""
    lines, seen = [], set()
    for q, passages in zip(queries, hits):
        for p in passages:
            if p["id"] not in seen:
                seen.add(p["id"])
                lines.append(q.rstrip("?") + "? " + (f"{p['title']}: {p['text']}" if p.get("title") else p["text"]))
    return lines


# Answer labels a model echoes from a prompt, in every prompt language: "Your revised short answer:",
# "Your Final Answer (True or False):", "Query:", "你的简短回答：", "Deine kurze Antwort:", "Ta réponse :".
_LABEL_WORDS = "|".join([
    r"(?:your\s+|the\s+|my\s+)?(?:(?:short|final|revised|corrected|rephrased|brief|search|short\s+rephrased)\s+)*"
    r"(?:answer|response|query|verdict|translation)(?:\s+is)?",
    r"(?:你的|我的)?[\u4e00-\u9fff]{0,4}?(?:回答|答案|答复|判断|翻译)(?:是)?",   # 你的简短回答, 你的简矯回答是
    r"(?:deine\s+|meine\s+)?(?:kurze\s+|endgültige\s+)?(?:antwort|übersetzung)",
    r"(?:ta\s+|votre\s+|ma\s+)?(?:réponse|traduction)(?:\s+courte)?",
    r"(?:あなたの|私の)?(?:短い)?(?:回答|答え|翻訳)"])
_LABEL = re.compile(r"^[\s*#_>]*(?:%s)\s*(?:[(（][^)）\n]*[)）])?[ \t*_]*(?:[:：]|(?=\n))[\s*_]*" % _LABEL_WORDS, re.I)


def strip_labels(text: str) -> str:
    """The text without the answer labels it starts with, their markdown ("**Answer:**") included, and a
    label alone on its line ("## Answer")."""
    text = text.strip()
    while (m := _LABEL.match(text)) and m.end() > 0:
        text = text[m.end():].lstrip()
    return text


# A line that introduces the answer instead of giving it: "Based on my reasoning above, the answer is:",
# "Here is the translation:", "The answer is", "The final answer to the question is". subtle: a line ending in
# "is" introduces only after a word for the answer: "Yes, it is", "No, it is" and "Paris is" are answers.
_INTRO = re.compile(r"(?:[:：]|\b(?:answer|verdict|response|conclusion)\b(?:\s+\S+){0,3}\s+is)$", re.I)


def introduces_answer(line: str) -> bool:
    """Whether a line introduces the answer (ends in ":", or in "is" at most three words after "answer",
    "verdict", "response" or "conclusion"; markdown aside): it is never the answer."""
    return bool(_INTRO.search(line.strip().rstrip("*_ ")))


def clean_answer(text: str, task: str) -> str:
    """The answer without a leading label echoed from the prompt ("Your revised short answer:", "**Answer:**",
    "你的简短回答：") and its markdown. TruthfulQA answers are free text; StrategyQA, short-answer QA,
    translations and search queries keep their first line that is neither empty nor an introduction
    (introduces_answer), taken after the labels are gone: "Your revised short answer:\nParis" and "Based on
    my reasoning above, the answer is:\nParis" both give "Paris" [ours; official: the raw stripped text].
    StrategyQA keeps its first line that says true or false ("False:" too; a numbered list's verdict after
    its items), else that first line, as the official is_supported reads the whole reply."""
    text = strip_labels(text)
    if task == "truthfulqa":
        return text
    lines = [l.strip() for l in text.split("\n") if l.strip()]
    line = next((l for l in lines if task == "strategyqa" and read_yes_no(l) is not None), None)
    line = line or next((l for l in lines if not introduces_answer(l)), "")
    return strip_labels(line).strip("*_ \"“”").strip()


def task_of(record: dict) -> str:
    """strategyqa (yes/no label), truthfulqa (correct / incorrect answers) or qa (short answers)."""
    if record.get("label") is not None:
        return "strategyqa"
    return "truthfulqa" if record.get("correct_answers") is not None else "qa"


# ----------------------------------------------------------------------------------------------
# Model calls: every independent call of a stage goes out as one batch

@dataclass
class Settings:
    mode: str = "hybrid"               # cl | cm | hybrid
    threshold: float | None = None     # None: default_threshold(mode); main passes its task and (M, M_V)'s
    alpha: float = ALPHA
    k: int = K
    target_language: str = TARGET_LANGUAGE
    retrieve: str = "adaptive"         # one of RETRIEVE_MODES (--retrieve)
    repair_prompt: str = REPAIR_PROMPT  # official | correct (REPAIR)
    seed: int = 0
    max_tokens: dict = field(default_factory=lambda: dict(MAX_TOKENS))

    @property
    def z_threshold(self) -> float:
        return default_threshold(self.mode) if self.threshold is None else self.threshold


def chat(tok, user: str, history=()) -> str:
    """The official [system, (history), user] turns in the model's chat template."""
    return common.chat_prompt(tok, user, system=SYSTEM, history=history)


def ask(lm, users: list[str], cap: int, calls: dict, role: str, histories=None) -> list[str]:
    """One batched greedy call (T = 0) for independent user turns; one model call per prompt."""
    model, tok = lm
    prompts = [chat(tok, u, h) for u, h in zip(users, histories or [()] * len(users))]
    stop = common.turn_stops(tok)
    calls[role] += len(prompts)
    return [g.text.strip() for g in common.greedy(model, tok, prompts, max_new_tokens=cap, stop=stop)]


def answer_prompts(task: str, language: str):
    """(CoT template, short-answer template) in English and in the target language. The short answers of
    both languages have one form (TruthfulQA a sentence, StrategyQA True/False or its target-language word,
    short-answer QA a few words), so that the CL check compares like with like."""
    final = {"truthfulqa": "final", "strategyqa": "final_yn", "qa": "final_qa"}[task]
    target = TARGET[language]
    return (COT[task], FINAL[task]), (target["cot_yn" if task == "strategyqa" else "cot"], target[final])


def answer(lm, questions: list[str], prompts: list[tuple[str, str]], s: Settings, calls: dict, role: str, task: str):
    """Stage 1 and Eq. 1-3: the chain of thought, then in the same conversation the short answer
    [official chain_of_thought_reasoning], for a batch of questions; prompts[i] = (CoT template, short
    answer template) of question i, so one batch can mix languages. Returns (long, short) lists."""
    firsts = [cot.format(question=q) for q, (cot, _) in zip(questions, prompts)]
    longs = ask(lm, firsts, s.max_tokens["cot"], calls, role)
    histories = [[{"role": "user", "content": f}, {"role": "assistant", "content": t}]
                 for f, t in zip(firsts, longs)]
    shorts = ask(lm, [final.format(question=q) for q, (_, final) in zip(questions, prompts)],
                 s.max_tokens["short"], calls, role, histories)
    return longs, [clean_answer(r, task) for r in shorts]


def perturb(lm, question: str, s: Settings, calls: dict, seed: int) -> str:
    """Paper 3.2.1: k semantically equivalent questions in one call sampled at T = 1.0; the token budget is
    K's, grown in proportion for a larger k (Fig. 4b's sweep), so that the list is not cut short."""
    model, tok = lm
    calls["main"] += 1
    prompt = chat(tok, PERTURB.format(k=s.k, question=question))
    budget = max(s.max_tokens["perturb"], s.max_tokens["perturb"] * s.k // K)
    return common.sample(model, tok, prompt, k=1, temperature=PERTURB_TEMPERATURE, max_new_tokens=budget,
                         stop=common.turn_stops(tok), seed=seed)[0].text.strip()


def judge(lm, prompts: list[str], s: Settings, calls: dict):
    """The checking operator C (paper 3.2.2, Tables 2 and 3), M at T = 0: (verdicts, verdict texts)."""
    texts = ask(lm, prompts, s.max_tokens["check"], calls, "main")
    return [read_yes_no(t) for t in texts], texts


def repair(lm, question: str, trace: dict, s: Settings, calls: dict) -> tuple[str, str]:
    """Stage 3, Eq. 7: M answers x0 (`question`) again from t0, r0 and the evidence E, read from the trace
    (initial_long_answer, initial_answer, evidence: one line each), in the REPAIR prompt of s.repair_prompt;
    one greedy call. Returns (its output, the final answer: clean_answer of it).
    subtle: it reads the trace, not solve()'s variables, so that a finished run's rows rebuild the very prompt
    the run sent (benchmarks/repair_again.py)."""
    task = trace["task"]
    prompt = REPAIR[s.repair_prompt][task].format(question=question, initial_long_answer=trace["initial_long_answer"],
                                                  initial_short_answer=trace["initial_answer"],
                                                  evidences="\n".join(trace["evidence"]))
    output = ask(lm, [prompt], s.max_tokens["repair" if task == "truthfulqa" else "short"], calls, "main")[0]
    return output, clean_answer(output, task)


# ----------------------------------------------------------------------------------------------
# The loop: one question

def solve(record: dict, main_lm, verifier_lm, bm25, s: Settings) -> dict:
    task, x0, lang = task_of(record), record["question"], s.target_language
    yn = task == "strategyqa"
    calls = {"main": 0, "verifier": 0}
    trace = {"task": task, "mode": s.mode, "threshold": s.z_threshold, "alpha": s.alpha,
             "repair_prompt": s.repair_prompt}
    cl, cm = s.mode in ("cl", "hybrid"), s.mode in ("cm", "hybrid")

    # Stage 2 first: the perturbed questions (the one sampled call) and, for Rowen-CL, their translations.
    # They do not depend on Stage 1, so M then answers x0, the x^j and the translated x^j in ONE batch.
    common.progress("stage 2: perturbing the question")
    raw = perturb(main_lm, x0, s, calls, common.question_seed(s.seed, record["id"]))
    xs = parse_perturbations(raw, s.k, x0) or [x0]
    xts = []
    if cl:
        xts = ask(main_lm, [TRANSLATE.format(language=lang, text=x) for x in xs], s.max_tokens["translate"], calls, "main")
        xts = [clean_answer(t, "qa") or x for t, x in zip(xts, xs)]  # the first line: notes after it are not the question
    english, target = answer_prompts(task, lang)
    common.progress(f"stages 1-2: M answers {1 + len(xs) + len(xts)} questions")
    longs, shorts = answer(main_lm, [x0] + xs + xts, [english] * (1 + len(xs)) + [target] * len(xts),
                           s, calls, "main", task)
    t0, r0, rs, rts = longs[0], shorts[0], shorts[1:1 + len(xs)], shorts[1 + len(xs):]   # Stage 1, Eq. 1, Eq. 2
    trace.update(initial_long_answer=t0, initial_answer=r0, initial_prediction=yes_no_label(r0) if yn else r0,
                 perturbation_output=raw, perturbed_questions=xs, answers=rs)
    if cm:
        common.progress("stage 2: the verifier answers")
    rvs = answer(verifier_lm, xs, [english] * len(xs), s, calls, "verifier", task)[1] if cm else []   # Eq. 3

    # The checking operator C: StrategyQA compares labels [official]; otherwise M judges every pair, the
    # cross-language and cross-model pairs in one batch (the CL judge sees the English question only [official]).
    z_cl = z_cm = None
    cl_v = cm_v = []
    if yn:
        trace["labels"] = [read_yes_no(r) for r in rs]
        if cl:
            cl_v, _, trace["target_labels"] = label_checks(rs, rts, lang)
        if cm:
            cm_v, _, trace["verifier_labels"] = label_checks(rs, rvs)
    else:
        cl_p = [CHECK_CL.format(language=lang, q=x, a1=r, a2=rt) for x, r, rt in zip(xs, rs, rts)]
        cm_p = [CHECK_CM.format(q=x, a1=r, a2=rv) for x, r, rv in zip(xs, rs, rvs)]
        common.progress(f"stage 2: judging {len(cl_p) + len(cm_p)} pairs")
        verdicts, texts = judge(main_lm, cl_p + cm_p, s, calls)
        cl_v, cm_v = verdicts[:len(cl_p)], verdicts[len(cl_p):]
        if cl:
            trace["cl_verdict_texts"] = texts[:len(cl_p)]
        if cm:
            trace["cm_verdict_texts"] = texts[len(cl_p):]
    if cl:   # Eq. 4
        z_cl = consistency_score(cl_v)
        trace.update(translations=xts, target_answers=rts, cl_verdicts=cl_v)
    if cm:   # Eq. 5
        z_cm = consistency_score(cm_v)
        trace.update(verifier_answers=rvs, cm_verdicts=cm_v)

    z = hybrid_score(z_cl, z_cm, s.alpha) if s.mode == "hybrid" else {"cl": z_cl, "cm": z_cm}[s.mode]
    decision = should_retrieve(z, s.z_threshold)
    retrieved = {"adaptive": decision, "never": False, "always": True}[s.retrieve]
    trace.update(z_cl=z_cl, z_cm=z_cm, z=z, decision=decision, retrieved=retrieved)

    final, queries = r0, []
    if retrieved:  # Stage 3: search, then repair (Eq. 7)
        common.progress("stage 3: searching and repairing")
        queries = xs
        if yn:  # StrategyQA: a short reformulation of each perturbed question [official; its quotes stripped,
                # and an empty one searches the perturbed question: official, the raw output]
            outs = ask(main_lm, [REFORMULATE.format(question=x) for x in xs], s.max_tokens["reformulate"], calls, "main")
            queries = [clean_answer(o, "qa").strip("\"'") or x for o, x in zip(outs, xs)]
        trace.update(queries=queries, evidence=evidence_lines(queries, [bm25.search(q, TOP_K) for q in queries]))
        try:
            trace["repair_output"], final = repair(main_lm, x0, trace, s, calls)   # raw, before clean_answer
        except common.ContextTooLong as e:   # the repair prompt outgrew the context: r0, Z and the search stand
            trace["repair_error"] = str(e)
            print(f"warning: {record['id']}: no repair ({e}); the answer is r0", file=sys.stderr)
    trace.update(final_answer=final, calls=calls)
    prediction = yes_no_label(final) if yn else final
    return {"prediction": prediction, "retrievals": len(queries), "model_calls": sum(calls.values()), "trace": trace}


# ----------------------------------------------------------------------------------------------
# Command line

def run_name(args) -> str:
    """The output file's method part, so that runs with other settings never resume each other."""
    parts = [f"rowen-{args.mode}", "" if args.retrieve == "adaptive" else args.retrieve,
             f"t{args.threshold:g}" if args.threshold is not None else "", f"k{args.k}" if args.k != K else "",
             f"a{args.alpha:g}" if args.alpha != ALPHA else "",
             args.target_language.lower() if args.target_language != TARGET_LANGUAGE and args.mode != "cm" else "",
             "v-" + args.verifier.rstrip("/").split("/")[-1] if args.verifier != VERIFIER and args.mode != "cl" else "",
             f"repair-{args.repair_prompt}" if args.repair_prompt != REPAIR_PROMPT else ""]
    return "-".join(p for p in parts if p)


def main(argv=None):
    p = argparse.ArgumentParser(description="Rowen: retrieve only when answers disagree across languages and models")
    g = p.add_argument_group("Rowen")
    g.add_argument("--verifier", default=VERIFIER, help="M_V for the cross-model check (alias, HF id or directory)")
    g.add_argument("--mode", choices=["cl", "cm", "hybrid"], default="hybrid",
                   help="consistency across languages (cl), models (cm) or both (hybrid, Eq. 6)")
    g.add_argument("--threshold", type=float, help="retrieve iff Z < threshold (default: " + ", ".join(
        f"{v:g} {m}" for m, v in THRESHOLDS.items()) + " (rowen.THRESHOLDS), or the task and (M, M_V)'s calibrated "
        "hybrid threshold: rowen.default_threshold)")
    g.add_argument("--alpha", type=float, default=ALPHA, help="weight of Z_CM in the hybrid score (paper: 1.0)")
    g.add_argument("--k", type=int, default=K, help="perturbed questions per question (paper: 6)")
    g.add_argument("--repair-prompt", choices=sorted(REPAIR), default=REPAIR_PROMPT,
                   help="Stage 3's prompt: the official templates (default) or ours, which says r0 may be wrong (correct)")
    g.add_argument("--target-language", choices=sorted(TARGET), default=TARGET_LANGUAGE,
                   help="language of the cross-language check (paper: Chinese; Table 7: German, French)")
    g.add_argument("--retrieve", choices=RETRIEVE_MODES, default="adaptive",
                   help="adaptive = Rowen; the baselines: never = always keep r0 (Z still computed), "
                        "always = always search and repair")
    g.add_argument("--modes-from", metavar="FILE", help="moved: python analysis.py modes FILE [--limit N]")
    g.add_argument("--repair-again", metavar="RUN", help="moved: python benchmarks/repair_again.py RUN")
    common.add_common_args(p, dataset="truthfulqa")
    p.set_defaults(model=MODEL)
    args = p.parse_args(argv)
    if args.modes_from:     # reading a run file is analysis.py's
        raise common.InputError(f"--modes-from moved: python analysis.py modes {args.modes_from}"
                                + (f" --limit {args.limit}" if args.limit else ""))
    if args.repair_again:   # Stage 3 of a finished run, redone alone: a tool of its own
        cmd = ["python benchmarks/repair_again.py", args.repair_again, "--repair-prompt", args.repair_prompt]
        cmd += [f"--{k} {getattr(args, k)}" for k in ("output", "limit", "skip", "cache") if getattr(args, k)]
        raise common.InputError("--repair-again moved: " + " ".join(cmd + ["--overwrite"] * args.overwrite))
    if args.k < 1:
        raise common.InputError(f"--k {args.k}: need at least one perturbed question")
    if args.threshold is not None and args.retrieve != "adaptive":
        print(f"note: with --retrieve {args.retrieve}, retrieval does not depend on --threshold {args.threshold:g}: it "
              f"only sets the decision the trace records (Z < {args.threshold:g}: whether Rowen would retrieve)",
              file=sys.stderr)
    if args.mode != "cl":
        common.check_model_name(args.verifier)
    records = common.check_inputs(args, run_name(args), __file__)   # bad input fails here, before a model loads
    tasks = {task_of(r) for r in records}       # the threshold is calibrated per task: the questions' own
    threshold = args.threshold if args.threshold is not None else default_threshold(
        args.mode, args.model, args.verifier, tasks.pop() if len(tasks) == 1 else None, say=True,
        scoring=(args.alpha, args.k, args.target_language))
    s = Settings(mode=args.mode, threshold=threshold, alpha=args.alpha, k=args.k,
                 target_language=args.target_language, seed=args.seed, repair_prompt=args.repair_prompt,
                 retrieve=args.retrieve)
    bm25 = common.load_retriever(args, records, preset="seakr")  # no official index (Serper web search)
    if args.mode != "cl" and args.model == args.verifier:
        print(f"note: M and M_V are both {args.model}: the cross-model check compares the model with itself "
              "(paper: M_V is another model; --verifier picks one)", file=sys.stderr)
    print(f"M (main model): {args.model}; " + (f"M_V (verifier): {args.verifier}" if args.mode != "cl"
          else "no verifier (--mode cl)"), file=sys.stderr)
    main_lm = common.load_model(args.model, args.dtype, args.device)
    verifier_lm = common.load_model(args.verifier, args.dtype, args.device) if args.mode != "cl" else None
    name = run_name(args)
    args.threshold = s.z_threshold          # the settings name the threshold used, the mode's default or given
    common.run(args, name, lambda rec: solve(rec, main_lm, verifier_lm, bm25, s), records)


if __name__ == "__main__":
    common.main_guard(main)
