//! The residual, the research variable of this project, as one trait: what a token carries from
//! block to block, how a branch reads it at a site (`read`) and how the branch's output lands
//! (`write`), with their backwards.
//!
//!   Vector    x ∈ R^D              read Norm(x)                 write x + y          transformer, MemoryFormer
//!   Matrix    X ∈ R^{D_k×D_v}      read r ·₁ Norm(X)            write X + Σ w ⊗ y    RMT, hybrid
//!   Streams   X ∈ R^{n×D}          read Norm(Σ_j pre_j x_j)     write Pᵀ X + post ⊗ y  HC, mHC, mHC-lite
//!   SubBlocks X ∈ R^{K×D}          read Norm(x_j)               write P X + g ⊗ (y − x̂_j)  AltUp
//!   DepthBlocks X ∈ R^{(N+1)×D}    read Norm(Σ_k α_k x_k)       write X + e_n ⊗ y    AttnRes
//!
//! A site is one branch of one block: its attention, then its feed-forward core. The trunk
//! (`trunk.rs`) runs every block over the sites; each kind also owns the model's two ends, the
//! embedding that makes the first residual and the head that reads the last.

/// The accessors every residual over rows of D shares (all but the matrix): its embedding lands
/// in its ends' `encoded`, its first residual is the ends' `$first`, and a site keeps what its
/// branch reads in `ln`, what the branch writes in `y` and the residual after it in `after`.
macro_rules! rows_of_d {
    (first: $first:ident) => {
        /// e = W_E[token] + W_PE[position]
        fn embed<B: Backend>(&self, be: &B, e: &Self::EndActs<B>, p: &Self::Ends<B::Tensor>, batch: &BatchTensors<B>) {
            self.embedding.forward(be, &e.encoded, &p.embedding, batch);
        }

        fn embedded<'a, B: Backend>(&self, e: &'a Self::EndActs<B>) -> &'a B::Tensor {
            &e.encoded
        }

        fn first<'a, B: Backend>(&self, e: &'a Self::EndActs<B>) -> &'a B::Tensor {
            &e.$first
        }

        fn after<'a, B: Backend>(&self, a: &'a Self::SiteActs<B>) -> &'a B::Tensor {
            &a.after
        }

        fn input<'a, B: Backend>(&self, a: &'a Self::SiteActs<B>, _qkv: &'a B::Tensor) -> &'a B::Tensor {
            &a.ln
        }

        fn output<'a, B: Backend>(&self, a: &'a Self::SiteActs<B>) -> Option<&'a B::Tensor> {
            Some(&a.y)
        }
    };
}

pub mod depth_blocks;
pub mod matrix;
pub mod streams;
pub mod sub_blocks;
pub mod vector;

use crate::batch::BatchTensors;
use crate::interventions::{Group, ReadOut};
use crate::loss::Unembedding;
use crate::observe::{DepthRead, MixingSite, Shape, SubBlockLayer};
use crate::params::{LayoutBuilder, ParamId};
use crate::probes::Layer;
use engine::Backend;

pub use depth_blocks::DepthBlocks;
pub use matrix::Matrix;
pub use streams::Streams;
pub use sub_blocks::SubBlocks;
pub use vector::Vector;

/// Parameters' views and their gradients' views, side by side.
pub type AndGrads<'a, P> = (&'a P, &'a P);

/// One site: block `block`'s attention or feed-forward branch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site {
    pub block: usize,
    pub layer: Layer,
}

impl Site {
    /// Block `block`'s attention.
    pub fn attn(block: usize) -> Self {
        Site {
            block,
            layer: Layer::Attn,
        }
    }

    /// Block `block`'s feed-forward branch.
    pub fn ff(block: usize) -> Self {
        Site {
            block,
            layer: Layer::Ff,
        }
    }

    /// The sites in forward order: block 0's attention, its FF, block 1's attention, …
    pub fn index(self) -> usize {
        2 * self.block + usize::from(self.layer == Layer::Ff)
    }

    /// The depth of the residual the site reads: 0 is the embedding's, 2L the last.
    pub fn depth_in(self) -> usize {
        self.index()
    }

    /// The depth of the residual the site writes.
    pub fn depth_out(self) -> usize {
        self.index() + 1
    }
}

/// What a residual is and does at a site. `T` is a parameter's id when declared and a tensor
/// view after (of the parameter or of its gradient).
pub trait Residual {
    /// One site's parameters: its read's (a norm's gain, retrieval keys, gates), then its
    /// write's (storage keys).
    type Site<T>;
    /// The embedding's and the head's parameters.
    type Ends<T>;
    /// What one site keeps from the forward for the backward, the residual after it included.
    type SiteActs<B: Backend>;
    /// What every site shares (a vector residual's branch output, constant ones), allocated
    /// first and kept by the ends.
    type Shared<B: Backend>;
    /// What the embedding and the head keep.
    type EndActs<B: Backend>;
    /// Backward scratch shared by every site, the residual's gradient among it.
    type Scratch<B: Backend>;

