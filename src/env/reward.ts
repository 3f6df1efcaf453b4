/**
 * Answer metrics and rewards.
 *
 * Metrics follow the official HotpotQA evaluation script (hotpot_evaluate_v1.py) character for character:
 *   normalize_answer(s) = white_space_fix(remove_articles(remove_punc(lower(s))))
 *   exact_match = normalize(pred) == normalize(gold)
 *   f1: 0 when either normalised side is yes / no / noanswer and they differ; else token-level F1
 * With several gold answers (aliases) every metric takes the max over them, as the MuSiQue and 2Wiki
 * evaluations do. Substring EM is Agent-R1's `subem_check`: normalize(gold) is a substring of
 * normalize(pred).
 *
 * The outcome reward is Agent-R1's `compute_score_format_answer`, with weights made configurable:
 *
 *   f        = 0.5 · (share of non-final turns that are well-formed tool-call turns; 1 if there are none)
 *            + 0.5 · [the final turn is a well-formed answer turn]
 *   outcome  = base + formatWeight · f + (f = 1 ? answerWeight · answerScore : 0)
 *
 * With the defaults (base −1, both weights 1) a well-formed episode earns its answer score in [0, 1] and a
 * malformed one earns −1 + f in [−1, 0): format gates the answer reward. answerScore is EM by default
 * (F1 or substring EM on request). Agent-R1's 0.2 consolation for a gold string appearing anywhere in
 * the response is deliberately left out: it pays for dumping passages instead of answering.
 */
import type { ParsedTurn } from './parse.ts';
import type { OutcomeReward } from './types.ts';

