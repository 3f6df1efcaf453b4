import { describe, expect, it } from 'vitest';
import {
  attentionBackward,
  attentionBlocks,
  attentionDecode,
  attentionForward,
  createKvCache,
  type DkvVariant,
  decodeBlocked,
  dkvChunking,
  kvCacheAppend,
  kvQueryBlocks,
  kvRowLengths,
  kvSlots,
  segmentSpans,
  uploadSegments,
} from '../../src/gpu/kernels/attention.ts';
import {
  attentionBlock,
  blockedAttentionWgsl,
  decodeQueryBlock,
} from '../../src/gpu/kernels/attention-blocked.ts';
import {
  type AttentionRefDims,
  attentionBackwardRef,
  attentionForwardRef,
} from '../../src/gpu/reference/attention.ts';
import { maxRelativeError } from '../../src/gpu/reference/matmul.ts';
import type { Gpu } from '../../src/gpu/runtime.ts';
import { numericGradient } from '../helpers/finite-diff.ts';
import { getTestGpu, randomArray } from '../helpers/gpu.ts';

// The first case of each head size builds its blocked pipelines: on a fresh machine (no Mesa disk
// cache) lavapipe takes 40-50 s for the backward of hd 64 or 24, more on a busy CPU.
const COMPILE_TIMEOUT_MS = 300_000;

// Tolerances (max |gpu - ref| / max(1, |ref|), NaN anywhere fails):
const FWD_TOL = 1e-5; // o and lse vs the float64 reference
const BWD_TOL = 1e-4; // dq, dk, dv vs the reference's analytic gradients
const FD_TOL = 1e-6; // reference analytic vs central differences (float64, eps 1e-5)

interface Case {
  name: string;
  dims: AttentionRefDims;
  /** seg per batch row, each of length T */
  rows: number[][];
}

const pad = (n: number) => new Array<number>(n).fill(0);
const run = (id: number, n: number) => new Array<number>(n).fill(id);

const CASES: Case[] = [
  {
    // B = 2: left padding in row 0, right padding in row 1; GQA 4 → 2.
    name: 'left+right padding, nH=4 nKv=2, hd=16, T=37',
    dims: { batch: 2, nHeads: 4, nKvHeads: 2, headDim: 16 },
    rows: [
      [...pad(5), ...run(1, 32)],
      [...run(1, 30), ...pad(7)],
    ],
  },
  {
    // Packed sequences (and a padded tail), nH = nKv.
    name: 'packed segments, nH=nKv=3, hd=32, T=29',
    dims: { batch: 2, nHeads: 3, nKvHeads: 3, headDim: 32 },
    rows: [
      [...run(1, 10), ...run(2, 12), ...pad(7)],
      [...run(3, 8), ...run(4, 1), ...run(5, 20)],
    ],
  },
  {
    // Longest case, not a multiple of 64; nH = 2·nKv, hd = 64 (Qwen2.5-0.5B's head size).
    name: 'one long row with a packed tail, nH=2 nKv=1, hd=64, T=70',
    dims: { batch: 1, nHeads: 2, nKvHeads: 1, headDim: 64 },
    rows: [[...pad(2), ...run(7, 51), ...run(9, 17)]],
  },
  {
    name: 'hd=128 (Qwen3), nH=nKv=2, T=19, custom scale',
    dims: { batch: 2, nHeads: 2, nKvHeads: 2, headDim: 128, scale: 0.05 },
    rows: [[...pad(4), ...run(1, 15)], [...run(2, 19)]],
  },
  {
    name: 'odd hd=24, nH=6 nKv=2, T=23',
    dims: { batch: 2, nHeads: 6, nKvHeads: 2, headDim: 24 },
    rows: [
      [...run(1, 11), ...run(2, 9), ...pad(3)],
      [...pad(1), ...run(1, 22)],
    ],
  },
  {
    // A segment id that comes back after another one (and padding inside a segment): its span runs
    // from its first slot to its last, and the rule still decides every pair.
    name: 'a segment interrupted by another and by padding, nH=2 nKv=1, hd=16, T=21',
    dims: { batch: 2, nHeads: 2, nKvHeads: 1, headDim: 16 },
    rows: [
      [...run(1, 5), ...run(2, 4), ...run(1, 3), ...pad(2), ...run(1, 4), ...pad(3)],
      [...pad(3), ...run(5, 6), ...pad(2), ...run(5, 7), ...run(6, 3)],
    ],
  },
  {
    name: 'hd=8, nH=4 nKv=1, T=13, an all-padding row',
    dims: { batch: 3, nHeads: 4, nKvHeads: 1, headDim: 8 },
    rows: [run(1, 13), pad(13), [...run(4, 6), ...pad(7)]],
  },
];

