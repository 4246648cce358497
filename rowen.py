"""Rowen: retrieve only when the model's answers disagree across languages and across models.

The method in five lines:
1. Stage 1: M answers x0 with a chain of thought t0 (Table 1) and, in the same conversation, a short answer r0.
2. Stage 2: M writes k = 6 semantically equivalent questions x^j (T = 1.0) and answers each (r^j, Eq. 1);
   M answers each translated into Chinese (r_T^j, Eq. 2); a verifier model M_V answers each (r_V^j, Eq. 3).
3. M judges each pair (Tables 2, 3): Z_CL, Z_CM = mean verdicts (Eq. 4, 5); hybrid Z = Z_CL + alpha Z_CM (Eq. 6).
4. If Z >= threshold, r0 is final. Otherwise each x^j is a search query, BM25 top 2 each, evidence "q? passage".
5. Stage 3: M repairs r0 from x0, t0, r0 and the evidence (Eq. 7); its output is the final answer.

Paper: Hanxing Ding, Liang Pang, Zihao Wei, Huawei Shen, Xueqi Cheng. "Rowen: Adaptive Retrieval-Augmented
Generation for Hallucination Mitigation in LLMs" (SIGIR-AP 2025, doi:10.1145/3767695.3769500). Official code:
dhx20150812/Rowen (gpt-3.5-turbo-0613 as M, qwen-max as M_V, Google Serper as search).

Follows the paper's intent, its prompts (Tables 1-3) and the official code's concrete values
(shared/specs/rowen.md); the other prompts are ours, written for the same purpose.
Differs from the official code in:
- models are local (M = SmolLM2-135M-Instruct, M_V = Gemma-3-270M by default) and search is BM25 over a
  local corpus; BM25's top 2 stands in for Serper's at most int(5/2) = 2 snippets per query;
- perturbations: numbering, bullets and quotes are stripped, empty and header lines ("...:") dropped, at
  most k kept (official: every output line, blanks and "Sure! Here are..." included, no cap); if none is
  left, x0 itself is the only question;
- True/False verdicts are read strictly (read_yes_no): every yes/no word must agree, "not" flips, else
  None, which counts as not consistent. The official `is_supported` reads "No." and "" as True;
- StrategyQA compares labels without a judge, as the official code does, but with the same strict reader
  in both languages (official `is_supported_zh` reads "否，不是" as True); unreadable labels never agree;
- thresholds default per mode: 0.6 CL and 0.8 CM (paper 5.4; official 0.5 everywhere); hybrid
  0.6 + alpha * 0.8 (the paper gives none, see default_threshold);
- StrategyQA search queries are reformulated greedily (paper 4.3 "otherwise 0.0"; official T = 1.0) and
  only their first line is kept; a passage found by several queries enters the evidence once, as "title: text";
- every call has a token cap (official: none); the verifier's StrategyQA final prompt is filled in (official
  sends a literal "{question}"); TruthfulQA --mode cm works (official NameError); no item is dropped
  on an error (official StrategyQA: try/except: pass);
- prompts outside the paper's Tables 1-3 are our own wording (StrategyQA reasoning, short answers,
  translation, query reformulation, repair, and every target-language prompt); NQ,
  TriviaQA and HotpotQA (paper Table 6, no official runner) use the TruthfulQA prompts with a short answer;
- --never-retrieve / --always-retrieve still run the detection, so the trace shows what Z decided;
- call order: the perturbation and the translations come first, so that M answers x0, the x^j and
  the translated x^j in one batch, and judges all pairs in one batch (greedy and per-question seeds:
  the same texts as the official one-stage-after-another order).
"""
from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field

import common

# ----------------------------------------------------------------------------------------------
# Settings (source in brackets)
K = 6                        # perturbed questions per question [paper 4.3 and 5.4; official --k 6]
PERTURB_TEMPERATURE = 1.0    # the one sampled call; every other call is greedy [paper 4.3; official]
ALPHA = 1.0                  # weight of Z_CM in the hybrid score, range 0.25-1.5 [paper 5.4; official --alpha]
PAPER_THRESHOLDS = {"cl": 0.6, "cm": 0.8}  # retrieve iff Z < threshold [paper 5.4, Fig. 4(a)]
TOP_K = 2                    # passages per search query [official Serper parser keeps int(5/2) = 2]
TARGET_LANGUAGE = "Chinese"  # [paper 4.3: English -> Chinese; Table 7 also German and French]
VERIFIER = "gemma3-270m"     # M_V [paper: qwen-max-0428; any Hugging Face id works]
SYSTEM = "You are a helpful assistant."    # [official construct_input_message]
MAX_TOKENS = {"cot": 512, "short": 64, "perturb": 256, "translate": 128, "check": 8,
              "repair": 256, "reformulate": 64}  # per call [spec section 0; official: no limit]