// Python's string.punctuation (ASCII only, like the official script).
const PUNCTUATION = new Set('!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~');
// Python's `\b(a|an|the)\b` on str patterns is Unicode-aware: a word character is a letter, a number or
// '_'. JavaScript's \b only knows ASCII, so the boundaries are spelled out.
const ARTICLES = /(?<![\p{L}\p{N}_])(?:a|an|the)(?![\p{L}\p{N}_])/gu;
// The characters Python's str.split() treats as white space.
// biome-ignore lint/suspicious/noControlCharactersInRegex: Python counts \x1c-\x1f (separators) as white space.
const PY_WHITESPACE = /[\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+/;

/** The official HotpotQA / SQuAD answer normalisation. */
export function normalizeAnswer(text: string): string {
  const lowered = text.toLowerCase();
  let withoutPunctuation = '';
  for (const ch of lowered) if (!PUNCTUATION.has(ch)) withoutPunctuation += ch;
  const withoutArticles = withoutPunctuation.replace(ARTICLES, ' ');
  return pythonSplit(withoutArticles).join(' ');
}

function pythonSplit(text: string): string[] {
  return text.split(PY_WHITESPACE).filter((t) => t !== '');
}

/** Exact match against one gold answer (1 or 0). */
export function exactMatchScore(prediction: string, gold: string): number {
  return normalizeAnswer(prediction) === normalizeAnswer(gold) ? 1 : 0;
}

export interface F1Parts {
  f1: number;
  precision: number;
  recall: number;
}

/** Token-level F1 against one gold answer, with the official yes/no/noanswer rule. */
export function f1Parts(prediction: string, gold: string): F1Parts {
  const zero = { f1: 0, precision: 0, recall: 0 };
  const p = normalizeAnswer(prediction);
  const g = normalizeAnswer(gold);
  const special = new Set(['yes', 'no', 'noanswer']);
  if (special.has(p) && p !== g) return zero;
  if (special.has(g) && p !== g) return zero;
  const predTokens = pythonSplit(p);
  const goldTokens = pythonSplit(g);
  const goldCounts = new Map<string, number>();
  for (const t of goldTokens) goldCounts.set(t, (goldCounts.get(t) ?? 0) + 1);
  let same = 0;
  for (const t of predTokens) {
    const left = goldCounts.get(t) ?? 0;
    if (left > 0) {
      same++;
      goldCounts.set(t, left - 1);
    }
  }
  if (same === 0) return zero;
  const precision = same / predTokens.length;
  const recall = same / goldTokens.length;
  return { f1: (2 * precision * recall) / (precision + recall), precision, recall };
}

export function f1Score(prediction: string, gold: string): number {
  return f1Parts(prediction, gold).f1;
}

/** Agent-R1's subem_check against one gold: the normalised gold occurs inside the normalised prediction. */
export function substringExactMatchScore(prediction: string, gold: string): number {
  return normalizeAnswer(prediction).includes(normalizeAnswer(gold)) ? 1 : 0;
}

/** Max of a metric over gold answers and aliases; 0 when there are none. */
export function maxOverGolds(
  metric: (prediction: string, gold: string) => number,
  prediction: string,
  golds: readonly string[],
): number {
  let best = 0;
  for (const gold of golds) best = Math.max(best, metric(prediction, gold));
  return best;
}

export interface AnswerScores {
  em: number;
  f1: number;
  subEm: number;
}

/** EM, F1 and substring EM of a prediction (null = no answer, scoring 0) against all golds. */
export function scoreAnswer(prediction: string | null, golds: readonly string[]): AnswerScores {
  if (prediction === null) return { em: 0, f1: 0, subEm: 0 };
  return {
    em: maxOverGolds(exactMatchScore, prediction, golds),
    f1: maxOverGolds(f1Score, prediction, golds),
    subEm: maxOverGolds(substringExactMatchScore, prediction, golds),
  };
}

export type AnswerMetric = 'em' | 'f1' | 'subem';

/** Weights of the outcome formula above. */
export interface OutcomeRewardConfig {
  metric: AnswerMetric;
  base: number;
  formatWeight: number;
  answerWeight: number;
  /** Require a `<think>` block in every turn for it to count as well-formed (Agent-R1's strict variant). */
  requireThink: boolean;
}

export const DEFAULT_OUTCOME_REWARD: Readonly<OutcomeRewardConfig> = Object.freeze({
  metric: 'em',
  base: -1,
  formatWeight: 1,
  answerWeight: 1,
  requireThink: false,
});

/** Weights of the per-step process reward; each part is reported separately. */
export interface ProcessRewardConfig {
  /** Per call that retrieves at least one gold passage not retrieved before in the episode. */
  goldRetrieval: number;
  /** Once per malformed turn. */
  invalidFormat: number;
  /** Per failed call: unknown tool, invalid arguments, tool error, over budget. */
  failedCall: number;
  /** Per successful call that brings nothing new (no results, or only passages seen before). */
  ineffectiveCall: number;
}

export const DEFAULT_PROCESS_REWARD: Readonly<ProcessRewardConfig> = Object.freeze({
  goldRetrieval: 0.1,
  invalidFormat: -0.1,
  failedCall: -0.05,
  ineffectiveCall: -0.05,
});

/** Whether one parsed turn is well-formed as a tool-call turn (non-final) or an answer turn (final). */
export function isWellFormedTurn(
  turn: ParsedTurn,
  role: 'tool_calls' | 'answer',
  maxCallsPerTurn: number,
  requireThink: boolean,
): boolean {
  if (requireThink && turn.think === null) return false;
  if (role === 'answer') return turn.kind === 'answer';
  return turn.kind === 'tool_calls' && turn.toolCalls.length <= maxCallsPerTurn;
}

/** The format score f in [0, 1] of a whole episode (see the formula at the top of this file). */
export function formatScore(
  turns: readonly ParsedTurn[],
  maxCallsPerTurn: number,
  requireThink = false,
): number {
  if (turns.length === 0) return 0;
  const nonFinal = turns.slice(0, -1);
  const goodNonFinal = nonFinal.filter((t) =>
    isWellFormedTurn(t, 'tool_calls', maxCallsPerTurn, requireThink),
  );
  const toolShare = nonFinal.length === 0 ? 1 : goodNonFinal.length / nonFinal.length;
  const finalOk = isWellFormedTurn(turns[turns.length - 1], 'answer', maxCallsPerTurn, requireThink) ? 1 : 0;
  return 0.5 * toolShare + 0.5 * finalOk;
}

/** The outcome reward of an episode from its parsed assistant turns and the gold answers. */
export function outcomeReward(
  turns: readonly ParsedTurn[],
  golds: readonly string[],
  maxCallsPerTurn: number,
  config: OutcomeRewardConfig = DEFAULT_OUTCOME_REWARD,
): OutcomeReward {
  const f = formatScore(turns, maxCallsPerTurn, config.requireThink);
  const formatValid = f === 1;
  const last = turns[turns.length - 1];
  const prediction = last?.answer ?? null;
  const scores = scoreAnswer(prediction, golds);
  const answerScore = config.metric === 'em' ? scores.em : config.metric === 'f1' ? scores.f1 : scores.subEm;
  const outcome =
    config.base + config.formatWeight * f + (formatValid ? config.answerWeight * answerScore : 0);
  return { formatScore: f, formatValid, prediction, ...scores, answerScore, outcome };
}
