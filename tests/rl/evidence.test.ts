// episodeEvidence, summarizeEvidence, classifyVainSearch and classifyAnswerSource (src/rl/evidence.ts): what
// an episode's searches had found when it answered, the outcome that sorts a wrong answer into behaviour
// (none found, stopped short, no answer) or reading (all found), what a fruitless search asked for, and
// where the answer's words came from.
import { describe, expect, it } from 'vitest';
import {
  classifyAnswerSource,
  classifyVainSearch,
  type EpisodeEvidence,
  episodeEvidence,
  summarizeEvidence,
} from '../../src/rl/evidence.ts';
import type { Trajectory } from '../../src/rl/rollout.ts';

/** A search that ran: its query and the gold passages it returned for the first time. */
const search = (query: string, newGoldIds: string[] = []) => ({
  name: 'search',
  arguments: { query },
  status: 'executed',
  retrievedIds: [...newGoldIds, 'x'],
  newGoldIds,
});
/** A turn with these calls; its results appended unless told otherwise. */
const turn = (calls: object[], resultAppended = true) => ({ calls, resultAppended });
const episode = (prediction: string | null, em: number, turns: object[]) =>
  ({ prediction, outcome: { em }, turnRecords: turns }) as unknown as Trajectory;
const answerTurn = turn([]);

describe('episodeEvidence', () => {
  const support = ['p1', 'p2'];

  it('is right whenever EM is 1, and counts what was found', () => {
    expect(
      episodeEvidence(episode('Port Vel', 1, [turn([search('a', ['p1'])]), answerTurn]), support),
    ).toEqual({
      supportingPassages: 2,
      supportingRetrieved: 1,
      outcome: 'right',
      missingIds: ['p2'],
    });
  });

  it('sorts a wrong answer by the supporting passages found: none, some then stopped, some then in vain, all', () => {
    expect(episodeEvidence(episode('x', 0, [turn([search('q')]), answerTurn]), support)).toEqual({
      supportingPassages: 2,
      supportingRetrieved: 0,
      outcome: 'wrong_no_evidence',
      missingIds: ['p1', 'p2'],
      lastVainQuery: 'q',
    });
    // Found p2 with its last search, then answered: a hop not taken.
    expect(
      episodeEvidence(episode('x', 0, [turn([search('a'), search('b', ['p2'])]), answerTurn]), support),
    ).toEqual({
      supportingPassages: 2,
      supportingRetrieved: 1,
      outcome: 'wrong_stopped_short',
      missingIds: ['p1'],
    });
    // Found p2, then searched again and found nothing new: a hop taken with the wrong query.
    const inVain = episode('x', 0, [
      turn([search('a', ['p2'])]),
      turn([search('b')]),
      turn([search('c')]),
      answerTurn,
    ]);
    expect(episodeEvidence(inVain, support)).toEqual({
      supportingPassages: 2,
      supportingRetrieved: 1,
      outcome: 'wrong_missed_hop',
      missingIds: ['p1'],
      lastVainQuery: 'c',
    });
    // A search that returns p2 again finds nothing new: still in vain.
    const again = episode('x', 0, [turn([search('a', ['p2'])]), turn([search('a', ['p2'])]), answerTurn]);
    expect(episodeEvidence(again, support).outcome).toBe('wrong_missed_hop');
    // A call that did not run is not a search.
    const failed = { name: 'search', status: 'invalid_arguments', arguments: null };
    const notRun = episode('x', 0, [turn([search('a', ['p2'])]), turn([failed]), answerTurn]);
    expect(episodeEvidence(notRun, support).outcome).toBe('wrong_stopped_short');
    // A retrieval without a string query: in vain, query null.
    const noQuery = { ...search('a'), arguments: { q: 'a' } };
    expect(episodeEvidence(episode('x', 0, [turn([noQuery]), answerTurn]), support).lastVainQuery).toBeNull();
    // Two calls in one turn and a second turn: the union, each passage once.
    const all = episode('x', 0, [
      turn([search('a', ['p1']), search('b')]),
      turn([search('c', ['p2', 'p1'])]),
      answerTurn,
    ]);
    expect(episodeEvidence(all, support)).toEqual({
      supportingPassages: 2,
      supportingRetrieved: 2,
      outcome: 'wrong_all_evidence',
      missingIds: [],
    });
  });

  it('an unanswered episode is no_answer wherever its searches got', () => {
    expect(episodeEvidence(episode(null, 0, [turn([search('a', ['p1', 'p2'])])]), support)).toMatchObject({
      supportingRetrieved: 2,
      outcome: 'no_answer',
    });
  });

  it('does not count results the policy never read, nor ids the task does not name', () => {
    // The last turn searched and the episode ended there (its results were not appended).
    const cut = episode('x', 0, [turn([search('a', ['p1'])]), turn([search('b', ['p2'])], false)]);
    expect(episodeEvidence(cut, support)).toMatchObject({
      supportingRetrieved: 1,
      outcome: 'wrong_stopped_short',
    });
    expect(episodeEvidence(episode('x', 0, [turn([search('a', ['q9'])])]), support).outcome).toBe(
      'wrong_no_evidence',
    );
    // Duplicated ids in the task count once.
    expect(episodeEvidence(episode('x', 0, [turn([search('a', ['p1'])])]), ['p1', 'p1']).outcome).toBe(
      'wrong_all_evidence',
    );
  });

  it('a wrong answer on a task that names no supporting passage is wrong_unknown, not "all found"', () => {
    expect(episodeEvidence(episode('x', 0, [turn([search('a', ['p1'])])]), [])).toMatchObject({
      supportingPassages: 0,
      supportingRetrieved: 0,
      outcome: 'wrong_unknown',
    });
  });
});

