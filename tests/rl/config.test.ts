import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ConfigError, DEFAULT_CONFIG, parseConfigText, resolveConfig } from '../../src/rl/config.ts';

describe('train config', () => {
  it('fills every missing key with the working default', () => {
    const c = resolveConfig({ name: 'x', actor: { lr: 3e-5 } });
    expect(c.actor.lr).toBe(3e-5);
    expect(c.actor.clipRatioLow).toBe(DEFAULT_CONFIG.actor.clipRatioLow);
    expect(c.rollout).toEqual(DEFAULT_CONFIG.rollout);
    expect(resolveConfig({})).toEqual(DEFAULT_CONFIG);
  });

  it('names the bad key: unknown keys, wrong types, out-of-range values', () => {
    const bad: Array<[unknown, string]> = [
      [{ actor: { lrr: 1 } }, '"actor.lrr" is not a known key of "actor"'],
      [{ algorithm: { name: 'ppo2' } }, '"algorithm.name" must be one of'],
      [{ rollout: { samplesPerQuestion: 1.5 } }, '"rollout.samplesPerQuestion" must be an integer'],
      [{ actor: { lossAggMode: 'mean' } }, '"actor.lossAggMode" must be one of'],
      [{ actor: 3 }, '"actor" must be an object'],
      [{ actor: { betas: [0.9] } }, '"actor.betas" needs at least 2 entries'],
      [{ task: { hops: [5] } }, '"task.hops[0]" must be <= 4'],
      [{ seed: 'one' }, '"seed" must be a number'],
      [{ name: 'a b' }, '"name" may hold only'],
      [{ rollout: { samplesPerQuestion: 1 } }, 'must be >= 2 for grpo'],
      [{ actor: { miniBatches: 3 } }, '"actor.miniBatches" must divide the 16 episodes'],
      [{ train: { microBatchRows: -1 } }, '"train.microBatchRows" must be >= 0'],
      [{ train: { microBatchRows: 1.5 } }, '"train.microBatchRows" must be an integer'],
      [{ sft: { copySpan: 1 } }, '"sft.copySpan" must be >= 2'],
      [{ sft: { copyRows: 0.5 } }, '"sft.copyRows" must be an integer'],
      [{ sft: { inputNoise: 1 } }, '"sft.inputNoise" must be <= 0.95'],
      [{ sft: { inputNoise: -0.1 } }, '"sft.inputNoise" must be >= 0'],
      [{ sft: { worlds: 4097 } }, '"sft.worlds" must be <= 4096'],
      [{ sft: { traces: 10, worlds: 11 } }, 'more worlds than sft.traces (10)'],
      [{ task: { trainWorldSeeds: [3, 4, 3] } }, '"task.trainWorldSeeds" repeats a seed'],
      [{ reward: { answerWeight: -1 } }, '"reward.answerWeight" must be >= 0'],
      [{ reward: { formatWeight: 'one' } }, '"reward.formatWeight" must be a number'],
      [{ task: { trainWorldSeeds: [1.5] } }, '"task.trainWorldSeeds[0]" must be an integer'],
      [{ task: { trainSize: 2, trainWorldSeeds: [1, 2, 3] } }, 'has 3 worlds for task.trainSize 2'],
      [
        { algorithm: { name: 'ppo', filterGroups: true } },
        '"algorithm.filterGroups" works with grpo, drgrpo, rloo, reinforce++, reinforce++-baseline, not ppo',
      ],
      [
        { algorithm: { name: 'reinforce++', filterGroups: true }, rollout: { samplesPerQuestion: 1 } },
        'needs rollout.samplesPerQuestion >= 2',
      ],
      [{ algorithm: { filterGroups: true }, actor: { miniBatches: 2 } }, 'needs actor.miniBatches 1'],
      [{ algorithm: { filterGroups: 1 } }, '"algorithm.filterGroups" must be'],
      [
        { algorithm: { name: 'ppo', oracleTraces: true } },
        '"algorithm.oracleTraces" works with the group estimators grpo, drgrpo, rloo, reinforce++-baseline, not ppo',
      ],
      [
        { algorithm: { name: 'reinforce++', oracleTraces: true } },
        'the group estimators grpo, drgrpo, rloo, reinforce++-baseline, not reinforce++',
      ],
      [{ algorithm: { oracleTraces: true }, actor: { ppoEpochs: 2 } }, 'needs one update per step'],
      [{ algorithm: { oracleTraces: true }, actor: { miniBatches: 2 } }, 'got 1 × 2'],
      [{ algorithm: { oracleTraces: 'yes' } }, '"algorithm.oracleTraces" must be'],
      [
        { algorithm: { name: 'grpo' }, ablation: { whitenOver: 'policy' } },
        '"ablation.whitenOver" "policy" applies to PPO\'s GAE only, not grpo',
      ],
      [
        { ablation: { whitenOver: 'env' } },
        '"ablation.whitenOver" must be one of "advantage-mask", "policy"',
      ],
      [
        { algorithm: { filterGroups: true }, reward: { klInRewardCoef: 0.1 } },
        'not with reward.klInRewardCoef > 0',
      ],
      [[], 'must be a JSON object'],
    ];
    for (const [raw, message] of bad) {
      expect(() => resolveConfig(raw), JSON.stringify(raw)).toThrow(ConfigError);
      expect(() => resolveConfig(raw), JSON.stringify(raw)).toThrow(message);
    }
  });

  it('parses file text with a BOM and names the file on a syntax error', () => {
    expect(parseConfigText('\uFEFF{"name": "bom"}', 'a.json').name).toBe('bom');
    expect(() => parseConfigText('{"name": ', 'configs/broken.json')).toThrow(
      /configs\/broken\.json is not valid JSON/,
    );
    expect(() => parseConfigText('{"actor": {"lrr": 1}}', 'configs/x.json')).toThrow(
      /"actor\.lrr".*\(in configs\/x\.json\)/,
    );
  });

  it('accepts every committed config', () => {
    const files = readdirSync('configs').filter((f) => f.endsWith('.json'));
    expect(files.length).toBeGreaterThan(0);
    for (const f of files)
      expect(() => parseConfigText(readFileSync(`configs/${f}`, 'utf8'), f), f).not.toThrow();
  });
});
