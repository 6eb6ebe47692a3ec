//! The embeddings: the residual X⁰ of each token from the token and its position.
//!
//!   VectorEmbedding   X⁰ = W_E[token] + W_PE[position]                  transformer, MemoryFormer
//!   MatrixEmbedding   X⁰ = Σ_h w_E^(h) ⊗ W_E^(h)[token]                 RMT, hybrid (SPEC §2)
//!                          (+ Σ_h w_PE^(h) ⊗ W_PE^(h)[position], or ALiBi in attention)
//!
//! Sequences shorter than N use the first T rows of the position table; the rows past T get no
//! gradient and stay as they are.

use crate::batch::BatchTensors;
use crate::memory::values;
use crate::params::{Init, LayoutBuilder, ParamId};
use crate::{Position, WeightInit};
use engine::{Backend, EmbeddingDims, GatherDims, ResidualDims};

/// W_E ∈ R^{V×D} and W_PE ∈ R^{N×D}, both N(0, std²), summed by one op.
#[derive(Clone, Copy, Debug)]
pub struct VectorEmbedding {
    /// B·T rows of `t` tokens each.
    pub tokens: usize,
    pub t: usize,
    pub d_model: usize,
    pub vocab: usize,
    pub seq_len: usize,
    pub std: f32,
}

#[derive(Clone, Copy, Debug)]
pub struct VectorEmbeddingParams<T> {
    wte: T, // (V, D)
    wpe: T, // (N, D)
}

impl<T: Copy> VectorEmbeddingParams<T> {
    pub fn map<U>(&self, f: &impl Fn(T) -> U) -> VectorEmbeddingParams<U> {
        VectorEmbeddingParams {
            wte: f(self.wte),
            wpe: f(self.wpe),
        }
    }
}

impl VectorEmbedding {
    /// V × D and N × D tables, N(0, std²), over batches of `b` sequences of `t` tokens.
    pub fn new(b: usize, t: usize, (vocab, seq_len, d_model): (usize, usize, usize), std: f32) -> Self {
        VectorEmbedding {
            tokens: b * t,
            t,
            d_model,
            vocab,
            seq_len,
            std,
        }
    }

    /// `wte` and `wpe`.
    pub fn declare(&self, lb: &mut LayoutBuilder) -> VectorEmbeddingParams<ParamId> {
        let (v, n, d) = (self.vocab, self.seq_len, self.d_model);
        let init = Init::Normal { std: self.std };
        VectorEmbeddingParams {
            wte: lb.add("wte", &[v, d], false, init.clone()),
            wpe: lb.add("wpe", &[n, d], false, init),
        }
    }

    fn dims(&self) -> EmbeddingDims {
        EmbeddingDims {
            bt: self.tokens,
            t: self.t,
            c: self.d_model,
            v: self.vocab,
        }
    }

    /// x0 = W_E[token] + W_PE[position] for the batch's tokens.
    pub fn forward<B: Backend>(
        &self,
        be: &B,
        x0: &B::Tensor,
        p: &VectorEmbeddingParams<B::Tensor>,
        batch: &BatchTensors<B>,
    ) {
        let wpe = be.view(&p.wpe, 0, self.t * self.d_model);
        be.embedding_forward(x0, &batch.tokens, &p.wte, &wpe, self.dims());
    }

    /// The tables' gradients from dX⁰.
    pub fn backward<B: Backend>(
        &self,
        be: &B,
        dp: &VectorEmbeddingParams<B::Tensor>,
        dx0: &B::Tensor,
        batch: &BatchTensors<B>,
    ) {
        let dwpe = be.view(&dp.wpe, 0, self.t * self.d_model);
        be.embedding_backward(
            &dp.wte,
            &dwpe,
            dx0,
            &batch.bucket_rows,
            &batch.bucket_start,
            self.dims(),
        );
    }
}

/// The tables W_E ∈ R^{V×R·D_v} and W_PE ∈ R^{N×R·D_v}, N(0, init_std²), gathered by row,
/// and the storage keys w_E, w_PE ∈ R^{R×D_k}, N(0, init_std²/R) (or Xavier's), that store
/// the gathered R vectors into the D_k×D_v residual.
#[derive(Clone, Copy, Debug)]
pub struct MatrixEmbedding {
    /// A storage of R vectors over every row of the batch.
    pub rm: ResidualDims,
    pub t: usize,
    pub vocab: usize,
    pub seq_len: usize,
    pub position: Position,
    pub init_std: f32,
    pub weight_init: WeightInit,
}

#[derive(Clone, Copy, Debug)]
pub struct MatrixEmbeddingParams<T> {
    wte: T,          // (V, R·D_v)
    w_e: T,          // (R, D_k)
    wpe: Option<T>,  // (N, R·D_v) with learned positions
    w_pe: Option<T>, // (R, D_k)
}

impl<T: Copy> MatrixEmbeddingParams<T> {
    pub fn map<U>(&self, f: &impl Fn(T) -> U) -> MatrixEmbeddingParams<U> {
        MatrixEmbeddingParams {
            wte: f(self.wte),
            w_e: f(self.w_e),
            wpe: self.wpe.map(f),
            w_pe: self.w_pe.map(f),
        }
    }
}

/// The position of every row and its buckets, for gathering W_PE like a token table.
struct Positions<B: Backend> {
    rows: B::Index,
    bucket_rows: B::Index,
    bucket_start: B::Index,
}

