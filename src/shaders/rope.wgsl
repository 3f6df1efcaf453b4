// Rotary position embedding, HF Qwen2 convention ("rotate_half": dimension i pairs with i + hd/2,
// NOT interleaved pairs), forward and backward:
//   a = fl32(f32(pos[n]) * invFreq[i])                 (i < hd/2; the f32 product, as HF computes it)
//   y[i]        = x[i] * cos(a) - x[i + hd/2] * sin(a)
//   y[i + hd/2] = x[i + hd/2] * cos(a) + x[i] * sin(a)
// The backward is the transpose of this rotation, i.e. the inverse rotation (sin -> -sin), applied
// to the gradient; the same entry points do it with sign = -1.
// x, y: [N, heads * hd] row-major (head h of token n at columns h*hd ..), pos: [N] u32,
// invFreq: [hd/2] f32, computed on the CPU exactly as HF does in f32 (see src/gpu/kernels/rope.ts).
//
// Precision. HF rounds the angle to f32, and so do we: at pos 32767 the f32 angle is off the exact
// real angle by up to ~2e-3 rad (half an ulp of 32767 is 2^-9, plus pos times inv_freq's rounding).
// That is the convention, not an error: we match HF's f32 angle bit for bit. What we must do well is
// cos/sin of that large f32 angle: WGSL's sin/cos promise only 2^-11 absolute error, and only on
// [-pi, pi]. So the angle is reduced exactly-enough (Cody-Waite: k = round(a * 2/pi), then a - k*pi/2
// with pi/2 split into 7-bit pieces so every k * piece is exact for k < 2^17, i.e. angles below
// ~2e5 rad, positions up to ~2e5) and cos/sin come from minimax polynomials on [-pi/4, pi/4]
// (Cephes sinf/cosf). Error of cos/sin vs float64 cos/sin of the same f32 angle: ~2e-7 absolute.
// The split constants come from the uniform, not literals, so no compiler can fold or reassociate
// the pieces back into one rounded constant. And the f32 angle itself is formed with integer
// arithmetic (exact 48-bit product, round-half-even to 24 bits, ldexp): a plain `pos * f` would let
// a compiler contract that product into the following subtraction (fma), which would silently use
// the unrounded angle, up to 2e-3 rad away from HF's at position 32k.

struct Params {
  count: u32, // N * heads * hd/2: one invocation per rotated pair
  heads: u32,
  half: u32,  // hd / 2
  sign: f32,  // +1 forward, -1 backward (inverse rotation)
  c1: f32,    // pi/2 = c1 + c2 + c3 + c4 + c5 (c1..c4: 7 significant bits each)
  c2: f32,
  c3: f32,
  c4: f32,
  c5: f32,
  twoOverPi: f32,
}

const WG = 64u;

fn flat_index(wid: vec3<u32>, nwg: vec3<u32>, lid: vec3<u32>) -> u32 {
  return (wid.y * nwg.x + wid.x) * WG + lid.x;
}

// fl32(p * f) for an integer p < 2^24 and f >= 0: exactly IEEE f32 multiplication (round to
// nearest, ties to even), but immune to fma contraction because it is built from integer ops.
fn angle_f32(p: u32, f: f32) -> f32 {
  let bits = bitcast<u32>(f);
  let e = (bits >> 23u) & 0xffu;
  let frac = bits & 0x7fffffu;
  let mf = select(frac | 0x800000u, frac, e == 0u); // subnormals have no implicit bit
  let ef = i32(select(e, 1u, e == 0u)) - 150;       // f = mf * 2^ef
  // P = p * mf, up to 48 bits, as (hi, lo) from 16-bit limbs.
  let a0 = p & 0xffffu;
  let a1 = p >> 16u;
  let b0 = mf & 0xffffu;
  let b1 = mf >> 16u;
  let p00 = a0 * b0;
  let p01 = a0 * b1;
  let p10 = a1 * b0;
  let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
  let lo = (p00 & 0xffffu) | (mid << 16u);
  let hi = a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
  if (hi == 0u && lo < 0x1000000u) {
    return ldexp(f32(lo), ef); // fits in 24 bits: exact
  }
  let bitLen = select(32u - countLeadingZeros(lo), 64u - countLeadingZeros(hi), hi != 0u);
  var shift = bitLen - 24u; // 1 ..= 24
  var m = (lo >> shift) | (hi << (32u - shift));
  let rem = lo & ((1u << shift) - 1u);
  let halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (m & 1u) == 1u)) {
    m += 1u;
    if (m == 0x1000000u) {
      m = 0x800000u;
      shift += 1u;
    }
  }
  return ldexp(f32(m), i32(shift) + ef);
}

