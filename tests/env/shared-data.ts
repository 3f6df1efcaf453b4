/**
 * Location of the real QA samples: `../shared/data` next to the repository. Tests that read them are
 * skipped (with a message) when the folder is absent, e.g. on a fresh clone.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const SHARED_DATA_DIR = path.resolve(REPO_ROOT, '..', 'shared', 'data');
export const HAS_SHARED_DATA = existsSync(SHARED_DATA_DIR);
export const SKIP_MESSAGE = `real QA samples not found at ${SHARED_DATA_DIR}; skipping`;

if (!HAS_SHARED_DATA) console.warn(SKIP_MESSAGE);

export function readSharedText(relative: string): string {
  return readFileSync(path.join(SHARED_DATA_DIR, relative), 'utf8');
}

export const HOTPOT_FILE = 'hotpotqa/hotpot_train_sample_100.json';
export const MUSIQUE_FILE = 'musique/musique_ans_train_sample_60.jsonl';
export const TWOWIKI_PASSAGES_FILE = '2wiki/2wiki_passages_6119.jsonl';
