//! The fast class's attention (`crate::precision`): q·kᵀ, P·v and the backward's four products
//! with f16 multiplicands into f32 sums; the softmax's statistics, the mask, ALiBi and every
//! output stay f32. Its CPU twin here, the bound the GPU keeps against it, and on the GPU the
//! scale pass (`shaders/fast_scale.wgsl`) and the cooperative-matrix kernels
//! (`shaders/attention_fast.wgsl`).
//!
//! Each operand is staged as f16 after a power-of-two scale: q, k and v by 2^sQ from qkv's
//! largest magnitude, dout by 2^sD from its own, P (in [0, 1]) by 2^14, and dS by 2^sS from its
//! bound 2·Dh·amax(dout)·amax(v) ([`crate::precision::gradient_exponent`]), so that nothing
//! overflows f16 and nothing that matters flushes. The forward sweeps the keys twice, so that P
//! is normalised before it is rounded: first each row's log-sum-exp, then out = P·v.

use super::AttentionDims;
use crate::gpu::{AsArg, Candidate, GpuBackend, GpuIndex, GpuTensor};
use crate::precision::{amax, gradient_exponent, pow2, round_operand, scale_exponent};
use crate::shaders::{Define, WG};

/// The widest head the fast kernels take: with more, the key pass's staged tiles outgrow the
/// 48 KiB of workgroup memory NVIDIA's Vulkan driver offers. Wider heads run the strict kernels.
pub const FAST_MAX_DH: usize = 64;

/// P is staged as f16(P · 2^14): at most 2^14, and P down to 2^-38 keeps its precision.
pub const P_EXPONENT: i32 = 14;

/// The rows a workgroup of the fast kernels may own, 16 for each of its subgroups of 32: the
/// tuner's candidates ([`FastAttentionTile`]), the default first. 64 stages each swept tile for
/// twice the rows; 32 needs half the workgroup memory (at Dh 64, 29 KiB against 47), so that
/// more workgroups share a multiprocessor, and fits where 32 KiB is all a device offers
/// (lavapipe). Both sum every value in the same order, so the choice changes no bit.
pub const FAST_OWNS: [usize; 2] = [64, 32];

/// A fast attention's workgroup: `own` rows for a head of `dh`, whose tiles must fit the
/// device's workgroup memory ([`fast_shared_bytes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastAttentionTile {
    pub own: usize,
    pub dh: usize,
}

impl FastAttentionTile {
    /// Every candidate for a head of `dh`, the default first.
    pub fn all(dh: usize) -> [Self; 2] {
        FAST_OWNS.map(|own| Self { own, dh })
    }
}

impl Candidate for FastAttentionTile {
    fn name(&self) -> String {
        format!("fast {} rows", self.own)
    }
    fn fits(&self, gpu: &GpuBackend) -> bool {
        let limits = &gpu.limits;
        fast_shared_bytes(self.dh, self.own) <= limits.max_compute_workgroup_storage_size as usize
            && 2 * self.own <= limits.max_compute_invocations_per_workgroup as usize
    }
}

/// The shader's switches with their defaults: the head dimension, the rows a workgroup owns,
/// and the cooperative built-ins (on) or their emulation (off).
pub(crate) const FAST_SWITCHES: &[Define] = &fast_variant(FAST_MAX_DH, FAST_OWNS[0], true);

/// The variant of `shaders/attention_fast.wgsl` for a head of `dh`, `own` rows a workgroup, on
/// cooperative matrices or not.
pub const fn fast_variant(dh: usize, own: usize, coop: bool) -> [Define; 3] {
    [
        Define::u32("DH", dh as u32),
        Define::u32("OWN", own as u32),
        Define::bool(crate::ops::matmul::COOP, coop),
    ]
}

/// What `shaders/attention_fast.wgsl` reads from here.
pub(crate) const FAST_DEFINES: &[Define] = &[
    Define::i32("MAX_SCALE_EXPONENT", crate::precision::MAX_SCALE_EXPONENT),
    Define::i32("SCALED_LOG2", crate::precision::SCALED_LOG2),
];

impl AttentionDims {
    /// Whether this attention runs in the fast class on a fast backend: a head of 16 to
    /// [`FAST_MAX_DH`] dimensions, a multiple of 16 (the cooperative tile).
    pub fn in_fast_class(&self) -> bool {
        self.dh.is_multiple_of(16) && (16..=FAST_MAX_DH).contains(&self.dh)
    }

