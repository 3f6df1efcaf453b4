// The ONNX export CLI (scripts/export-onnx.ts) as a user runs it: qwen-tiny with a PEFT LoRA adapter
// merged in gives exactly the graph built from the merged weights; bad input is one line and exit 2.
import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadCheckpoint } from '../../src/agent/model/checkpoint.ts';
import { initLoraWeights, type LoraConfig, mergeLora, savePeftAdapter } from '../../src/agent/model/lora.ts';
import { directorySource, writeCheckpointFiles } from '../../src/agent/model/node-fs.ts';
import { buildQwenOnnx } from '../../src/agent/model/onnx-export.ts';

const run = (args: string[]) => {
  const r = spawnSync(process.execPath, ['--import', 'tsx', 'scripts/export-onnx.ts', ...args], {
    encoding: 'utf8',
    timeout: 120_000,
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
};

let dir = '';
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'export-onnx-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('npm run export:onnx', () => {
  it('merges a PEFT adapter (--adapter) and writes the graph of the merged weights', async () => {
    const ck = await loadCheckpoint(directorySource('public/models/qwen-tiny'), { requireTokenizer: true });
    const lora: LoraConfig = { rank: 2, alpha: 4, modules: ['q_proj', 'down_proj'] };
    const adapter = initLoraWeights(ck.config, lora, 3);
    for (const [name, t] of adapter) if (name.includes('lora_B')) t.data.fill(0.01);
    await writeCheckpointFiles(
      join(dir, 'adapter'),
      savePeftAdapter({ config: ck.config, lora, tensors: adapter, baseModel: 'qwen-tiny' }),
    );
    const r = run(['public/models/qwen-tiny', join(dir, 'out'), '--adapter', join(dir, 'adapter')]);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/\+ adapter .* \(merged\) → .*onnx\/model\.onnx/);
    const written = new Uint8Array(await readFile(join(dir, 'out', 'onnx', 'model.onnx')));
    const expected = buildQwenOnnx(ck.config, mergeLora(ck.config, ck.tensors, adapter, lora)).model;
    expect(Buffer.from(written).equals(Buffer.from(expected))).toBe(true);
  });

  it('bad input: one line naming the problem, exit 2, nothing written', async () => {
    const missing = run(['no/such/folder', join(dir, 'x')]);
    expect(missing.status).toBe(2);
    expect(missing.stderr).toMatch(
      /^export:onnx: cannot load the checkpoint at no\/such\/folder: .*config\.json/,
    );
    const badAdapter = run(['public/models/qwen-tiny', join(dir, 'y'), '--adapter', dir]);
    expect(badAdapter.status).toBe(2);
    expect(badAdapter.stderr).toMatch(/^export:onnx: .*adapter_config\.json.*missing/);
    expect(await readFile(join(dir, 'y', 'config.json')).catch(() => null)).toBeNull();
    const usage = run(['only-one']);
    expect(usage.status).toBe(2);
    expect(usage.stderr).toMatch(/usage: npm run export:onnx/);
    const notEmpty = run(['public/models/qwen-tiny', join(dir, 'out')]);
    expect(notEmpty.status).toBe(2);
    expect(notEmpty.stderr).toMatch(/is not empty: pass --force/);
  });
});