// Every case runs twice: with a bare seg tensor (the kernels loop over whole rows) and with the
// segment spans the model uploads (uploadSegments: the loops run over each token's segment only).
const SEGMENTS = ['seg tensor', 'segment spans'] as const;
function segmentsFor(gpu: Gpu, seg: Uint32Array, batch: number, how: (typeof SEGMENTS)[number]) {
  if (how === 'seg tensor') {
    const t = gpu.upload(seg, [seg.length], 'u32');
    return { arg: t, release: () => t.release() };
  }
  const s = uploadSegments(gpu, seg, batch);
  return {
    arg: s,
    release: () => {
      s.seg.release();
      s.spans.release();
    },
  };
}

function inputs(c: Case, seed: number) {
  const { nHeads: nH, nKvHeads: nKv, headDim: hd } = c.dims;
  const seg = Uint32Array.from(c.rows.flat());
  const N = seg.length;
  return {
    N,
    seg,
    q: randomArray(N * nH * hd, seed + 1, 1.5),
    k: randomArray(N * nKv * hd, seed + 2, 1.5),
    v: randomArray(N * nKv * hd, seed + 3),
    dO: randomArray(N * nH * hd, seed + 4), // nonzero at padding rows too: none of it may flow
  };
}

/** Every value of the rows of `a` (width `w`) whose seg is 0 is exactly 0. */
function paddingRowsAreZero(a: ArrayLike<number>, seg: Uint32Array, w: number): boolean {
  for (let i = 0; i < seg.length; i++) {
    if (seg[i] !== 0) continue;
    for (let d = 0; d < w; d++) if (!Object.is(a[i * w + d], 0)) return false;
  }
  return true;
}

describe('attention CPU reference', () => {
  it(`analytic backward matches central finite differences (rel err <= ${FD_TOL})`, () => {
    const c: Case = {
      name: 'fd',
      dims: { batch: 2, nHeads: 4, nKvHeads: 2, headDim: 3 },
      rows: [
        [0, 0, 1, 1, 1, 1],
        [1, 1, 2, 2, 2, 0],
      ],
    };
    const { q, k, v, seg, dO } = inputs(c, 100);
    const [q64, k64, v64] = [Float64Array.from(q), Float64Array.from(k), Float64Array.from(v)];
    const loss = () => {
      const { o } = attentionForwardRef(q64, k64, v64, seg, c.dims);
      let s = 0;
      for (let i = 0; i < o.length; i++) s += o[i] * dO[i];
      return s;
    };
    const g = attentionBackwardRef(q64, k64, v64, seg, dO, c.dims);
    const eps = 1e-5;
    for (const [x, grad, name] of [
      [q64, g.dq, 'dq'],
      [k64, g.dk, 'dk'],
      [v64, g.dv, 'dv'],
    ] as const) {
      const fd = numericGradient(x, loss, eps);
      expect(maxRelativeError(grad, fd), name).toBeLessThanOrEqual(FD_TOL);
      // The check is not vacuous: gradients are far from zero.
      expect(Math.max(...Array.from(grad, Math.abs)), name).toBeGreaterThan(1e-2);
    }
    // Padding rows: no gradient (seg 0 at tokens 0, 1 and 11).
    expect(paddingRowsAreZero(g.dq, seg, 12) && paddingRowsAreZero(g.dk, seg, 6)).toBe(true);
    expect(paddingRowsAreZero(g.dv, seg, 6)).toBe(true);
  });

  it('the first token of a segment copies its own value; padding queries output 0', () => {
    const c = CASES[1];
    const { q, k, v, seg } = inputs(c, 7);
    const { o } = attentionForwardRef(q, k, v, seg, c.dims);
    const hd = c.dims.headDim;
    // Row 0 token 10 starts segment 2: o = v[10] for each of the 3 heads (nKv = nH).
    for (let h = 0; h < 3; h++) {
      for (let d = 0; d < hd; d++) expect(o[(10 * 3 + h) * hd + d]).toBeCloseTo(v[(10 * 3 + h) * hd + d], 12);
    }
    expect(paddingRowsAreZero(o, seg, 3 * hd)).toBe(true);
  });
});

