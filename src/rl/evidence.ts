// What an evaluated episode had in front of it when it answered. A task names the passages its question
// needs (QaTask.supportingIds: the synthetic task's gold passages, HotpotQA's supporting facts' titles,
// MuSiQue's supporting paragraphs), and the ToolEnv records which of them each search returned for the
// first time (StepCallInfo.newGoldIds). With EM this sorts an episode into right or one of:
//
//   no_answer            the episode ended without an answer (wherever its searches got)
//   wrong_no_evidence    it answered, and no search had returned a supporting passage
//   wrong_stopped_short  it answered after finding some of them, without searching again after the
//                        last find (a hop not taken)
//   wrong_missed_hop     it found some, searched again after the last find, and those searches
//                        returned none of the rest (a hop taken with the wrong query)
//   wrong_all_evidence   every supporting passage was in its context, and the answer was still wrong
//   wrong_unknown        it answered wrongly on a task that names no supporting passage
//
// no_answer and wrong_stopped_short are behaviour: answering, searching again. wrong_all_evidence is
// reading (or, on yes/no and comparison questions, comparing) what was found. The two between mix both,
// and classifyVainSearch (below) tells them apart by what the fruitless search named. docs/results.md
// reads the bundled model's held-out failures this way (thirty-ninth session).

import { normalizeAnswer } from '../env/reward.ts';
import type { Trajectory } from './rollout.ts';

export const EPISODE_OUTCOMES = [
  'right',
  'no_answer',
  'wrong_no_evidence',
  'wrong_stopped_short',
  'wrong_missed_hop',
  'wrong_all_evidence',
  'wrong_unknown',
] as const;
export type EpisodeOutcome = (typeof EPISODE_OUTCOMES)[number];

export interface EpisodeEvidence {
  /** Distinct supporting passages the task names. */
  supportingPassages: number;
  /** How many of them the episode's searches returned. */
  supportingRetrieved: number;
  outcome: EpisodeOutcome;
  /** The supporting passages its searches did not return. */
  missingIds: string[];
  /**
   * The query of its last search when that search returned no supporting passage it had not seen
   * (a string argument named "query"; null when the arguments had none); undefined when there was no
   * such search.
   */
  lastVainQuery?: string | null;
}

type EvidenceInput = Pick<Trajectory, 'prediction' | 'outcome' | 'turnRecords'>;

/** One episode's supporting passages found, and its outcome (header) from them and its EM. */
export function episodeEvidence(
  trajectory: EvidenceInput,
  supportingIds: readonly string[],
): EpisodeEvidence {
  const supporting = new Set(supportingIds);
  const found = new Set<string>();
  // The query of the last retrieval when it found nothing new; undefined when there was none since the
  // last find (or no retrieval at all).
  let lastVainQuery: string | null | undefined;
  // Only results the policy read: the last turn's tool responses are not appended when the episode
  // ends with it (TurnRecord.resultAppended).
  for (const turn of trajectory.turnRecords) {
    if (!turn.resultAppended) continue;
    for (const call of turn.calls) {
      if (call.retrievedIds === undefined) continue; // not a retrieval that ran
      const fresh = (call.newGoldIds ?? []).filter((id) => supporting.has(id) && !found.has(id));
      for (const id of fresh) found.add(id);
      const query = call.arguments?.query;
      lastVainQuery = fresh.length > 0 ? undefined : typeof query === 'string' ? query : null;
    }
  }
  const n = supporting.size;
  const k = found.size;
  let outcome: EpisodeOutcome;
  if ((trajectory.outcome?.em ?? 0) >= 1) outcome = 'right';
  else if (trajectory.prediction === null) outcome = 'no_answer';
  else if (n === 0) outcome = 'wrong_unknown';
  else if (k === 0) outcome = 'wrong_no_evidence';
  else if (k < n) outcome = lastVainQuery === undefined ? 'wrong_stopped_short' : 'wrong_missed_hop';
  else outcome = 'wrong_all_evidence';
  return {
    supportingPassages: n,
    supportingRetrieved: k,
    outcome,
    missingIds: [...supporting].filter((id) => !found.has(id)),
    ...(lastVainQuery !== undefined ? { lastVainQuery } : {}),
  };
}

export interface EvidenceSummary {
  /** Share of the episodes in each outcome (every outcome present, 0 where none). */
  byOutcome: Record<EpisodeOutcome, number>;
  /** Mean share of its task's supporting passages an episode found, over tasks that name any (0 when none do). */
  supportingRecall: number;
}

