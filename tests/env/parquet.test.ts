import { parquetMetadata, parquetReadObjects } from 'hyparquet';
import { describe, expect, it } from 'vitest';
import { exportTasksToParquet, toVerlRows, writeVerlParquet } from '../../src/env/tasks/parquet.ts';
import type { QaTask } from '../../src/env/tasks/schema.ts';
import { generateSyntheticDataset } from '../../src/env/tasks/synthetic.ts';

const TASKS = generateSyntheticDataset({ seed: 3, trainSize: 12, testSize: 2 }).train.tasks;
const NO_GOLD: QaTask = {
  id: 'h9',
  source: 'hotpotqa',
  question: 'Qué?',
  answers: ['sí', 'si'],
  passages: [],
  supportingIds: [],
};

describe('verl / Agent-R1 parquet export', () => {
  it('writes the verl columns as nested parquet types and reads back identically', async () => {
    const tasks = [...TASKS, NO_GOLD];
    const buffer = exportTasksToParquet(tasks, { split: 'train' });
    const metadata = parquetMetadata(buffer);
    expect(Number(metadata.num_rows)).toBe(tasks.length);
    const element = (name: string) => metadata.schema.find((e) => e.name === name);
    expect(element('prompt')).toMatchObject({ converted_type: 'LIST', num_children: 1 });
    expect(element('reward_model')).toMatchObject({ num_children: 2 });
    expect(element('extra_info')).toMatchObject({ num_children: 7 });
    const rows = await parquetReadObjects({ file: buffer });
    expect(Object.keys(rows[0])).toEqual(['data_source', 'prompt', 'ability', 'reward_model', 'extra_info']);
    const expected = toVerlRows(tasks, { split: 'train' });
    expect(rows).toEqual(expected);
    expect(rows[0]).toMatchObject({
      data_source: 'synthetic',
      ability: 'multihop-qa',
      reward_model: { style: 'rule', ground_truth: TASKS[0].answers },
      extra_info: { split: 'train', index: 0, id: TASKS[0].id, question: TASKS[0].question },
    });
    expect(rows[0].prompt).toEqual([
      { role: 'system', content: expect.stringContaining('<answer>') },
      { role: 'user', content: `Question: ${TASKS[0].question}` },
    ]);
    const titles = TASKS[0].supportingIds.map((id) => TASKS[0].passages.find((p) => p.id === id)?.title);
    expect(rows[0].extra_info.supporting_titles).toEqual(titles);
    expect(rows.at(-1)?.extra_info).toMatchObject({ supporting_titles: [], answers: ['sí', 'si'], type: '' });
  });

  it('can write ground_truth as a single string and override source, ability and prompt', async () => {
    const buffer = exportTasksToParquet(TASKS.slice(0, 2), {
      split: 'test',
      groundTruth: 'first',
      dataSource: 'synthetic_v1',
      ability: 'qa',
      prompt: (t) => [{ role: 'user', content: t.question }],
    });
    const rows = await parquetReadObjects({ file: buffer });
    expect(rows[1]).toMatchObject({
      data_source: 'synthetic_v1',
      ability: 'qa',
      prompt: [{ role: 'user', content: TASKS[1].question }],
      reward_model: { style: 'rule', ground_truth: TASKS[1].answers[0] },
      extra_info: { split: 'test', index: 1 },
    });
  });

  it('refuses empty or mixed input with a clear error', () => {
    expect(() => writeVerlParquet([])).toThrow(/no rows/);
    const [a] = toVerlRows(TASKS.slice(0, 1), { split: 'x' });
    const [b] = toVerlRows(TASKS.slice(1, 2), { split: 'x', groundTruth: 'first' });
    expect(() => writeVerlParquet([a, b])).toThrow(/every row/);
  });
});