    /// The name a fault of its fast products carries.
    pub fn describe(&self, pass: &str) -> String {
        format!(
            "attention {pass} batch {} T {} heads {}×{}",
            self.b, self.t, self.h, self.dh
        )
    }
}

/// Workgroup memory of the fast kernels at head dimension `dh` with `own` rows a workgroup, the
/// largest pass's (dk and dv): `own` staged rows of k and v, 32 of q and dout, in f16 at a stride
/// of dh + 8; the scores in f32; P and dS in f16; the forward's row statistics; and
/// common.wgsl's reduction tree.
pub fn fast_shared_bytes(dh: usize, own: usize) -> usize {
    let swept = 32;
    let staged = (2 * own + 2 * swept) * (dh + 8) * 2;
    staged + own * swept * 4 + 2 * own * (swept + 8) * 2 + own * 4 * 4 + crate::shaders::WG * 4
}

/// qkv as the fast class stages it, and the power of two that unscales it.
struct Staged {
    /// f16(qkv · 2^sQ), as f32s.
    qkv: Vec<f32>,
    /// 2^-sQ.
    uq: f32,
}

fn staged_qkv(qkv: &[f32]) -> (Staged, bool) {
    let (s, finite) = match scale_exponent(amax(qkv.iter().copied())) {
        Some(s) => (s, true),
        None => (0, false),
    };
    let staged = Staged {
        qkv: qkv.iter().map(|&x| round_operand(x, s)).collect(),
        uq: pow2(-s),
    };
    (staged, finite)
}

/// Where a sequence's rows of part `part` (0 q, 1 k, 2 v) of head h, and of out, start.
#[derive(Clone, Copy)]
struct Head {
    b: usize,
    h: usize,
    d: AttentionDims,
}

impl Head {
    fn qkv(&self, part: usize, t: usize) -> usize {
        let c = self.d.h * self.d.dh;
        (self.b * self.d.t + t) * 3 * c + part * c + self.h * self.d.dh
    }
    fn out(&self, t: usize) -> usize {
        (self.b * self.d.t + t) * self.d.h * self.d.dh + self.h * self.d.dh
    }
    fn row(&self, t: usize) -> usize {
        (self.b * self.d.h + self.h) * self.d.t + t
    }
    /// The keys query i sees.
    fn keys(&self, starts: &[u32], i: usize) -> std::ops::Range<usize> {
        (starts[self.b * self.d.t + i] as usize).min(i)..i + 1
    }
    /// ALiBi's −slope·(i − j) as the shader computes it, in f32.
    fn bias(&self, i: usize, j: usize) -> f32 {
        let slope = match self.d.alibi {
            true => (-8.0 * (self.h + 1) as f32 / self.d.h as f32).exp2(),
            false => 0.0,
        };
        -(slope * (i - j) as f32)
    }
}

/// Σ x·y over a head's dh values, in order, in f32.
fn dot(x: &[f32], y: &[f32]) -> f32 {
    x.iter().zip(y).fold(0.0, |acc, (a, b)| acc + a * b)
}

/// The logit of query i and key j from the staged q and k: (q̂·k̂ · 2^-sQ · 2^-sQ)·scale + bias.
fn logit(st: &Staged, hd: Head, i: usize, j: usize) -> f32 {
    let dh = hd.d.dh;
    let s = dot(&st.qkv[hd.qkv(0, i)..][..dh], &st.qkv[hd.qkv(1, j)..][..dh]);
    ((s * st.uq) * st.uq).mul_add(hd.d.scale, hd.bias(i, j))
}

/// f16(P · 2^14) as an f32, with P = exp(logit − lse).
fn staged_p(logit: f32, lse: f32) -> f32 {
    round_operand((logit - lse).exp(), P_EXPONENT)
}

