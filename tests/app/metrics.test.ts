// The Train screen's metric helpers: CSV and JSONL downloads, debiased EMA smoothing, and the merge of
// several runs onto one step axis with ± bands.
import { describe, expect, it } from 'vitest';
import { chartRows, metricsToCsv, metricsToJsonl, smooth } from '../../src/app/metrics.ts';
import type { StepMetrics } from '../../src/rl/trainer.ts';

describe('metrics downloads', () => {
  const lines: StepMetrics[] = [
    { step: 1, 'reward/mean': 0.5, algorithm: 'grpo' },
    { step: 1, 'eval/em': 0.25 },
    { step: 2, 'reward/mean': -1, algorithm: 'a,"b"' },
  ];
  it('CSV has every key once, step first, empty cells for missing keys, quoted text', () => {
    expect(metricsToCsv(lines)).toBe(
      'step,reward/mean,algorithm,eval/em\n1,0.5,grpo,\n1,,,0.25\n2,-1,"a,""b""",\n',
    );
  });
  it('JSONL is one object per line and parses back', () => {
    const text = metricsToJsonl(lines);
    expect(text.endsWith('\n')).toBe(true);
    expect(
      text
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l)),
    ).toEqual(lines);
  });
});

describe('smooth', () => {
  it('is the identity at weight 0', () => {
    expect(smooth([3, -1, 4], 0)).toEqual([3, -1, 4]);
  });
  it('is debiased: a constant series stays constant', () => {
    for (const v of smooth([2, 2, 2, 2], 0.9)) expect(v).toBeCloseTo(2, 12);
  });
  it('follows s_t = w s_{t-1} + (1-w) x_t / (1 - w^t)', () => {
    const w = 0.5;
    // raw EMA: 0.5, 0.5·0.5 + 0.5·3 = 1.75; debiased: 0.5/0.5 = 1, 1.75/0.75
    const [a, b] = smooth([1, 3], w);
    expect(a).toBeCloseTo(1, 12);
    expect(b).toBeCloseTo(1.75 / 0.75, 12);
  });
  it('refuses a weight outside [0, 1)', () => {
    expect(() => smooth([1], 1)).toThrow('smoothing weight must be in [0, 1), got 1');
  });
});

describe('chartRows', () => {
  it('merges runs on the step axis, skips lines without the key, adds ± bands', () => {
    const rows = chartRows(
      [
        {
          id: 'a',
          lines: [
            { step: 1, 'reward/mean': 1, 'reward/std': 0.5 },
            { step: 1, 'eval/em': 1 },
            { step: 2, 'reward/mean': 2, 'reward/std': 0 },
          ],
        },
        {
          id: 'b',
          lines: [
            { step: 2, 'reward/mean': -1 },
            { step: 3, 'reward/mean': 0 },
          ],
        },
      ],
      'reward/mean',
      0,
      'reward/std',
    );
    expect(rows).toEqual([
      { step: 1, a: 1, 'a:band': [0.5, 1.5] },
      { step: 2, a: 2, 'a:band': [2, 2], b: -1 },
      { step: 3, b: 0 },
    ]);
  });
});
