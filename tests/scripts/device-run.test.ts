// scripts/device/run.sh runs on a lent GPU machine, where a mistake costs device time that cannot be
// had back: here, without a GPU, the script must parse, every run its `learn` part starts by default
// must be a committed config that validates. (It is not run here: it unpacks packages over /.)
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseConfigText } from '../../src/rl/config.ts';

const script = 'scripts/device/run.sh';
const text = readFileSync(script, 'utf8');

describe('scripts/device/run.sh', () => {
  it('parses (bash -n)', () => {
    const r = spawnSync('bash', ['-n', script], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
  });

  it("names committed, valid configs for the learn part's runs, the SFT and the replay", () => {
    const runs = text.match(/learn_runs=\(\$\{LEARN_RUNS:-([^}]+)\}\)/);
    expect(runs, 'the default LEARN_RUNS list').not.toBeNull();
    const names = runs![1].trim().split(/\s+/);
    expect(names.length).toBeGreaterThan(1);
    const sft = text.match(/SFT_CONFIG:-(configs\/[\w.-]+\.json)/);
    const replay = text.match(/--config (configs\/[\w.-]+\.json) --evaluate-only/);
    expect(sft).not.toBeNull();
    expect(replay).not.toBeNull();
    const files = [...names.map((n) => `configs/${n}.json`), sft![1], replay![1]];
    for (const f of files) expect(() => parseConfigText(readFileSync(f, 'utf8'), f), f).not.toThrow();
    // Each RL run is named after its config, so its run folder and log say which one it was.
    for (const n of names) expect(JSON.parse(readFileSync(`configs/${n}.json`, 'utf8')).name).toBe(n);
  });
});