// Kernel sets: the generic loops (real GPUs) and the blocked, unrolled kernels that CPU adapters get
// by default (attention-blocked.ts), at their default block for each head size: blocks of 2 to 8
// here, so partial last blocks and blocks across padding and segment edges are all covered.
const KERNELS: Array<{ name: string; block: (headDim: number) => number }> = [
  { name: 'generic loops', block: () => 1 },
  { name: 'blocked', block: attentionBlock },
];

/** Every case with each way of passing its segments: [name, case, index, how]. */
const SEGMENT_CASES = CASES.flatMap((c, n) =>
  SEGMENTS.map((how) => [`${c.name}, ${how}`, c, n, how] as const),
);

/** A case's inputs (seed 10·n), uploaded, with its segments passed `how`. */
function caseOnGpu(gpu: Gpu, c: Case, n: number, how: (typeof SEGMENTS)[number]) {
  const x = inputs(c, 10 * n);
  const { nHeads: nH, nKvHeads: nKv, headDim: hd } = c.dims;
  const t = {
    q: gpu.upload(x.q, [x.N, nH * hd]),
    k: gpu.upload(x.k, [x.N, nKv * hd]),
    v: gpu.upload(x.v, [x.N, nKv * hd]),
    dO: gpu.upload(x.dO, [x.N, nH * hd]),
  };
  return { ...x, nH, nKv, hd, t, segments: segmentsFor(gpu, x.seg, c.dims.batch, how) };
}

describe.each(KERNELS)('attention forward, $name (GPU vs reference)', (kernels) => {
  it.each(SEGMENT_CASES)(
    `%s (rel err <= ${FWD_TOL})`,
    async (_, c, n, how) => {
      const gpu = await getTestGpu();
      const { N, seg, q, k, v, nH, hd, t, segments } = caseOnGpu(gpu, c, n, how);
      // Outputs pre-filled with NaN: every element, padding included, must be written.
      const out = gpu.upload(new Float32Array(N * nH * hd).fill(Number.NaN), [N, nH * hd]);
      const lseOut = gpu.upload(new Float32Array(N * nH).fill(Number.NaN), [N, nH]);
      const { o, lse } = attentionForward(gpu, t.q, t.k, t.v, segments.arg, {
        ...c.dims,
        out,
        lse: lseOut,
        block: kernels.block(hd),
      });
      const [go, gl] = await gpu.readMany([o, lse]);
      const ref = attentionForwardRef(q, k, v, seg, c.dims);
      expect(maxRelativeError(go, ref.o), 'o').toBeLessThanOrEqual(FWD_TOL);
      expect(maxRelativeError(gl, ref.lse), 'lse').toBeLessThanOrEqual(FWD_TOL);
      expect(paddingRowsAreZero(go, seg, nH * hd), 'padding queries output 0').toBe(true);
      for (const x of [...Object.values(t), o, lse]) x.release();
      segments.release();
    },
    COMPILE_TIMEOUT_MS,
  );
});

// dK/dV variants: per key row with the generic loops and blocked (CPU adapters; dQ likewise), and in
// query chunks with a sum pass (real GPUs, generic dQ), with the default chunk (64: one or two chunks
// here) and with chunks of 8 (up to 9 per row, chunk edges inside segments and padding).
const DKV: Array<{
  name: string;
  dkvVariant: DkvVariant;
  dkvChunk?: number;
  block: (headDim: number) => number;
}> = [
  { name: 'rows, generic loops', dkvVariant: 'rows', block: () => 1 },
  { name: 'rows, blocked', dkvVariant: 'rows', block: attentionBlock },
  { name: 'chunks of 64', dkvVariant: 'chunks', block: () => 1 },
  { name: 'chunks of 8', dkvVariant: 'chunks', dkvChunk: 8, block: () => 1 },
];