/// The forward's CPU twin: lse as the f32 log-sum-exp of each row's logits from the staged q and
/// k, out = (Σ_j f16(P·2^14)·v̂) · 2^-14 · 2^-sQ. False when qkv held a NaN or an infinity
/// (the outputs carry it).
pub fn cpu_forward(out: &mut [f32], lse: &mut [f32], qkv: &[f32], doc_start: &[u32], d: AttentionDims) -> bool {
    d.check(qkv.len(), out.len(), lse.len(), doc_start.len());
    let (st, finite) = staged_qkv(qkv);
    let unscale = pow2(-P_EXPONENT);
    for b in 0..d.b {
        for h in 0..d.h {
            let hd = Head { b, h, d };
            for i in 0..d.t {
                let keys = hd.keys(doc_start, i);
                let logits: Vec<f32> = keys.clone().map(|j| logit(&st, hd, i, j)).collect();
                let m = logits.iter().fold(f32::MIN, |m, &x| m.max(x));
                let l = logits.iter().fold(0.0f32, |l, &x| l + (x - m).exp());
                let row_lse = m + l.ln();
                lse[hd.row(i)] = row_lse;
                let o = &mut out[hd.out(i)..][..d.dh];
                o.fill(0.0);
                for (j, &x) in keys.zip(&logits) {
                    let p = staged_p(x, row_lse);
                    for (o, &v) in o.iter_mut().zip(&st.qkv[hd.qkv(2, j)..][..d.dh]) {
                        *o += p * v;
                    }
                }
                for o in o.iter_mut() {
                    *o = (*o * unscale) * st.uq;
                }
            }
        }
    }
    finite
}

/// The backward's CPU twin: delta = dout·out per row in f32, then from P recomputed as the
/// forward stages it, dS = (P̂·2^-14)·(dout̂·v̂ · 2^-sD · 2^-sQ − delta) staged as f16(dS·2^sS),
/// dq = scale·Σ dŜ·k̂, dk = scale·Σ dŜ·q̂ and dv = Σ P̂·dout̂, each sum unscaled by its operands'
/// powers of two. False when qkv or dout held a NaN or an infinity.
#[allow(clippy::too_many_arguments)]
pub fn cpu_backward(
    dqkv: &mut [f32],
    delta: &mut [f32],
    dout: &[f32],
    out: &[f32],
    qkv: &[f32],
    lse: &[f32],
    doc_start: &[u32],
    d: AttentionDims,
) -> bool {
    d.check(qkv.len(), dout.len(), lse.len(), doc_start.len());
    let (st, finite_qkv) = staged_qkv(qkv);
    let sd = scale_exponent(amax(dout.iter().copied()));
    let sq = scale_exponent(amax(qkv.iter().copied())).unwrap_or(0);
    let sd_or_0 = sd.unwrap_or(0);
    let ss = gradient_exponent(sq, sd_or_0, d.dh);
    let (ud, us, up) = (pow2(-sd_or_0), pow2(-ss), pow2(-P_EXPONENT));
    let dh = d.dh;
    let dout_hat: Vec<f32> = dout.iter().map(|&x| round_operand(x, sd_or_0)).collect();
    dqkv.fill(0.0);
    for b in 0..d.b {
        for h in 0..d.h {
            let hd = Head { b, h, d };
            for i in 0..d.t {
                delta[hd.row(i)] = dot(&dout[hd.out(i)..][..dh], &out[hd.out(i)..][..dh]);
            }
            // Sums of staged products, unscaled at the end.
            let mut dq = vec![0f32; d.t * dh];
            let mut dk = vec![0f32; d.t * dh];
            let mut dv = vec![0f32; d.t * dh];
            for i in 0..d.t {
                let (row_lse, row_delta) = (lse[hd.row(i)], delta[hd.row(i)]);
                let go = &dout_hat[hd.out(i)..][..dh];
                for j in hd.keys(doc_start, i) {
                    let p = staged_p(logit(&st, hd, i, j), row_lse);
                    let dp = (dot(go, &st.qkv[hd.qkv(2, j)..][..dh]) * ud) * st.uq;
                    let g = round_operand((p * up) * (dp - row_delta), ss);
                    for x in 0..dh {
                        dq[i * dh + x] += g * st.qkv[hd.qkv(1, j) + x];
                        dk[j * dh + x] += g * st.qkv[hd.qkv(0, i) + x];
                        dv[j * dh + x] += p * go[x];
                    }
                }
            }
            for t in 0..d.t {
                for x in 0..dh {
                    dqkv[hd.qkv(0, t) + x] = ((dq[t * dh + x] * us) * st.uq) * d.scale;
                    dqkv[hd.qkv(1, t) + x] = ((dk[t * dh + x] * us) * st.uq) * d.scale;
                    dqkv[hd.qkv(2, t) + x] = (dv[t * dh + x] * up) * ud;
                }
            }
        }
    }
    finite_qkv && sd.is_some()
}