// (cos a, sin a) for a >= 0.
fn cos_sin(a: f32, p: Params) -> vec2<f32> {
  let kf = round(a * p.twoOverPi);
  var r = a - kf * p.c1; // exact: kf * c1 has <= 24 significant bits and r is near a multiple
  r = r - kf * p.c2;
  r = r - kf * p.c3;
  r = r - kf * p.c4;
  r = r - kf * p.c5;
  let z = r * r;
  let s = r + r * z * (-1.6666654611e-1 + z * (8.3321608736e-3 + z * -1.9515295891e-4));
  let c = 1.0 - 0.5 * z + z * z * (4.166664568298827e-2 + z * (-1.388731625493765e-3 + z * 2.443315711809948e-5));
  // a = k * pi/2 + r: rotate (cos r, sin r) by k quarter turns.
  switch (u32(kf) & 3u) {
    case 0u: { return vec2<f32>(c, s); }
    case 1u: { return vec2<f32>(-s, c); }
    case 2u: { return vec2<f32>(-c, -s); }
    default: { return vec2<f32>(s, -c); }
  }
}

struct Pair {
  base: u32, // index of x[i] in the flat array; its partner is base + half
  n: u32,
  i: u32,
}

fn pair_of(t: u32, p: Params) -> Pair {
  let i = t % p.half;
  let nh = t / p.half;       // n * heads + h
  let n = nh / p.heads;
  return Pair(nh * 2u * p.half + i, n, i);
}

fn rotate(x1: f32, x2: f32, cs: vec2<f32>, sign: f32) -> vec2<f32> {
  let s = sign * cs.y;
  return vec2<f32>(x1 * cs.x - x2 * s, x2 * cs.x + x1 * s);
}

// ---------------------------------------------------------------- out of place

@group(0) @binding(0) var<storage, read> o_x: array<f32>;
@group(0) @binding(1) var<storage, read_write> o_y: array<f32>;
@group(0) @binding(2) var<storage, read> o_pos: array<u32>;
@group(0) @binding(3) var<storage, read> o_inv: array<f32>;
@group(0) @binding(4) var<uniform> op: Params;

// x [N, heads*hd] -> y [N, heads*hd]
@compute @workgroup_size(64, 1, 1)
fn rope(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
  let t = flat_index(wid, nwg, lid);
  if (t >= op.count) { return; }
  let q = pair_of(t, op);
  let cs = cos_sin(angle_f32(o_pos[q.n], o_inv[q.i]), op);
  let v = rotate(o_x[q.base], o_x[q.base + op.half], cs, op.sign);
  o_y[q.base] = v.x;
  o_y[q.base + op.half] = v.y;
}

// ---------------------------------------------------------------- in place

@group(0) @binding(0) var<storage, read_write> i_x: array<f32>;
@group(0) @binding(1) var<storage, read> i_pos: array<u32>;
@group(0) @binding(2) var<storage, read> i_inv: array<f32>;
@group(0) @binding(3) var<uniform> ip: Params;

// x [N, heads*hd] rotated in place (each invocation owns one pair: no races).
@compute @workgroup_size(64, 1, 1)
fn rope_inplace(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_id) lid: vec3<u32>) {
  let t = flat_index(wid, nwg, lid);
  if (t >= ip.count) { return; }
  let q = pair_of(t, ip);
  let cs = cos_sin(angle_f32(i_pos[q.n], i_inv[q.i]), ip);
  let v = rotate(i_x[q.base], i_x[q.base + ip.half], cs, ip.sign);
  i_x[q.base] = v.x;
  i_x[q.base + ip.half] = v.y;
}
