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

  it("names committed, valid configs for the learn part's runs and the replay, and a bundled warm start", () => {
    const runs = text.match(/learn_runs=\(\$\{LEARN_RUNS:-([^}]+)\}\)/);
    expect(runs, 'the default LEARN_RUNS list').not.toBeNull();
    const names = runs![1].trim().split(/\s+/);
    expect(names.length).toBeGreaterThan(1);
    // Without SFT_CONFIG the runs start from WARM_START, by default a committed model folder.
    const warm = text.match(/warm=\$\{WARM_START:-([\w./-]+)\}/);
    expect(warm, 'the default WARM_START').not.toBeNull();
    expect(JSON.parse(readFileSync(`${warm![1]}/config.json`, 'utf8')).model_type).toMatch(/^qwen[23]$/);
    const replay = text.match(/--config (configs\/[\w.-]+\.json) --evaluate-only/);
    expect(replay).not.toBeNull();
    const files = [...names.map((n) => `configs/${n}.json`), replay![1]];
    for (const f of files) expect(() => parseConfigText(readFileSync(f, 'utf8'), f), f).not.toThrow();
    // Each RL run is named after its config, so its run folder and log say which one it was.
    for (const n of names) expect(JSON.parse(readFileSync(`configs/${n}.json`, 'utf8')).name).toBe(n);
  });

  it('continues carried runs with --resume and does not replay their carried checkpoints', () => {
    // A continuation that restarts AdamW and the KL reference is not the same run (forty-third session).
    expect(text).toMatch(/cp -r "\$LEARN_RESUME\/\$cfg" "\$runs\/\$cfg" && resume=--resume/);
    expect(text).toMatch(/--out "\$runs\/\$cfg" \$resume --minutes/);
    expect(text).toMatch(/grep -qx "\$step" "\$runs\/\$cfg\/\.carried" 2>\/dev\/null && continue/);
    // LEARN_PACK=full keeps the optimizer state that --resume reads; the default leaves it out.
    expect(text).toMatch(/LEARN_PACK:-policy\} == full \]\]; then\n\s+per_file=1\n\s+excludes=\(\)/);
  });

  it('gives each of the runs sharing the GPU a memory budget', () => {
    // Six runs without one ran out of memory on an H100 (twenty-fifth session).
    expect(text).toMatch(/share=\$\(\(gpu_mib \* 85 \/ 100 \/ \$\{#learn_runs\[@\]\}\)\)/);
    expect(text).toMatch(
      /scripts\/train\.js --config "configs\/\$cfg\.json"[^\n]*\\\n[^\n]*\$\{share:\+--memory-budget "\$share"\}/,
    );
  });
});
