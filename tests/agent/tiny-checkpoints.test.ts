// The tiny checkpoint maker: deterministic bytes, HF layout that loads cleanly, and the CLI script.

import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadCheckpoint } from '../../src/agent/model/checkpoint.ts';
import { directorySource } from '../../src/agent/model/node-fs.ts';
import { memorySource } from '../../src/agent/model/sources.ts';
import {
  makeTinyCheckpoint,
  TINY_CHECKPOINTS,
  tinyCheckpointTensors,
  tinyModelConfig,
  tinySpec,
} from '../../src/agent/model/tiny-checkpoints.ts';
import { QwenTokenizer } from '../../src/agent/tokenizer/qwen-tokenizer.ts';
import { sameBytes } from './helpers.ts';

const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

describe('tiny checkpoints', () => {
  it('are deterministic: same spec, same bytes; golden hashes pin the generator', () => {
    // If these change, every test or fixture built on the tiny models changes with them: only
    // update them on purpose (and say so in the commit).
    const golden: Record<string, string> = {
      'tiny-qwen2-v512': '1aef26e6c74feebcd6b7c730d456025f1d46986f22e586f3eddd42a5ad0ca30a',
      'tiny-qwen2-tied-v512': '2cdd45de15d0b636b6be09f569f9ee6d11d3f896b2fdb3763edd19f0c973eb20',
      'tiny-qwen3-v512': '32ffd362927360cb78be3b2071a41e887e455f28d4c7a49d9172353a19e3d921',
      'tiny-qwen3-bf16-v512': '7b7aecbfab82b2a95d1ee92c2e3f54b9eddd04c7e74dd2542215f2c378fc7590',
    };
    for (const [name, hash] of Object.entries(golden)) {
      const a = makeTinyCheckpoint(tinySpec(name));
      const b = makeTinyCheckpoint(tinySpec(name));
      for (const [file, bytes] of a) expect(sameBytes(bytes, b.get(file)!)).toBe(true);
      expect(sha256(a.get('model.safetensors')!), name).toBe(hash);
    }
    const other = makeTinyCheckpoint({ ...tinySpec('tiny-qwen2-v512'), seed: 1234 });
    expect(sha256(other.get('model.safetensors')!)).not.toBe(golden['tiny-qwen2-v512']);
  });

  it('have the documented shapes', () => {
    const q2 = tinyModelConfig(tinySpec('tiny-qwen2'));
    expect(q2).toMatchObject({
      vocabSize: 151936,
      hiddenSize: 64,
      intermediateSize: 128,
      numLayers: 2,
      numHeads: 4,
      numKvHeads: 2,
      headDim: 16,
      qkvBias: true,
      tieWordEmbeddings: false,
    });
    const q3 = tinyModelConfig(tinySpec('tiny-qwen3'));
    expect(q3).toMatchObject({ headDim: 32, qkNorm: true, qkvBias: false, tieWordEmbeddings: true });
    expect(tinyModelConfig(tinySpec('tiny-qwen2-tied')).tieWordEmbeddings).toBe(true);
    expect(TINY_CHECKPOINTS.map((s) => s.dtype)).toContain('F16');
    expect(TINY_CHECKPOINTS.map((s) => s.dtype)).toContain('BF16');
    // Norm weights around 1, projections around 0.
    const t = tinyCheckpointTensors(tinySpec('tiny-qwen3-v512'));
    const mean = (a: Float32Array) => a.reduce((s, v) => s + v, 0) / a.length;
    expect(mean(t.get('model.layers.0.self_attn.q_norm.weight')!.data)).toBeCloseTo(1, 1);
    expect(Math.abs(mean(t.get('model.layers.0.mlp.up_proj.weight')!.data))).toBeLessThan(0.01);
  });

  it.each(TINY_CHECKPOINTS.filter((s) => !s.withTokenizer).map((s) => [s.name]))(
    '%s loads cleanly',
    async (name) => {
      const spec = tinySpec(name);
      const ckpt = await loadCheckpoint(memorySource(makeTinyCheckpoint(spec)));
      expect(ckpt.warnings).toEqual([]);
      expect(ckpt.tokenizerFiles.size).toBe(0);
      expect(ckpt.config.raw.agent_r1_note).toMatch(/math tests only/);
      expect(ckpt.tensors.has('lm_head.weight')).toBe(!spec.tied);
    },
  );

  it('real-vocabulary checkpoints need the tokenizer files', () => {
    expect(() => makeTinyCheckpoint(tinySpec('tiny-qwen2'))).toThrow(
      /ships the Qwen tokenizer: pass its files/,
    );
    expect(() => tinySpec('tiny-llama')).toThrow(/no tiny checkpoint named 'tiny-llama'/);
  });
});

describe('scripts/make-tiny-checkpoints.ts', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'agent-r1-tiny-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('writes the named checkpoints in HF layout; the real-vocab one works with the real tokenizer', async () => {
    const run = spawnSync(
      process.execPath,
      ['--import', 'tsx', 'scripts/make-tiny-checkpoints.ts', dir, 'tiny-qwen3-bf16', 'tiny-qwen2-v512'],
      { encoding: 'utf8' },
    );
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toMatch(
      /tiny-qwen3-bf16: config\.json, generation_config\.json, model\.safetensors, tokenizer\.json, tokenizer_config\.json/,
    );
    expect((await readdir(dir)).sort()).toEqual(['tiny-qwen2-v512', 'tiny-qwen3-bf16']);
    expect((await readdir(join(dir, 'tiny-qwen3-bf16'))).sort()).toEqual([
      'config.json',
      'generation_config.json',
      'model.safetensors',
      'tokenizer.json',
      'tokenizer_config.json',
    ]);
    const small = await readFile(join(dir, 'tiny-qwen2-v512', 'model.safetensors'));
    expect(sha256(small)).toBe('1aef26e6c74feebcd6b7c730d456025f1d46986f22e586f3eddd42a5ad0ca30a');

    const ckpt = await loadCheckpoint(directorySource(join(dir, 'tiny-qwen3-bf16')), {
      requireTokenizer: true,
    });
    expect(ckpt.tokenizerVocabSize).toBe(151669);
    expect(ckpt.tensors.get('model.embed_tokens.weight')!.shape).toEqual([151936, 64]);
    expect(ckpt.tensors.get('model.embed_tokens.weight')!.dtype).toBe('BF16');
    expect(ckpt.generationConfig?.eosTokenIds).toEqual([151645, 151643]);
    const tokenizer = QwenTokenizer.fromFiles(ckpt.tokenizerFiles);
    const ids = tokenizer.encodeChat([{ role: 'user', content: 'hi' }], { addGenerationPrompt: true });
    expect(Math.max(...ids)).toBeLessThan(ckpt.config.vocabSize);
  });

  it('fails with a message for an unknown checkpoint name', () => {
    const run = spawnSync(
      process.execPath,
      ['--import', 'tsx', 'scripts/make-tiny-checkpoints.ts', dir, 'nope'],
      {
        encoding: 'utf8',
      },
    );
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/no tiny checkpoint named 'nope'/);
  });
});
