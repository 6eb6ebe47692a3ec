//! metrics.jsonl: one typed row per logged step, as the training loop writes it, and the one
//! reader every consumer (plots, sweep summaries, a resumed run's truncation) parses it with.

use serde::{Deserialize, Serialize};

/// One line of metrics.jsonl. Every field but `step` may be absent: a row that only
/// checkpoints has no `val_loss`, a run without a z-loss no `total`, the page's export only
/// `step` and `loss`.
///
/// The fields are in alphabetical order because the file's keys always were (it was written
/// through serde_json's sorted map), and a run resumed by a newer resmem should not change its
/// rows' form midway. Losses are the f32 the device computed, widened to f64, so that a reader
/// gets the same f32 back; `val_total` and the timings were computed in f64.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricsRow {
    /// Wall seconds since this segment of the run started (a resumed run starts again at 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed_s: Option<f64>,
    /// The global L2 norm of the step's gradient, before clipping to `max_grad_norm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_norm: Option<f64>,
    /// The training loss of the step's batch (cross-entropy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
    /// The learning rate the step used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lr: Option<f64>,
    pub step: u64,
    /// Training tokens a second since the previous row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_s: Option<f64>,
    /// `loss` plus the z-loss term, with a z-loss: what the official RMT code reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// The mean cross-entropy of the held-out batches, at an evaluation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_loss: Option<f64>,
    /// `val_loss` plus the held-out z-loss term, at an evaluation with a z-loss.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_total: Option<f64>,
    /// The composite gains of every hyper-connection site's P (the mHC paper's Amax): the
    /// forward gain (the largest absolute column sum of their product), then the backward (the
    /// largest row sum), the largest over the last held-out batch's tokens, at an evaluation of
    /// a hyper-connected model (`observe::composite_gain`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixing_gain: Option<[f64; 2]>,
}

impl MetricsRow {
    /// The row as one line of metrics.jsonl, without its newline.
    pub fn to_line(&self) -> String {
        // Plain numbers and options: serialising cannot fail (a non-finite f64 becomes null).
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The row a line holds, or None when it is not one (a torn write, a NaN, a missing step).
    pub fn parse(line: &[u8]) -> Option<MetricsRow> {
        serde_json::from_slice(line).ok()
    }
}

/// The rows of a metrics.jsonl text, each with its line number (from 1), and the lines that
/// hold no row. Blank lines are neither.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metrics {
    pub rows: Vec<(usize, MetricsRow)>,
    pub skipped: Vec<usize>,
}

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        let mut metrics = Metrics::default();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match MetricsRow::parse(line.as_bytes()) {
                Some(row) => metrics.rows.push((i + 1, row)),
                None => metrics.skipped.push(i + 1),
            }
        }
        metrics
    }

    /// Wall seconds since the run first started, for each row that has `elapsed_s`: a resumed
    /// run's `elapsed_s` starts again from 0, so each restart adds the previous segment's last
    /// value as an offset. Past f64 it is infinite, for the caller to refuse.
    pub fn wall_times(&self) -> Vec<Option<f64>> {
        let (mut offset, mut last) = (0.0, 0.0);
        self.rows
            .iter()
            .map(|(_, row)| {
                row.elapsed_s.map(|e| {
                    if e < last {
                        offset += last;
                    }
                    last = e;
                    offset + e
                })
            })
            .collect()
    }

    /// Wall seconds of training, summed over resumed segments; 0 without timings.
    pub fn wall_seconds(&self) -> f64 {
        self.wall_times().into_iter().flatten().last().unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full row as `resmem train` wrote it before the row was typed: through `json!`, whose
    /// map sorts the keys and widens each f32.
    fn untyped(step: usize, loss: f32, lr: f32, total: f32, val: f32, val_total: f64) -> String {
        let mut row = serde_json::json!({
            "step": step, "loss": loss, "lr": lr,
            "tokens_per_s": 1234.5678f64, "elapsed_s": 0.032621397f64,
        });
        row["total"] = total.into();
        row["val_loss"] = val.into();
        row["val_total"] = val_total.into();
        serde_json::to_string(&row).unwrap()
    }

    #[test]
    fn a_row_is_written_as_the_untyped_rows_were() {
        for (loss, lr) in [(5.545_177_5f32, 0.01f32), (1e-30, 3e38), (0.1, 2.5e-4)] {
            let (total, val, val_total) = (loss + 0.003, loss * 0.97, f64::from(loss) * 0.97 + 1e-3);
            let typed = MetricsRow {
                elapsed_s: Some(0.032621397),
                grad_norm: None,
                loss: Some(f64::from(loss)),
                lr: Some(f64::from(lr)),
                step: 17,
                tokens_per_s: Some(1234.5678),
                total: Some(f64::from(total)),
                val_loss: Some(f64::from(val)),
                val_total: Some(val_total),
                mixing_gain: None,
            };
            assert_eq!(typed.to_line(), untyped(17, loss, lr, total, val, val_total));
        }
        // Absent values are left out, not written as null.
        let short = MetricsRow {
            step: 3,
            loss: Some(2.0),
            ..MetricsRow::default()
        };
        assert_eq!(short.to_line(), r#"{"loss":2.0,"step":3}"#);
    }

    #[test]
    fn lines_that_are_not_rows_are_named() {
        let text = "{\"step\":1,\"loss\":2.5}\n\n{\"step\":2,\"loss\":NaN}\n{\"loss\":1.0}\n{\"step\":4,\"loss\":1.5,\"new\":true}\n{\"step\":5,";
        let m = Metrics::parse(text);
        let steps: Vec<(usize, u64)> = m.rows.iter().map(|(l, r)| (*l, r.step)).collect();
        assert_eq!(steps, [(1, 1), (5, 4)]);
        assert_eq!(m.skipped, [3, 4, 6]);
        assert_eq!(m.rows[0].1.loss, Some(2.5));
        assert_eq!(m.rows[0].1.val_loss, None);
    }

    #[test]
    fn wall_time_adds_resumed_segments() {
        // Segments 1, 2 | 0.5, 1.5 (a resume restarts elapsed_s) → 1, 2, 2.5, 3.5.
        let rows: String = [
            (1, Some(1.0)),
            (2, Some(2.0)),
            (3, None),
            (4, Some(0.5)),
            (5, Some(1.5)),
        ]
        .iter()
        .map(|&(step, elapsed_s)| {
            let row = MetricsRow {
                step,
                elapsed_s,
                ..MetricsRow::default()
            };
            row.to_line() + "\n"
        })
        .collect();
        let m = Metrics::parse(&rows);
        assert_eq!(m.wall_times(), [Some(1.0), Some(2.0), None, Some(2.5), Some(3.5)]);
        assert_eq!(m.wall_seconds(), 3.5);
        assert_eq!(Metrics::parse("").wall_seconds(), 0.0);
    }
}
