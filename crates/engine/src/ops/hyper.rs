//! Hyper-connections' gates (SPEC §6.3–6.5): from one site's logits m (a token's n·D streams
//! projected by Φ, divided by their RMS), the collapse weights `pre`, the write-back weights
//! `post` and the mixing matrix P, P[j,k] the weight from source stream j to destination k.
//!
//! `alpha` holds the site's three scales (α_pre, α_post, α_res). With [`Mixing::Tanh`] (HC's
//! dynamic hyper-connections, §6.3) each stream j makes its own n + 2 logits, laid out stream by
//! stream `[pre_j, post_j, P[j,0..n)]`, and every gate is unconstrained, the bias outside:
//! `gate = α·tanh(m) + b`, b holding HC's static parts (A_m, B, A_r). Otherwise the logits and
//! the bias are laid out `[pre 0..n | post n..2n | res 2n..]` (DeepSeek's kernel):
//! - `pre_j = σ(α_pre·m_j + b_j) + ε` (ε only with Sinkhorn, as DeepSeek-V4; mHC-lite has none);
//! - `post_k = 2·σ(α_post·m_{n+k} + b_{n+k})`;
//! - P: with [`Mixing::Sinkhorn`], DeepSeek-V4's recipe on `Z[j,k] = α_res·m_{2n+jn+k} + b`:
//!   a softmax over k plus ε, a column normalisation (over j), then `iters − 1` rounds of a row
//!   normalisation (over k) and a column one, each dividing by its sum plus ε; with
//!   [`Mixing::Permutations`] (mHC-lite) `P = Σ_κ a_κ Π_κ`, a = softmax of the n! logits, Π_κ the
//!   κ-th permutation of `itertools.permutations` order (κ = 0 the identity), exactly doubly
//!   stochastic.
//!
//! The backward is the exact gradient of the forward as computed, to rounding: Sinkhorn is run
//! again from Z, keeping each step's divisors (2·iters − 1 of n values), and walked back, each
//! step's input restored from its output times its divisors; so finite differences check it.
//! It writes dm = α ⊙ dz, dz (the gradient of the gates' pre-activations, whose column sums are
//! the bias's gradient) and each token's three `Σ dz·m` (whose column sums are α's gradient):
//! every reduction over tokens is left to a product with ones, in a fixed order.

use crate::gpu::{AsArg, GpuBackend, GpuTensor};
use crate::shaders::{Define, WG};

/// How a site's streams are mixed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mixing {
    /// mHC: a Sinkhorn projection of n² logits, `iters` rounds (DeepSeek-V4: 20).
    Sinkhorn { iters: u32 },
    /// mHC-lite: a convex mixture of the n! permutation matrices.
    Permutations,
    /// HC: every gate α·tanh(m) + b, P unconstrained.
    Tanh,
    /// DeepSeek-V4's collapse before the head (`hc_head`): only pre, `σ(α·m_j + b_j) + ε`, from n
    /// logits and one scale; post and P are left as they are.
    Head,
}

/// Sinkhorn's ε and mHC's ε on pre (DeepSeek-V4).
pub const EPS: f32 = 1e-6;

/// The most streams a GPU thread's arrays hold: n² ≤ 64, and n! ≤ 24 for permutations.
pub const MAX_STREAMS: usize = 8;
pub const MAX_PERMUTED_STREAMS: usize = 4;
/// The most Sinkhorn rounds: the backward keeps each step's divisors in a GPU thread's array.
pub const MAX_ITERS: u32 = 32;

/// `kind` in the shader's uniform: the mixing.
const SINKHORN: u32 = 0;
const PERMUTATIONS: u32 = 1;
const TANH: u32 = 2;
const HEAD: u32 = 3;

/// What `shaders/hyper.wgsl` reads from here.
pub const DEFINES: &[Define] = &[
    Define::u32("SINKHORN", SINKHORN),
    Define::u32("PERMUTATIONS", PERMUTATIONS),
    Define::u32("TANH", TANH),
    Define::u32("HEAD", HEAD),
    Define::u32("MAX_MIX", (MAX_STREAMS * MAX_STREAMS) as u32),
    Define::f32("HC_EPS", EPS),
    Define::u32("MAX_DIVISORS", (2 * MAX_ITERS - 1) * MAX_STREAMS as u32),
];

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HyperDims {
    pub tokens: usize,
    /// Streams.
    pub n: usize,
    pub mixing: Mixing,
}

