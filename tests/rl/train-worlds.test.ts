// task.trainWorldSeeds (trainWorlds in src/rl/trainer.ts): RL questions from several synthetic worlds,
// shared out evenly, with unique ids, each searched over its own world only; trainWorld (also the SFT's
// extra worlds) follows task.corpus.
import { describe, expect, it } from 'vitest';
import { generateSyntheticDataset } from '../../src/env/tasks/synthetic.ts';
import type { Tool } from '../../src/env/tool.ts';
import { resolveConfig } from '../../src/rl/config.ts';
import { trainWorld, trainWorlds } from '../../src/rl/trainer.ts';

const task = resolveConfig({ task: { trainSize: 10, trainWorldSeeds: [5, 6, 7] } }).task;

async function search(tools: readonly Tool[] | unknown, query: string): Promise<string> {
  const [tool] = tools as Tool[];
  const r = await tool.execute({ query });
  return r.content;
}

describe('trainWorlds', () => {
  const worlds = trainWorlds(task, task.trainWorldSeeds);

  it('shares trainSize out over the worlds with unique ids, in the worlds’ own question order', () => {
    expect(worlds.tasks.map((t) => t.id.split('-')[0])).toEqual([
      ...Array(4).fill('s5'),
      ...Array(4).fill('s6'),
      ...Array(2).fill('s7'),
    ]);
    expect(new Set(worlds.tasks.map((t) => t.id)).size).toBe(10);
    const own = generateSyntheticDataset({ seed: 6, trainSize: 4, testSize: 1, hops: task.hops });
    expect(worlds.tasks.slice(4, 8).map((t) => t.question)).toEqual(own.train.tasks.map((t) => t.question));
  });

  it('searches each question over its own world', async () => {
    const [a, b] = [worlds.tasks[0], worlds.tasks[4]]; // seeds 5 and 6
    const goldA = a.passages.find((p) => a.supportingIds.includes(p.id))!;
    expect(await search(worlds.tools(a), goldA.title)).toContain(goldA.title);
    expect(await search(worlds.tools(b), goldA.title)).not.toContain(goldA.title);
  });

  it('refuses a question that is not one of its worlds', () => {
    const stranger = generateSyntheticDataset({ seed: 9, trainSize: 1, testSize: 1 }).train.tasks[0];
    expect(() => worlds.tools(stranger)).toThrow(/not one of these worlds/);
  });
});

describe('trainWorld', () => {
  // Two questions of one world; b's gold passage is in the world's corpus, not among a's passages.
  const pooled = trainWorld(task, 5, 6);
  const a = pooled.tasks[0];
  const b = pooled.tasks.find((q) =>
    q.passages.every((p) => !a.passages.some((pa) => pa.title === p.title)),
  )!;
  const goldB = b.passages.find((p) => b.supportingIds.includes(p.id))!;

  it('gives the world’s first questions', () => {
    const own = generateSyntheticDataset({ seed: 5, trainSize: 6, testSize: 1, hops: task.hops });
    expect(pooled.tasks.map((t) => t.question)).toEqual(own.train.tasks.map((t) => t.question));
  });

  it("searches the whole world with corpus 'pooled', the question's own passages with 'question'", async () => {
    expect(await search(pooled.tools(a), goldB.title)).toContain(goldB.title);
    const own = trainWorld({ ...task, corpus: 'question' }, 5, 6);
    expect(await search(own.tools(a), goldB.title)).not.toContain(goldB.title);
    expect(await search(own.tools(b), goldB.title)).toContain(goldB.title);
  });
});
