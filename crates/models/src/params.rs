//! Parameters as named views into one flat buffer, like llm.c's ParameterTensors: one AdamW
//! launch and one norm reduction cover them all, and gradients share the same layout.
//!
//! Decayed parameters (matrices and key vectors) come first, so AdamW decays [0, decay_end);
//! among them, the ones with a boosted learning rate (MemoryFormer's tables) come first of all,
//! so AdamW multiplies the learning rate of [0, boost_end) by `lr_boost`.
//! Every view starts at a multiple of 64 values, the GPU's binding alignment.

use crate::memory::{GRADIENTS, PARAMETERS};
use engine::Backend;
use engine::VIEW_ALIGN;
use rand::SeedableRng;
// Xoshiro256++ by name, not rand's SmallRng, which is another generator on 32-bit targets: the
// page (wasm32) would draw other weights and batches than the CLI from the same seed.
use rand_distr::{Distribution, StandardNormal};
use rand_xoshiro::Xoshiro256PlusPlus;

/// How a parameter starts.
#[derive(Clone, Debug, PartialEq)]
pub enum Init {
    Normal {
        std: f32,
    },
    Constant(f32),
    /// Each value given, in order (hyper-connections' static gates: one-hot, identity).
    Values(std::sync::Arc<[f32]>),
}

impl Init {
    /// Every norm's gain starts here.
    pub const ONE: Init = Init::Constant(1.0);
}

#[derive(Clone, Debug, PartialEq)]
pub struct ParamSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub decay: bool,
    /// Learns at `lr_boost` times the learning rate (implies decay).
    pub boosted: bool,
    pub init: Init,
    pub offset: usize,
}

impl ParamSpec {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The layout of a model's flat parameter buffer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParamLayout {
    pub specs: Vec<ParamSpec>,
    /// Values in the buffer, padding included.
    pub total: usize,
    pub decay_end: usize,
    pub boost_end: usize,
    /// The learning-rate multiplier of [0, boost_end).
    pub lr_boost: f32,
}

/// Collects parameters in declaration order, then places the decayed ones first.
#[derive(Default)]
pub struct LayoutBuilder {
    specs: Vec<ParamSpec>,
    lr_boost: Option<f32>,
}

/// A parameter's position in the layout, returned when it is declared.
pub type ParamId = usize;

impl LayoutBuilder {
    pub fn add(&mut self, name: impl Into<String>, shape: &[usize], decay: bool, init: Init) -> ParamId {
        self.specs.push(ParamSpec {
            name: name.into(),
            shape: shape.to_vec(),
            decay,
            boosted: false,
            init,
            offset: 0,
        });
        self.specs.len() - 1
    }

    /// A decayed parameter that learns at `lr_boost` times the learning rate.
    pub fn add_boosted(&mut self, name: impl Into<String>, shape: &[usize], lr_boost: f32, init: Init) -> ParamId {
        self.lr_boost = Some(lr_boost);
        let id = self.add(name, shape, true, init);
        self.specs[id].boosted = true;
        id
    }

    pub fn build(mut self) -> ParamLayout {
        let (mut offset, mut boost_end, mut decay_end) = (0, 0, 0);
        // Boosted (and decayed), then decayed, then the rest.
        for (pass, (decay, boosted)) in [(true, true), (true, false), (false, false)].into_iter().enumerate() {
            for s in self
                .specs
                .iter_mut()
                .filter(|s| (s.decay, s.boosted) == (decay, boosted))
            {
                s.offset = offset;
                offset = (offset + s.len()).next_multiple_of(VIEW_ALIGN);
            }
            match pass {
                0 => boost_end = offset,
                1 => decay_end = offset,
                _ => {}
            }
        }
        ParamLayout {
            specs: self.specs,
            total: offset,
            decay_end,
            boost_end,
            lr_boost: self.lr_boost.unwrap_or(1.0),
        }
    }
}

impl ParamLayout {
    /// Real parameters, padding excluded.
    pub fn count(&self) -> usize {
        self.specs.iter().map(|s| s.len()).sum()
    }

    /// Initial values from a seed: the same seed gives the same model on every backend.
    ///
    /// Samples are std·z with z standard normal, exactly what `Normal::new(0, std)` draws, but
    /// with no constructor that can fail: a std that validation missed gives non-finite values,
    /// never a panic.
    pub fn init_values(&self, seed: u64) -> Vec<f32> {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut values = vec![0.0; self.total];
        for s in &self.specs {
            let Some(dst) = values.get_mut(s.offset..s.offset.saturating_add(s.len())) else {
                continue;
            };
            match s.init {
                Init::Constant(c) => dst.fill(c),
                Init::Values(ref given) => dst.copy_from_slice(given),
                Init::Normal { std: 0.0 } => dst.fill(0.0),
                Init::Normal { std } => dst.iter_mut().for_each(|v| {
                    let z: f64 = StandardNormal.sample(&mut rng);
                    *v = (0.0 + std as f64 * z) as f32
                }),
            }
        }
        values
    }
}

/// A model's parameters and gradients on a backend, laid out by a [`ParamLayout`].
pub struct ParamStore<B: Backend> {
    pub layout: ParamLayout,
    /// (total)
    pub params: B::Tensor,
    /// (total); padding stays 0. Empty (0 values) in an inference store, which has no
    /// gradients: check `trainable` before using it.
    pub grads: B::Tensor,
    trainable: bool,
}

impl<B: Backend> ParamStore<B> {
    /// Parameters initialised from `seed`, and their gradients. On a backend that only counts,
    /// the initial values are not drawn: they would take host memory the size of the model.
    pub fn new(be: &B, layout: ParamLayout, seed: u64) -> engine::Result<Self> {
        let params = be.zeros(PARAMETERS, layout.total)?;
        let grads = be.zeros(GRADIENTS, layout.total)?;
        if be.holds_values() {
            be.write(&params, &layout.init_values(seed));
        }
        Ok(Self {
            layout,
            params,
            grads,
            trainable: true,
        })
    }

    /// Parameters only, all 0 until the caller writes them (a checkpoint's values): no gradient
    /// buffer, and no host-side init values to draw.
    pub fn inference(be: &B, layout: ParamLayout) -> engine::Result<Self> {
        let params = be.zeros(PARAMETERS, layout.total)?;
        // A zero-length stand-in, so that the field keeps its type; nothing may read it.
        let grads = be.zeros("no gradients (inference)", 0)?;
        Ok(Self {
            layout,
            params,
            grads,
            trainable: false,
        })
    }

    /// Whether the store has gradients (built by `new`, not `inference`).
    pub fn trainable(&self) -> bool {
        self.trainable
    }

    pub fn param(&self, be: &B, id: ParamId) -> B::Tensor {
        let s = &self.layout.specs[id];
        be.view(&self.params, s.offset, s.len())
    }

    /// The gradient view of `id`; only a trainable store has one (an inference store's empty
    /// buffer fails the view's bounds check).
    pub fn grad(&self, be: &B, id: ParamId) -> B::Tensor {
        let s = &self.layout.specs[id];
        be.view(&self.grads, s.offset, s.len())
    }
}