# ----------------------------------------------------------------------------------------------
# Prompts. Table 1 (CoT), Table 2 (cross-language check), Table 3 (cross-model check) and the
# perturbation prompt (3.2.1) are the paper's; the others are ours, written to do what the official
# prompts do (spec sections 1-3) without copying their wording.

COT = {  # Stage 1 (Table 1): the chain of thought
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
FINAL = {  # Stage 1, second turn: the short answer (the TruthfulQA one shows no question, as official)
    "truthfulqa": "From the reasoning above, state the answer to my question briefly and directly, in one sentence, without extra detail.\nYour Short Answer:",
    "strategyqa": "From the reasoning above, answer the question \"{question}\" with a single word: True or False. Give no explanation.\nYour Final Answer (True or False):",
    "qa": "From the reasoning above, give the answer to the question in a few words (a name, a date, a number, yes or no), with no explanation.\nYour Short Answer:",
}
PERTURB = "For the question [QUERIED QUESTION], provide {k} semantically equivalent questions.\nQUERIED QUESTION: {question}\nSEMANTICALLY EQUIVALENT PERTURBATIONS:\n"  # paper 3.2.1
TRANSLATE = "Translate this sentence into {language}. Reply with the translation only:\n{text}"  # ours
CHECK_CL = "Given the question Q, and two potential answers: answer A in English and answer B in {language}. Your task is to determine if the content and meaning of A and B are equivalent in the context of answering Q. Consider linguistic nuances, cultural variations, and the overall conveyance of information. Respond with a binary classification. If A and B are equivalent, output 'True.', otherwise output 'False'\n\nQuestion: {q}\nAnswer A (in English): {a1}\nAnswer B (in {language}): {a2}\nYour response (True or False):"
# Table 3's instruction; the layout of the two pairs is ours
CHECK_CM = "Are the following two Question-Answer(QA) pairs semantically equivalent? Provide your best guess that it is correct (True or False). Given ONLY the guess (True or False), no other words or explanation.\n\n[QA pair 1]\nQuestion: {q}\nAnswer: {a1}\n\n[QA pair 2]\nQuestion: {q}\nAnswer: {a2}\n\nYour Answer:"
REFORMULATE = """Turn this question into a short search-engine query: keep only the key names and terms it needs to be answered, drop everything else.

Original Question: {question}

Your Short Rephrased Query:"""  # ours
_REPAIR = """Revise an earlier answer with the help of retrieved evidence.

Question: {question}
Earlier reasoning: {initial_long_answer}
Earlier short answer: {initial_short_answer}
Retrieved evidence:
{evidences}

Where the evidence contradicts the earlier answer, trust the evidence; where it is silent, keep what the reasoning supports. """  # ours, the inputs of Eq. 7
REPAIR = {  # Stage 3 (Eq. 7)
    "truthfulqa": _REPAIR + "Write the corrected answer as one short, accurate sentence.\nYour revised short answer:",
    "strategyqa": _REPAIR + "Answer the question with True or False only, no explanation.\nYour revised answer (True or False):",
    "qa": _REPAIR + "Write only the corrected answer, in a few words.\nYour revised short answer:",
}
# Target-language prompts, all ours: Chinese (the paper's target) and Table 7's others; "cot" renders
# Table 1, the others render our English prompts.
# "cot"/"final" serve TruthfulQA and short-answer QA, "cot_yn"/"final_yn" StrategyQA.
TARGET = {
    "Chinese": {  # ours, the same requests as the English prompts
        "cot": "回答我的问题之前，请先判断问题所依据的信息或假设是否成立。确认之后，再给出详细的解释或回答。准确和核实事实优先于展开论述或猜测。\n\n我的问题：{question}\n\n你的回答：",
        "final": "根据上面的思考，用一句话简短、直接地回答这个问题，不要添加多余的信息。\n\n你的简短回答：",
        "cot_yn": "请一步一步地思考这个是非题。\n\n问题：{question}\n\n先指出问题依赖的事实（包括默认的前提），把它拆成几个小问题并逐一回答，再把这些答案合理地联系起来，检查结论，最后给出明确的判断。\n\n你的推理和判断：",
        "final_yn": "根据上面的思考，只用一个字回答问题【{question}】：是或否。不要解释。\n\n你的回答（是或否）：",
    },
    "German": {
        "cot": "Wenn du meine Frage beantwortest, prüfe bitte zuerst, ob die Informationen oder Annahmen, auf denen die Frage beruht, zutreffen. Sobald du ihre Richtigkeit oder Existenz festgestellt hast, gib eine ausführliche Erklärung oder Antwort. Stelle Genauigkeit und Faktenprüfung vor Ausführungen oder Vermutungen.\n\nMeine Frage: {question}\n\nDeine Antwort:",
        "final": "Beantworte meine Frage auf Grundlage der obigen Überlegungen kurz und direkt in einem Satz, ohne zusätzliche Details.\n\nDeine kurze Antwort:",
        "final_yn": "Beantworte die Frage „{question}“ auf Grundlage der obigen Überlegungen mit einem einzigen Wort: Ja oder Nein. Gib keine Erklärung.\n\nDeine Antwort (Ja oder Nein):",
    },
    "French": {
        "cot": "Lorsque tu réponds à ma question, évalue d'abord la validité des informations ou de l'hypothèse sur lesquelles elle repose. Une fois leur véracité ou leur existence établie, donne une explication ou une réponse détaillée. Privilégie l'exactitude et la vérification des faits avant de développer ou de faire des conjectures.\n\nMa question : {question}\n\nTa réponse :",
        "final": "À partir du raisonnement ci-dessus, donne la réponse à ma question brièvement et directement, en une phrase, sans détails superflus.\n\nTa réponse courte :",
        "final_yn": "À partir du raisonnement ci-dessus, réponds à la question « {question} » par un seul mot : oui ou non. Ne donne pas d'explication.\n\nTa réponse (oui ou non) :",
    },
    "Japanese": {
        "cot": "私の質問に答えるときは、まず質問の前提となっている情報や仮定が正しいかどうかを評価してください。それが真実である、または存在することを確認したうえで、詳しい説明や回答をしてください。詳しい説明や推測に入る前に、正確さと事実確認を優先してください。\n\n私の質問：{question}\n\nあなたの回答：",
        "final": "上の推論に基づいて、私の質問への答えを一文で簡潔かつ直接的に述べてください。余計な詳細は不要です。\n\nあなたの短い回答：",
        "final_yn": "上の推論に基づいて、質問「{question}」に一語で答えてください：はい または いいえ。説明は不要です。\n\nあなたの回答（はい／いいえ）：",
    },
}
for _p in TARGET.values():  # the paper ran StrategyQA in Chinese only: elsewhere the Table 1 prompt reasons
    _p.setdefault("cot_yn", _p["cot"])
# Words read as yes / no in each language; the English ones count in every language.
YES_NO = {"English": (("yes", "true"), ("no", "false")),
          "Chinese": (("是", "对", "正确"), ("否", "不是", "不对", "错误", "不正确")),
          "German": (("ja", "wahr", "richtig"), ("nein", "falsch")),
          "French": (("oui", "vrai"), ("non", "faux")),
          "Japanese": (("はい", "正しい"), ("いいえ", "間違い"))}


# ----------------------------------------------------------------------------------------------
# The detection and the decision (pure functions)

_NUMBERING = re.compile(r"^(?:\d+\s*[.):]|[-*•])\s*")


def parse_perturbations(text: str, k: int) -> list[str]:
    """The perturbed questions X = {x^1..x^k} (paper 3.2.1) from the perturbation output: one per line,
    numbering ("1.", "2)"), bullets and quotes stripped, empty and header lines ("...:") dropped, at most k.

    The official parser only removes "^\\d+\\.\\s" and keeps every line, so "Sure! Here are 6..." and
    blank lines became questions that were translated, answered and scored."""
    questions = []
    for line in text.split("\n"):
        line = _NUMBERING.sub("", line.strip()).strip().strip("\"'*").strip()
        if line and not line.endswith(":"):
            questions.append(line)
    return questions[:k]


def _yes_no_pattern(language: str) -> re.Pattern:
    words = [(w, True) for w in YES_NO["English"][0] + YES_NO[language][0]]
    words += [(w, False) for w in YES_NO["English"][1] + YES_NO[language][1]]
    # longest first, so that 不是 (no) is read before the 是 (yes) inside it
    alts = [(r"\b%s\b" if w.isascii() else "%s") % re.escape(w) for w, _ in sorted(words, key=lambda x: -len(x[0]))]
    return re.compile(r"(\bnot\s+)?(" + "|".join(alts) + ")")


def read_yes_no(text: str, language: str = "English") -> bool | None:
    """A verdict or a yes/no label: True, False, or None when the text does not commit to one.

    Every yes/no word (true, false, yes, no and the target language's) must agree; "not" before one flips
    it ("not true" is False). So "True." -> True, "No." -> False, "True or False" -> None, "" -> None.
    The official `is_supported` lets the later first occurrence win and falls back to True: it reads
    "No." and "" as True and "True. It is not false" as False."""
    pattern = _yes_no_pattern(language)
    yes = {w.lower() for w in YES_NO["English"][0] + YES_NO[language][0]}
    seen = {(m.group(2) in yes) != bool(m.group(1)) for m in pattern.finditer((text or "").lower())}
    return seen.pop() if len(seen) == 1 else None


def consistency_score(verdicts: list) -> float:
    """Z_CL (Eq. 4) or Z_CM (Eq. 5): the fraction of the n checks that found the pair consistent
    ("True" -> 1.0, "False" -> 0.0). An unreadable verdict (None) counts as 0: it is no evidence of
    agreement. No check at all gives 0.0."""
    return sum(v is True for v in verdicts) / len(verdicts) if verdicts else 0.0


def hybrid_score(z_cl: float, z_cm: float, alpha: float = ALPHA) -> float:
    """Eq. 6: Z_Hybrid = Z_CL + alpha * Z_CM, in [0, 1 + alpha]."""
    return z_cl + alpha * z_cm


def default_threshold(mode: str, alpha: float = ALPHA) -> float:
    """0.6 for CL and 0.8 for CM, the paper's best (5.4). The paper states no hybrid threshold; on the
    hybrid scale Z_CL + alpha Z_CM we combine the two the same way: 0.6 + alpha * 0.8 (1.4 at alpha = 1).

    Why not calibrated: on 4 held-out TruthfulQA questions (not in the demo set; k = 6, SmolLM2-135M
    judging, Gemma-3-270M verifying) Z_CL = Z_CM = 0 for every question, because the 135M judge answers
    "False" even to "Paris" vs "Paris". Every positive threshold then retrieves always, so the embedded
    models leave nothing to calibrate. With a stronger model, run --never-retrieve on held-out questions
    (the trace keeps z_cl and z_cm) and pick the threshold that gives the retrieval rate you want
    (the paper's Rowen-Hybrid retrieved for 23% of TruthfulQA and 20% of StrategyQA, Table 5)."""
    return hybrid_score(PAPER_THRESHOLDS["cl"], PAPER_THRESHOLDS["cm"], alpha) if mode == "hybrid" else PAPER_THRESHOLDS[mode]


def label_checks(answers: list[str], others: list[str], language: str = "English"):
    """StrategyQA's C without a judge [official]: pair j is consistent iff both yes/no labels are read
    and equal. Returns (verdicts, labels, other labels)."""
    a, b = [read_yes_no(t) for t in answers], [read_yes_no(t, language) for t in others]
    return [x is not None and x == y for x, y in zip(a, b)], a, b


def yes_no_label(text: str) -> str:
    """A committed "yes" / "no", or "unknown" (scored wrong), never a guess from a mixed answer."""
    return {True: "yes", False: "no"}.get(read_yes_no(text), "unknown")


def mode_score(trace: dict, mode: str, alpha: float = ALPHA) -> float:
    """Z of one mode from a trace that holds Z_CL and Z_CM."""
    return hybrid_score(trace["z_cl"], trace["z_cm"], alpha) if mode == "hybrid" else trace[f"z_{mode}"]


def should_retrieve(z: float, threshold: float) -> bool:
    """Paper 3.3: one aggregate comparison, retrieve iff Z < threshold (strictly); Z = threshold keeps r0."""
    return z < threshold


def passage_text(p: dict) -> str:
    return f"{p['title']}: {p['text']}" if p.get("title") else p["text"]


def evidence_lines(queries: list[str], hits: list[list[dict]]) -> list[str]:
    """E of Eq. 7 [official]: one line q.rstrip("?") + "? " + passage per query and passage found.
    A passage already found by an earlier query is not repeated (a small corpus returns the same
    passages for near-identical paraphrases)."""
    lines, seen = [], set()
    for q, passages in zip(queries, hits):
        for p in passages:
            if p["id"] not in seen:
                seen.add(p["id"])
                lines.append(q.rstrip("?") + "? " + passage_text(p))
    return lines


_ANSWER_PREFIX = re.compile(r"^(?:your\s+)?(?:short\s+|final\s+|revised\s+|rephrased\s+)*(?:answer|query)\s*(?:\([^)]*\))?\s*:\s*", re.I)


def clean_answer(text: str, task: str) -> str:
    """Without a leading "Your revised answer:" / "Query:" echoed from the prompt. TruthfulQA answers
    are free text; StrategyQA, short-answer QA and search queries keep their first non-empty line."""
    text = text.strip()
    if task == "truthfulqa":
        return _ANSWER_PREFIX.sub("", text).strip()
    line = next((l.strip() for l in text.split("\n") if l.strip()), "")
    return _ANSWER_PREFIX.sub("", line).strip()


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
    threshold: float | None = None     # None: default_threshold(mode, alpha)
    alpha: float = ALPHA
    k: int = K
    target_language: str = TARGET_LANGUAGE
    retrieve: str = "adaptive"         # adaptive | never | always (the baselines)
    seed: int = 0
    max_tokens: dict = field(default_factory=lambda: dict(MAX_TOKENS))

    @property
    def z_threshold(self) -> float:
        return default_threshold(self.mode, self.alpha) if self.threshold is None else self.threshold


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
    """Paper 3.2.1: k semantically equivalent questions in one call sampled at T = 1.0."""
    model, tok = lm
    calls["main"] += 1
    prompt = chat(tok, PERTURB.format(k=s.k, question=question))
    return common.sample(model, tok, prompt, k=1, temperature=PERTURB_TEMPERATURE, max_new_tokens=s.max_tokens["perturb"],
                         stop=common.turn_stops(tok), seed=seed)[0].text.strip()


def judge(lm, prompts: list[str], s: Settings, calls: dict):
    """The checking operator C (paper 3.2.2, Tables 2 and 3), M at T = 0: (verdicts, verdict texts)."""
    texts = ask(lm, prompts, s.max_tokens["check"], calls, "main")
    return [read_yes_no(t) for t in texts], texts


# ----------------------------------------------------------------------------------------------
# The loop: one question

def solve(record: dict, main_lm, verifier_lm, bm25, s: Settings) -> dict:
    task, x0, lang = task_of(record), record["question"], s.target_language
    yn = task == "strategyqa"
    calls = {"main": 0, "verifier": 0}
    trace = {"task": task, "mode": s.mode, "threshold": s.z_threshold, "alpha": s.alpha}
    cl, cm = s.mode in ("cl", "hybrid"), s.mode in ("cm", "hybrid")

    # Stage 2 first: the perturbed questions (the one sampled call) and, for Rowen-CL, their translations.
    # They do not depend on Stage 1, so M then answers x0, the x^j and the translated x^j in ONE batch.
    raw = perturb(main_lm, x0, s, calls, common.question_seed(s.seed, record["id"]))
    xs = parse_perturbations(raw, s.k) or [x0]
    xts = []
    if cl:
        xts = ask(main_lm, [TRANSLATE.format(language=lang, text=x) for x in xs], s.max_tokens["translate"], calls, "main")
        xts = [clean_answer(t, "qa") or x for t, x in zip(xts, xs)]  # the first line: notes after it are not the question
    english = (COT[task], FINAL[task])
    target = (TARGET[lang]["cot_yn" if yn else "cot"], TARGET[lang]["final_yn" if yn else "final"])
    longs, shorts = answer(main_lm, [x0] + xs + xts, [english] * (1 + len(xs)) + [target] * len(xts),
                           s, calls, "main", task)
    t0, r0, rs, rts = longs[0], shorts[0], shorts[1:1 + len(xs)], shorts[1 + len(xs):]   # Stage 1, Eq. 1, Eq. 2
    trace.update(initial_long_answer=t0, initial_answer=r0, perturbation_output=raw, perturbed_questions=xs, answers=rs)
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
        queries = xs
        if yn:  # StrategyQA: a short reformulation of each perturbed question [official]
            outs = ask(main_lm, [REFORMULATE.format(question=x) for x in xs], s.max_tokens["reformulate"], calls, "main")
            queries = [clean_answer(o, "qa").strip("\"'") or x for o, x in zip(outs, xs)]
        evidence = evidence_lines(queries, [bm25.search(q, TOP_K) for q in queries])
        prompt = REPAIR[task].format(question=x0, initial_long_answer=t0, initial_short_answer=r0,
                                     evidences="\n".join(evidence))
        cap = s.max_tokens["repair" if task == "truthfulqa" else "short"]
        final = clean_answer(ask(main_lm, [prompt], cap, calls, "main")[0], task)
        trace.update(queries=queries, evidence=evidence)
    trace.update(final_answer=final, calls=calls)
    prediction = yes_no_label(final) if yn else final
    return {"prediction": prediction, "retrievals": len(queries), "model_calls": sum(calls.values()), "trace": trace}


# ----------------------------------------------------------------------------------------------
# Command line

def at_threshold(rows: list[dict], mode: str, threshold: float, alpha: float = ALPHA) -> list[dict]:
    """The rows a run of `mode` with this threshold would give, re-read from one `--mode hybrid
    --always-retrieve` run. Every mode draws the same perturbations (same seed) and gets the same greedy
    answers and verdicts, and retrieval repairs with the same greedy call, so the prediction is the
    run's repaired answer iff Z_mode < threshold, else r0 (exactly what a run of that mode returns).
    Model calls and seconds stay those of the hybrid run (a CL-only run makes fewer)."""
    out = []
    for row in rows:
        tr = row["trace"]
        if tr.get("z_cl") is None or tr.get("z_cm") is None or not tr.get("retrieved"):
            raise common.InputError(f"{row['id']}: not from a --mode hybrid --always-retrieve run")
        retrieve = should_retrieve(mode_score(tr, mode, alpha), threshold)
        final = tr["final_answer"] if retrieve else tr["initial_answer"]
        if tr["task"] == "strategyqa":
            final = yes_no_label(final)
        out.append({**row, "prediction": final, "retrievals": len(tr["queries"]) if retrieve else 0})
    return out


def modes_from_run(rows: list[dict], alpha: float = ALPHA) -> dict[str, list[dict]]:
    """Rowen-CL, -CM, -Hybrid at their default thresholds and the never-retrieve baseline (threshold
    0: Z < 0 never holds), re-read from one `--mode hybrid --always-retrieve` run (at_threshold)."""
    out = {m: at_threshold(rows, m, default_threshold(m, alpha), alpha) for m in ("cl", "cm", "hybrid")}
    out["never"] = at_threshold(rows, "hybrid", 0.0, alpha)
    return out


def initial_is_right(row: dict) -> bool:
    """Whether r0 (the initial answer) is right: StrategyQA's label, TruthfulQA's closer-to-correct,
    otherwise the gold answer contained in it (CtrlA's accuracy)."""
    import eval as metrics
    r0 = row["trace"]["initial_answer"]
    if row["trace"]["task"] == "strategyqa":
        r0 = yes_no_label(r0)
    scores = metrics.score_record({**row, "prediction": r0})
    return bool(scores.get("acc", scores.get("closer_to_correct")))


def detection_quality(rows: list[dict], alpha: float = ALPHA) -> dict:
    """Does a low Z go with a wrong initial answer? Per score (Z_CL, Z_CM, hybrid): the AUC of Z
    separating right from wrong r0 (the chance that a random right answer has the higher Z; ties
    count half; 0.5 = no signal), and the rate at which the default threshold sends wrong and right
    answers to retrieval."""
    if any(r["trace"].get("z_cl") is None or r["trace"].get("z_cm") is None for r in rows):
        raise common.InputError("detection quality needs Z_CL and Z_CM: a --mode hybrid run")
    right = [initial_is_right(r) for r in rows]
    out = {"n": len(rows), "wrong": right.count(False)}
    for name in ("cl", "cm", "hybrid"):
        z = [mode_score(r["trace"], name, alpha) for r in rows]
        good = [v for v, ok in zip(z, right) if ok]
        bad = [v for v, ok in zip(z, right) if not ok]
        pairs = [(g > b) + 0.5 * (g == b) for g in good for b in bad]
        th = default_threshold(name, alpha)
        out[name] = {"auc": round(sum(pairs) / len(pairs), 3) if pairs else None,
                     "retrieve_wrong": round(sum(v < th for v in bad) / len(bad), 3) if bad else None,
                     "retrieve_right": round(sum(v < th for v in good) / len(good), 3) if good else None}
    return out


def run_name(args) -> str:
    """The output file's method part, so that runs with other settings never resume each other."""
    parts = [f"rowen-{args.mode}", "never" if args.never_retrieve else "always" if args.always_retrieve else "",
             f"t{args.threshold:g}" if args.threshold is not None else "", f"k{args.k}" if args.k != K else "",
             f"a{args.alpha:g}" if args.alpha != ALPHA else "",
             args.target_language.lower() if args.target_language != TARGET_LANGUAGE and args.mode != "cm" else "",
             "v-" + args.verifier.rstrip("/").split("/")[-1] if args.verifier != VERIFIER and args.mode != "cl" else ""]
    return "-".join(p for p in parts if p)


def main(argv=None):
    p = argparse.ArgumentParser(description="Rowen: retrieve only when answers disagree across languages and models")
    common.add_common_args(p, dataset="truthfulqa")
    p.add_argument("--verifier", default=VERIFIER, help="M_V for the cross-model check (alias, HF id or directory)")
    p.add_argument("--mode", choices=["cl", "cm", "hybrid"], default="hybrid",
                   help="consistency across languages (cl), models (cm) or both (hybrid, Eq. 6)")
    p.add_argument("--threshold", type=float,
                   help="retrieve iff Z < threshold (default: 0.6 cl, 0.8 cm [paper 5.4], 0.6 + alpha * 0.8 hybrid)")
    p.add_argument("--alpha", type=float, default=ALPHA, help="weight of Z_CM in the hybrid score (paper: 1.0)")
    p.add_argument("--k", type=int, default=K, help="perturbed questions per question (paper: 6)")
    p.add_argument("--target-language", choices=sorted(TARGET), default=TARGET_LANGUAGE,
                   help="language of the cross-language check (paper: Chinese; Table 7: German, French)")
    baseline = p.add_mutually_exclusive_group()
    baseline.add_argument("--never-retrieve", action="store_true", help="baseline: always keep r0 (Z still computed)")
    baseline.add_argument("--always-retrieve", action="store_true", help="baseline: always search and repair")
    p.add_argument("--modes-from", metavar="FILE",
                   help="read a --mode hybrid output file: print how well Z_CL, Z_CM and Z flag wrong initial "
                        "answers (detection_quality) and, for an --always-retrieve run, Rowen-CL, -CM, "
                        "-Hybrid and never-retrieve re-read from it (modes_from_run); with --limit N, its first "
                        "N rows; then exit")
    args = p.parse_args(argv)
    if args.modes_from:
        import eval as metrics
        try:
            rows = metrics.read_rows(args.modes_from)
        except (OSError, ValueError) as e:
            raise common.InputError(f"--modes-from: {e}") from None
        rows = rows[:args.limit] if args.limit else rows   # the first N rows of the file
        if all(r["trace"].get("retrieved") for r in rows):
            table = [(f"rowen-{m}", metrics.summarize(r)) for m, r in modes_from_run(rows, args.alpha).items()]
            print(metrics.format_table(table, markdown=True))
        q = detection_quality(rows, args.alpha)
        print(f"detection on {q['n']} questions, {q['wrong']} initial answers wrong:")
        for name in ("cl", "cm", "hybrid"):
            print(f"  Z_{name}: AUC {q[name]['auc']}, retrieves {q[name]['retrieve_wrong']} of wrong and "
                  f"{q[name]['retrieve_right']} of right answers")
        return
    if args.k < 1:
        raise common.InputError(f"--k {args.k}: need at least one perturbed question")
    s = Settings(mode=args.mode, threshold=args.threshold, alpha=args.alpha, k=args.k,
                 target_language=args.target_language, seed=args.seed,
                 retrieve="never" if args.never_retrieve else "always" if args.always_retrieve else "adaptive")
    records = common.check_inputs(args)     # bad input fails here, before a model loads
    bm25 = common.load_retriever(args, records, preset="seakr")  # no official index (Serper web search)
    main_lm = common.load_model(args.model, args.dtype, args.device)
    verifier_lm = common.load_model(args.verifier, args.dtype, args.device) if args.mode != "cl" else None
    common.run(args, run_name(args), lambda rec: solve(rec, main_lm, verifier_lm, bm25, s), records)


if __name__ == "__main__":
    common.main_guard(main)
