"""SeaKR: self-aware knowledge retrieval, re-ranking and reasoning driven by an eigen-score uncertainty.

The method in five lines:
1. Each reasoning step is generated greedily; 20 more samples of the same step give the uncertainty
   U = (1/k) logdet(Z J Z^T + alpha I) of their centred hidden states at the EOS position (3.4),
   layer L/2 - 1's MLP output.
2. Self-aware retrieval (3.1): if U exceeds delta, the step without its uncertain words is the query; BM25 gives N = 3.
3. Self-aware re-ranking (3.2): the step is regenerated with each passage; the lowest U's passage and step are kept.
4. The loop stops at a step that states its answer, after 7 steps or 5 retrievals (official README).
5. Self-aware reasoning (3.3): an answer from the rationales and one from the passages; the lower U wins.

Paper: Zijun Yao, Weijian Qi, Liangming Pan, Shulin Cao, Linmei Hu, Weichuan Liu, Lei Hou, Juanzi Li.
"SeaKR: Self-aware Knowledge Retrieval for Adaptive Retrieval Augmented Generation" (arXiv 2406.19215;
ICLR 2025 submission). Official code: THU-KEG/SeaKR (a patched vLLM 0.4.2 + Elasticsearch).

Follows the paper's intent and the official code's concrete values; the official code, not the paper,
in the final reasoning (reason). Differs from the official code, in ways that can change results, in:
- a step is final when eval.read_answer finds an answer in it read with the ". " stop that cut it
  (step_answer; official: without it, which finds none in the last step of 46 of the shipped delta-0.41 run's 50);
- a step with no non-empty sample has U = +inf, always uncertain (official 0: uncertain only on LLaMA-2's scale);
- prompts end in "Answer:" without the official trailing space; fed-back steps keep their internal periods;
- query words are kept by a stop-word list over the whole step (official: spaCy POS tags, last sentence only);
- passages are shown as "title: text" (official: text only); simple QA searches BM25's top 10 itself;
- a forced continuation is read to its first comma or period (official: whole);
- the passages' chain that names an empty answer is forced to another (official: "" kept, compared by U);
- IRCoT (DRAGIN's, not SeaKR's) searches the edited question and keeps every passage it read.
Full list, each with the official file and line and its effect where measured: docs/seakr.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
from dataclasses import dataclass, field

import torch

import common
import eval as metrics

# ----------------------------------------------------------------------------------------------
# Settings (source in brackets)
K_SAMPLES = 20          # samples per call for the eigen score [paper 4.1.3; official call_llm n=20]
TEMPERATURE = 1.0       # sampling temperature [official call_llm]
TOP_K = 50              # top-k of the samples [official call_llm]
TOP_P = 0.9             # nucleus of the samples [official call_llm]
MAX_NEW_TOKENS = 100    # per call, greedy and samples; CoT's whole chain [official max_tokens; DRAGIN
                        # generate_max_length 100]
FORCED_TOKENS = 100     # the forced "So the answer is" continuation, multi-hop [official call_llm]
EXEMPLAR_FILE = common.DATA_DIR / "seakr_exemplars.json"   # DRAGIN's CoT exemplars as SeaKR ships them [official]
DATA_FILES = (EXEMPLAR_FILE,)   # the data a run's rows depend on: hashed into its settings
SIMPLE_FORCED_TOKENS = 20   # the same in simple QA [official main_simpleqa.py:80]
BASELINE_FORCED_TOKENS = 20     # the same for CoT and IRCoT chains [DRAGIN src/eval.py:48, max_new_tokens]
# CoT's whole chain per dataset [DRAGIN config/Llama2-7b-chat/<dataset>/wo-RAG.json generate_max_length];
# MuSiQue (HotpotQA's exemplars) and simple QA (one line) take MAX_NEW_TOKENS
COT_TOKENS = {"2wikimultihopqa": 64, "hotpotqa": 100, "iirc": 128}
ALPHA = 1e-3            # regulariser of the Gram matrix [official --eigen_alpha]
PROB_KEEP = 0.9         # a query keeps a word when all its tokens have p >= 0.9 [official --prob_threshold 0.1]
QUERY_MAX_TOKENS = 64   # queries are left-truncated to 64 tokens [official _retrieve]
RERANK_N = 3            # BM25 passages re-ranked per retrieval, multi-hop [paper 4.1.3 N=3; official topk=3]
SIMPLE_QA_N = 10        # passages tried one by one in simple QA [official eval_singlehop.ipynb: DPR top 10]
MAX_DOCS = 5            # at most 5 retrievals [official --max_docs: default and README]
MAX_STEPS = 7           # at most 7 reasoning steps [official README --max_reasoning_steps 7; argparse 10]
N_SHOT = 10             # in-context examples [official --n_shot]
# Threshold delta per model: retrieve iff U > delta. LLaMA-2-7B-chat's -6.0 is the paper's (5.3);
# other models' scores live on other scales, so each needs its own (python seakr.py --calibrate).
THRESHOLDS = {
    "meta-llama/Llama-2-7b-chat-hf": -6.0,   # paper 5.3, official --eigen_threshold
    # our rule over results/nq200/seakr-calibrate.jsonl, the scores of `--calibrate --data
    # NQ-open.dev.jsonl --limit 200` (code at 5cede81; 6 of 200 right unaided, the paper's condition met
    # nowhere), recomputed without a model by: python -c "import json, analysis; print(analysis.threshold_table(
    # [(r['score'], r['right']) for r in map(json.loads, open('results/nq200/seakr-calibrate.jsonl'))])['gap'])"
    # The results up to now were made with 3.01 (the same rule on the first 30 questions, before 0c352f2)
    "smollm2-135m": 3.69,
    # the paper's 5.3 condition over results/nq200-qwen2.5-coder-1.5b/seakr-calibrate.jsonl, the scores of
    # `--calibrate --data NQ-open.dev.jsonl --limit 200 --dtype float32 --linear onednn` (code at 062262b;
    # 22 of 200 right unaided, eigen-score AUROC 0.60; our rule gives 0.13), recomputed without a model by:
    # python benchmarks/run_all.py --out results/nq200-qwen2.5-coder-1.5b --table-only
    # (1.25 before: the same condition on 100 questions in bfloat16 on an Intel Xeon with AMX)
    "qwen2.5-coder-1.5b": 0.41,
}
PAPER_THRESHOLD = -6.0
CALIBRATED_IN = {"meta-llama/Llama-2-7b-chat-hf": "float16"}  # others': float32 (the official engine: the model's)
MULTI_HOP = {"hotpotqa": "hotpotqa", "2wikimultihopqa": "2wikimultihopqa", "iirc": "iirc",
             "musique": "hotpotqa"}   # MuSiQue has no exemplars of its own: HotpotQA's are closest
BASE_STOP = ("\n\n", "\nQuestion:", "\nContext")   # [official prepare_llm_input]
RETRIEVE_MODES = ("adaptive", "never", "ircot", "no-sa-retrieval")   # SeaKR, CoT, IRCoT, "- S.A. Retrieval"


# ----------------------------------------------------------------------------------------------
# The uncertainty estimator and the decisions (pure functions)

def eigen_score(hidden: torch.Tensor, alpha: float = ALPHA) -> float:
    """U = (1/k) logdet(Z J Z^T + alpha I) for k x d hidden states Z (paper 3.4, INSIDE's EigenScore).
    J centres each row on its own mean over the d features (official _compute_eigen_score); the Gram
    matrix is over samples, neither normalised nor divided by d. Higher means more uncertain; a state
    that is not finite (a float16 overflow) gives +inf, never a NaN that every comparison reads as sure."""
    z = hidden.double()
    z = z - z.mean(dim=1, keepdim=True)
    gram = z @ z.T + alpha * torch.eye(z.shape[0], dtype=z.dtype)
    u = float(torch.linalg.slogdet(gram)[1]) / z.shape[0]
    return u if math.isfinite(u) else math.inf


def should_retrieve(score: float, text: str, delta: float) -> bool:
    """Self-aware retrieval (paper 3.1): retrieve iff U > delta (strictly) or the step is empty."""
    return not text.strip() or score > delta


def pick_candidate(scores: list[float], texts: list[str]) -> int:
    """Self-aware re-ranking (paper 3.2): the candidate whose step has the lowest U; an empty step
    counts as +inf; ties go to the earlier (higher BM25) candidate."""
    keyed = [(s if t.strip() else math.inf, i) for i, (s, t) in enumerate(zip(scores, texts))]
    return min(keyed)[1]


def choose_answer(step_answer, step_score: float, read_answer, read_score: float) -> tuple[str, str]:
    """Self-aware reasoning (paper 3.3, official compare_answer): (answer, which).

    A missing or "unknown" answer loses; otherwise the lower U wins and a tie goes to the answer
    read from the passages.
    """
    def bad(a):
        return a is None or "unknown" in a.lower()
    if bad(step_answer):
        return read_answer, "knowledge"
    if bad(read_answer):
        return step_answer, "rationales"
    return (step_answer, "rationales") if step_score < read_score else (read_answer, "knowledge")


def forced_reading(text: str) -> str | None:
    """The answer of a forced continuation (the text after " So the answer is"): read as any answer, to its
    first comma or period (eval.read_answer), or the whole line where it holds neither. Official: the whole
    continuation is the answer (reasoner.py:300-301, 427-428; main_simpleqa.py:91); read whole, this
    model's run-on continuations ("1860.Human: Given the context, ...") would be answers."""
    return metrics.read_answer("So the answer is" + text) or text.strip() or None


def step_answer(gen: common.Generation) -> str | None:
    """The answer with which a reasoning step ends the loop, or None (paper 3.3: the iteration stops when the
    model states its answer; official check_final_step: eval.read_answer of the step). subtle: the step is
    read as the model wrote it, with the ". " stop that cut it, where the official code reads vLLM's text
    without it: "So the answer is Paris" cut from "Paris. It is" is final here (official: not, and the loop
    goes on). On the shipped HotpotQA runs the official test finds no answer in the last step of 46 of 50
    questions at delta 0.41 and 35 of 48 at -0.99 (no comma or period after the answer): there the loop would
    have gone on past the stated answer."""
    return metrics.read_answer(gen.text + (". " if gen.finish == ". " else ""))


def drop_answer_sentences(step: str) -> str:
    """The rationale strategy's last step (official filter_last_step): every sentence that contains
    "the answer is" or "is the answer" (any case) is dropped, the others kept whole. Sentences end at
    ". ", "? " or "! " (official: spaCy's splitter; a step holds no ". " inside, the loop's stop string)."""
    keep = [x for x in re.split(r"(?<=[.?!])\s+", step.strip())
            if "the answer is" not in x.lower() and "is the answer" not in x.lower()]
    return " ".join(keep)


def token_spans(tok, ids: list[int]) -> list[tuple[int, int]]:
    """The character span of each generated token within the generation's text (Generation.text before
    its stop cut: common.decode_continuations), from the lengths of the decoded prefixes. subtle: never
    from tokens decoded one by one: a SentencePiece token decoded alone loses its leading space ("▁Cahn"
    -> "Cahn"), and a byte token of a character split over several tokens ("Î" = <0xC3><0x8E>) decodes
    alone to "\ufffd". A prefix that ends inside a character decodes to a trailing "\ufffd"; its tokens
    share the span of the token that completes the character."""
    spans, start, pending = [], 0, 0
    prefixes = common.decode_continuations(tok, [ids[:i + 1] for i in range(len(ids))])
    for i, prefix in enumerate(prefixes):
        if prefix.endswith("\ufffd") and i + 1 < len(ids):
            pending += 1
            continue
        spans += [(start, len(prefix))] * (pending + 1)
        start, pending = len(prefix), 0
    return spans


def query_from_step(tok, gen: common.Generation, text: str, question: str, previous: str) -> str:
    """Self-aware retrieval's query (paper 3.1 "Query Generation", official _build_query): the step with
    its uncertain words removed. A word stays if each of its tokens had p >= PROB_KEEP, or it appears in
    the question or in the previous step (substring test, as the official code); stop words and
    thus/answer/so are dropped. Divergences besides the stop-word list (module docstring): thus/answer/so
    go in any case (official: the lower-case words only, so "Thus" can stay there), and a word no token
    covers stays when the question or previous step holds it (official: every such word is skipped)."""
    spans = token_spans(tok, gen.token_ids)
    offset = len(gen.text) - len(gen.text.lstrip())   # `text` is the stripped greedy text
    kept = []
    for m in re.finditer(r"\w+", text):
        lo, hi = m.start() + offset, m.end() + offset
        probs = [math.exp(lp) for (a, b), lp in zip(spans, gen.logprobs) if a < hi and b > lo]
        word = m.group()
        sure = bool(probs) and min(probs) >= PROB_KEEP
        if sure or word.lower() in question.lower() or (previous and word.lower() in previous.lower()):
            kept.append(word)
    drop = common.STOP_WORDS | {"thus", "answer", "so"}
    words = [w for w in kept if w.lower() not in drop]
    return " ".join(words)


def truncate_query(tok, query: str) -> str:
    """The query's last QUERY_MAX_TOKENS tokens [official _retrieve max_query_length]."""
    return tok.decode(tok(query, add_special_tokens=False)["input_ids"][-QUERY_MAX_TOKENS:]).strip()


# ----------------------------------------------------------------------------------------------
# Prompts (official SEAKR/dataset.py format; paper appendix D.4 examples)

def load_exemplars(kind: str, n: int = N_SHOT) -> str:
    """The few-shot prefix: `Question: q\\nAnswer: s1. s2. So the answer is a.` joined by blank lines; as in
    the official demos, periods inside a step become spaces, so the ". " stop string only ever ends a step."""
    demos = []
    for ex in common.data_json(EXEMPLAR_FILE, f"'{kind}' exemplars", lambda data: data[kind][:n]):
        steps = " ".join(s.replace(".", " ").strip() + "." for s in ex["cot"])
        demos.append(f"Question: {ex['question']}\nAnswer: {steps} So the answer is {ex['answer']}.")
    return "\n\n".join(demos)


def passage_text(p: dict) -> str:
    return f"{p['title']}: {p['text']}" if p.get("title") else p["text"]


def build_prompt(prefix: str, question: str, steps: list[str] = (), docs: list[str] = ()) -> str:
    """prefix + Context + "Answer in the same format as before." + Question + Answer + steps (no trailing space)."""
    context = ("Context: " + "\n".join(f"[{i}] {d}" for i, d in enumerate(docs, 1)) + "\n") if docs else ""
    answer = " ".join(s.strip().rstrip(".") + "." for s in steps if s.strip())
    prompt = f"{prefix}\n\n{context}Answer in the same format as before. \nQuestion: {question}\nAnswer:"
    return prompt + (" " + answer if answer else "")


def stop_strings(has_steps: bool, final: bool) -> tuple[str, ...]:
    """[official prepare_llm_input] one sentence per step; "\\n" once there are previous steps."""
    return BASE_STOP + (("\n",) if has_steps else ()) + (() if final else (". ",))


# ----------------------------------------------------------------------------------------------
# One model call: the greedy step and its uncertainty, from one prefill

@dataclass
class Call:
    text: str                     # the greedy continuation, stripped
    score: float                  # eigen score of the samples (+inf when no sample is usable)
    gen: common.Generation        # the greedy Generation (tokens and probabilities, for the query)
    samples: int = 0              # how many non-empty samples entered the score
    sample_nll: list[float] = field(default_factory=list)  # per sample with a scored token, empty ones
                                  # included (official): -mean of scored_logprobs, for --calibrate


def scored_logprobs(gen: common.Generation) -> list[float]:
    """The log-probabilities the official engine scores for perplexity (llm_engine.py compute_perplexity:
    every entry but the last). Its stop checker overwrites a generation's last token with EOS (log p
    0) unless it is EOS already, so what it leaves out is the token that completed a stop string, the
    last one under the length limit, or EOS itself; Generation.logprobs hold no EOS, so a generation
    that ended at EOS keeps all of them."""
    return list(gen.logprobs) if gen.finish == "eos" else list(gen.logprobs[:-1])


@dataclass
class Settings:
    delta: float
    layer: int
    k: int = K_SAMPLES
    retrieve: str = "adaptive"    # one of RETRIEVE_MODES
    rerank: bool = True
    final: str = "both"           # both | rationales | knowledge
    seed: int = 0
    cot_tokens: int = MAX_NEW_TOKENS   # CoT's chain: COT_TOKENS of the question's dataset


@dataclass
class Budget:
    """Counts model calls and hands each call its own seed."""
    seed: int
    calls: int = 0

    def next_seed(self) -> int:
        self.calls += 1
        return self.seed + self.calls


def call(model, tok, prompt: str, stop, s: Settings, budget: Budget) -> Call:
    """Greedy step + k samples with one prefill; U from the samples' EOS states (paper 3.4)."""
    return call_many(model, tok, [prompt], stop, s, budget)[0]


def call_many(model, tok, prompts: list[str], stop, s: Settings, budget: Budget) -> list[Call]:
    """call() for independent prompts (the candidate passages of one retrieval) as one batch; each
    gets the seed, and so the texts, it would get alone in this order."""
    mlp = common.decoder_layers(model)[s.layer].mlp
    seeds = [budget.next_seed() for _ in prompts]
    calls = []
    # g.hidden: layer s.layer's MLP output at the row's last token replaced by EOS (common.reference reads it)
    for gens in common.sample_many(model, tok, prompts, s.k, seeds=seeds, temperature=TEMPERATURE, top_k=TOP_K,
                                   top_p=TOP_P, max_new_tokens=MAX_NEW_TOKENS, stop=stop, hidden_module=mlp,
                                   with_greedy=True):
        greedy, samples = gens[0], [g for g in gens[1:] if g.text.strip()]
        score = eigen_score(torch.stack([g.hidden for g in samples])) if samples else math.inf
        nll = [-sum(lp) / len(lp) for lp in map(scored_logprobs, gens[1:]) if lp]
        calls.append(Call(greedy.text.strip(), score, greedy, len(samples), nll))
    return calls


def forced_answer(model, tok, prompt: str, budget: Budget, max_new_tokens: int = FORCED_TOKENS) -> str | None:
    """Append " So the answer is" and read the greedy continuation, to the end of its line (official forced
    answer: 100 tokens in SeaKR's reasoning, 20 in simple QA and in DRAGIN's evaluation of the baselines)."""
    budget.calls += 1
    g = common.greedy(model, tok, prompt + " So the answer is", max_new_tokens=max_new_tokens,
                      stop=BASE_STOP + ("\n",))
    return forced_reading(g.text)


def chain(model, tok, prompt: str, stop, budget: Budget, max_new_tokens: int, bare: str | None = None):
    """(one greedy chain of thought, its answer), forced when the chain names none (the baselines; DRAGIN
    src/eval.py:26-48: the exemplars, question and chain, no passages, 20 tokens): `bare` is the prompt
    without the passages where `prompt` holds some."""
    budget.calls += 1
    text = common.greedy(model, tok, prompt, max_new_tokens=max_new_tokens, stop=stop).text.strip()
    answer = metrics.read_answer(text)
    if answer is None:
        answer = forced_answer(model, tok, (bare or prompt) + (" " + text if text else ""), budget,
                               BASELINE_FORCED_TOKENS)
    return text, answer


def _num(x: float):
    return None if math.isinf(x) else round(x, 4)


# ----------------------------------------------------------------------------------------------
# Multi-hop QA (paper 3, official main_multihop.py / MultiHopReasoner.solve)

def solve_multihop(model, tok, bm25, prefix: str, question: str, s: Settings, budget: Budget) -> dict:
    """SeaKR's loop (paper 3): step, retrieve and re-rank when uncertain, then reason. The
    baselines CoT and IRCoT are solve_cot and solve_ircot; "- S.A. Retrieval" is this loop retrieving
    at every step."""
    if s.retrieve == "never":
        return solve_cot(model, tok, prefix, question, budget, s.cot_tokens)
    if s.retrieve == "ircot":
        return solve_ircot(model, tok, bm25, prefix, question, budget)
    steps: list[str] = []          # rationale buffer
    docs: list[dict] = []          # knowledge buffer (one passage per retrieval)
    searched: set[str] = set()
    trace, stopped = [], None
    try:    # a prompt past the model's context ends the chain there, reasoned on (vLLM: an empty output) [ours]
        while True:
            c = call(model, tok, build_prompt(prefix, question, steps, [passage_text(d) for d in docs]),
                     stop_strings(bool(steps), final=False), s, budget)
            every_step = s.retrieve == "no-sa-retrieval"      # paper 5.1: retrieve for each generation step
            retrieve = every_step or should_retrieve(c.score, c.text, s.delta)
            entry = {"text": c.text, "score": _num(c.score), "samples": c.samples, "retrieved": False}
            trace.append(entry)
            if not every_step and step_answer(c.gen) is not None:       # official check_final_step
                steps.append(c.text)        # a final answer is never retrieval-checked (official order)
                break
            if not retrieve:                # (an empty step always retrieves: should_retrieve)
                steps.append(c.text)
            else:
                full, query, hits = search(tok, bm25, c, question, steps, docs, searched)
                searched.add(full)
                entry.update(retrieved=True, query=query)
                if not hits:                # a repeated query or no new passage: the step is dropped, the loop ends
                    if every_step and step_answer(c.gen) is not None:       # (official); the ablation's final
                        steps.append(c.text)    # step, searched only in the ablation, still gives its answer [ours]
                    break
                hits = hits if s.rerank else hits[:1]       # "- S.A. Re-rank": BM25's first passage alone
                context = [passage_text(d) for d in docs]
                prompts = [build_prompt(prefix, question, steps, context + [passage_text(h)]) for h in hits]
                stop = stop_strings(bool(steps), final=False)
                chosen, passage, entry["candidates"] = rerank(model, tok, hits, prompts, stop, s, budget)    # one batch
                entry["chosen"] = passage["id"]
                docs.append(passage)
                steps.append(chosen.text)
                if step_answer(chosen.gen) is not None:
                    break
            if len(steps) >= MAX_STEPS or len(docs) >= MAX_DOCS:
                break
    except common.ContextTooLong as e:     # not retrieval.Unavailable: a search service down stops the run
        stopped = str(e)
    final = reason(model, tok, prefix, question, steps, docs, s, budget)
    return {"prediction": final["answer"] or "", "retrievals": len(docs), "model_calls": budget.calls,
            "trace": {"steps": trace, "passages": [d["id"] for d in docs], **final,
                      **({"stopped": stopped} if stopped else {})}}


def search(tok, bm25, failed: Call, question: str, steps: list[str], docs: list[dict],
           searched: set[str]) -> tuple[str, str, list[dict]]:
    """Self-aware retrieval's search for an uncertain step (paper 3.1): the query from its sure words
    (query_from_step; the question's content words when none), and BM25's top N passages for it that are
    not in the knowledge buffer yet. Returns (the query as built, the query as searched: its last 64
    tokens, the passages); no passages, and no search, for a query already in `searched`."""
    query = query_from_step(tok, failed.gen, failed.text, question, steps[-1] if steps else "")
    if not query:
        query = " ".join(w for w in re.findall(r"\w+", question) if w.lower() not in common.STOP_WORDS)
    full, query = query, truncate_query(tok, query)
    if full in searched:   # [official _retrieve] the query as built, before its cut to 64 tokens
        return full, query, []
    have = {d["id"] for d in docs}
    return full, query, [h for h in bm25.search(query, RERANK_N) if h["id"] not in have]


def rerank(model, tok, hits: list[dict], prompts: list[str], stop, s: Settings,
           budget: Budget) -> tuple[Call, dict, list[dict]]:
    """Self-aware re-ranking (paper 3.2): the step regenerated once per passage (prompts[i] reads hits[i]
    after the knowledge buffer), as one batch; the passage whose step is most certain is kept. Returns (that
    step's call, its passage, every candidate as the trace records it)."""
    cands = call_many(model, tok, prompts, stop, s, budget)
    best = pick_candidate([c.score for c in cands], [c.text for c in cands])
    record = [{"id": h["id"], "title": h["title"], "bm25": round(h["score"], 3), "text": c.text,
               "score": _num(c.score)} for h, c in zip(hits, cands)]
    return cands[best], hits[best], record


def reason(model, tok, prefix, question, steps, docs, s: Settings, budget: Budget) -> dict:
    """Self-aware reasoning (paper 3.3): answer from the rationales and from the passages, keep the
    lower U. As the official code, not the paper (3.3, appendix D.3: "So the final answer is" after the
    last rationale, newline stops): the rationales are given as Context passages and the answer is
    regenerated (official read_all_steps: the base stops and a newline), and the passages' chain of
    thought stops at the base stops only (official read_all_docs). Each strategy's U comes from its
    first generation (read_all_steps) or from its last one (read_all_docs: the forced call's, when
    forcing was needed)."""
    out = {"step_answer": None, "step_score": None, "read_answer": None, "read_score": None}
    step_score = read_score = math.inf
    if s.final in ("both", "rationales"):
        # the last step's answer sentences are dropped: the model must re-derive the answer; with no
        # rationale left the prompt has no context, as official (where an empty buffer would crash)
        rationales = [r for r in steps[:-1] + [drop_answer_sentences(steps[-1])] if r.strip()] if steps else []
        prompt = build_prompt(prefix, question, docs=rationales)
        c = call(model, tok, prompt, BASE_STOP + ("\n",), s, budget)
        answer = metrics.read_answer(c.text) or forced_answer(model, tok, prompt, budget)
        step_score = c.score
        out.update(step_answer=answer, step_score=_num(step_score), step_text=c.text)
    if s.final in ("both", "knowledge"):
        prompt = build_prompt(prefix, question, docs=[passage_text(d) for d in docs])
        c = call(model, tok, prompt, BASE_STOP, s, budget)
        answer, chain = metrics.read_answer(c.text), c.text
        if answer is None:      # the trace keeps the chain (read_text) and the forced continuation apart
            c = call(model, tok, prompt + " So the answer is", BASE_STOP + ("\n",), s, budget)
            answer, out["read_forced"] = forced_reading(c.gen.text), c.text
        read_score = c.score
        out.update(read_answer=answer, read_score=_num(read_score), read_text=chain)
    answer, which = choose_answer(out["step_answer"], step_score, out["read_answer"], read_score)
    out.update(answer=answer, chosen=which)
    return out


# ----------------------------------------------------------------------------------------------
# The paper's baselines (4.1.2): CoT and IRCoT, with the same prompts, limits and retriever

def solve_cot(model, tok, prefix: str, question: str, budget: Budget, max_new_tokens: int = MAX_NEW_TOKENS) -> dict:
    """CoT: one greedy chain of thought with SeaKR's exemplars and no retrieval (paper 4.1.2; DRAGIN's
    non-retrieval generation, 100 tokens); no samples, no U."""
    text, answer = chain(model, tok, build_prompt(prefix, question), BASE_STOP, budget, max_new_tokens)
    return {"prediction": answer or "", "retrievals": 0, "model_calls": budget.calls,
            "trace": {"chain": text, "answer": answer}}


def solve_ircot(model, tok, bm25, prefix: str, question: str, budget: Budget) -> dict:
    """IRCoT (paper 4.1.2: "retrieves for every reasoning step ... and integrates the top-ranked
    knowledge"): before each step, BM25 is queried with the question (first step) or the last
    generated sentence (DRAGIN's fix-sentence IRCoT) and its top passage not yet in the context joins
    it; one greedy sentence per step; the same stops, final-step test and limits as SeaKR's loop
    (paper 4.1.3: the constraints apply to all baselines); the answer is the final step's, forced
    when no step ends the chain with one."""
    steps: list[str] = []
    docs: list[dict] = []
    trace = []
    answer = None
    query = question
    while True:
        query = truncate_query(tok, query)
        have = {d["id"] for d in docs}
        hit = next((h for h in bm25.search(query, len(docs) + 1) if h["id"] not in have), None)
        if hit is None:                 # nothing new to read: as SeaKR's loop, stop
            trace.append({"query": query, "passage": None})
            break
        docs.append(hit)
        budget.calls += 1
        prompt = build_prompt(prefix, question, steps, [passage_text(d) for d in docs])
        g = common.greedy(model, tok, prompt, max_new_tokens=MAX_NEW_TOKENS,
                          stop=stop_strings(bool(steps), final=False))
        text = g.text.strip()
        trace.append({"query": query, "passage": hit["id"], "text": text})
        if not text:
            break
        steps.append(text)
        answer = step_answer(g)
        if answer is not None or len(steps) >= MAX_STEPS or len(docs) >= MAX_DOCS:
            break
        query = text
    if answer is None:
        answer = forced_answer(model, tok, build_prompt(prefix, question, steps), budget, BASELINE_FORCED_TOKENS)
    return {"prediction": answer or "", "retrievals": len(docs), "model_calls": budget.calls,
            "trace": {"steps": trace, "passages": [d["id"] for d in docs], "answer": answer}}


# ----------------------------------------------------------------------------------------------
# Simple QA (paper 4.1.3, official main_simpleqa.py + eval_singlehop.ipynb)

def answer_once(model, tok, prompt: str, s: Settings, budget: Budget) -> tuple[str | None, Call]:
    """One chain of thought on one line; the answer, forced with the generated text kept (as official)."""
    c = call(model, tok, prompt, ("\n",) + BASE_STOP, s, budget)
    answer = metrics.read_answer(c.text)
    if answer is None:
        answer = forced_answer(model, tok, prompt + (" " + c.text if c.text else ""), budget, SIMPLE_FORCED_TOKENS)
    return answer, c


def solve_simple(model, tok, bm25, prefix: str, question: str, s: Settings, budget: Budget) -> dict:
    """One retrieval round: answer directly if certain; else answer with each of the top N passages
    alone and keep the most certain answer. CoT answers without passages, IRCoT with BM25's top one
    (paper 4.1.3: "search time 1"), "- S.A. Retrieval" always retrieves."""
    stop = ("\n",) + BASE_STOP
    if s.retrieve == "never":
        text, answer = chain(model, tok, build_prompt(prefix, question), stop, budget, MAX_NEW_TOKENS)
        return {"prediction": answer or "", "retrievals": 0, "model_calls": budget.calls,
                "trace": {"chain": text, "answer": answer}}
    if s.retrieve == "ircot":
        hits = bm25.search(truncate_query(tok, question), 1)
        text, answer = chain(model, tok, build_prompt(prefix, question, docs=[passage_text(h) for h in hits]),
                             stop, budget, MAX_NEW_TOKENS, bare=build_prompt(prefix, question))
        return {"prediction": answer or "", "retrievals": len(hits), "model_calls": budget.calls,
                "trace": {"chain": text, "answer": answer, "passages": [h["id"] for h in hits]}}
    answer, c = answer_once(model, tok, build_prompt(prefix, question), s, budget)
    retrieve = should_retrieve(c.score, c.text, s.delta) or s.retrieve == "no-sa-retrieval"
    trace = {"direct": {"text": c.text, "answer": answer, "score": _num(c.score)}, "retrieved": retrieve}
    if not retrieve:
        return {"prediction": answer or "", "retrievals": 0, "model_calls": budget.calls, "trace": trace}
    hits = bm25.search(truncate_query(tok, question), SIMPLE_QA_N if s.rerank else 1)
    tried = []
    for h in hits:
        a, hc = answer_once(model, tok, build_prompt(prefix, question, docs=[passage_text(h)]), s, budget)
        tried.append({"id": h["id"], "title": h["title"], "answer": a, "score": hc.score, "text": hc.text})
    if tried:
        best = pick_candidate([t["score"] for t in tried], [t["text"] for t in tried])
        answer = tried[best]["answer"]
        trace["chosen"] = tried[best]["id"]
    trace["candidates"] = [{**t, "score": _num(t["score"])} for t in tried]
    return {"prediction": answer or "", "retrievals": 1 if hits else 0, "model_calls": budget.calls,
            "trace": trace}


# ----------------------------------------------------------------------------------------------
# Command line

def default_layer(model) -> int:
    """Decoder layer L/2 - 1 (0-based; 15 of LLaMA-2-7B's 32), whose MLP output U reads [official: vLLM layer 15]."""
    return model.config.num_hidden_layers // 2 - 1


def edit_question(question: str, multihop: bool) -> str:
    """[official] multi-hop questions lose their periods (MultiHopReasoner.__init__: "F.W. Murnau" ->
    "F W  Murnau", as the exemplars' steps); simple QA's are kept as they are (main_simpleqa)."""
    return question.replace(".", " ").strip() if multihop else question


def run_name(retrieve: str, rerank: bool = True, final: str = "both") -> str:
    """The output's method name: the paper's names for the baselines (4.1.2) and the ablations (Table 3)."""
    if retrieve in ("never", "ircot"):
        return {"never": "cot", "ircot": "ircot"}[retrieve]
    return ("seakr" + ("-no-sa-retrieval" if retrieve == "no-sa-retrieval" else "")
            + ("" if rerank else "-no-sa-rerank") + ("" if final == "both" else f"-{final}-only"))


def main(argv=None):
    p = argparse.ArgumentParser(description="SeaKR: self-aware knowledge retrieval (uncertainty-driven RAG)")
    g = p.add_argument_group("SeaKR")
    g.add_argument("--threshold", type=float, help="delta: retrieve iff U > delta (default: per model)")
    g.add_argument("--layer", type=int, help="decoder layer (0-based) whose MLP output U reads (default L/2 - 1)")
    g.add_argument("--samples", type=int, default=K_SAMPLES, help="k samples per call (paper: 20)")
    g.add_argument("--retrieve", choices=RETRIEVE_MODES + ("always",), default="adaptive",
                   help="adaptive = SeaKR; the paper's baselines: never = CoT, ircot = IRCoT; the ablation "
                        "no-sa-retrieval = '- S.A. Retrieval' (retrieve at every step; 'always' is its old name)")
    g.add_argument("--no-rerank", action="store_true",
                   help="ablation '- S.A. Re-rank': take BM25's first passage")
    g.add_argument("--final", choices=["both", "rationales", "knowledge"], default="both",
                   help="ablations 'Rationales-only' and 'Knowledge-only': one reasoning strategy")
    g.add_argument("--mode", choices=["auto", "multihop", "simple"], default="auto",
                   help="multi-hop loop or simple QA (auto: by dataset)")
    g.add_argument("--calibrate", action="store_true",
                   help="answer --data/--dataset directly, write each answer's eigen score and the "
                        "paper's baseline scores (a run file, resumable); python analysis.py calibration FILE "
                        "prints accuracy per threshold")
    common.add_common_args(p, dataset="hotpotqa")
    args = p.parse_args(argv)
    if args.retrieve == "always":
        args.retrieve = "no-sa-retrieval"
    if args.retrieve in ("never", "ircot") and (args.no_rerank or args.final != "both" or args.calibrate):
        p.error(f"--retrieve {args.retrieve} is a baseline without re-ranking, reasoning strategies or U")
    if args.samples < 2:        # U of one sample is its norm, not a spread (paper 4.1.3: k = 20)
        p.error(f"--samples {args.samples}: the eigen score needs at least 2 samples (paper: 20)")
    if args.retrieve in ("never", "ircot") and args.threshold is not None:
        print(f"warning: --threshold {args.threshold:g} is not used by --retrieve {args.retrieve} (no U)",
              file=sys.stderr)

    name = "seakr-calibrate" if args.calibrate else run_name(args.retrieve, not args.no_rerank, args.final)
    # the table that picks delta from a calibration file reads it without a model: analysis.py
    output = args.output or common.default_output(name, args)
    table = f"accuracy per threshold: python analysis.py calibration {output}" + (
        f" --limit {args.limit}" if args.limit else "")
    try:
        records = common.check_inputs(args, name, __file__)   # bad input fails here, before the model loads
    except common.NothingToDo as done:
        if not args.calibrate:
            raise
        print(done, file=sys.stderr)    # every answer is in the file: its table needs no model
        print(table)
        return
    model, tok = common.load_model(args.model, args.dtype, args.device)
    delta = args.threshold if args.threshold is not None else THRESHOLDS.get(args.model)
    if delta is None and not args.calibrate:
        delta = PAPER_THRESHOLD
        print(f"warning: no calibrated threshold for {args.model}; using the paper's {delta} (LLaMA-2-7B). "
              f"Calibrate: python seakr.py --model {args.model} --calibrate --data NQ-open.dev.jsonl "
              f"--limit 200", file=sys.stderr)
    made_in, now = CALIBRATED_IN.get(args.model, "float32"), common.precision(model)
    if args.model in THRESHOLDS and now != made_in and args.threshold is None and not args.calibrate:
        print(f"warning: delta {delta} was calibrated for {args.model} in {made_in}; this run is {now}, where U "
              "moves: pass --threshold, or --dtype " + made_in, file=sys.stderr)
    s = Settings(delta=delta if delta is not None else PAPER_THRESHOLD,
                 layer=args.layer if args.layer is not None else default_layer(model), k=args.samples,
                 retrieve=args.retrieve, rerank=not args.no_rerank, final=args.final, seed=args.seed)
    if s.layer not in range(model.config.num_hidden_layers):    # else a traceback at the first question
        raise common.InputError(f"--layer {s.layer}: {args.model} has decoder layers 0 to "
                                f"{model.config.num_hidden_layers - 1}")
    args.layer = s.layer    # the settings name the layer this run read, not "the model's default" (None)
    if args.calibrate:
        calibrate(model, tok, args, records, s)
        print(table)
        return
    bm25 = common.load_retriever(args, records, preset="seakr")
    prefixes = {}

    def solve(rec):
        kind = rec.get("dataset")
        multihop = args.mode == "multihop" or (args.mode == "auto" and kind in MULTI_HOP)
        exemplars = MULTI_HOP.get(kind, "hotpotqa") if multihop else "simpleqa"
        if exemplars not in prefixes:
            prefixes[exemplars] = load_exemplars(exemplars)
        budget = Budget(common.question_seed(args.seed, rec["id"]))
        solver = solve_multihop if multihop else solve_simple
        rs = dataclasses.replace(s, cot_tokens=COT_TOKENS.get(exemplars, MAX_NEW_TOKENS))
        return solver(model, tok, bm25, prefixes[exemplars], edit_question(rec["question"], multihop), rs, budget)

    args.threshold = s.delta    # and the delta
    common.run(args, name, solve, records)


# ----------------------------------------------------------------------------------------------
# Threshold calibration, not part of the method: `python seakr.py --calibrate` answers and scores; the
# table that picks delta from its file (paper 5.3: delta searched on a sample of NQ questions) is
# analysis.py's

def uncertainty_baselines(c: Call) -> dict:
    """The simpler estimators SeaKR's ablation compares with the eigen score (paper 5.1, "Ablating
    Self-aware Uncertainty Estimator"), from the same call, each over scored_logprobs (the token that
    completed a stop string is not scored, as in the official engine); each higher = less sure:
    - perplexity: exp(-mean log p) of the greedy step's scored tokens (the official engine's
      `perplexity`) and that mean log p itself; None where no token is scored (official: 1e3);
    - multi-perplexity: the mean of the samples' perplexities over every sample with a scored token,
      empty ones included (the official engine's key `ln_entropy`: np.mean of the samples' perplexities);
    - LN-entropy (Malinin and Gales, 2020): the mean over the same samples of -mean log p (official: none).
    The greedy step's log-probabilities are the model's full distribution, as vLLM's at temperature 0; the
    samples' are too, at temperature 1, where vLLM's are after top-k 50 and top-p 0.9, renormalised (never
    below ours): multi-perplexity and LN-entropy here are at least the official values. The energy score
    needs the raw logits, which a Generation does not keep: not computed."""
    lp = scored_logprobs(c.gen)
    out = {"mean_logprob": _num(sum(lp) / len(lp)) if lp else None,
           "perplexity": _num(math.exp(-sum(lp) / len(lp))) if lp else None,
           "multi_perplexity": None, "ln_entropy": None, "samples": c.samples}
    if c.sample_nll:
        out["multi_perplexity"] = _num(sum(math.exp(x) for x in c.sample_nll) / len(c.sample_nll))
        out["ln_entropy"] = _num(sum(c.sample_nll) / len(c.sample_nll))
    return out


def calibrate(model, tok, args, records: list[dict], s: Settings) -> dict:
    """Answer each question directly (simple-QA prompt, no passages), for paper 5.3's search of delta:
    `python analysis.py calibration FILE` prints per candidate threshold the retrieval rate and the
    no-retrieval accuracy on each side, and the deltas our rule and the paper's condition recommend.
    The answers go through common.run, so a calibration file is an ordinary run file (resumable, its
    settings beside it; `--output`): each row's trace holds the eigen score ("score") and
    uncertainty_baselines, for `python eval.py signals FILE`. Returns common.run's summary."""
    prefix = load_exemplars("simpleqa")

    def solve(rec):
        budget = Budget(common.question_seed(s.seed, rec["id"]))
        answer, c = answer_once(model, tok, build_prompt(prefix, rec["question"]), s, budget)
        return {"prediction": answer or "", "retrievals": 0, "model_calls": budget.calls,
                "trace": {"direct": c.text, "score": _num(c.score), **uncertainty_baselines(c)}}

    return common.run(args, "seakr-calibrate", solve, records)


if __name__ == "__main__":
    common.main_guard(main)
