import { defineConfig } from 'vitest/config';

// Kernel tests run in Node on Dawn (the `webgpu` package). GPU work on a CPU adapter is slow and
// Dawn spins a core while waiting, so test files run one at a time and get generous timeouts.
export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts'],
    exclude: ['tests/e2e/**', 'node_modules/**'],
    environment: 'node',
    testTimeout: 120_000,
    hookTimeout: 120_000,
    fileParallelism: false,
    pool: 'forks',
    reporters: ['default'],
  },
});