/// One f16 ulp, relative: two conversions of the same value (or of values a hair apart) to f16
/// differ by at most this much when one rounds to nearest and the other does not (WGSL leaves the
/// rounding to the implementation).
const ULP16: f64 = 1.0 / 1024.0;
/// f32's unit roundoff.
const U32: f64 = 1.0 / 16_777_216.0;

/// What the bounds read: the twin's staged operands in f64 and the row statistics.
struct Exact<'a> {
    st: Staged,
    doc_start: &'a [u32],
    d: AttentionDims,
}

impl Exact<'_> {
    fn value(&self, at: usize) -> f64 {
        self.st.qkv[at] as f64 * self.st.uq as f64
    }
    /// The exact logit of (i, j) from the staged operands, and the bound on the difference
    /// between any two f32 evaluations of it: `precision::fast_bound` on Σ|q̂·k̂| (sums in any
    /// order, conversions rounded either way), and an f32 ulp of ALiBi's slope times i − j.
    fn logit(&self, hd: Head, i: usize, j: usize) -> (f64, f64) {
        let (mut s, mut mag) = (0.0, 0.0);
        for x in 0..self.d.dh {
            let v = self.value(hd.qkv(0, i) + x) * self.value(hd.qkv(1, j) + x);
            s += v;
            mag += v.abs();
        }
        let bias = hd.bias(i, j) as f64;
        let scale = self.d.scale as f64;
        let err = crate::precision::fast_bound(self.d.dh, mag) * scale + 2.0 * U32 * bias.abs();
        (s * scale + bias, err)
    }
    /// Row i's logits over its keys, with their error bounds; its exact log-sum-exp, and the bound
    /// on any f32 evaluation's difference from another: the logits' own, the sum's order and
    /// WGSL's exp (3 + 2|x| ulp) and log (2^-21 absolute near 1, else 3 ulp).
    fn row(&self, hd: Head, i: usize) -> (Vec<(usize, f64, f64)>, f64, f64) {
        let row: Vec<(usize, f64, f64)> = hd
            .keys(self.doc_start, i)
            .map(|j| {
                let (x, e) = self.logit(hd, i, j);
                (j, x, e)
            })
            .collect();
        let m = row.iter().fold(f64::MIN, |m, r| m.max(r.1));
        let lse = m + row.iter().map(|r| (r.1 - m).exp()).sum::<f64>().ln();
        let worst = row.iter().fold(0.0f64, |w, r| w.max(r.2));
        let n = row.len() as f64;
        let err = worst + (8.0 + 2.0 * n) * U32 + 8.0 * U32 + 6.0 * U32 * lse.abs();
        (row, lse, err)
    }
    /// P and the bound on the relative difference of two f16 stagings of it: e^δ − 1 for δ the
    /// logit's and the lse's errors and exp's, and one f16 ulp.
    fn p(&self, x: f64, e: f64, lse: f64, lse_err: f64) -> (f64, f64) {
        let z = x - lse;
        let delta = e + lse_err + (6.0 + 4.0 * z.abs()) * U32;
        (z.exp(), delta.exp_m1() * 1.01 + ULP16)
    }
}

/// The bound each value of the fast forward keeps against [`cpu_forward`], per element of out
/// and of lse, derived from f16 rounding and f32 summation in any order (module docs): each
/// out value within Σ_j P_j·|v_j|·(ρ_j + 2 ulp16 + (n + 32)·2^-22), ρ_j the relative bound on
/// P_j's staging, doubled as a margin.
pub fn forward_bounds(qkv: &[f32], doc_start: &[u32], d: AttentionDims) -> (Vec<f64>, Vec<f64>) {
    let ex = Exact {
        st: staged_qkv(qkv).0,
        doc_start,
        d,
    };
    let mut out = vec![0.0; d.b * d.t * d.h * d.dh];
    let mut lse = vec![0.0; d.rows()];
    for b in 0..d.b {
        for h in 0..d.h {
            let hd = Head { b, h, d };
            for i in 0..d.t {
                let (row, row_lse, lse_err) = ex.row(hd, i);
                lse[hd.row(i)] = 2.0 * lse_err;
                let acc = (row.len() as f64 + 32.0) * 4.0 * U32;
                for (j, x, e) in row {
                    let (p, rho) = ex.p(x, e, row_lse, lse_err);
                    for c in 0..d.dh {
                        let v = ex.value(hd.qkv(2, j) + c).abs();
                        out[hd.out(i) + c] += 2.0 * p * v * (rho + 2.0 * ULP16 + acc);
                    }
                }
            }
        }
    }
    (out, lse)
}

