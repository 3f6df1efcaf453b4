// npm run -s probe:adv-mask -- RUN_DIR [--json FILE]
// How much the advantage mask changes the advantages, on a run's own rollouts and critic: for each
// arrays/step-XXXXXX.json of a run trained with train.saveArrays, GAE with the mask (over the policy's
// tokens, Agent-R1) and without it (over every response token, the ablation), from the same rewards and
// the same critic values, each whitened over its own mask as the trainer does (src/rl/step-arrays.ts,
// the CPU float64 twin of the kernel). Printed per step, on the policy's tokens of each episode's last
// turn and of its earlier turns: mean |advantage| of each arm, their correlation and sign agreement, each
// arm's correlation with the episode's reward (how much of the outcome reaches those tokens); the
// whitening's mean and standard deviation of each arm (without the mask over every response token, or
// over the policy's where the run's ablation.whitenOver is "policy"); and the largest gap between the advantages the
// run's GPU kernel produced and the CPU twin of the run's own arm. γ and λ come from the run's
// config.json. Bad input (no folder, no arrays, a malformed file) is one line and exit 2.
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import {
  type AdvantageMaskComparison,
  compareAdvantageMasks,
  parseStepArrays,
} from '../src/rl/step-arrays.ts';
import { keepWorkingWhenStdoutCloses } from './closed-stdout.ts';

keepWorkingWhenStdoutCloses();

function fail(message: string): never {
  console.error(`probe:adv-mask: ${message}`);
  process.exit(2);
}

const { values, positionals } = (() => {
  try {
    return parseArgs({ options: { json: { type: 'string' } }, allowPositionals: true });
  } catch (e) {
    fail((e as Error).message);
  }
})();
if (positionals.length !== 1) fail('usage: npm run -s probe:adv-mask -- RUN_DIR [--json FILE]');
const run = positionals[0];
const configPath = join(run, 'config.json');
if (!existsSync(configPath)) fail(`${run} has no config.json (is it a run folder?)`);
let algorithm: { name?: string; gamma?: number; lam?: number };
let whitenOver: 'advantage-mask' | 'policy';
try {
  const config = JSON.parse(readFileSync(configPath, 'utf8')) as {
    algorithm?: typeof algorithm;
    ablation?: { whitenOver?: typeof whitenOver };
  };
  algorithm = config.algorithm ?? {};
  whitenOver = config.ablation?.whitenOver ?? 'advantage-mask';
} catch (e) {
  fail(`${configPath}: ${(e as Error).message}`);
}
if (whitenOver !== 'advantage-mask' && whitenOver !== 'policy')
  fail(`${configPath}: ablation.whitenOver must be "advantage-mask" or "policy"`);
const { gamma, lam } = algorithm;
if (typeof gamma !== 'number' || typeof lam !== 'number')
  fail(`${configPath} names no algorithm.gamma and algorithm.lam`);
const dir = join(run, 'arrays');
const files = existsSync(dir)
  ? readdirSync(dir)
      .filter((f) => /^step-\d+\.json$/.test(f))
      .sort()
  : [];
if (files.length === 0)
  fail(
    `${run} has no arrays/step-*.json: train it with "train": { "saveArrays": true } or npm run train -- --save-arrays`,
  );

const results: AdvantageMaskComparison[] = [];
for (const f of files) {
  const path = join(dir, f);
  let file: ReturnType<typeof parseStepArrays>;
  try {
    file = parseStepArrays(readFileSync(path, 'utf8'), path);
  } catch (e) {
    fail((e as Error).message);
  }
  results.push(compareAdvantageMasks(file, { gamma, lam, whitenOver }));
}

const n = (x: number, d = 3) => (Number.isFinite(x) ? x.toFixed(d) : '–');
const e = (x: number) => (Number.isFinite(x) ? x.toExponential(1) : '–');
const first = results[0];
console.log(
  `${run}: ${algorithm.name ?? '?'}, γ ${gamma}, λ ${lam}; without the mask whitened over ${whitenOver === 'policy' ? "the policy's tokens" : 'every response token'}; the run's own arm: ${first.runArm === 'masked' ? 'with the advantage mask' : first.runArm === 'unmasked' ? 'without it' : 'neither (another ablation)'}; ${first.hasValues ? "the critic's values as GAE read them" : 'no critic values (0 everywhere)'}`,
);
console.log('');
console.log(
  '| step | rows | turn | policy tokens | mean \\|A\\| with mask | mean \\|A\\| without | correlation | same sign | corr. with reward, with mask | without | raw mean / std with mask | without | GPU − CPU max |',
);
console.log('|---|---|---|---|---|---|---|---|---|---|---|---|---|');
for (const r of results) {
  const rows: Array<[string, typeof r.lastTurn]> = [
    ['last', r.lastTurn],
    ['earlier', r.earlierTurns],
    ['all', r.all],
  ];
  rows.forEach(([name, s], k) => {
    const w = r.whitening;
    console.log(
      `| ${k === 0 ? r.step : ''} | ${k === 0 ? r.rows : ''} | ${name} | ${s.tokens} | ${n(s.meanAbsMasked)} | ${n(s.meanAbsUnmasked)} | ${n(s.correlation)} | ${n(s.signAgreement)} | ${n(s.rewardCorrelationMasked)} | ${n(s.rewardCorrelationUnmasked)} | ${k === 0 ? `${n(w.masked.mean, 4)} / ${n(w.masked.std, 4)}` : ''} | ${k === 0 ? `${n(w.unmasked.mean, 4)} / ${n(w.unmasked.std, 4)}` : ''} | ${k === 0 ? e(r.gpuVsCpuMaxAbs) : ''} |`,
    );
  });
}
if (values.json) {
  try {
    writeFileSync(values.json, `${JSON.stringify(results, null, 1)}\n`);
  } catch (e) {
    fail(`cannot write ${values.json}: ${(e as Error).message}`);
  }
}