impl HyperDims {
    /// The res logits a token: n² for Sinkhorn, n! for permutations.
    pub fn res_logits(&self) -> usize {
        match self.mixing {
            Mixing::Sinkhorn { .. } | Mixing::Tanh => self.n * self.n,
            Mixing::Permutations => (1..=self.n).product(),
            Mixing::Head => 0,
        }
    }

    /// The scales a site has: α_pre, α_post and α_res, or the head's one.
    pub fn scales(&self) -> usize {
        match self.mixing {
            Mixing::Head => 1,
            _ => 3,
        }
    }

    /// Where a token's logit of pre_j, post_j and P[j,k] is: stream by stream for HC's
    /// per-stream projection, `[pre | post | res]` otherwise.
    pub fn pre_at(&self, j: usize) -> usize {
        match self.mixing {
            Mixing::Tanh => j * (self.n + 2),
            _ => j,
        }
    }
    pub fn post_at(&self, j: usize) -> usize {
        match self.mixing {
            Mixing::Tanh => j * (self.n + 2) + 1,
            _ => self.n + j,
        }
    }
    pub fn res_at(&self, j: usize, k: usize) -> usize {
        match self.mixing {
            Mixing::Tanh => j * (self.n + 2) + 2 + k,
            _ => 2 * self.n + j * self.n + k,
        }
    }

    /// Logits a token: pre, post and res (the head's: pre).
    pub fn width(&self) -> usize {
        match self.mixing {
            Mixing::Head => self.n,
            _ => 2 * self.n + self.res_logits(),
        }
    }

    /// ε added to pre: DeepSeek-V4's with Sinkhorn, none in mHC-lite.
    fn pre_eps(&self) -> f64 {
        match self.mixing {
            Mixing::Sinkhorn { .. } | Mixing::Head => EPS as f64,
            Mixing::Permutations | Mixing::Tanh => 0.0,
        }
    }

    fn iters(&self) -> u32 {
        match self.mixing {
            Mixing::Sinkhorn { iters } => iters,
            Mixing::Permutations | Mixing::Tanh | Mixing::Head => 0,
        }
    }

    fn check(&self, pre: usize, post: usize, mix: usize, logits: usize, alpha: usize, bias: usize) {
        let (t, n, w) = (self.tokens, self.n, self.width());
        assert!(n >= 1, "hyper: {self:?} has no streams");
        match self.mixing {
            Mixing::Sinkhorn { iters } => assert!(
                n <= MAX_STREAMS && (1..=MAX_ITERS).contains(&iters),
                "hyper: Sinkhorn takes 1 to {MAX_STREAMS} streams and 1 to {MAX_ITERS} rounds, not {self:?}"
            ),
            Mixing::Permutations => assert!(
                n <= MAX_PERMUTED_STREAMS,
                "hyper: permutations take at most {MAX_PERMUTED_STREAMS} streams, not {n}"
            ),
            Mixing::Tanh | Mixing::Head => assert!(
                n <= MAX_STREAMS,
                "hyper: {:?} gates take at most {MAX_STREAMS} streams, not {n}",
                self.mixing
            ),
        }
        assert_eq!(pre, t * n, "hyper: pre has {pre} values for {self:?}");
        assert_eq!(post, t * n, "hyper: post has {post} values for {self:?}");
        assert_eq!(mix, t * n * n, "hyper: mix has {mix} values for {self:?}");
        assert_eq!(logits, t * w, "hyper: logits have {logits} values for {self:?}");
        assert_eq!(alpha, self.scales(), "hyper: alpha has {alpha} values for {self:?}");
        assert_eq!(bias, w, "hyper: bias has {bias} values for {self:?}");
    }
}

/// The κ-th permutation of 0..n in `itertools.permutations` (lexicographic) order: the
/// factorial number system's digits pick from the values left.
pub fn permutation(n: usize, kappa: usize) -> Vec<usize> {
    let mut left: Vec<usize> = (0..n).collect();
    let mut rest = kappa;
    let mut perm = Vec::with_capacity(n);
    for i in 0..n {
        let f: usize = (1..n - i).product();
        perm.push(left.remove(rest / f));
        rest %= f;
    }
    perm
}