    /// Its read and write are maps of their own (the RMT's retrieval and storage keys), which
    /// the variance probes measure at every site; a core's own maps are then probed apart.
    /// Otherwise the branch's first and last maps stand in their places (W_QKV and W_O, W1
    /// and W2; RMT paper Table 2).
    const KEYED: bool;

    /// Declares site `site`'s read parameters, the branch's (`branch`), then its write's.
    fn declare_site<P>(
        &self,
        lb: &mut LayoutBuilder,
        site: Site,
        branch: impl FnOnce(&mut LayoutBuilder) -> P,
    ) -> (Self::Site<ParamId>, P);
    /// Declares the embedding's parameters, every block's (`blocks`), then the head's.
    fn declare_ends<P>(
        &self,
        lb: &mut LayoutBuilder,
        blocks: impl FnOnce(&mut LayoutBuilder) -> P,
    ) -> (Self::Ends<ParamId>, P);
    fn map_site<T>(p: &Self::Site<ParamId>, f: &impl Fn(ParamId) -> T) -> Self::Site<T>;
    fn map_ends<T>(p: &Self::Ends<ParamId>, f: &impl Fn(ParamId) -> T) -> Self::Ends<T>;

    fn shared<B: Backend>(&self, be: &B) -> engine::Result<Self::Shared<B>>;
    /// A site's buffers, with views of what it shares.
    fn site_acts<B: Backend>(&self, be: &B, site: Site, shared: &Self::Shared<B>) -> engine::Result<Self::SiteActs<B>>;
    /// The ends' buffers, allocated after the sites': of equal buffers, the memory estimate names
    /// the first, a residual's own.
    fn end_acts<B: Backend>(&self, be: &B, shared: Self::Shared<B>) -> engine::Result<Self::EndActs<B>>;
    fn scratch<B: Backend>(&self, be: &B) -> engine::Result<Self::Scratch<B>>;
    /// The head's width, what W_U reads a row.
    fn head_width(&self) -> usize;