describe.each(DKV)('attention backward, dK/dV $name (GPU vs reference analytic gradients)', (dkvOptions) => {
  it.each(SEGMENT_CASES)(
    `%s (rel err <= ${BWD_TOL})`,
    async (_, c, n, how) => {
      const gpu = await getTestGpu();
      const { N, seg, q, k, v, dO, nH, nKv, hd, t, segments } = caseOnGpu(gpu, c, n, how);
      const nan = (size: number, w: number) =>
        gpu.upload(new Float32Array(size * w).fill(Number.NaN), [size, w]);
      const { o, lse } = attentionForward(gpu, t.q, t.k, t.v, segments.arg, c.dims);
      const { dq, dk, dv } = attentionBackward(gpu, t.q, t.k, t.v, segments.arg, o, lse, t.dO, {
        ...c.dims,
        dkvVariant: dkvOptions.dkvVariant,
        dkvChunk: dkvOptions.dkvChunk,
        dqBlock: dkvOptions.block(hd),
        dkvBlock: dkvOptions.block(hd),
        dq: nan(N, nH * hd),
        dk: nan(N, nKv * hd),
        dv: nan(N, nKv * hd),
      });
      const [gq, gk, gv] = await gpu.readMany([dq, dk, dv]);
      const ref = attentionBackwardRef(q, k, v, seg, dO, c.dims);
      expect(maxRelativeError(gq, ref.dq), 'dq').toBeLessThanOrEqual(BWD_TOL);
      expect(maxRelativeError(gk, ref.dk), 'dk').toBeLessThanOrEqual(BWD_TOL);
      expect(maxRelativeError(gv, ref.dv), 'dv').toBeLessThanOrEqual(BWD_TOL);
      expect(paddingRowsAreZero(gq, seg, nH * hd), 'dq at padding').toBe(true);
      expect(paddingRowsAreZero(gk, seg, nKv * hd), 'dk at padding').toBe(true);
      expect(paddingRowsAreZero(gv, seg, nKv * hd), 'dv at padding').toBe(true);
      for (const x of [...Object.values(t), o, lse, dq, dk, dv]) x.release();
      segments.release();
    },
    COMPILE_TIMEOUT_MS,
  );
});

describe('segmentSpans', () => {
  it("each token's span is its segment's first to last slot in its row (its own empty slot for padding); pairs are the rule's", () => {
    const seg = [1, 1, 2, 2, 1, 0, 0, 3, 3, 3, 0, 0];
    const { spans, pairs } = segmentSpans(seg, 2); // rows of 6
    const at = (i: number) => [spans[2 * i], spans[2 * i + 1]];
    expect([0, 1, 4].map(at)).toEqual([
      [0, 5],
      [0, 5],
      [0, 5],
    ]);
    expect([2, 3].map(at)).toEqual([
      [2, 4],
      [2, 4],
    ]);
    expect(at(5)).toEqual([5, 5]);
    expect([6, 7, 8, 9, 10, 11].map(at)).toEqual([
      [0, 0],
      [1, 4],
      [1, 4],
      [1, 4],
      [4, 4],
      [5, 5],
    ]);
    // row 0: segment 1 has 3 tokens (1+2+3 pairs), segment 2 has 2 (1+2); row 1: segment 3 (1+2+3)
    expect(pairs).toBe(6 + 3 + 6);
    expect(() => segmentSpans(seg, 5)).toThrow(/do not split into 5 rows/);
  });
});

// KV-cache decoding kernels: the generic one (real GPUs), and the blocked one of CPU adapters with one
// new token per invocation (decode steps) and with blocks of 2 and 3 consecutive new tokens of a row
// (appends), each with the kv head's group of query heads.
const DECODE: Array<{ name: string; blocked: boolean; block: number }> = [
  { name: 'generic', blocked: false, block: 1 },
  { name: 'blocked, one token per block', blocked: true, block: 1 },
  { name: 'blocked, blocks of 2', blocked: true, block: 2 },
  { name: 'blocked, blocks of 3', blocked: true, block: 3 },
];

/** attentionDecode's options for a variant of DECODE, given each row's count of new tokens. */
function decodeOptions(gpu: Gpu, variant: (typeof DECODE)[number], nHeads: number, count: number[]) {
  const queryBlocks = variant.block > 1 ? kvQueryBlocks(gpu, count, variant.block) : undefined;
  return { nHeads, blocked: variant.blocked, queryBlocks };
}