/// The bound each value of dqkv from the fast backward keeps against [`cpu_backward`] given the
/// same inputs, derived the same way through dS = P·(dP − delta): P's relative bound, dP's
/// (`fast_bound` on Σ|dout̂·v̂|), delta's f32 sum, dS's staging (one f16 ulp, and the f16
/// subnormal step at 2^-sS), and the final sum's order, doubled as a margin.
pub fn backward_bounds(
    qkv: &[f32],
    dout: &[f32],
    out: &[f32],
    lse: &[f32],
    doc_start: &[u32],
    d: AttentionDims,
) -> Vec<f64> {
    let ex = Exact {
        st: staged_qkv(qkv).0,
        doc_start,
        d,
    };
    let sd = scale_exponent(amax(dout.iter().copied())).unwrap_or(0);
    let sq = scale_exponent(amax(qkv.iter().copied())).unwrap_or(0);
    let step = 2f64.powi(-24 - gradient_exponent(sq, sd, d.dh));
    let go = |at: usize| round_operand(dout[at], sd) as f64 * pow2(-sd) as f64;
    let dh = d.dh;
    let mut bound = vec![0.0; qkv.len()];
    let scale = d.scale as f64;
    for b in 0..d.b {
        for h in 0..d.h {
            let hd = Head { b, h, d };
            for i in 0..d.t {
                // The inputs' lse, not the exact one: both backends read it.
                let (row, _, _) = ex.row(hd, i);
                let lse_i = lse[hd.row(i)] as f64;
                let (mut delta, mut delta_mag) = (0.0, 0.0);
                for x in 0..dh {
                    let v = dout[hd.out(i) + x] as f64 * out[hd.out(i) + x] as f64;
                    delta += v;
                    delta_mag += v.abs();
                }
                let delta_err = (dh as f64 + 8.0) * 2.0 * U32 * delta_mag;
                let n = row.len() as f64;
                for (j, x, e) in row {
                    // Both backends read the same lse: only the logit and exp differ.
                    let (p, rho) = ex.p(x, e, lse_i, 0.0);
                    let (mut dp, mut dp_mag) = (0.0, 0.0);
                    for y in 0..dh {
                        let v = go(hd.out(i) + y) * ex.value(hd.qkv(2, j) + y);
                        dp += v;
                        dp_mag += v.abs();
                    }
                    let dp_err = crate::precision::fast_bound(dh, dp_mag);
                    let g = p * (dp - delta);
                    let g_err =
                        p * rho * (dp - delta).abs() + p * (dp_err + delta_err) + (ULP16 + 4.0 * U32) * g.abs() + step;
                    let acc = |n: f64| (n + 32.0) * 4.0 * U32;
                    for y in 0..dh {
                        let (k, q) = (ex.value(hd.qkv(1, j) + y).abs(), ex.value(hd.qkv(0, i) + y).abs());
                        let o = go(hd.out(i) + y).abs();
                        let dq_err = scale * (g_err + (ULP16 + acc(n)) * g.abs()) * k;
                        let dk_err = scale * (g_err + (ULP16 + acc(d.t as f64)) * g.abs()) * q;
                        let dv_err = p * (rho + 2.0 * ULP16 + acc(d.t as f64)) * o;
                        bound[hd.qkv(0, i) + y] += 2.0 * dq_err;
                        bound[hd.qkv(1, j) + y] += 2.0 * dk_err;
                        bound[hd.qkv(2, j) + y] += 2.0 * dv_err;
                    }
                }
            }
        }
    }
    bound
}

/// Whether `d` runs the fast kernels on `gpu`: a fast backend, a head in the fast class, and a
/// workgroup whose tiles fit. Otherwise the strict kernels run.
pub(crate) fn runs_fast(gpu: &GpuBackend, d: &AttentionDims) -> bool {
    gpu.fast.is_some() && d.in_fast_class() && FastAttentionTile::all(d.dh).iter().any(|t| t.fits(gpu))
}

