// The exported folder as a web developer uses it: @huggingface/transformers' text-generation pipeline
// loads it over HTTP from a local server (as it would from the Hub) and plays agent episodes with the
// search tool, greedily; every turn's text must be the lab engine's greedy text for the same
// conversation. transformers.js runs the graph on onnxruntime-node in Node (its default there);
// onnx-export.test.ts covers onnxruntime-web.

import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, normalize } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Checkpoint, loadCheckpoint } from '../../src/agent/model/checkpoint.ts';
import { directorySource, writeCheckpointFiles } from '../../src/agent/model/node-fs.ts';
import { exportForTransformersJs } from '../../src/agent/model/onnx-export.ts';
import { QwenGpuModel } from '../../src/agent/model/qwen-gpu.ts';
import { QWEN_TOKENS, QwenTokenizer } from '../../src/agent/tokenizer/qwen-tokenizer.ts';
import { TASK_PRESETS } from '../../src/env/presets.ts';
import { generateSyntheticDataset } from '../../src/env/tasks/synthetic.ts';
import { ToolEnv } from '../../src/env/tool-env.ts';
import { pooledSearchTools } from '../../src/env/tools/search.ts';
import { getTestGpu } from '../helpers/gpu.ts';

const MODEL_ID = 'agent-r1-lab/qwen-tiny-onnx';
const SPECIAL_TEXTS = Object.values(QWEN_TOKENS).map((t) => t.text);

let dir: string;
let server: Server;
let port: number;
let checkpoint: Checkpoint;
const requested: string[] = [];

beforeAll(async () => {
  checkpoint = await loadCheckpoint(directorySource('public/models/qwen-tiny'), { requireTokenizer: true });
  dir = await mkdtemp(join(tmpdir(), 'agent-r1-onnx-'));
  await writeCheckpointFiles(join(dir, 'export'), exportForTransformersJs(checkpoint));
  server = createServer(async (req, res) => {
    const url = decodeURIComponent((req.url ?? '/').split('?')[0]);
    requested.push(url);
    const prefix = `/${MODEL_ID}/`;
    const rel = url.startsWith(prefix) ? normalize(url.slice(prefix.length)) : null;
    const body =
      rel && !rel.startsWith('..') ? await readFile(join(dir, 'export', rel)).catch(() => null) : null;
    if (!body) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-length': body.length }).end(body);
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  port = (server.address() as AddressInfo).port;
});

afterAll(async () => {
  await new Promise((ok) => server.close(ok));
  await rm(dir, { recursive: true, force: true });
});

describe('transformers.js loads the export and decodes like the lab', () => {
  it('text-generation pipeline with the search tool, greedy: whole agent episodes turn for turn as the engine plays them', async () => {
    const { env, pipeline } = await import('@huggingface/transformers');
    env.allowLocalModels = false;
    // In Node transformers.js hands onnxruntime-node a file path: downloads go through its file cache,
    // kept in a fresh folder so nothing from an earlier run is served.
    env.useFSCache = true;
    env.cacheDir = join(dir, 'transformers-cache');
    env.useBrowserCache = false;
    env.remoteHost = `http://127.0.0.1:${port}/`;
    env.remotePathTemplate = '{model}/';
    const generator = await pipeline('text-generation', MODEL_ID);
    expect(requested).toContain(`/${MODEL_ID}/onnx/model.onnx`);

    const tokenizer = QwenTokenizer.fromFiles(checkpoint.tokenizerFiles);
    const gpu = await getTestGpu();
    const model = new QwenGpuModel(gpu, checkpoint.config, checkpoint.tensors);
    const stopTokenIds = checkpoint.generationConfig?.eosTokenIds ?? [tokenizer.specialId('imEnd')];
    const preset = TASK_PRESETS.compact;
    const world = generateSyntheticDataset({ seed: 1, trainSize: 1, testSize: 3, hops: [2] });
    const tools = pooledSearchTools(world.test.corpus, preset.search);
    let turns = 0;
    let labIdTurns = 0;
    let toolCalls = 0;
    for (const task of world.test.tasks) {
      const toolEnv = new ToolEnv(task, tools(task), { maxTurns: 4, systemPrompt: preset.systemPrompt });
      let state = toolEnv.reset();
      for (;;) {
        // transformers.js renders the conversation with tokenizer_config.json's template and tokenizes the
        // text, reading special-token strings inside message contents as special tokens; the lab keeps
        // user and tool contents as text (encodeChat). The two id sequences agree unless a data message
        // spells a special token (the ToolEnv's format-error hints quote <tool_call> and </think>), so
        // the engine is fed transformers.js' ids, and the lab's own ids are checked equal where they agree.
        const rendered = tokenizer.applyChatTemplate(state.messages, {
          tools: toolEnv.toolSpecs,
          addGenerationPrompt: true,
        });
        const prompt = tokenizer.encode(rendered);
        const dataSpellsSpecial = state.messages.some(
          (m) =>
            m.role !== 'system' && m.role !== 'assistant' && SPECIAL_TEXTS.some((t) => m.content.includes(t)),
        );
        if (!dataSpellsSpecial) {
          expect(
            tokenizer.encodeChat(state.messages, { tools: toolEnv.toolSpecs, addGenerationPrompt: true }),
          ).toEqual(prompt);
          labIdTurns++;
        }
        const ours = await model.generate([prompt], { maxNewTokens: 64, temperature: 0, stopTokenIds });
        const oursText = tokenizer.decode(ours.tokens[0], { skipSpecialTokens: true });
        const out = (await generator(state.messages as never, {
          tools: toolEnv.toolSpecs as never,
          max_new_tokens: 64,
          do_sample: false,
        })) as Array<{ generated_text: Array<{ role: string; content: string }> }>;
        const reply = out[0].generated_text.at(-1)!;
        expect(reply.role).toBe('assistant');
        expect(reply.content).toBe(oursText);
        turns++;
        const step = await toolEnv.step(reply.content);
        if (step.done) break;
        toolCalls += step.info.calls.filter((c) => c.status === 'executed').length;
        state = toolEnv.snapshot();
      }
    }
    // The bundled model searches before it answers: the loop above went through tool responses.
    expect(toolCalls).toBeGreaterThan(0);
    expect(turns).toBeGreaterThan(world.test.tasks.length);
    expect(labIdTurns).toBeGreaterThan(world.test.tasks.length);
    model.release();
    await generator.dispose();
  }, 300_000);
});
