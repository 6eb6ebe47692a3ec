//! What the page reads of a run besides its loss, one kind at a time: the one relay from
//! `models::observe` to a view. A run keeps its readings in a map by kind (`Run::observed`);
//! the device sends each as one `Event::Observed`; a view takes the focused run's readings of
//! its kind. A new view is its component and one arm of each `match` here
//! (docs/adding-a-view.md).

use crate::arch::Arch;
use crate::residual::Look;
use crate::session::Session;
use engine::Backend;
use models::buckets::{self, BucketCounts};
use models::observe::{AltupRow, DepthRow, MixingRow};
use models::probes::Measured;
use serde::{Deserialize, Serialize};

/// How often the measured kinds are read while training (after step 1, then every this many
/// steps): the variance probes cost about one more forward and backward.
pub const MEASURE_EVERY: usize = 10;
/// Steps whose bucket hits the histograms sum.
pub const BUCKET_WINDOW: usize = 10;

/// A kind of reading, in the order a step reads them: the kinds that run a forward of their own
/// come last, so that the others read the step's forward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Kind {
    /// Bucket hits of every hashed layer in a step's forward.
    Buckets,
    /// Hyper-connections' gates at every site, for the viewer's token.
    Mixing,
    /// Attention Residuals' weights over depth at every read, for the viewer's token.
    Depth,
    /// AltUp's coefficients at every layer, and its sub-blocks' likeness at the viewer's token.
    Altup,
    /// Variance ratios of every storage and retrieval (a forward and backward of their own).
    Variance,
}

/// When a kind is read as a run trains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cadence {
    /// After every step, from its forward, before its loss is read: reads only.
    EveryStep,
    /// After step 1 and every `MEASURE_EVERY` steps, once the step's loss is read and before
    /// its residuals (whose logit lens rewrites the head's buffers): reads only.
    Measured,
    /// At the same steps, after the residuals: these run a forward of their own.
    MeasuredForward,
}

impl Kind {
    pub const ALL: [Kind; 5] = [Kind::Buckets, Kind::Mixing, Kind::Depth, Kind::Altup, Kind::Variance];

    pub fn cadence(self) -> Cadence {
        match self {
            Kind::Buckets => Cadence::EveryStep,
            Kind::Mixing | Kind::Depth | Kind::Altup => Cadence::Measured,
            Kind::Variance => Cadence::MeasuredForward,
        }
    }

    /// The kinds of `cadence` that step `n` reads, in order.
    pub fn due(cadence: Cadence, n: usize) -> impl Iterator<Item = Kind> {
        let now = match cadence {
            Cadence::EveryStep => true,
            Cadence::Measured | Cadence::MeasuredForward => n == 1 || n.is_multiple_of(MEASURE_EVERY),
        };
        Kind::ALL.into_iter().filter(move |k| now && k.cadence() == cadence)
    }

    /// How many readings a run keeps, the newest: a whole history for the views with a step
    /// scrubber, a window for the histograms.
    pub fn keep(self) -> usize {
        match self {
            Kind::Buckets => BUCKET_WINDOW,
            Kind::Mixing | Kind::Depth | Kind::Altup | Kind::Variance => usize::MAX,
        }
    }

    /// Whether a run of `arch` has readings of this kind, and the page its view.
    pub fn shown_for(self, arch: Arch) -> bool {
        match self {
            Kind::Buckets => arch.has_hash_tables(),
            Kind::Mixing => arch.has_mixing(),
            Kind::Depth => arch.has_depth_reads(),
            Kind::Altup => arch.has_sub_blocks(),
            Kind::Variance => arch.has_variance(),
        }
    }

    /// Whether it outlives the job that read it: the browser's store keeps it across reloads
    /// and a continued run keeps it (the histograms' window restarts with each job, as it is
    /// cheap to read again and not worth the space).
    pub fn saved(self) -> bool {
        match self {
            Kind::Buckets => false,
            Kind::Mixing | Kind::Depth | Kind::Altup | Kind::Variance => true,
        }
    }
}

/// What one reading holds, by kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Rows {
    Buckets(Vec<BucketCounts>),
    Mixing(Vec<MixingRow>),
    Depth(Vec<DepthRow>),
    Altup(Vec<AltupRow>),
    Variance(Vec<Measured>),
}

impl Rows {
    pub fn kind(&self) -> Kind {
        match self {
            Rows::Buckets(_) => Kind::Buckets,
            Rows::Mixing(_) => Kind::Mixing,
            Rows::Depth(_) => Kind::Depth,
            Rows::Altup(_) => Kind::Altup,
            Rows::Variance(_) => Kind::Variance,
        }
    }
}

/// One reading: what a run read of one kind after a step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Observed {
    pub step: usize,
    pub rows: Rows,
}

/// One reading as a view keeps it: its step and its kind's rows, typed.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading<T> {
    pub step: usize,
    pub rows: T,
}

/// The readings whose rows `pick` takes (those of the view's kind), oldest first.
pub fn series<T: Clone>(readings: &[Observed], pick: impl Fn(&Rows) -> Option<&T>) -> Vec<Reading<T>> {
    let typed = |o: &Observed| {
        pick(&o.rows).map(|rows| Reading {
            step: o.step,
            rows: rows.clone(),
        })
    };
    readings.iter().filter_map(typed).collect()
}

/// Reads `kind` of the session's last forward, at the token the residual viewer looks at (or
/// the first sequence's first); None for a model without it, or before the first step.
pub async fn observe<B: Backend + 'static>(
    session: &mut Session<B>,
    kind: Kind,
    look: &Look,
) -> Result<Option<Rows>, String> {
    let err = |e: models::ModelError| e.to_string();
    let Some((b, t)) = session.last_shape() else {
        return Ok(None);
    };
    let at = (look.seq.min(b - 1), t, look.token.min(t - 1));
    let (be, model) = (&session.be, &*session.trainer.model);
    Ok(match kind {
        Kind::Buckets => {
            let layers = model.inside().hashed;
            match layers.is_empty() {
                true => None,
                false => Some(Rows::Buckets(buckets::read(be, &layers).await.map_err(err)?)),
            }
        }
        Kind::Mixing => models::observe::mixing(be, model, at)
            .await
            .map_err(err)?
            .map(Rows::Mixing),
        Kind::Depth => models::observe::depth(be, model, at)
            .await
            .map_err(err)?
            .map(Rows::Depth),
        Kind::Altup => models::observe::altup(be, model, at)
            .await
            .map_err(err)?
            .map(Rows::Altup),
        Kind::Variance => session.measure().await?.map(Rows::Variance),
    })
}

/// Reads each of `kinds` in turn after step `n`, handing each reading to `emit`.
pub async fn observe_each<B: Backend + 'static>(
    session: &mut Session<B>,
    kinds: impl IntoIterator<Item = Kind>,
    n: usize,
    look: &Look,
    emit: &dyn Fn(Observed),
) -> Result<(), String> {
    for kind in kinds {
        if let Some(rows) = observe(session, kind, look).await? {
            emit(Observed { step: n, rows });
        }
    }
    Ok(())
}