/// What the matrix embedding keeps from the forward for the backward.
pub struct MatrixEmbeddingActs<B: Backend> {
    etok: B::Tensor,         // (BT, R·D_v) W_E[token]
    epos: Option<B::Tensor>, // (BT, R·D_v) W_PE[position]
    positions: Option<Positions<B>>,
}

impl MatrixEmbedding {
    /// `wte` and `w_e`, then `wpe` and `w_pe` with learned positions.
    pub fn declare(&self, lb: &mut LayoutBuilder) -> MatrixEmbeddingParams<ParamId> {
        let (r, dk, dv) = (self.rm.keys, self.rm.dk, self.rm.dv);
        let table = Init::Normal { std: self.init_std };
        let keys = Init::Normal {
            std: self.weight_init.std(self.init_std, r, dk, 1.0),
        };
        let wte = lb.add("wte", &[self.vocab, r, dv], false, table.clone());
        let w_e = lb.add("w_e", &[r, dk], true, keys.clone());
        let (wpe, w_pe) = match self.position {
            Position::Learned => (
                Some(lb.add("wpe", &[self.seq_len, r, dv], false, table)),
                Some(lb.add("w_pe", &[r, dk], true, keys)),
            ),
            Position::Alibi => (None, None),
        };
        MatrixEmbeddingParams { wte, w_e, wpe, w_pe }
    }

    pub fn acts<B: Backend>(&self, be: &B) -> engine::Result<MatrixEmbeddingActs<B>> {
        let bt = self.rm.tokens;
        let positions = match self.position {
            Position::Learned => {
                let index = |what: &str, len: usize| be.index(what, len);
                let p = Positions {
                    rows: index("the positions (batch × seq_len)", bt)?,
                    bucket_rows: index("the position buckets (batch × seq_len)", bt)?,
                    bucket_start: index("the position bucket starts (seq_len)", self.seq_len.saturating_add(1))?,
                };
                // Nothing to compute for a backend that only counts, whatever the batch.
                if be.holds_values() {
                    let rows: Vec<u32> = (0..bt).map(|i| (i % self.t) as u32).collect();
                    let buckets = engine::TokenBuckets::new(&rows, self.seq_len);
                    be.write_index(&p.rows, &rows);
                    be.write_index(&p.bucket_rows, &buckets.rows);
                    be.write_index(&p.bucket_start, &buckets.start);
                }
                Some(p)
            }
            Position::Alibi => None,
        };
        let vectors = |what: &str| be.zeros(what, values(&[bt, self.rm.keys, self.rm.dv]));
        Ok(MatrixEmbeddingActs {
            etok: vectors("the token embeddings (batch × seq_len × rank × d_v)")?,
            epos: positions
                .is_some()
                .then(|| vectors("the position embeddings (batch × seq_len × rank × d_v)"))
                .transpose()?,
            positions,
        })
    }

    /// A gather from a table of `rows` rows of R·D_v values, one row per token of the batch.
    fn gather(&self, rows: usize) -> GatherDims {
        GatherDims {
            rows: self.rm.tokens,
            c: self.rm.keys * self.rm.dv,
            v: rows,
        }
    }

    /// x0 = Σ_h w_E ⊗ W_E[token] (+ Σ_h w_PE ⊗ W_PE[position]).
    pub fn forward<B: Backend>(
        &self,
        be: &B,
        x0: &B::Tensor,
        a: &MatrixEmbeddingActs<B>,
        p: &MatrixEmbeddingParams<B::Tensor>,
        batch: &BatchTensors<B>,
    ) {
        be.gather_forward(&a.etok, &batch.tokens, &p.wte, self.gather(self.vocab));
        be.fill(x0, 0.0);
        be.store(x0, None, &p.w_e, &a.etok, self.rm);
        if let (Some(epos), Some(pos), Some(wpe), Some(w_pe)) = (&a.epos, &a.positions, &p.wpe, &p.w_pe) {
            be.gather_forward(epos, &pos.rows, wpe, self.gather(self.seq_len));
            be.store(x0, None, w_pe, epos, self.rm);
        }
    }

    /// Every gradient from dX⁰: the gathered rows' are retrievals of dX⁰ with the storage keys
    /// (into `dvec`, (BT, R·D_v)), the keys' are summed with the key gradient's `partials`.
    #[allow(clippy::too_many_arguments)]
    pub fn backward<B: Backend>(
        &self,
        be: &B,
        dp: &MatrixEmbeddingParams<B::Tensor>,
        dx0: &B::Tensor,
        dvec: &B::Tensor,
        partials: &B::Tensor,
        a: &MatrixEmbeddingActs<B>,
        p: &MatrixEmbeddingParams<B::Tensor>,
        batch: &BatchTensors<B>,
    ) {
        be.store_backward(dvec, &dp.w_e, partials, dx0, &p.w_e, &a.etok, self.rm);
        be.gather_backward(
            &dp.wte,
            dvec,
            &batch.bucket_rows,
            &batch.bucket_start,
            self.gather(self.vocab),
        );
        if let (Some(epos), Some(pos), Some(dwpe), Some(w_pe), Some(dw_pe)) =
            (&a.epos, &a.positions, &dp.wpe, &p.w_pe, &dp.w_pe)
        {
            be.store_backward(dvec, dw_pe, partials, dx0, w_pe, epos, self.rm);
            // Rows of the position table past T have no rows in their buckets: their gradient is 0.
            be.gather_backward(
                dwpe,
                dvec,
                &pos.bucket_rows,
                &pos.bucket_start,
                self.gather(self.seq_len),
            );
        }
    }
}