describe('summarizeEvidence', () => {
  it('gives every outcome a share and the mean recall over tasks that name passages', () => {
    const e = (outcome: EpisodeEvidence['outcome'], k: number, n: number): EpisodeEvidence => ({
      outcome,
      supportingRetrieved: k,
      supportingPassages: n,
      missingIds: [],
    });
    const s = summarizeEvidence([
      e('right', 2, 2),
      e('wrong_missed_hop', 1, 2),
      e('no_answer', 0, 2),
      e('wrong_unknown', 0, 0),
    ]);
    expect(s.byOutcome).toEqual({
      right: 0.25,
      no_answer: 0.25,
      wrong_no_evidence: 0,
      wrong_stopped_short: 0,
      wrong_missed_hop: 0.25,
      wrong_all_evidence: 0,
      wrong_unknown: 0.25,
    });
    // (1 + 0.5 + 0) / 3: the task without supporting passages is left out.
    expect(s.supportingRecall).toBeCloseTo(0.5, 12);
    expect(summarizeEvidence([]).supportingRecall).toBe(0);
    expect(Object.values(summarizeEvidence([]).byOutcome).every((x) => x === 0)).toBe(true);
  });
});

describe('classifyVainSearch', () => {
  const all = [
    'Geiheth University',
    'Wenba Zuskound',
    'Borke',
    'The Machine at Wabriax',
    'Moundsond Studios',
  ];

  it('names the title a fruitless query contains: missing, already found, another, none', () => {
    const titles = { missing: ['Wenba Zuskound'], found: ['Geiheth University'], all };
    expect(classifyVainSearch(' Wenba Zuskound', titles)).toBe('names_missing');
    expect(classifyVainSearch('born year of wenba zuskound?', titles)).toBe('names_missing');
    expect(classifyVainSearch(' Geiheth University', titles)).toBe('names_found');
    // A real entity that is not one the question needs (a city beside a common word counts).
    expect(classifyVainSearch(' Borke university', titles)).toBe('names_other');
    // Articles go as EM's normalisation drops them.
    expect(classifyVainSearch('Machine at Wabriax', titles)).toBe('names_other');
    // Names no passage has: part of a name, a blend, a name inside a longer word.
    expect(classifyVainSearch(' Wenba Z', titles)).toBe('invented_name');
    expect(classifyVainSearch(' Moundsondkous', titles)).toBe('invented_name');
    expect(classifyVainSearch('Borkes', titles)).toBe('invented_name');
    expect(classifyVainSearch(null, titles)).toBe('no_query');
  });

  it('prefers the missing title when the query names several', () => {
    const titles = { missing: ['Borke'], found: ['Wenba Zuskound'], all };
    expect(classifyVainSearch('Wenba Zuskound Borke', titles)).toBe('names_missing');
    expect(classifyVainSearch('Wenba Zuskound Geiheth University', titles)).toBe('names_found');
  });
});

describe('classifyAnswerSource', () => {
  const question = 'Which came out first, the album Orchards of Stasbreix or the novel Tide of Condbral?';
  // A turn whose tool result the policy read (or not), rendered as the template does.
  const read = (text: string, resultAppended = true) => ({
    resultAppended,
    toolResultText: `<|im_start|>user\n<tool_response>\n${text}\n</tool_response><|im_end|>\n`,
  });
  const results = [
    read('1. Orchards of Wabriax: Orchards of Wabriax is a 1954 album recorded by Necoul Talmoth.'),
    read('1. Tide of Condbral: The novel Tide of Condbral appeared in 1963.'),
  ];
  const answer = (prediction: string | null, turns: object[] = results) =>
    classifyAnswerSource({ prediction, question, turnRecords: turns } as unknown as Trajectory);

  it('sorts an answer by the text its words are in: the question first, then the results read', () => {
    expect(answer(null)).toBe('no_answer');
    expect(answer('Yes')).toBe('yes_no');
    expect(answer(' no.')).toBe('yes_no');
    // Either of the question's names, right or wrong, cased and punctuated as EM normalises.
    expect(answer('Orchards of Stasbreix')).toBe('from_question');
    expect(answer('tide of condbral!')).toBe('from_question');
    // A name in both is the question's.
    expect(answer('Tide of Condbral', [read('Tide of Condbral: a novel.')])).toBe('from_question');
    // The wrong entity of a passage read, and a year a passage gave.
    expect(answer('Orchards of Wabriax')).toBe('from_results');
    expect(answer('1954')).toBe('from_results');
    expect(answer('Necoul Talmoth')).toBe('from_results');
  });

  it('is nowhere for a blend, a partial word, an unread result or nothing left after normalising', () => {
    // Two of the question's names blended: every word is in the question, the phrase is not.
    expect(answer('Orchards of Condbral')).toBe('nowhere');
    expect(answer('Orchards of Stas')).toBe('nowhere');
    expect(answer('2003')).toBe('nowhere');
    // The last turn's results end the episode unread.
    expect(answer('Orchards of Wabriax', [read('Orchards of Wabriax: an album.', false)])).toBe('nowhere');
    expect(answer('the')).toBe('nowhere');
    expect(answer('')).toBe('nowhere');
  });
});
