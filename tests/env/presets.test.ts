// Task presets (src/env/presets.ts) and the oracle's compact style: 'default' is today's settings,
// 'compact' still solves the synthetic task with much shorter episodes.

import { describe, expect, it } from 'vitest';
import { evaluate } from '../../src/env/evaluate.ts';
import { parseTurn } from '../../src/env/parse.ts';
import { createOraclePolicy, type OracleStyle } from '../../src/env/policies/oracle.ts';
import { TASK_PRESETS, taskPreset } from '../../src/env/presets.ts';
import { DEFAULT_SYSTEM_PROMPT } from '../../src/env/prompt.ts';
import { generateSyntheticDataset } from '../../src/env/tasks/synthetic.ts';
import {
  DEFAULT_SEARCH_DESCRIPTION,
  DEFAULT_SEARCH_MAX_CHARS,
  DEFAULT_SEARCH_TOP_K,
  pooledSearchTools,
} from '../../src/env/tools/search.ts';

const TEST = generateSyntheticDataset({ seed: 1, trainSize: 50, testSize: 100 }).test;

async function runPreset(name: 'default' | 'compact', style: OracleStyle) {
  const preset = TASK_PRESETS[name];
  return evaluate(createOraclePolicy({ style }), TEST.tasks, {
    tools: pooledSearchTools(TEST.corpus, preset.search),
    env: { systemPrompt: preset.systemPrompt },
  });
}

const thinkLines = (turn: string) => (parseTurn(turn).think ?? '').split('\n');

describe('task presets', () => {
  it("'default' is today's prompt, search settings and oracle", () => {
    expect(TASK_PRESETS.default).toEqual({
      systemPrompt: DEFAULT_SYSTEM_PROMPT,
      search: {
        topK: DEFAULT_SEARCH_TOP_K,
        maxChars: DEFAULT_SEARCH_MAX_CHARS,
        description: DEFAULT_SEARCH_DESCRIPTION,
      },
      oracleStyle: 'full',
    });
    expect(taskPreset('compact')).toBe(TASK_PRESETS.compact);
    expect(() => taskPreset('tiny')).toThrow(/unknown task preset "tiny"/);
  });

  it("'compact' has a two-line prompt that names the format, top-3 search and the compact oracle", () => {
    const { systemPrompt, search, oracleStyle } = TASK_PRESETS.compact;
    expect(systemPrompt.split('\n').length).toBeLessThanOrEqual(2);
    for (const tag of ['<think>', '</think>', '<tool_call>', '</tool_call>', '<answer>', '</answer>']) {
      expect(systemPrompt).toContain(tag);
    }
    expect(search.topK).toBe(3);
    expect(search.maxChars).toBeLessThan(DEFAULT_SEARCH_MAX_CHARS / 4);
    expect(search.description.length).toBeLessThan(DEFAULT_SEARCH_DESCRIPTION.length);
    expect(oracleStyle).toBe('compact');
  });
});

describe('oracle, compact style', () => {
  it('refuses an unknown style, naming it', () => {
    expect(() => createOraclePolicy({ style: 'terse' as OracleStyle })).toThrow(/got "terse"/);
  });

  it('the default style is the full one', async () => {
    const a = await evaluate(createOraclePolicy(), TEST.tasks.slice(0, 5), {
      tools: pooledSearchTools(TEST.corpus),
    });
    const b = await runPreset('default', 'full');
    expect(a.episodes.map((e) => e.messages)).toEqual(b.episodes.slice(0, 5).map((e) => e.messages));
  });

  it('solves the compact preset (EM ≥ 0.95) with short think text and turns', async () => {
    const full = await runPreset('default', 'full');
    const compact = await runPreset('compact', 'compact');
    expect(compact.em).toBeGreaterThanOrEqual(0.95);
    expect(compact.formatErrorRate).toBe(0);
    expect(compact.turnFormatErrorRate).toBe(0);

    const assistant = (r: typeof full) =>
      r.episodes.flatMap((e) => e.messages.filter((m) => m.role === 'assistant').map((m) => m.content));
    const compactTurns = assistant(compact);
    for (const episode of compact.episodes) {
      const turns = episode.messages.filter((m) => m.role === 'assistant').map((m) => m.content);
      const seen = new Set<string>();
      for (const turn of turns) {
        const lines = thinkLines(turn);
        expect(
          lines.some((l) => l.startsWith('The question:')),
          turn,
        ).toBe(false);
        expect(lines.length, turn).toBeLessThanOrEqual(3);
        // A fact is stated once per episode, in the turn after the search that found it.
        for (const line of lines.slice(0, -1)) {
          expect(seen.has(line), line).toBe(false);
          seen.add(line);
        }
      }
      expect(thinkLines(turns[0])).toEqual([expect.stringMatching(/^Next, search for [^"]+\.$/)]);
    }
    const meanChars = (turns: string[]) => turns.reduce((n, t) => n + t.length, 0) / turns.length;
    expect(meanChars(compactTurns)).toBeLessThan(0.6 * meanChars(assistant(full)));
    const chars = (r: typeof full) =>
      r.episodes.reduce((n, e) => n + e.messages.reduce((m, x) => m + x.content.length, 0), 0);
    expect(chars(compact)).toBeLessThan(0.65 * chars(full)); // 0.59 on this split
  });
});
