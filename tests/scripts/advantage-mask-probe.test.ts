// npm run probe:adv-mask (scripts/advantage-mask-probe.ts) on a small run folder: it reads γ, λ and
// ablation.whitenOver from the run's config.json and writes what compareAdvantageMasks gives for them; bad
// input is one line on stderr and exit 2, never a stack trace.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { compareAdvantageMasks, parseStepArrays, STEP_ARRAYS_FORMAT } from '../../src/rl/step-arrays.ts';

// Positions 0..8: prompt, policy × 2, environment × 3, policy × 3; the run's arm ran without the mask.
const layout = '0' + '11' + '000' + '111';
const response = '0' + '11111111';
const stepText = JSON.stringify({
  format: STEP_ARRAYS_FORMAT,
  step: 1,
  rows: [1, 0, 1, 1].map((outcome, b) => ({
    group: b >> 1,
    length: layout.length,
    firstResponse: 1,
    policy: layout,
    advMask: response,
    rewards: outcome === 0 ? [] : [[layout.length - 1, outcome]],
    values: [0, 0.1, -0.2, 0.3, 0.05, -0.1, 0.2, 0.4, -0.3].map((v) => v * (b + 1)),
    advantages: Array(layout.length).fill(0),
  })),
});

const root = mkdtempSync(join(tmpdir(), 'adv-mask-probe-'));
function runFolder(name: string, config: unknown, arrays: string | null = stepText): string {
  const dir = join(root, name);
  mkdirSync(join(dir, 'arrays'), { recursive: true });
  writeFileSync(join(dir, 'config.json'), typeof config === 'string' ? config : JSON.stringify(config));
  if (arrays !== null) writeFileSync(join(dir, 'arrays', 'step-000001.json'), arrays);
  return dir;
}
const probe = (...args: string[]) => {
  const r = spawnSync(process.execPath, ['--import', 'tsx', 'scripts/advantage-mask-probe.ts', ...args], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
};
const ppo = (extra: object = {}) => ({ algorithm: { name: 'ppo', gamma: 1, lam: 0.9 }, ...extra });

describe('npm run probe:adv-mask', () => {
  it("writes the comparison for the run's own γ, λ and whitening, and names them", () => {
    const dir = runFolder('policy', ppo({ ablation: { advantageMask: false, whitenOver: 'policy' } }));
    const json = join(root, 'policy.json');
    const r = probe(dir, '--json', json);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain("γ 1, λ 0.9; without the mask whitened over the policy's tokens");
    expect(r.stdout).toContain("the run's own arm: without it");
    expect(
      r.stdout.split('\n').filter((l) => /^\| *(1)? *\| *(4)? *\| (last|earlier|all) \|/.test(l)),
    ).toHaveLength(3);
    const file = parseStepArrays(stepText);
    const expected = compareAdvantageMasks(file, { gamma: 1, lam: 0.9, whitenOver: 'policy' });
    const written = JSON.parse(readFileSync(json, 'utf8'));
    expect(written).toEqual(JSON.parse(JSON.stringify([expected])));
    // the config's settings matter: another λ or the default whitening gives other numbers
    const otherLam = compareAdvantageMasks(file, {
      gamma: 1,
      lam: 1,
      whitenOver: 'policy',
    });
    const otherWhiten = compareAdvantageMasks(file, {
      gamma: 1,
      lam: 0.9,
      whitenOver: 'advantage-mask',
    });
    expect(written[0].earlierTurns.meanAbsUnmasked).not.toBeCloseTo(otherLam.earlierTurns.meanAbsUnmasked, 6);
    expect(written[0].whitening.unmasked.std).not.toBeCloseTo(otherWhiten.whitening.unmasked.std, 6);
  });

  it('whitens without the mask over every response token when the config names no whitenOver', () => {
    const r = probe(runFolder('default', ppo({ ablation: { advantageMask: false } })));
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain('without the mask whitened over every response token');
  });

  const bad: Array<[string, () => string[], RegExp]> = [
    ['no run folder', () => [], /usage: npm run -s probe:adv-mask -- RUN_DIR/],
    ['a folder without config.json', () => [join(root, 'nowhere')], /has no config\.json/],
    ['a config that is not JSON', () => [runFolder('not-json', '{ algorithm')], /config\.json: /],
    [
      'an unknown whitenOver',
      () => [runFolder('whiten', ppo({ ablation: { whitenOver: 'all' } }))],
      /whitenOver must be/,
    ],
    [
      'a config without λ',
      () => [runFolder('no-lam', { algorithm: { name: 'ppo', gamma: 1 } })],
      /names no algorithm\.gamma and algorithm\.lam/,
    ],
    [
      'a run without arrays',
      () => [runFolder('no-arrays', ppo(), null)],
      /has no arrays\/step-\*\.json: train it with "train": { "saveArrays": true } or npm run train -- --save-arrays/,
    ],
    [
      'a malformed step file',
      () => [runFolder('malformed', ppo(), stepText.replace('"policy":"011000111"', '"policy":"0110"'))],
      /row 0 is malformed/,
    ],
    [
      'a --json path it cannot write',
      () => [runFolder('unwritable', ppo()), '--json', join(root, 'no', 'such', 'dir', 'x.json')],
      /cannot write/,
    ],
  ];
  for (const [what, args, message] of bad)
    it(`rejects ${what} in one line, exit 2`, () => {
      const r = probe(...args());
      expect(r.status).toBe(2);
      expect(r.stderr).toMatch(message);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).not.toMatch(/\n\s+at /);
    });
});
