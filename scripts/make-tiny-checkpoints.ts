// Write the tiny random Qwen checkpoints (see src/agent/model/tiny-checkpoints.ts) in HF layout:
//   node --import tsx scripts/make-tiny-checkpoints.ts [outDir] [name ...]
// outDir defaults to public/models, so the app serves them at /models/<name>/. With names, only
// those checkpoints are written. Output is deterministic: running it twice gives identical files.

import { join } from 'node:path';
import { readQwenTokenizerFiles, writeCheckpointFiles } from '../src/agent/model/node-fs.ts';
import { makeTinyCheckpoint, TINY_CHECKPOINTS, tinySpec } from '../src/agent/model/tiny-checkpoints.ts';
import { formatBytes } from '../src/agent/model/weights.ts';

async function main(): Promise<void> {
  const [outDir = 'public/models', ...names] = process.argv.slice(2);
  const specs = names.length > 0 ? names.map(tinySpec) : TINY_CHECKPOINTS;
  const tokenizerFiles = await readQwenTokenizerFiles();
  for (const spec of specs) {
    const files = makeTinyCheckpoint(spec, tokenizerFiles);
    const dir = join(outDir, spec.name);
    await writeCheckpointFiles(dir, files);
    const bytes = [...files.values()].reduce((n, f) => n + f.length, 0);
    console.log(`${dir}: ${[...files.keys()].join(', ')} (${formatBytes(bytes)})`);
  }
}

main().catch((e) => {
  console.error(e instanceof Error ? e.message : e);
  process.exit(1);
});