#[cfg(feature = "cpu")]
mod cpu_twin {
    use super::*;
    use crate::ops::Scalar;
    use rayon::prelude::*;

    fn sigmoid<T: Scalar>(z: T) -> T {
        T::one() / (T::one() + (-z).exp())
    }

    const MIX: usize = MAX_STREAMS * MAX_STREAMS;
    const DIVISORS: usize = (2 * MAX_ITERS as usize - 1) * MAX_STREAMS;

    /// One token's Sinkhorn state on the stack (a token's gates run millions of times a step):
    /// the n×n matrix and each step's n divisors, step-major.
    struct Sinkhorn<T> {
        x: [T; MIX],
        divisors: [T; DIVISORS],
    }

    /// Divides each row (`rows`: over k) or each column (over j) of the n×n `x` by its sum + ε,
    /// writing those divisors to `divisors`.
    fn normalise<T: Scalar>(x: &mut [T], n: usize, rows: bool, divisors: &mut [T]) {
        let eps = T::of(EPS as f64);
        for (a, divisor) in divisors[..n].iter_mut().enumerate() {
            let at = |b: usize| if rows { a * n + b } else { b * n + a };
            let sum = (0..n).fold(T::zero(), |s, b| s + x[at(b)]) + eps;
            for b in 0..n {
                x[at(b)] = x[at(b)] / sum;
            }
            *divisor = sum;
        }
    }

    /// Row-wise softmax of the n×n Z into `p`, without the ε.
    fn softmax_rows<T: Scalar>(z: &[T], n: usize, p: &mut [T]) {
        let mut e = [T::zero(); MAX_STREAMS];
        for j in 0..n {
            let row = &z[j * n..(j + 1) * n];
            let max = row.iter().fold(T::neg_infinity(), |m, &v| m.max(v));
            for (e, &v) in e.iter_mut().zip(row) {
                *e = (v - max).exp();
            }
            let sum = e[..n].iter().fold(T::zero(), |s, &v| s + v);
            for k in 0..n {
                p[j * n + k] = e[k] / sum;
            }
        }
    }

    /// Sinkhorn's result after `steps` normalisations of softmax(Z) + ε (odd steps normalise
    /// columns, even ones rows), with each step's divisors.
    fn sinkhorn<T: Scalar>(z: &[T], n: usize, steps: usize) -> Sinkhorn<T> {
        let eps = T::of(EPS as f64);
        let mut st = Sinkhorn {
            x: [T::zero(); MIX],
            divisors: [T::zero(); DIVISORS],
        };
        softmax_rows(z, n, &mut st.x);
        for v in &mut st.x[..n * n] {
            *v = *v + eps;
        }
        for s in 1..=steps {
            normalise(&mut st.x, n, s % 2 == 0, &mut st.divisors[(s - 1) * n..s * n]);
        }
        st
    }

    /// The permutations of 0..n, in `itertools.permutations` order, once for every token.
    fn permutations(d: &HyperDims) -> Vec<Vec<usize>> {
        match d.mixing {
            Mixing::Permutations => (0..d.res_logits()).map(|kappa| permutation(d.n, kappa)).collect(),
            _ => Vec::new(),
        }
    }

    /// pre and post from their sigmoids (mHC and mHC-lite).
    fn sigmoid_gates<T: Scalar>(pre: &mut [T], post: &mut [T], m: &[T], alpha: &[T], bias: &[T], d: HyperDims) {
        let (n, two) = (d.n, T::of(2.0));
        for j in 0..n {
            pre[j] = sigmoid(alpha[0] * m[j] + bias[j]) + T::of(d.pre_eps());
            post[j] = two * sigmoid(alpha[1] * m[n + j] + bias[n + j]);
        }
    }

    /// The logits of P on the stack (mHC and mHC-lite): Z = α_res·m + b, the first
    /// `res_logits` values.
    fn res_logits<T: Scalar>(m: &[T], alpha: &[T], bias: &[T], d: HyperDims) -> [T; MIX] {
        let mut z = [T::zero(); MIX];
        for (z, i) in z.iter_mut().zip(2 * d.n..d.width()) {
            *z = alpha[2] * m[i] + bias[i];
        }
        z
    }

