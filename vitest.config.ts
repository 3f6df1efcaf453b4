import { defineConfig } from 'vitest/config';

// Kernel tests run in Node on Dawn (the `webgpu` package). GPU work on a CPU adapter is slow and
// Dawn spins a core while waiting, so test files run one at a time and get generous timeouts: the
// timeout is a hang guard, not a speed target (with two training runs sharing the 2 cores, single GPU
// tests took over 120 s).
export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts'],
    exclude: ['tests/e2e/**', 'node_modules/**'],
    environment: 'node',
    testTimeout: 300_000,
    hookTimeout: 300_000,
    fileParallelism: false,
    pool: 'forks',
    reporters: ['default'],
  },
});
