// The verl parquet export read by an independent implementation: DuckDB's C++ parquet reader (what
// a user's pandas/pyarrow/verl stack would meet), not the hyparquet library the other test uses.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import { afterAll, describe, expect, it } from 'vitest';
import { exportTasksToParquet, toVerlRows } from '../../src/env/tasks/parquet.ts';
import { generateSyntheticDataset } from '../../src/env/tasks/synthetic.ts';

const dir = mkdtempSync(join(tmpdir(), 'agent-r1-parquet-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('verl parquet export, read by DuckDB', () => {
  for (const groundTruth of ['list', 'first'] as const) {
    it(`has verl's nested column types and the same values (ground_truth as ${groundTruth})`, async () => {
      const tasks = generateSyntheticDataset({ seed: 5, trainSize: 9, testSize: 1 }).train.tasks;
      const file = join(dir, `train-${groundTruth}.parquet`);
      writeFileSync(file, new Uint8Array(exportTasksToParquet(tasks, { split: 'train', groundTruth })));
      const db = await DuckDBInstance.create(':memory:');
      const con = await db.connect();
      const schema = await con.runAndReadAll(`DESCRIBE SELECT * FROM read_parquet('${file}')`);
      // DuckDB quotes some identifiers ("role", "index"): compare without quotes.
      const types = Object.fromEntries(
        schema.getRowObjectsJS().map((r) => [r.column_name, String(r.column_type).replaceAll('"', '')]),
      );
      expect(types.data_source).toBe('VARCHAR');
      expect(types.ability).toBe('VARCHAR');
      expect(types.prompt).toBe('STRUCT(role VARCHAR, content VARCHAR)[]');
      expect(types.reward_model).toBe(
        groundTruth === 'list'
          ? 'STRUCT(style VARCHAR, ground_truth VARCHAR[])'
          : 'STRUCT(style VARCHAR, ground_truth VARCHAR)',
      );
      expect(types.extra_info).toMatch(/^STRUCT\(split VARCHAR, index (BIGINT|INTEGER|DOUBLE), id VARCHAR/);
      const rows = (
        await con.runAndReadAll(
          `SELECT data_source, ability, prompt, reward_model, extra_info FROM read_parquet('${file}')`,
        )
      ).getRowObjectsJS();
      const expected = toVerlRows(tasks, { split: 'train', groundTruth });
      expect(rows.length).toBe(expected.length);
      rows.forEach((row, i) => {
        const want = expected[i];
        expect(row.data_source).toBe(want.data_source);
        expect(row.ability).toBe(want.ability);
        expect(row.prompt).toEqual(want.prompt);
        expect(row.reward_model).toEqual(want.reward_model);
        const extra = row.extra_info as Record<string, unknown>;
        expect(Number(extra.index)).toBe(want.extra_info.index);
        expect({ ...extra, index: want.extra_info.index }).toEqual(want.extra_info);
      });
      con.closeSync();
    });
  }
});