    /// The softmax of mHC-lite's n! logits `z`, on the stack.
    fn mixture_weights<T: Scalar>(z: &[T]) -> [T; MIX] {
        let max = z.iter().fold(T::neg_infinity(), |m, &v| m.max(v));
        let mut e = [T::zero(); MIX];
        for (e, &v) in e.iter_mut().zip(z) {
            *e = (v - max).exp();
        }
        let sum = e[..z.len()].iter().fold(T::zero(), |s, &v| s + v);
        for e in &mut e[..z.len()] {
            *e = *e / sum;
        }
        e
    }

    /// One token's gates from its logits m (width) into pre (n), post (n) and mix (n²).
    #[allow(clippy::too_many_arguments)]
    fn gates_token<T: Scalar>(
        pre: &mut [T],
        post: &mut [T],
        mix: &mut [T],
        m: &[T],
        alpha: &[T],
        bias: &[T],
        d: HyperDims,
        perms: &[Vec<usize>],
    ) {
        let n = d.n;
        match d.mixing {
            Mixing::Tanh => {
                let gate = |s: usize, i: usize| alpha[s] * m[i].tanh() + bias[i];
                for j in 0..n {
                    pre[j] = gate(0, d.pre_at(j));
                    post[j] = gate(1, d.post_at(j));
                    for k in 0..n {
                        mix[j * n + k] = gate(2, d.res_at(j, k));
                    }
                }
            }
            Mixing::Head => {
                for j in 0..n {
                    pre[j] = sigmoid(alpha[0] * m[j] + bias[j]) + T::of(d.pre_eps());
                }
            }
            Mixing::Sinkhorn { iters } => {
                sigmoid_gates(pre, post, m, alpha, bias, d);
                let z = res_logits(m, alpha, bias, d);
                mix.copy_from_slice(&sinkhorn(&z[..n * n], n, 2 * iters as usize - 1).x[..n * n]);
            }
            Mixing::Permutations => {
                sigmoid_gates(pre, post, m, alpha, bias, d);
                let z = res_logits(m, alpha, bias, d);
                let a = mixture_weights(&z[..d.res_logits()]);
                mix.fill(T::zero());
                for (&ak, perm) in a.iter().zip(perms) {
                    for (j, &k) in perm.iter().enumerate() {
                        mix[j * n + k] = mix[j * n + k] + ak;
                    }
                }
            }
        }
    }

    /// The sigmoid gates' backward into dz's pre and post: the gradients of their logits.
    fn sigmoid_gates_backward<T: Scalar>(
        dz: &mut [T],
        dpre: &[T],
        dpost: &[T],
        m: &[T],
        alpha: &[T],
        bias: &[T],
        n: usize,
    ) {
        for j in 0..n {
            let s = sigmoid(alpha[0] * m[j] + bias[j]);
            dz[j] = dpre[j] * s * (T::one() - s);
            let s = sigmoid(alpha[1] * m[n + j] + bias[n + j]);
            dz[n + j] = dpost[j] * T::of(2.0) * s * (T::one() - s);
        }
    }

    /// dm = α ⊙ dz and each scale's Σ dz ⊙ m over its segment [pre | post | res].
    fn scales_backward<T: Scalar>(dm: &mut [T], dalpha: &mut [T], dz: &[T], m: &[T], alpha: &[T], d: HyperDims) {
        let n = d.n;
        for (seg, range) in [0..n, n..2 * n, 2 * n..d.width()].into_iter().enumerate() {
            dalpha[seg] = range.clone().fold(T::zero(), |acc, i| acc + dz[i] * m[i]);
            for i in range {
                dm[i] = alpha[seg] * dz[i];
            }
        }
    }