    /// The embedding of the batch's tokens, before it becomes the first residual.
    fn embed<B: Backend>(&self, be: &B, e: &Self::EndActs<B>, p: &Self::Ends<B::Tensor>, batch: &BatchTensors<B>);
    /// What `embed` wrote.
    fn embedded<'a, B: Backend>(&self, e: &'a Self::EndActs<B>) -> &'a B::Tensor;
    /// The first residual from the embedding (hyper-connections' n copies of it).
    fn spread<B: Backend>(&self, _be: &B, _e: &Self::EndActs<B>) {}
    /// The first residual.
    fn first<'a, B: Backend>(&self, e: &'a Self::EndActs<B>) -> &'a B::Tensor;
    /// The residual after the site.
    fn after<'a, B: Backend>(&self, a: &'a Self::SiteActs<B>) -> &'a B::Tensor;

    /// Where the site's read lands: a buffer of its own, or attention's `qkv` for a residual
    /// whose read is attention's input map.
    fn input<'a, B: Backend>(&self, a: &'a Self::SiteActs<B>, qkv: &'a B::Tensor) -> &'a B::Tensor;
    /// Where the branch writes what the residual takes; None: attention's output itself.
    fn output<'a, B: Backend>(&self, a: &'a Self::SiteActs<B>) -> Option<&'a B::Tensor>;
    /// input = read(x): what the branch sees of the residual `x`, into `input`.
    #[allow(clippy::too_many_arguments)]
    fn read<B: Backend>(
        &self,
        be: &B,
        a: &Self::SiteActs<B>,
        x: &B::Tensor,
        input: &B::Tensor,
        p: &Self::Site<B::Tensor>,
        site: Site,
    );
    /// after = write(x, y): the residual `x` with the branch's output `y`.
    fn write<B: Backend>(
        &self,
        be: &B,
        a: &Self::SiteActs<B>,
        x: &B::Tensor,
        y: &B::Tensor,
        p: &Self::Site<B::Tensor>,
        site: Site,
    );
    /// Writes into the head's logits what it reads of the residual `x`.
    fn read_out<B: Backend>(
        &self,
        be: &B,
        e: &Self::EndActs<B>,
        x: &B::Tensor,
        p: &Self::Ends<B::Tensor>,
        head: &Unembedding<B>,
    );

    /// The residual's gradient at `depth` (0 the embedding's, 2L the last).
    fn dresidual<'a, B: Backend>(&self, s: &'a Self::Scratch<B>, depth: usize) -> &'a B::Tensor;
    /// The head's backward, from the loss (or an intervention's `seed`) into the last
    /// residual's gradient.
    #[allow(clippy::too_many_arguments)]
    fn read_out_backward<B: Backend>(
        &self,
        be: &B,
        s: &Self::Scratch<B>,
        e: &Self::EndActs<B>,
        x: &B::Tensor,
        params: AndGrads<'_, Self::Ends<B::Tensor>>,
        head: &Unembedding<B>,
        batch: &BatchTensors<B>,
        seed: Option<&B::Tensor>,
    );
    /// The write's backward from the gradient after the site: the write's parameter gradients,
    /// the gradient before it through the write, and the branch output's gradient, returned.
    #[allow(clippy::too_many_arguments)]
    fn write_backward<'a, B: Backend>(
        &self,
        be: &B,
        s: &'a Self::Scratch<B>,
        a: &Self::SiteActs<B>,
        x: &B::Tensor,
        y: &B::Tensor,
        params: AndGrads<'_, Self::Site<B::Tensor>>,
        site: Site,
    ) -> &'a B::Tensor;
    /// Where the branch writes its input's gradient: a buffer of the scratch, or attention's
    /// `dqkv` where the read is attention's input map.
    fn input_grad<'a, B: Backend>(&self, s: &'a Self::Scratch<B>, dqkv: &'a B::Tensor, site: Site) -> &'a B::Tensor;
    /// The read's backward from the branch input's gradient `dinput`: the read's parameter
    /// gradients, added to the gradient before the site.
    #[allow(clippy::too_many_arguments)]
    fn read_backward<B: Backend>(
        &self,
        be: &B,
        s: &Self::Scratch<B>,
        a: &Self::SiteActs<B>,
        x: &B::Tensor,
        dinput: &B::Tensor,
        params: AndGrads<'_, Self::Site<B::Tensor>>,
        site: Site,
    );
    /// The embedding's gradient from the first residual's: the same buffer, or the streams'
    /// sum.
    fn gather<'a, B: Backend>(&self, be: &B, s: &'a Self::Scratch<B>, e: &Self::EndActs<B>) -> &'a B::Tensor;
    /// The embedding's parameter gradients from `gather`'s.
    fn embed_backward<B: Backend>(
        &self,
        be: &B,
        s: &Self::Scratch<B>,
        e: &Self::EndActs<B>,
        params: AndGrads<'_, Self::Ends<B::Tensor>>,
        batch: &BatchTensors<B>,
    );

    /// For the variance probes, a keyed residual computes what its fused read and write never
    /// write out: Norm(x) (forward), the write alone (forward), and dNorm (backward), into its
    /// scratch. For the others the branch's own first and last maps are probed: these return
    /// the branch's normalised input, the map's output and its input's gradient as they are.
    #[allow(clippy::too_many_arguments)]
    fn normed<'a, B: Backend>(
        &self,
        _be: &B,
        _s: &'a Self::Scratch<B>,
        _a: &Self::SiteActs<B>,
        _x: &B::Tensor,
        input: &'a B::Tensor,
        _p: &Self::Site<B::Tensor>,
        _site: Site,
    ) -> &'a B::Tensor {
        input
    }
    fn written<'a, B: Backend>(
        &self,
        _be: &B,
        _s: &'a Self::Scratch<B>,
        y: &'a B::Tensor,
        _p: &Self::Site<B::Tensor>,
        _site: Site,
    ) -> &'a B::Tensor {
        y
    }
    fn dnormed<'a, B: Backend>(
        &self,
        _be: &B,
        _s: &'a Self::Scratch<B>,
        dinput: &'a B::Tensor,
        _p: &Self::Site<B::Tensor>,
        _site: Site,
    ) -> &'a B::Tensor {
        dinput
    }

    /// A token's residual, for viewers.
    fn shape(&self) -> Shape;
    /// Its groups of columns and how many a row has (an RMT's D_k slots, n streams, or 1).
    fn groups(&self) -> (Option<Group>, usize);
    /// Values a token, the residual's width.
    fn width(&self) -> usize;
    /// Values a token of what `embed` writes.
    fn embedding_width(&self) -> usize {
        self.width()
    }
    /// Values a token of what a branch gives the write.
    fn branch_width(&self) -> usize;
    /// The read-out as a linear map of the last residual, where it is one.
    fn linear_read_out(&self) -> Option<ReadOut>;
    /// Hyper-connections' gates at each site, for the mixing view; none for the others.
    fn mixing<'a, B: Backend>(&self, _sites: Vec<(String, &'a Self::SiteActs<B>)>) -> Vec<MixingSite<'a, B>> {
        Vec::new()
    }
    /// AltUp's coefficients at each layer (its attention's and FF's sites) and the sub-block
    /// it computes on, for the AltUp view; none for the others.
    fn sub_blocks<'a, B: Backend>(&self, _layers: Vec<[&'a Self::Site<B::Tensor>; 2]>) -> Vec<SubBlockLayer<'a, B>> {
        Vec::new()
    }
    /// Attention Residuals' reads over depth at each site and the head's, for the depth view;
    /// none for the others.
    fn depth<'a, B: Backend>(
        &self,
        _sites: Vec<(String, &'a Self::SiteActs<B>)>,
        _ends: &'a Self::EndActs<B>,
    ) -> Vec<DepthRead<'a, B>> {
        Vec::new()
    }
}
