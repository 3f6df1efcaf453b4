// The vitest shim that runs tests/gpu on the device machine (scripts/device/vitest-shim.ts): it must
// report failing expectations as failures, name .each cases as vitest does, and run hooks in vitest's
// order, or a green device run would mean nothing.
import { describe as vDescribe, expect as vExpect, it as vIt } from 'vitest';
import * as shim from '../../scripts/device/vitest-shim.ts';

vDescribe('device vitest shim', () => {
  vIt('reports passes and failures (toBe, toBeCloseTo, toEqual, rejects), names .each cases', async () => {
    const results = await shim.runTestFile(
      async () => {
        shim.describe.each([{ name: 'a', v: 1 }])('suite $name', ({ v }) => {
          shim.it('passes', () => shim.expect(v).toBe(1));
          shim.it('fails toBe', () => shim.expect(v).toBe(2));
          shim.it('fails toBeCloseTo', () => shim.expect(1).toBeCloseTo(1.1, 5));
          shim.it('fails toEqual', () => shim.expect([1, [2, 3]]).toEqual([1, [2, 4]]));
          shim.it('rejects', async () => {
            await shim.expect(Promise.reject(new Error('boom'))).rejects.toThrow('boom');
          });
          shim.it('fails rejects', async () => {
            await shim.expect(Promise.resolve(1)).rejects.toThrow('boom');
          });
          shim.it.each([
            [1, 2],
            [3, 5],
          ])('each %s %s', (x, y) => shim.expect((y as number) - (x as number)).toBe(1));
        });
      },
      () => {},
    );
    vExpect(results.map((r) => [r.name, r.ok])).toEqual([
      ['suite a > passes', true],
      ['suite a > fails toBe', false],
      ['suite a > fails toBeCloseTo', false],
      ['suite a > fails toEqual', false],
      ['suite a > rejects', true],
      ['suite a > fails rejects', false],
      ['suite a > each 1 2', true],
      ['suite a > each 3 5', false],
    ]);
    vExpect(results[1].error).toContain('expected 1 to be 2');
  });

  vIt(
    "runs hooks in vitest's order, afterAll registered while running too; a failing import is reported",
    async () => {
      const log: string[] = [];
      const results = await shim.runTestFile(
        async () => {
          shim.beforeAll(() => void log.push('beforeAll'));
          shim.beforeEach(() => void log.push('beforeEach outer'));
          shim.afterEach(() => void log.push('afterEach outer'));
          shim.describe('inner', () => {
            shim.beforeEach(() => void log.push('beforeEach inner'));
            shim.afterEach(() => void log.push('afterEach inner'));
            shim.it('t', () => {
              log.push('test');
              shim.afterAll(() => void log.push('late afterAll'));
            });
          });
          shim.afterAll(() => void log.push('afterAll'));
        },
        () => {},
      );
      vExpect(results.every((r) => r.ok)).toBe(true);
      vExpect(log).toEqual([
        'beforeAll',
        'beforeEach outer',
        'beforeEach inner',
        'test',
        'afterEach inner',
        'afterEach outer',
        'late afterAll',
        'afterAll',
      ]);
      const broken = await shim.runTestFile(
        async () => {
          throw new Error('no adapter');
        },
        () => {},
      );
      vExpect(broken).toHaveLength(1);
      vExpect(broken[0]).toMatchObject({ name: 'import', ok: false });
    },
  );
});
