// Bundles what the device machine runs (it has no package registry and no node_modules) into
// .device/js with esbuild: the GPU kernel tests (vitest aliased to scripts/device/vitest-shim.ts),
// the benchmarks and the trainer CLI. `webgpu` stays external: bundle.sh copies its Dawn binary to
// .device/js/node_modules/webgpu. WGSL `?raw` imports become strings, as Vite and
// scripts/wgsl-hooks.mjs make them. Code shared by several entries goes to chunks (ESM splitting).
//   node scripts/device/build.mjs        (run by scripts/device/bundle.sh)
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const out = path.join(root, '.device/js');

const entryPoints = [
  ...readdirSync(path.join(root, 'tests/gpu'))
    .filter((f) => f.endsWith('.test.ts'))
    .map((f) => `tests/gpu/${f}`),
  'scripts/device/gpu-tests.ts',
  'scripts/device/probe.ts',
  'bench/matmul.ts',
  'bench/kernels.ts',
  'bench/model.ts',
  'bench/attention.ts',
  'bench/lora-step.ts',
  'bench/rollout.ts',
  'scripts/train.ts',
].map((p) => path.join(root, p));

const wgslRaw = {
  name: 'wgsl-raw',
  setup(b) {
    b.onResolve({ filter: /\?raw$/ }, (args) => ({
      path: path.resolve(args.resolveDir, args.path.slice(0, -'?raw'.length)),
      namespace: 'raw',
    }));
    b.onLoad({ filter: /.*/, namespace: 'raw' }, async (args) => ({
      contents: await readFile(args.path, 'utf8'),
      loader: 'text',
    }));
  },
};

const result = await build({
  absWorkingDir: root,
  entryPoints,
  outdir: out,
  outbase: root,
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  external: ['webgpu'],
  // ESM builds first: tfjs's CommonJS build and tfjs-backend-webgpu's ESM build would otherwise bundle
  // two copies of tfjs-core, and the backend would register with the copy tfjs does not use.
  mainFields: ['module', 'main'],
  alias: {
    vitest: path.join(root, 'scripts/device/vitest-shim.ts'),
    // transformers.js (the tokenizer's chat template) imports sharp, a native module, at load time
    // in Node; the tokenizer never uses it and its binary is not carried.
    sharp: path.join(root, 'scripts/device/native-stub.mjs'),
  },
  plugins: [wgslRaw],
  // CommonJS dependencies (tfjs) call require(); give ESM chunks one.
  banner: {
    js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);",
  },
  logLevel: 'warning',
  metafile: true,
});
// transformers.js also loads onnxruntime-node through createRequire, out of esbuild's reach: a stub
// package beside the bundle answers that require.
const ortStub = path.join(out, 'node_modules/onnxruntime-node');
mkdirSync(ortStub, { recursive: true });
writeFileSync(
  path.join(ortStub, 'package.json'),
  '{"name":"onnxruntime-node","version":"0.0.0","main":"index.cjs"}\n',
);
writeFileSync(
  path.join(ortStub, 'index.cjs'),
  '// device bundle stub (scripts/device/build.mjs)\nmodule.exports = {};\n',
);

const bytes = Object.values(result.metafile.outputs).reduce((s, o) => s + o.bytes, 0);
console.log(
  `device bundle: ${Object.keys(result.metafile.outputs).length} files, ${(bytes / 2 ** 20).toFixed(1)} MiB in .device/js`,
);