describe.each(DECODE)('attention KV-cache decoding, $name', (variant) => {
  it('prefill + appended tokens equal full attention over the cache (rel err <= 1e-5)', async () => {
    const gpu = await getTestGpu();
    const [B, S, nH, nKv, hd, T0] = [2, 24, 4, 2, 16, 12];
    const dims = { batch: B, nHeads: nH, nKvHeads: nKv, headDim: hd };
    const qw = nH * hd;
    const kw = nKv * hd;
    // The final cache layout [B, S]. Row 0: prompt left-padded by 3 to T0, then 5 generated tokens.
    // Row 1: a 7-token prompt right-padded to T0 (slots 7..11 are padding at prefill and are then
    // overwritten by the generated tokens), 4 generated tokens and one finished (seg 0) step.
    const segFinal = Uint32Array.from([
      ...pad(3),
      ...run(1, T0 - 3 + 5),
      ...pad(S - T0 - 5),
      ...run(1, 7 + 4),
      ...pad(S - 11),
    ]);
    const Qf = randomArray(B * S * qw, 1, 1.5);
    const Kf = randomArray(B * S * kw, 2, 1.5);
    const Vf = randomArray(B * S * kw, 3);
    const garbage = randomArray(B * S * kw, 4, 9); // what padding tokens of the prompt hold
    const rows = (src: Float32Array, w: number, picks: Array<[number, number]>) => {
      const out = new Float32Array(picks.length * w);
      picks.forEach(([b, s], n) => {
        out.set(src.subarray((b * S + s) * w, (b * S + s + 1) * w), n * w);
      });
      return out;
    };
    const ref = attentionForwardRef(Qf, Kf, Vf, segFinal, { ...dims, batch: B });

    const cache = createKvCache(gpu, { batch: B, maxLen: S, nKvHeads: nKv, headDim: hd });
    const steps: Array<{ picks: Array<[number, number]>; rowLen: number[]; segNew: number[] }> = [];
    // Prefill: all T0 slots of both rows; row 1's padding slots carry garbage and seg 0.
    const prefill: Array<[number, number]> = [];
    for (let b = 0; b < B; b++) for (let s = 0; s < T0; s++) prefill.push([b, s]);
    steps.push({
      picks: prefill,
      rowLen: [T0, T0],
      segNew: [...segFinal.subarray(0, T0), ...run(1, 7), ...pad(5)],
    });
    // Then 1 token, 3 tokens, 1 token per row (row 1's last one is a finished row: seg 0).
    let len = [T0, 7];
    for (const Tq of [1, 3, 1]) {
      const picks: Array<[number, number]> = [];
      for (let b = 0; b < B; b++) for (let t = 0; t < Tq; t++) picks.push([b, len[b] + t]);
      len = len.map((l) => l + Tq);
      steps.push({ picks, rowLen: [...len], segNew: picks.map(([b, s]) => segFinal[b * S + s]) });
    }
    let checked = 0;
    for (const [n, step] of steps.entries()) {
      const M = step.picks.length;
      const kNew = rows(Kf, kw, step.picks);
      const vNew = rows(Vf, kw, step.picks);
      // Padding tokens carry garbage keys/values (large ones): masking must hide them.
      step.segNew.forEach((sg, r) => {
        if (sg !== 0) return;
        kNew.set(garbage.subarray(r * kw, (r + 1) * kw), r * kw);
        vNew.set(garbage.subarray(r * kw, (r + 1) * kw), r * kw);
      });
      const tk = gpu.upload(kNew, [M, kw]);
      const tv = gpu.upload(vNew, [M, kw]);
      const ts = gpu.upload(Uint32Array.from(step.segNew), [M], 'u32');
      const tq = gpu.upload(rows(Qf, qw, step.picks), [M, qw]);
      // Row lengths as an uploaded tensor (one upload for every layer of a step), or a CPU array.
      const lens = kvRowLengths(gpu, cache, step.rowLen, M / B);
      kvCacheAppend(gpu, cache, tk, tv, ts, n === 1 ? step.rowLen : lens);
      const options = decodeOptions(gpu, variant, nH, new Array(B).fill(M / B));
      const { o } = attentionDecode(gpu, tq, cache, n === 2 ? step.rowLen : lens, options);
      options.queryBlocks?.starts.release();
      const got = (await gpu.readF32(o)) as Float32Array;
      // The reference at the same slots of the final layout. Row 1's prompt padding (prefill
      // slots 7..11) is compared with 0: those queries were padding at prefill time.
      const want = new Float64Array(M * qw);
      step.picks.forEach(([b, s], r) => {
        if (step.segNew[r] !== 0) want.set(ref.o.subarray((b * S + s) * qw, (b * S + s + 1) * qw), r * qw);
      });
      expect(maxRelativeError(got, want), `step ${n}`).toBeLessThanOrEqual(FWD_TOL);
      expect(paddingRowsAreZero(got, Uint32Array.from(step.segNew), qw), `step ${n} padding`).toBe(true);
      checked += step.picks.filter((_, r) => step.segNew[r] !== 0).length;
      for (const x of [tk, tv, ts, tq, lens, o]) x.release();
    }
    expect(checked).toBe(9 + 7 + 2 + 6 + 1);

    // The cache now holds the final layout at every valid slot (and seg exactly).
    const [ck, cseg] = await gpu.readMany([cache.k, cache.seg]);
    expect(Array.from(cseg)).toEqual(Array.from(segFinal));
    for (let b = 0; b < B; b++) {
      for (let s = 0; s < len[b]; s++) {
        if (segFinal[b * S + s] === 0) continue;
        const r = (b * S + s) * kw;
        expect(Array.from(ck.subarray(r, r + kw))).toEqual(Array.from(Kf.subarray(r, r + kw)));
      }
    }

    // The training forward over the final layout gives the same (the decode path's ground truth).
    const full = attentionForward(
      gpu,
      gpu.upload(Qf, [B * S, qw]),
      gpu.upload(Kf, [B * S, kw]),
      gpu.upload(Vf, [B * S, kw]),
      gpu.upload(segFinal, [B * S], 'u32'),
      dims,
    );
    expect(maxRelativeError(await gpu.readF32(full.o), ref.o)).toBeLessThanOrEqual(FWD_TOL);
  });
});