    /// One token's backward: dm, dz (the gradient of the gates' pre-activations) and dalpha,
    /// each scale's Σ over its segment.
    #[allow(clippy::too_many_arguments)]
    fn gates_backward_token<T: Scalar>(
        dm: &mut [T],
        dz: &mut [T],
        dalpha: &mut [T],
        dpre: &[T],
        dpost: &[T],
        dmix: &[T],
        m: &[T],
        alpha: &[T],
        bias: &[T],
        d: HyperDims,
        perms: &[Vec<usize>],
    ) {
        let n = d.n;
        match d.mixing {
            Mixing::Tanh => {
                // gate = α·tanh(m) + b: db = dgate, dm = α·(1 − tanh²)·dgate, dα = Σ tanh·dgate.
                dalpha.fill(T::zero());
                for j in 0..n {
                    let sites = (0..n).map(|k| (2, d.res_at(j, k), dmix[j * n + k]));
                    for (s, i, g) in [(0, d.pre_at(j), dpre[j]), (1, d.post_at(j), dpost[j])]
                        .into_iter()
                        .chain(sites)
                    {
                        let th = m[i].tanh();
                        dz[i] = g;
                        dm[i] = alpha[s] * (T::one() - th * th) * g;
                        dalpha[s] = dalpha[s] + th * g;
                    }
                }
            }
            Mixing::Head => {
                dalpha[0] = T::zero();
                for j in 0..n {
                    let s = sigmoid(alpha[0] * m[j] + bias[j]);
                    dz[j] = dpre[j] * s * (T::one() - s);
                    dm[j] = alpha[0] * dz[j];
                    dalpha[0] = dalpha[0] + dz[j] * m[j];
                }
            }
            Mixing::Sinkhorn { iters } => {
                let z = res_logits(m, alpha, bias, d);
                let z = &z[..n * n];
                sigmoid_gates_backward(dz, dpre, dpost, m, alpha, bias, n);
                // Back through each normalisation y = x / d: dx = (dy − Σ dy ⊙ y) / d along the
                // normalised axis, then x = y ⊙ d, the step's input, for the step before.
                let steps = 2 * iters as usize - 1;
                let Sinkhorn { x: mut y, divisors } = sinkhorn(z, n, steps);
                let mut g = [T::zero(); MIX];
                g[..n * n].copy_from_slice(dmix);
                for (s, d) in divisors[..steps * n].chunks(n).enumerate().rev() {
                    let rows = (s + 1) % 2 == 0;
                    for (a, &d) in d.iter().enumerate() {
                        let at = |b: usize| if rows { a * n + b } else { b * n + a };
                        let gy = (0..n).fold(T::zero(), |acc, b| acc + g[at(b)] * y[at(b)]);
                        for b in 0..n {
                            g[at(b)] = (g[at(b)] - gy) / d;
                            y[at(b)] = y[at(b)] * d;
                        }
                    }
                }
                // The ε after the softmax passes g unchanged; then the softmax's backward.
                let mut p = [T::zero(); MIX];
                softmax_rows(z, n, &mut p);
                let dres = &mut dz[2 * n..];
                for j in 0..n {
                    let row = j * n..(j + 1) * n;
                    let gp = row.clone().fold(T::zero(), |acc, i| acc + g[i] * p[i]);
                    for i in row {
                        dres[i] = p[i] * (g[i] - gp);
                    }
                }
                scales_backward(dm, dalpha, dz, m, alpha, d);
            }
            Mixing::Permutations => {
                let r = d.res_logits();
                let z = res_logits(m, alpha, bias, d);
                sigmoid_gates_backward(dz, dpre, dpost, m, alpha, bias, n);
                // dz_κ = a_κ (⟨dP, Π_κ⟩ − Σ_μ a_μ ⟨dP, Π_μ⟩).
                let a = mixture_weights(&z[..r]);
                let mut da = [T::zero(); MIX];
                for (da, perm) in da.iter_mut().zip(perms) {
                    *da = (0..n).fold(T::zero(), |acc, j| acc + dmix[j * n + perm[j]]);
                }
                let mean = (0..r).fold(T::zero(), |acc, k| acc + a[k] * da[k]);
                for k in 0..r {
                    dz[2 * n + k] = a[k] * (da[k] - mean);
                }
                scales_backward(dm, dalpha, dz, m, alpha, d);
            }
        }
    }

    pub fn cpu_forward<T: Scalar>(
        pre: &mut [T],
        post: &mut [T],
        mix: &mut [T],
        logits: &[T],
        alpha: &[T],
        bias: &[T],
        d: HyperDims,
    ) {
        d.check(pre.len(), post.len(), mix.len(), logits.len(), alpha.len(), bias.len());
        let (n, w, perms) = (d.n, d.width(), permutations(&d));
        (
            pre.par_chunks_mut(n),
            post.par_chunks_mut(n),
            mix.par_chunks_mut(n * n),
            logits.par_chunks(w),
        )
            .into_par_iter()
            .for_each(|(pre, post, mix, m)| gates_token(pre, post, mix, m, alpha, bias, d, &perms));
    }

