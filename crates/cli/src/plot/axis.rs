//! The axes: ranges that plotters can tick, numbers as tick labels and in messages, and an axis
//! ticked at given values.

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::ops::Range;

/// The smallest and largest of `values` ((0, 0) when there are none).
pub(super) fn span(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        (0.0, 0.0)
    } else {
        (lo, hi)
    }
}

/// The axis of values from `lo` to `hi`: widened by `frac` of its width on each side, or, when
/// it is narrower than a millionth of its values (a single point), by half their size (at least
/// 0.5). For any finite values the axis and its width are finite and the width is many floats
/// wide: plotters' search for round ticks never ends otherwise.
pub(super) fn padded((lo, hi): (f64, f64), frac: f64) -> (f64, f64) {
    // Values beyond a quarter of f64's range are drawn off the axis.
    const LIMIT: f64 = f64::MAX / 4.0;
    let (lo, hi) = (lo.clamp(-LIMIT, LIMIT), hi.clamp(-LIMIT, LIMIT));
    let size = lo.abs().max(hi.abs());
    let pad = if hi - lo > size * 1e-6 {
        (hi - lo) * frac
    } else {
        size.max(1.0) * 0.5
    };
    (lo - pad, hi + pad)
}

/// A number for a message: integers whole, others with up to 4 significant digits.
pub(super) fn plain(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.4e}")
            .parse::<f64>()
            .map(|r| r.to_string())
            .unwrap_or_else(|_| v.to_string())
    }
}

/// An axis label: 1.5k, 3M, 1.2G for large numbers, up to 3 decimals for small ones.
pub(super) fn compact(v: f64) -> String {
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    for (scale, suffix) in [
        (1e18, "E"),
        (1e15, "P"),
        (1e12, "T"),
        (1e9, "G"),
        (1e6, "M"),
        (1e3, "k"),
    ] {
        if v.abs() >= scale {
            return format!("{}{suffix}", trim(format!("{:.2}", v / scale)));
        }
    }
    trim(format!("{v:.3}"))
}

/// Tick labels of a loss axis with enough decimals to tell its ticks apart.
pub(super) fn decimals((lo, hi): (f64, f64)) -> usize {
    let step = ((hi - lo) / 8.0).max(1e-9);
    (-step.log10()).ceil().clamp(1.0, 6.0) as usize
}

/// A linear axis whose ticks are given values (a setting's), not round numbers.
pub(super) struct TickedAxis {
    pub(super) range: RangedCoordf64,
    pub(super) ticks: Vec<f64>,
}

impl Ranged for TickedAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.range.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // No fine grid between the values: it would suggest values that were not run.
        match hint.weight().allow_light_points() {
            true => vec![],
            false => self.ticks.clone(),
        }
    }

    fn range(&self) -> Range<f64> {
        self.range.range()
    }
}

/// The label of the tick at `v`, among (position, label) ticks; empty between them.
pub(super) fn tick_label(ticks: &[(f64, String)], v: f64) -> String {
    ticks
        .iter()
        .find(|t| (t.0 - v).abs() < 1e-9)
        .map(|t| t.1.clone())
        .unwrap_or_default()
}