/**
 * Appends counts[step][b] new tokens to row b of a cache of S slots, step by step (packed, as kvSlots),
 * and checks every step's attention against the float64 reference over the final layout.
 */
async function checkRaggedDecode(S: number, counts: number[][], variant: (typeof DECODE)[number]) {
  const gpu = await getTestGpu();
  const B = counts[0].length;
  const [nH, nKv, hd] = [4, 2, 8];
  const dims = { batch: B, nHeads: nH, nKvHeads: nKv, headDim: hd };
  const qw = nH * hd;
  const kw = nKv * hd;
  const lens = counts.reduce((acc, c) => acc.map((n, b) => n + c[b]), pad(B));
  const segFinal = new Uint32Array(B * S);
  lens.forEach((n, b) => {
    segFinal.fill(1, b * S, b * S + n);
  });
  const Qf = randomArray(B * S * qw, 11, 1.5);
  const Kf = randomArray(B * S * kw, 12, 1.5);
  const Vf = randomArray(B * S * kw, 13);
  const ref = attentionForwardRef(Qf, Kf, Vf, segFinal, dims);
  const cache = createKvCache(gpu, { batch: B, maxLen: S, nKvHeads: nKv, headDim: hd });
  const len = pad(B);
  let checked = 0;
  for (const [n, count] of counts.entries()) {
    const picks: Array<[number, number]> = [];
    count.forEach((c, b) => {
      for (let t = 0; t < c; t++) picks.push([b, len[b] + t]);
    });
    const M = picks.length;
    const gather = (src: Float32Array, w: number) => {
      const out = new Float32Array(M * w);
      picks.forEach(([b, s], r) => {
        out.set(src.subarray((b * S + s) * w, (b * S + s + 1) * w), r * w);
      });
      return out;
    };
    const slots = kvSlots(gpu, cache, len, count);
    const tk = gpu.upload(gather(Kf, kw), [M, kw]);
    const tv = gpu.upload(gather(Vf, kw), [M, kw]);
    const ts = gpu.upload(new Uint32Array(M).fill(1), [M], 'u32');
    const tq = gpu.upload(gather(Qf, qw), [M, qw]);
    kvCacheAppend(gpu, cache, tk, tv, ts, slots);
    const options = decodeOptions(gpu, variant, nH, count);
    const { o, lse } = attentionDecode(gpu, tq, cache, slots, options);
    options.queryBlocks?.starts.release();
    const [got, gotLse] = (await gpu.readMany([o, lse])) as Float32Array[];
    const want = new Float64Array(M * qw);
    const wantLse = new Float64Array(M * nH);
    picks.forEach(([b, s], r) => {
      want.set(ref.o.subarray((b * S + s) * qw, (b * S + s + 1) * qw), r * qw);
      wantLse.set(ref.lse.subarray((b * S + s) * nH, (b * S + s + 1) * nH), r * nH);
    });
    expect(maxRelativeError(got, want), `step ${n} o`).toBeLessThanOrEqual(FWD_TOL);
    expect(maxRelativeError(gotLse, wantLse), `step ${n} lse`).toBeLessThanOrEqual(FWD_TOL);
    checked += M;
    count.forEach((c, b) => {
      len[b] += c;
    });
    for (const x of [slots, tk, tv, ts, tq, o, lse]) x.release();
  }
  expect(checked).toBe(lens.reduce((a, b) => a + b, 0));
  // Rows that were finished got nothing written: the cache's segment ids are exactly the final layout.
  expect(Array.from((await gpu.readMany([cache.seg]))[0])).toEqual(Array.from(segFinal));
  // A step where no row adds anything is a no-op, not an error.
  const none = kvSlots(gpu, cache, len, pad(B));
  expect(none.size).toBe(0);
  none.release();
}