    #[allow(clippy::too_many_arguments)]
    pub fn cpu_backward<T: Scalar>(
        dm: &mut [T],
        dz: &mut [T],
        dalpha: &mut [T],
        dpre: &[T],
        dpost: &[T],
        dmix: &[T],
        logits: &[T],
        alpha: &[T],
        bias: &[T],
        d: HyperDims,
    ) {
        d.check(
            dpre.len(),
            dpost.len(),
            dmix.len(),
            logits.len(),
            alpha.len(),
            bias.len(),
        );
        let (n, w, t, perms) = (d.n, d.width(), d.tokens, permutations(&d));
        assert_eq!(
            (dm.len(), dz.len(), dalpha.len()),
            (t * w, t * w, t * d.scales()),
            "hyper: gradients for {d:?}"
        );
        (
            dm.par_chunks_mut(w),
            dz.par_chunks_mut(w),
            dalpha.par_chunks_mut(d.scales()),
            logits.par_chunks(w),
        )
            .into_par_iter()
            .enumerate()
            .for_each(|(i, (dm, dz, da, m))| {
                let (tok, mix) = (i * n..(i + 1) * n, i * n * n..(i + 1) * n * n);
                gates_backward_token(
                    dm,
                    dz,
                    da,
                    &dpre[tok.clone()],
                    &dpost[tok],
                    &dmix[mix],
                    m,
                    alpha,
                    bias,
                    d,
                    &perms,
                )
            });
    }
}
#[cfg(feature = "cpu")]
pub use cpu_twin::*;

fn params(d: &HyperDims) -> [u32; 4] {
    let kind = match d.mixing {
        Mixing::Sinkhorn { .. } => SINKHORN,
        Mixing::Permutations => PERMUTATIONS,
        Mixing::Tanh => TANH,
        Mixing::Head => HEAD,
    };
    [d.tokens as u32, d.n as u32, kind, d.iters()]
}

/// The ops on the GPU: one thread a token.
pub mod gpu {
    use super::*;

    #[allow(clippy::too_many_arguments)]
    pub fn hyper_gates(
        gpu: &GpuBackend,
        pre: &GpuTensor,
        post: &GpuTensor,
        mix: &GpuTensor,
        logits: &GpuTensor,
        alpha: &GpuTensor,
        bias: &GpuTensor,
        d: HyperDims,
    ) {
        d.check(pre.len, post.len, mix.len, logits.len, alpha.len, bias.len);
        let args = [pre.arg(), post.arg(), mix.arg(), logits.arg(), alpha.arg(), bias.arg()];
        gpu.dispatch("hyper", "hyper_gates", &params(&d), &args, gpu.grid_1d(d.tokens, WG));
    }

    #[allow(clippy::too_many_arguments)]
    pub fn hyper_gates_backward(
        gpu: &GpuBackend,
        dm: &GpuTensor,
        dz: &GpuTensor,
        dalpha: &GpuTensor,
        dpre: &GpuTensor,
        dpost: &GpuTensor,
        dmix: &GpuTensor,
        logits: &GpuTensor,
        alpha: &GpuTensor,
        bias: &GpuTensor,
        d: HyperDims,
    ) {
        d.check(dpre.len, dpost.len, dmix.len, logits.len, alpha.len, bias.len);
        let (t, w) = (d.tokens, d.width());
        assert_eq!(
            (dm.len, dz.len, dalpha.len),
            (t * w, t * w, t * d.scales()),
            "hyper: gradients for {d:?}"
        );
        let args = [
            dm.arg(),
            dz.arg(),
            dalpha.arg(),
            dpre.arg(),
            dpost.arg(),
            dmix.arg(),
            logits.arg(),
            alpha.arg(),
            bias.arg(),
        ];
        gpu.dispatch(
            "hyper",
            "hyper_gates_backward",
            &params(&d),
            &args,
            gpu.grid_1d(d.tokens, WG),
        );
    }
}

/// The ops on the CPU, as `CpuBackend` runs them.
#[cfg(feature = "cpu")]
pub mod cpu {
    use super::*;
    use crate::cpu::{CpuBackend, CpuTensor};
    use crate::ops::Scalar;