export function summarizeEvidence(evidence: readonly EpisodeEvidence[]): EvidenceSummary {
  const byOutcome = Object.fromEntries(EPISODE_OUTCOMES.map((o) => [o, 0])) as Record<EpisodeOutcome, number>;
  let recall = 0;
  let withSupport = 0;
  for (const e of evidence) {
    byOutcome[e.outcome]++;
    if (e.supportingPassages > 0) {
      recall += e.supportingRetrieved / e.supportingPassages;
      withSupport++;
    }
  }
  if (evidence.length > 0) for (const o of EPISODE_OUTCOMES) byOutcome[o] /= evidence.length;
  return { byOutcome, supportingRecall: withSupport === 0 ? 0 : recall / withSupport };
}

// A fruitless search after some supporting passages were found (wrong_missed_hop), or with none found
// (wrong_no_evidence), read against the titles of the split's passages (in this task a passage's title
// is its entity's name):
//   names_missing   the query contains the title of a supporting passage still missing: the right
//                   entity, and the search did not return its passage
//   names_found     it contains the title of a supporting passage already found: the hop before, again
//   names_other     it contains the title of another passage: a real entity, the wrong one
//   invented_name   it contains no title at all: a name no passage has (a name miscopied or blended
//                   from two, "Moundsondkous" for "Moundsond Studios")
//   no_query        the call had no string "query" argument
// Titles and query are compared as EM normalises answers, a title matching whole words only.
export const VAIN_SEARCH_KINDS = [
  'names_missing',
  'names_found',
  'names_other',
  'invented_name',
  'no_query',
] as const;
export type VainSearchKind = (typeof VAIN_SEARCH_KINDS)[number];

export interface SearchTitles {
  /** Titles of the supporting passages the episode had not found. */
  missing: readonly string[];
  /** Titles of those it had found. */
  found: readonly string[];
  /** Every title of the split's corpus (or at least of its questions' passages). */
  all: readonly string[];
}

export function classifyVainSearch(query: string | null, titles: SearchTitles): VainSearchKind {
  if (query === null) return 'no_query';
  const names = (list: readonly string[]) =>
    list.some((title) => {
      const t = normalizeAnswer(title);
      return t !== '' && containsWords(query, t);
    });
  if (names(titles.missing)) return 'names_missing';
  if (names(titles.found)) return 'names_found';
  if (names(titles.all)) return 'names_other';
  return 'invented_name';
}

// Where an answer's words come from, read against what the episode had in front of it when it answered:
//   no_answer       no answer
//   yes_no          "yes" or "no": a choice, not a copy
//   from_question   words of the question (a comparison's answer is one of its two names)
//   from_results    words of a tool result the policy read, not of the question (a passage's entity,
//                   the right one or not, or a year a passage gave)
//   nowhere         in neither: a name miscopied or blended ("Orchards of Condbral" from the question's
//                   "Orchards of Stasbreix" and "Tide of Condbral"), a year no passage gave, or an answer
//                   with no words left after normalising
// Right answers are sorted too: a right bridge answer is from_results, a right comparison from_question.
// Texts compare as EM normalises answers, the answer matching whole words only; the question comes
// first, so a name in both is from_question. docs/results.md reads the held-out answers this way
// (forty-first session).
export const ANSWER_SOURCES = ['no_answer', 'yes_no', 'from_question', 'from_results', 'nowhere'] as const;
export type AnswerSource = (typeof ANSWER_SOURCES)[number];

export function classifyAnswerSource(
  trajectory: Pick<Trajectory, 'prediction' | 'question' | 'turnRecords'>,
): AnswerSource {
  if (trajectory.prediction === null) return 'no_answer';
  const answer = normalizeAnswer(trajectory.prediction);
  if (answer === 'yes' || answer === 'no') return 'yes_no';
  if (answer === '') return 'nowhere';
  if (containsWords(trajectory.question, answer)) return 'from_question';
  // Only results the policy read (as episodeEvidence): the last turn's are not appended when it ends.
  if (trajectory.turnRecords.some((t) => t.resultAppended && containsWords(t.toolResultText, answer)))
    return 'from_results';
  return 'nowhere';
}

/** Whether `text`, normalised as EM normalises answers, holds `words` (already normalised) as whole words. */
function containsWords(text: string, words: string): boolean {
  return ` ${normalizeAnswer(text)} `.includes(` ${words} `);
}
