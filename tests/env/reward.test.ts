import { describe, expect, it } from 'vitest';
import { parseTurn } from '../../src/env/parse.ts';
import {
  exactMatchScore,
  f1Parts,
  f1Score,
  formatScore,
  maxOverGolds,
  normalizeAnswer,
  outcomeReward,
  scoreAnswer,
  substringExactMatchScore,
} from '../../src/env/reward.ts';

// Expected values worked by hand and checked against hotpot_evaluate_v1.py's functions under Python 3.
describe('normalizeAnswer (official HotpotQA normalisation)', () => {
  const cases: [string, string][] = [
    ['The Cat!', 'cat'],
    ['  A   quick\tbrown fox.  ', 'quick brown fox'],
    ['an apple a day', 'apple day'],
    ['Theater', 'theater'], // "the" inside a word stays
    ['U.S.A.', 'usa'],
    ['rock-n-roll', 'rocknroll'], // punctuation goes before articles are looked for
    ['a-the-an', 'athean'],
    ['the_cat', 'thecat'], // '_' is in string.punctuation
    ["l'été", 'lété'], // non-ASCII letters are kept
    ['éa b', 'éa b'], // Python's \b is Unicode-aware: é is a word character, so "a" is no article here
    ['Ça a été', 'ça été'],
    ['THE  Beatles', 'beatles'],
    ['a\u00a0b\u2003the c', 'b c'], // Unicode white space splits like str.split()
    ['x\x1cy', 'x y'], // so do the ASCII separators Python counts as white space
    ['Ångström the—end', 'ångström —end'], // the em dash is not ASCII punctuation
    ['1,000 a.m.', '1000 am'],
    ['', ''],
  ];
  it.each(cases)('%j → %j', (input, expected) => {
    expect(normalizeAnswer(input)).toBe(expected);
  });
});

describe('exact match and F1', () => {
  it('EM compares normalised strings', () => {
    expect(exactMatchScore('The Beatles.', 'beatles')).toBe(1);
    expect(exactMatchScore('Beatles band', 'beatles')).toBe(0);
    expect(exactMatchScore('the', 'a')).toBe(1); // both normalise to ""
  });

  it('token F1 with precision and recall', () => {
    expect(f1Parts('the cat sat', 'cat sat down')).toEqual({ f1: 0.8, precision: 1, recall: 2 / 3 });
    expect(f1Parts('Paris, France', 'paris')).toEqual({ f1: 2 / 3, precision: 0.5, recall: 1 });
    // Counter intersection: min counts per token.
    expect(f1Score('x x y', 'x y y')).toBeCloseTo(2 / 3, 12);
  });

  it('F1 yes / no / noanswer rule', () => {
    expect(f1Score('yes', 'no')).toBe(0);
    expect(f1Score('yes it is', 'yes')).toBe(0); // gold is special and differs
    expect(f1Score('no', 'No.')).toBe(1);
    expect(f1Score('noanswer', 'no answer')).toBe(0);
  });

  it('F1 is 0 with no common token or an empty side', () => {
    expect(f1Score('', 'x')).toBe(0);
    expect(f1Score('the', 'a')).toBe(0); // both empty after normalisation: no common token
    expect(f1Score('red', 'blue')).toBe(0);
  });

  it("substring EM is Agent-R1's subem_check (character substring of normalised strings)", () => {
    expect(substringExactMatchScore('It was Paris, France.', 'paris')).toBe(1);
    expect(substringExactMatchScore('par', 'paris')).toBe(0);
    expect(substringExactMatchScore('unknown', 'no')).toBe(1); // the known weakness of the metric
  });

  it('takes the max over gold answers and aliases', () => {
    expect(maxOverGolds(exactMatchScore, 'Stanley Hall', ['G. Stanley Hall', 'Stanley Hall'])).toBe(1);
    expect(maxOverGolds(f1Score, 'Hall', ['G. Stanley Hall', 'Hall of Fame'])).toBeCloseTo(0.5, 12);
    expect(maxOverGolds(f1Score, 'x', [])).toBe(0);
    expect(scoreAnswer(null, ['x'])).toEqual({ em: 0, f1: 0, subEm: 0 });
    expect(scoreAnswer('G Stanley Hall', ['G. Stanley Hall'])).toEqual({ em: 1, f1: 1, subEm: 1 });
  });
});

describe('format score and outcome reward', () => {
  const call =
    '<think>\nlook\n</think>\n\n<tool_call>\n{"name": "search", "arguments": {"query": "x"}}\n</tool_call>';
  const answer = (a: string) => `<think>\nso\n</think>\n\n<answer>${a}</answer>`;
  const turns = (...texts: string[]) => texts.map((t) => parseTurn(t));

  it('f = 1 for well-formed tool turns followed by an answer', () => {
    expect(formatScore(turns(call, call, answer('x')), 1)).toBe(1);
    expect(formatScore(turns(answer('x')), 1)).toBe(1); // no tool turns: that half counts as complete
  });

  it('partial credit: half for the tool turns (by share), half for the final answer', () => {
    expect(formatScore(turns(call, 'garbage <tool_call>', answer('x')), 1)).toBe(0.75);
    expect(formatScore(turns(call, call), 1)).toBe(0.5); // no final answer
    expect(formatScore(turns('plain text'), 1)).toBe(0.5);
    expect(formatScore([], 1)).toBe(0);
  });

  it('too many calls in a turn is malformed; requireThink demands <think>', () => {
    const two = `${call}\n${call.slice(call.indexOf('<tool_call>'))}`;
    expect(formatScore(turns(two, answer('x')), 1)).toBe(0.5);
    expect(formatScore(turns(two, answer('x')), 2)).toBe(1);
    expect(formatScore(turns('<answer>x</answer>'), 1, true)).toBe(0.5);
    expect(formatScore(turns('<answer>x</answer>'), 1, false)).toBe(1);
  });

  it('format gates the answer: outcome = -1 + f + (f = 1 ? answer : 0)', () => {
    const good = outcomeReward(turns(call, answer('Paris')), ['paris'], 1);
    expect(good).toMatchObject({ formatScore: 1, formatValid: true, prediction: 'Paris', em: 1, outcome: 1 });
    const wrong = outcomeReward(turns(call, answer('Rome')), ['paris'], 1);
    expect(wrong.outcome).toBe(0);
    // Right answer, broken format: the answer earns nothing.
    const broken = outcomeReward(turns('<tool_call>{bad', answer('Paris')), ['paris'], 1);
    expect(broken).toMatchObject({ formatScore: 0.5, formatValid: false, em: 1, outcome: -0.5 });
  });

  it('weights and metric are configurable', () => {
    const config = {
      metric: 'f1' as const,
      base: 0,
      formatWeight: 0.2,
      answerWeight: 2,
      requireThink: false,
    };
    const r = outcomeReward(turns(call, answer('Paris France')), ['paris'], 1, config);
    expect(r.answerScore).toBeCloseTo(2 / 3, 12);
    expect(r.outcome).toBeCloseTo(0.2 + (2 * 2) / 3, 12);
    const sub = outcomeReward(turns(answer('in Paris')), ['paris'], 1, { ...config, metric: 'subem' });
    expect(sub.answerScore).toBe(1);
  });
});