    #[allow(clippy::too_many_arguments)]
    pub fn hyper_gates<T: Scalar>(
        _: &CpuBackend<T>,
        pre: &CpuTensor<T>,
        post: &CpuTensor<T>,
        mix: &CpuTensor<T>,
        logits: &CpuTensor<T>,
        alpha: &CpuTensor<T>,
        bias: &CpuTensor<T>,
        d: HyperDims,
    ) {
        cpu_forward(
            &mut pre.get_mut(),
            &mut post.get_mut(),
            &mut mix.get_mut(),
            &logits.get(),
            &alpha.get(),
            &bias.get(),
            d,
        )
    }

    #[allow(clippy::too_many_arguments)]
    pub fn hyper_gates_backward<T: Scalar>(
        _: &CpuBackend<T>,
        dm: &CpuTensor<T>,
        dz: &CpuTensor<T>,
        dalpha: &CpuTensor<T>,
        dpre: &CpuTensor<T>,
        dpost: &CpuTensor<T>,
        dmix: &CpuTensor<T>,
        logits: &CpuTensor<T>,
        alpha: &CpuTensor<T>,
        bias: &CpuTensor<T>,
        d: HyperDims,
    ) {
        cpu_backward(
            &mut dm.get_mut(),
            &mut dz.get_mut(),
            &mut dalpha.get_mut(),
            &dpre.get(),
            &dpost.get(),
            &dmix.get(),
            &logits.get(),
            &alpha.get(),
            &bias.get(),
            d,
        )
    }
}

/// What each op costs (`crate::cost` has the conventions).
pub mod cost {
    use super::*;
    use crate::cost::{f, Cost, Family, W};

    /// Per token: the gates' few FLOPs a logit and Sinkhorn's ≈ 4n² a normalisation (mHC SPEC
    /// §6.8), or the n!·n of the permutation mixture; the logits read, the gates written.
    fn per_token(d: &HyperDims, passes: f64) -> (f64, f64) {
        let n = f(d.n);
        let res = match d.mixing {
            Mixing::Sinkhorn { iters } => 4.0 * n * n * (2.0 * iters as f64) * passes,
            Mixing::Permutations => f(d.res_logits()) * (n + 4.0),
            Mixing::Tanh | Mixing::Head => 0.0,
        };
        (8.0 * f(d.width()) + res, f(d.width()) + 2.0 * n + n * n)
    }

    pub fn hyper_gates(d: HyperDims) -> Cost {
        let (flops, values) = per_token(&d, 1.0);
        Family::Elementwise.cost(f(d.tokens) * flops, W * f(d.tokens) * values)
    }

    pub fn hyper_gates_backward(d: HyperDims) -> Cost {
        // The backward recomputes Sinkhorn's states: about iters times the forward's work.
        let (flops, values) = per_token(&d, d.iters().max(1) as f64);
        Family::Elementwise.cost(
            f(d.tokens) * 2.0 * flops,
            W * f(d.tokens) * (values + 2.0 * f(d.width()) + 3.0),
        )
    }
}

#[cfg(all(test, feature = "cpu"))]
mod tests {
    use super::*;
    use rand::{rngs::SmallRng, Rng, SeedableRng};