describe.each(DECODE)('attention KV-cache decoding, ragged blocks, $name', (variant) => {
  it('each row appends its own count (0 for a finished row), packed: equals full attention', async () => {
    // Tokens added per row per step: a ragged prefill, then decode steps where rows finish early.
    const counts = [
      [9, 4, 1],
      [1, 1, 0],
      [0, 3, 1],
      [1, 0, 0],
      [2, 0, 5],
    ];
    await checkRaggedDecode(20, counts, variant);
  });

  it("a row filled to its last slot: the next row's first token (the next cache slot) is not in its block", async () => {
    await checkRaggedDecode(
      5,
      [
        [5, 3],
        [0, 2],
      ],
      variant,
    );
  });
});

describe('dK/dV chunking for real GPUs', () => {
  it('chunks of >= 64 queries, <= 16 per sequence, longer while a partial buffer is over budget', () => {
    expect(dkvChunking(70, 70, 2, 64)).toBe(64);
    expect(dkvChunking(512, 2048, 14, 64)).toBe(64); // the 0.5B train step: 8 chunks, 59 MB
    expect(dkvChunking(8192, 8192, 14, 64)).toBe(1024); // 16 chunks would be 470 MB: 8 of 1024
    expect(dkvChunking(1024, 16384, 14, 64)).toBe(256); // 16 rows of 1024: 4 chunks, 235 MB each
    expect(dkvChunking(8192, 131072, 14, 64)).toBeNull(); // one chunk is 470 MB: per-row kernel
  });
});

