// The copy probe (src/rl/copy-probe.ts): which tokens of a turn are its answer, and the probabilities
// it reads equal the model's full softmax at the positions that predict them.
import { beforeAll, describe, expect, it } from 'vitest';
import { type Checkpoint, loadCheckpoint } from '../../src/agent/model/checkpoint.ts';
import { directorySource } from '../../src/agent/model/node-fs.ts';
import { packBatch, QwenGpuModel } from '../../src/agent/model/qwen-gpu.ts';
import { QwenTokenizer } from '../../src/agent/tokenizer/qwen-tokenizer.ts';
import type { Gpu } from '../../src/gpu/runtime.ts';
import { answerTokenRange, copyProbe, copyProbeTraces } from '../../src/rl/copy-probe.ts';
import { getTestGpu } from '../helpers/gpu.ts';

describe('answerTokenRange', () => {
  it('covers the tokens overlapping the answer, a token holding the tag and the answer included', () => {
    expect(
      answerTokenRange(['<think>', 'x', '</think>', '<', 'answer', '>Or', 'ch', 'ards', '</', 'answer', '>']),
    ).toEqual([5, 8]);
    expect(answerTokenRange(['<answer>', 'Zo', 'zi', ' Press', '</answer>'])).toEqual([1, 4]);
  });
  it('takes the last answer; null without one or with an empty one', () => {
    expect(answerTokenRange(['<answer>a</answer> <answer>', 'b', '</answer>'])).toEqual([1, 2]);
    expect(answerTokenRange(['no answer here'])).toBeNull();
    expect(answerTokenRange(['<answer>', '</answer>'])).toBeNull();
    expect(answerTokenRange(['<answer>', 'open'])).toBeNull();
  });
});

/** Index of the first occurrence of `needle` in `hay[0, end)`, or -1. */
function findRun(hay: readonly number[], needle: readonly number[], end: number): number {
  for (let i = 0; i + needle.length <= end; i++) if (needle.every((id, k) => hay[i + k] === id)) return i;
  return -1;
}

describe("the compact oracle's names", () => {
  it('are spelled with the token ids of their source (question or passage), queries and answers alike', async () => {
    const ckpt = await loadCheckpoint(directorySource('public/models/qwen-tiny'), { requireTokenizer: true });
    const tokenizer = QwenTokenizer.fromFiles(ckpt.tokenizerFiles);
    const traces = await copyProbeTraces(tokenizer, 24);
    let names = 0;
    let copies = 0;
    let unspacedCopies = 0;
    for (const trace of traces) {
      const { ids, sources } = trace;
      // every policy turn: its query (tool-call turns) or its answer (the last turn)
      for (let start = 0; start < ids.length; start++) {
        if (sources[start] !== 'policy' || (start > 0 && sources[start - 1] === 'policy')) continue;
        let end = start;
        while (end < ids.length && sources[end] === 'policy') end++;
        const text = tokenizer.decode(ids.slice(start, end));
        const query = text.match(/"query": "([^"]*)"/)?.[1];
        // a bridge hop's query is the name and a kind word (" Posbour Narnflou film"); its fallback
        // query, which starts with the kind word, copies nothing
        if (query !== undefined && /^ [a-z]/.test(query)) continue;
        const name = query?.replace(/ [a-z]+$/, '') ?? text.match(/<answer>(.*)<\/answer>/s)?.[1];
        if (name === undefined) continue;
        expect(name.startsWith(' '), name).toBe(true);
        const tokens = tokenizer.encode(name);
        const at = findRun(ids, tokens, ids.length);
        // the name's ids occur in the turn, and earlier, outside the policy's own text
        expect(at, name).toBeGreaterThanOrEqual(0);
        let earlier = -1;
        for (let i = 0; i + tokens.length <= start; i++) {
          if (tokens.every((id, k) => ids[i + k] === id && sources[i + k] !== 'policy')) {
            earlier = i;
            break;
          }
        }
        names++;
        if (earlier >= 0) copies++;
        if (findRun(ids, tokenizer.encode(name.trim()), start) >= 0) unspacedCopies++;
      }
    }
    expect(names).toBeGreaterThan(40);
    // Every name (yes/no answers excepted: the probe's traces have none) is a copy of earlier tokens;
    // written without the leading space, as after a quote, few are (the reason for the space).
    expect(copies).toBe(names);
    expect(unspacedCopies / names).toBeLessThan(0.5);
  });
});

