/**
 * Export of a task set to the parquet layout verl's RLHFDataset and Agent-R1 read, so a user can take a
 * task set from the lab to a cluster:
 *
 *   data_source  string
 *   prompt       list<struct<role: string, content: string>>     the chat messages before the first turn
 *   ability      string
 *   reward_model struct<style: string, ground_truth: list<string>>  style "rule"; answers + aliases
 *   extra_info   struct<split: string, index: int32, id: string, question: string, type: string,
 *                       answers: list<string>, supporting_titles: list<string>>
 *
 * The columns are real nested parquet types (not JSON strings), written with hyparquet-writer's Dremel
 * encoder; pandas / pyarrow read them back as lists of dicts and dicts. ground_truth is a list because
 * Agent-R1's `em_check` / `subem_check` accept a list of golds; set `groundTruth: 'first'` for recipes
 * that expect a single string.
 */
import { parquetWriteBuffer } from 'hyparquet-writer';
import { initialMessages } from '../prompt.ts';
import type { ChatMessage } from '../types.ts';
import type { QaTask } from './schema.ts';

export interface VerlRow {
  data_source: string;
  prompt: { role: string; content: string }[];
  ability: string;
  reward_model: { style: string; ground_truth: string[] | string };
  extra_info: {
    split: string;
    index: number;
    id: string;
    question: string;
    type: string;
    answers: string[];
    supporting_titles: string[];
  };
}

export interface VerlExportOptions {
  split: string;
  /** Defaults to each task's `source`. */
  dataSource?: string;
  ability?: string;
  /** Messages before the first assistant turn; defaults to the lab's system prompt and user question. */
  prompt?: (task: QaTask) => ChatMessage[];
  /** 'list' (default): all answers and aliases; 'first': the primary answer as a plain string. */
  groundTruth?: 'list' | 'first';
}

/** Converts tasks to verl / Agent-R1 rows. */
export function toVerlRows(tasks: readonly QaTask[], options: VerlExportOptions): VerlRow[] {
  const buildPrompt = options.prompt ?? ((task: QaTask) => initialMessages(task.question));
  return tasks.map((task, index) => {
    const titles = new Map(task.passages.map((p) => [p.id, p.title]));
    return {
      data_source: options.dataSource ?? task.source,
      prompt: buildPrompt(task).map(({ role, content }) => ({ role, content })),
      ability: options.ability ?? 'multihop-qa',
      reward_model: {
        style: 'rule',
        ground_truth: options.groundTruth === 'first' ? task.answers[0] : [...task.answers],
      },
      extra_info: {
        split: options.split,
        index,
        id: task.id,
        question: task.question,
        type: task.type ?? '',
        answers: [...task.answers],
        supporting_titles: task.supportingIds.map((id) => titles.get(id) ?? id),
      },
    };
  });
}

type SchemaElement = NonNullable<Parameters<typeof parquetWriteBuffer>[0]['schema']>[number];

const utf8 = (name: string): SchemaElement => ({
  name,
  type: 'BYTE_ARRAY',
  converted_type: 'UTF8',
  repetition_type: 'REQUIRED',
});

/** A standard 3-level parquet LIST of required strings. */
function stringList(name: string): SchemaElement[] {
  return [
    { name, repetition_type: 'REQUIRED', converted_type: 'LIST', num_children: 1 },
    { name: 'list', repetition_type: 'REPEATED', num_children: 1 },
    { ...utf8('element') },
  ];
}

function schemaFor(groundTruth: 'list' | 'first'): SchemaElement[] {
  return [
    { name: 'root', num_children: 5 },
    utf8('data_source'),
    { name: 'prompt', repetition_type: 'REQUIRED', converted_type: 'LIST', num_children: 1 },
    { name: 'list', repetition_type: 'REPEATED', num_children: 1 },
    { name: 'element', repetition_type: 'REQUIRED', num_children: 2 },
    utf8('role'),
    utf8('content'),
    utf8('ability'),
    { name: 'reward_model', repetition_type: 'REQUIRED', num_children: 2 },
    utf8('style'),
    ...(groundTruth === 'first' ? [utf8('ground_truth')] : stringList('ground_truth')),
    { name: 'extra_info', repetition_type: 'REQUIRED', num_children: 7 },
    utf8('split'),
    { name: 'index', type: 'INT32', repetition_type: 'REQUIRED' },
    utf8('id'),
    utf8('question'),
    utf8('type'),
    ...stringList('answers'),
    ...stringList('supporting_titles'),
  ];
}

/** Writes rows to a parquet file in memory (snappy-compressed). Save it with node:fs or a browser download. */
export function writeVerlParquet(rows: readonly VerlRow[]): ArrayBuffer {
  if (rows.length === 0) throw new Error('writeVerlParquet: no rows to write');
  const groundTruth = Array.isArray(rows[0].reward_model.ground_truth) ? 'list' : 'first';
  if (rows.some((r) => Array.isArray(r.reward_model.ground_truth) !== (groundTruth === 'list'))) {
    throw new Error('writeVerlParquet: ground_truth must be a list in every row or a string in every row');
  }
  const column = <K extends keyof VerlRow>(name: K) => ({ name, data: rows.map((r) => r[name]) });
  return parquetWriteBuffer({
    schema: schemaFor(groundTruth),
    columnData: [
      column('data_source'),
      column('prompt'),
      column('ability'),
      column('reward_model'),
      column('extra_info'),
    ],
  });
}

/** Tasks straight to a parquet buffer. */
export function exportTasksToParquet(tasks: readonly QaTask[], options: VerlExportOptions): ArrayBuffer {
  return writeVerlParquet(toVerlRows(tasks, options));
}