describe('attention argument checks', () => {
  it('rejects slots past the end of a row and slot tensors of the wrong size, naming them', async () => {
    const gpu = await getTestGpu();
    const cache = createKvCache(gpu, { batch: 2, maxLen: 5, nKvHeads: 2, headDim: 8 });
    expect(() => kvSlots(gpu, cache, [0, 3], [2, 3])).toThrow(/row 1 adds 3 tokens at slot 3/);
    expect(() => kvSlots(gpu, cache, [0], [1])).toThrow(/1 starts and 1 counts for a cache of batch 2/);
    const slots = kvSlots(gpu, cache, [0, 0], [2, 1]);
    expect(() => attentionDecode(gpu, gpu.zeros([2, 32]), cache, slots, { nHeads: 4 })).toThrow(
      /slots is \[3\] u32, expected \[2\] u32/,
    );
    slots.release();
  });

  it('rejects bad shapes, head counts and row lengths with messages naming them', async () => {
    const gpu = await getTestGpu();
    const seg = gpu.upload(new Uint32Array(6).fill(1), [6], 'u32');
    const q = gpu.zeros([6, 32]);
    const k = gpu.zeros([6, 16]);
    const dims = { batch: 2, nHeads: 4, nKvHeads: 2, headDim: 8 };
    expect(() => attentionForward(gpu, q, k, gpu.zeros([6, 8]), seg, dims)).toThrow(
      /v is \[6, 8\].*\[6, 16\]/,
    );
    expect(() => attentionForward(gpu, q, k, k, seg, { ...dims, nKvHeads: 3 })).toThrow(
      /multiple of nKvHeads/,
    );
    expect(() => attentionForward(gpu, q, k, k, seg, { ...dims, batch: 4 })).toThrow(
      /not a multiple of batch 4/,
    );
    expect(() => attentionForward(gpu, q, k, k, gpu.zeros([6]), dims)).toThrow(/u32/);
    const wide = gpu.zeros([6, 2 * 256]);
    expect(() =>
      attentionForward(gpu, wide, k, k, seg, { ...dims, headDim: 256, nHeads: 2, nKvHeads: 1 }),
    ).toThrow(/headDim 256 is not supported/);
    const odd = { ...dims, headDim: 6, nHeads: 2, nKvHeads: 1 }; // 12 columns of q, 6 of k
    expect(() =>
      attentionForward(gpu, gpu.zeros([6, 12]), gpu.zeros([6, 6]), gpu.zeros([6, 6]), seg, odd),
    ).toThrow(/multiple of 4/);
    expect(() => attentionForward(gpu, q, k, k, seg, { ...dims, block: 0 })).toThrow(
      /block must be an integer/,
    );
    const o = gpu.zeros([6, 32]);
    const lse = gpu.zeros([6, 4]);
    expect(() => attentionBackward(gpu, q, k, k, seg, o, lse, o, { ...dims, dkvBlock: 2.5 })).toThrow(
      /dkvBlock must be an integer from 1 to 16, got 2.5/,
    );
    const cache = createKvCache(gpu, { batch: 2, maxLen: 5, nKvHeads: 2, headDim: 8 });
    expect(() => kvRowLengths(gpu, cache, [5, 6], 1)).toThrow(/rowLen\[1\] = 6/);
    expect(() => attentionDecode(gpu, gpu.zeros([4, 32]), cache, [1, 5], { nHeads: 4 })).toThrow(
      /rowLen\[0\] = 1/,
    );
  });
});

describe('attention kernel choice', () => {
  it('blocks of block × head dim / 4 = 32 vec4s on CPU adapters (1 = generic), the generic loops on GPUs', async () => {
    expect([8, 16, 24, 32, 64, 128].map(attentionBlock)).toEqual([8, 8, 5, 4, 2, 1]);
    const gpu = await getTestGpu();
    const fake = (kind: string) => ({ report: { kind } }) as unknown as Gpu;
    expect(attentionBlocks(fake('gpu'), 32)).toEqual({ fwd: 1, dq: 1, dkv: 1 });
    expect(attentionBlocks(fake('lavapipe'), 32)).toEqual({ fwd: 4, dq: 4, dkv: 4 });
    // Decoding: blocks of a row's new tokens × the kv head's query heads; groups too large for the
    // budget (Qwen2.5-0.5B: 7 query heads of hd 64 per kv head) keep the generic kernel.
    expect(decodeQueryBlock(32, 2)).toBe(2);
    expect(decodeQueryBlock(64, 7)).toBe(0);
    expect(decodeBlocked(fake('swiftshader'), 32, 2)).toBe(true);
    expect(decodeBlocked(fake('lavapipe'), 64, 7)).toBe(false);
    expect(decodeBlocked(fake('gpu'), 32, 2)).toBe(false);
    expect(attentionBlocks(gpu, 64).fwd).toBe(gpu.report.kind === 'gpu' ? 1 : 2);
  });

  it('the blocked WGSL for one head size names its registers and has no indexed private arrays', () => {
    const code = blockedAttentionWgsl('attn_fwd_blocked', 8, 4);
    expect(code).toContain('let q3_7 = q[qb3 + 7u] * p.scale;');
    expect(code).not.toMatch(/var \w+: array</);
    expect(() => blockedAttentionWgsl('attn_bwd_dq_blocked', 0, 4)).toThrow(/hd4 must be a positive integer/);
  });
});