    #[test]
    fn permutations_in_itertools_order() {
        let all: Vec<Vec<usize>> = (0..6).map(|k| permutation(3, k)).collect();
        assert_eq!(all, [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]]);
        assert_eq!(permutation(4, 0), [0, 1, 2, 3], "κ = 0 is the identity");
        assert_eq!(permutation(4, 23), [3, 2, 1, 0]);
    }

    /// (largest |row sum − 1|, largest |column sum − 1|) of each token's P, in f32 as trained.
    fn margins(mixing: Mixing, n: usize, scale: f32) -> (f32, f32) {
        let d = HyperDims { tokens: 64, n, mixing };
        let mut rng = SmallRng::seed_from_u64(3);
        let logits: Vec<f32> = (0..d.tokens * d.width())
            .map(|_| rng.random_range(-1.7..1.7) * scale)
            .collect();
        let (mut pre, mut post, mut mix) = (
            vec![0.0; d.tokens * n],
            vec![0.0; d.tokens * n],
            vec![0.0; d.tokens * n * n],
        );
        cpu_forward(
            &mut pre,
            &mut post,
            &mut mix,
            &logits,
            &[1.0; 3],
            &vec![0.0; d.width()],
            d,
        );
        let (mut rows, mut cols) = (0f32, 0f32);
        for p in mix.chunks(n * n) {
            for a in 0..n {
                rows = rows.max(((0..n).map(|b| p[a * n + b]).sum::<f32>() - 1.0).abs());
                cols = cols.max(((0..n).map(|b| p[b * n + a]).sum::<f32>() - 1.0).abs());
            }
        }
        (rows, cols)
    }

    /// SPEC §6.10 E0: Sinkhorn's 20 rounds leave both margins within 1e-5 of 1 on logits of std 1
    /// for n ≥ 3 (the columns, normalised last, to about ε); at n = 2 the rows converge slower
    /// (4.3e-5 off on these logits). mHC-lite's mixture is doubly stochastic to rounding.
    #[test]
    fn margins_of_the_mixing_matrices() {
        for n in [3, 4, 8] {
            let (rows, cols) = margins(Mixing::Sinkhorn { iters: 20 }, n, 1.0);
            assert!(
                rows < 1e-5 && cols < 1e-5,
                "Sinkhorn n {n}: rows off by {rows}, columns by {cols}"
            );
        }
        let (rows, cols) = margins(Mixing::Sinkhorn { iters: 20 }, 2, 1.0);
        assert!(
            rows < 1e-4 && cols < 1e-5,
            "Sinkhorn n 2: rows off by {rows}, columns by {cols}"
        );
        // One round: only the columns are normalised, the rows are not.
        let (rows, cols) = margins(Mixing::Sinkhorn { iters: 1 }, 4, 1.0);
        assert!(
            cols < 1e-5 && rows > 1e-2,
            "one round: rows off by {rows}, columns by {cols}"
        );
        for n in [1, 3, 4] {
            let (rows, cols) = margins(Mixing::Permutations, n, 3.0);
            assert!(
                rows < 1e-6 && cols < 1e-6,
                "permutations n {n}: rows off by {rows}, columns by {cols}"
            );
        }
    }

    /// HC's gates are α·tanh(m) + b, read stream by stream: at m = 0 they are the bias (HC's
    /// static A_m, B and A_r), and they saturate at b ± α.
    #[test]
    fn tanh_gates_are_the_static_parts_plus_a_bounded_term() {
        let d = HyperDims {
            tokens: 2,
            n: 2,
            mixing: Mixing::Tanh,
        };
        // Stream by stream: [pre_j, post_j, P[j,0], P[j,1]].
        let bias = [1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0];
        let mut logits = vec![0f32; 16];
        logits[8..].copy_from_slice(&[100.0, -100.0, 100.0, 0.0, 0.0, 0.0, -100.0, 0.0]);
        let (mut pre, mut post, mut mix) = ([0f32; 4], [0f32; 4], [0f32; 8]);
        let alpha = [0.1, 0.2, 0.3];
        cpu_forward(&mut pre, &mut post, &mut mix, &logits, &alpha, &bias, d);
        assert_eq!(
            (&pre[..2], &post[..2], &mix[..4]),
            (&[1.0, 0.0][..], &[1.0, 1.0][..], &[1.0, 0.0, 0.0, 1.0][..])
        );
        assert_eq!(pre[2..], [1.1, 0.0]);
        assert_eq!(post[2..], [0.8, 1.0]);
        assert_eq!(mix[4..], [1.3, 0.0, -0.3, 1.0]);
    }

    /// n = 1: P is 1 (to ε), pre σ(·) + ε and post 2σ(·): the gated pre-norm block of §6.4.
    #[test]
    fn one_stream_mixes_nothing() {
        let d = HyperDims {
            tokens: 2,
            n: 1,
            mixing: Mixing::Sinkhorn { iters: 20 },
        };
        let (mut pre, mut post, mut mix) = ([0f32; 2], [0f32; 2], [0f32; 2]);
        cpu_forward(
            &mut pre,
            &mut post,
            &mut mix,
            &[0.3, -0.2, 5.0, 1.0, 2.0, -7.0],
            &[1.0, 1.0, 1.0],
            &[0.0; 3],
            d,
        );
        let sigmoid = |z: f32| 1.0 / (1.0 + (-z).exp());
        assert!(mix.iter().all(|&p| (p - 1.0).abs() < 3e-6), "P {mix:?}");
        assert!((pre[0] - sigmoid(0.3) - EPS).abs() < 1e-7 && (post[1] - 2.0 * sigmoid(2.0)).abs() < 1e-6);
    }
}