/// One launch of a fast pass in `tile`'s variant: a workgroup per (batch, head, `own` rows).
fn launch(
    gpu: &GpuBackend,
    entry: &'static str,
    tile: FastAttentionTile,
    args: &[(u32, crate::gpu::Arg<'_>)],
    d: &AttentionDims,
) {
    let Some(state) = gpu.fast.as_ref() else {
        return gpu.refuse("attention: a fast kernel on a backend without the fast class".into());
    };
    let defines = fast_variant(d.dh, tile.own, state.coop);
    let groups = gpu.grid_1d(d.b * d.h * d.t.div_ceil(tile.own), 1);
    gpu.dispatch_with_at("attention_fast", entry, &defines, &super::params(d), args, groups);
}

/// The fast forward: qkv's scales, then one launch in the tile tuned for the shape.
pub(crate) fn gpu_forward(
    gpu: &GpuBackend,
    out: &GpuTensor,
    lse: &GpuTensor,
    qkv: &GpuTensor,
    doc_start: &GpuIndex,
    d: AttentionDims,
) {
    // q, k and v share one scale: the second operand's is unused.
    gpu.fast_scales((qkv, qkv.len), (qkv, 0), || d.describe("forward"));
    let Some(scales) = gpu.fast.as_ref().map(|s| &s.scales) else {
        return;
    };
    let forward = |out: &GpuTensor, lse: &GpuTensor, d: &AttentionDims, tile| {
        let args = [
            (1, out.arg()),
            (2, lse.arg()),
            (3, qkv.arg()),
            (4, doc_start.arg()),
            (5, scales.arg()),
        ];
        launch(gpu, "attention_forward_fast", tile, &args, d)
    };
    let class = || super::class("fast forward", &d);
    let tile = gpu.tuned(
        "attention_forward_fast",
        class,
        &FastAttentionTile::all(d.dh),
        |tile, growth| {
            let (t, whole) = super::for_tuning(&d, growth);
            if let (Ok(out), Ok(lse)) = (
                crate::Backend::zeros(gpu, "tuning out", t.b * t.t * t.h * t.dh),
                crate::Backend::zeros(gpu, "tuning lse", t.rows()),
            ) {
                forward(&out, &lse, &t, tile)
            }
            whole
        },
    );
    forward(out, lse, &d, tile)
}

/// The fast backward: delta (the strict pass: f32 in both classes), the scales of qkv and dout,
/// then the dq pass and the dk/dv pass in the tile tuned for the shape.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gpu_backward(
    gpu: &GpuBackend,
    dqkv: &GpuTensor,
    delta: &GpuTensor,
    dout: &GpuTensor,
    out: &GpuTensor,
    qkv: &GpuTensor,
    lse: &GpuTensor,
    doc_start: &GpuIndex,
    d: AttentionDims,
) {
    let rows = [(2, delta.arg()), (3, dout.arg()), (4, out.arg())];
    let p = super::params(&d);
    gpu.dispatch_at(
        "attention",
        "attention_backward_delta",
        &p,
        &rows,
        gpu.grid_1d(d.rows(), WG),
    );
    gpu.fast_scales((qkv, qkv.len), (dout, dout.len), || d.describe("backward"));
    let Some(scales) = gpu.fast.as_ref().map(|s| &s.scales) else {
        return;
    };
    let backward = |dqkv: &GpuTensor, d: &AttentionDims, tile| {
        let args = [
            (1, dqkv.arg()),
            (2, lse.arg()),
            (3, qkv.arg()),
            (4, doc_start.arg()),
            (5, scales.arg()),
            (6, delta.arg()),
            (7, dout.arg()),
        ];
        launch(gpu, "attention_backward_query_fast", tile, &args, d);
        launch(gpu, "attention_backward_key_fast", tile, &args, d);
    };
    let class = || super::class("fast backward", &d);
    let tile = gpu.tuned(
        "attention_backward_fast",
        class,
        &FastAttentionTile::all(d.dh),
        |tile, growth| {
            let (t, whole) = super::for_tuning(&d, growth);
            if let Ok(dqkv) = crate::Backend::zeros(gpu, "tuning dqkv", t.b * t.t * 3 * t.h * t.dh) {
                backward(&dqkv, &t, tile)
            }
            whole
        },
    );
    backward(dqkv, &d, tile)
}