describe('copyProbeTraces', () => {
  it("takes split 'train' from the training world: other questions, other names, same oracle", async () => {
    const ckpt = await loadCheckpoint(directorySource('public/models/qwen-tiny'), { requireTokenizer: true });
    const tokenizer = QwenTokenizer.fromFiles(ckpt.tokenizerFiles);
    const test = await copyProbeTraces(tokenizer, 6);
    const train = await copyProbeTraces(tokenizer, 6, 'train');
    expect(train.length).toBe(6);
    const answer = (t: (typeof test)[number]) =>
      t.messages.at(-1)!.content.match(/<answer>(.*)<\/answer>/s)![1];
    const testAnswers = new Set(test.map(answer));
    for (const t of train) {
      expect(t.taskId.startsWith('train-'), t.taskId).toBe(true);
      expect(testAnswers.has(answer(t)), answer(t)).toBe(false);
    }
    expect(test.every((t) => t.taskId.startsWith('test-'))).toBe(true);
  });
});

describe('copyProbe', () => {
  let gpu: Gpu;
  let ckpt: Checkpoint;
  beforeAll(async () => {
    gpu = await getTestGpu();
    ckpt = await loadCheckpoint(directorySource('public/models/qwen-tiny'), { requireTokenizer: true });
  });

  it('reads the softmax probability of each answer token at the position before it', async () => {
    const tokenizer = QwenTokenizer.fromFiles(ckpt.tokenizerFiles);
    const traces = await copyProbeTraces(tokenizer, 2);
    expect(traces.length).toBe(2);
    const model = new QwenGpuModel(gpu, ckpt.config, ckpt.tensors);
    const probe = await copyProbe(model, tokenizer, traces);
    // independently: full logits, the answer located by decoding the last turn's text
    const V = ckpt.config.vocabSize;
    const first: number[] = [];
    const rest: number[] = [];
    for (const trace of traces) {
      const logits = await model.logits(packBatch([trace.ids]));
      const p = (t: number) => {
        const row = logits.subarray((t - 1) * V, t * V);
        const max = row.reduce((m, x) => Math.max(m, x), -Infinity);
        const z = row.reduce((s, x) => s + Math.exp(x - max), 0);
        return Math.exp(row[trace.ids[t]] - max) / z;
      };
      const answer = trace.messages.at(-1)!.content.match(/<answer>(.*)<\/answer>/s)![1];
      // the answer's tokens: from the end of the last turn, the tokens that spell the answer text
      const last = trace.ids.length - 2; // before <|im_end|>
      let text = '';
      let t = last;
      for (; !text.startsWith('</answer>'); t--) text = tokenizer.decode([trace.ids[t]]) + text;
      const tokens: number[] = [];
      for (let s = ''; !s.includes(answer); t--) {
        s = tokenizer.decode([trace.ids[t]]) + s;
        tokens.unshift(t);
      }
      first.push(p(tokens[0]));
      for (const k of tokens.slice(1)) rest.push(p(k));
    }
    model.release();
    const mean = (x: number[]) => x.reduce((s, v) => s + v, 0) / x.length;
    expect(probe.traces).toBe(2);
    expect(probe.restTokens).toBe(rest.length);
    expect(probe.firstP).toBeCloseTo(mean(first), 4);
    expect(probe.restP).toBeCloseTo(mean(rest), 4);
  });
});
