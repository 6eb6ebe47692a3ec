//! A run directory as the curves read it: its config, its metrics rows (with the wall time of
//! resumed segments added up), and where each row sits on the x axis.

use super::XAxis;
use crate::console::warn;
use crate::run_dir::{CONFIG_FILE, METRICS_FILE};
use anyhow::{bail, Context, Result};
use models::RunConfig;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// One logged step of a run.
pub(super) struct Row {
    /// Its line in metrics.jsonl, from 1.
    pub(super) line: usize,
    pub(super) step: u64,
    pub(super) loss: Option<f64>,
    pub(super) val_loss: Option<f64>,
    /// Wall seconds since the run first started, across resumes.
    pub(super) time: Option<f64>,
}

pub(super) struct Run {
    pub(super) dir: PathBuf,
    pub(super) cfg: RunConfig,
    pub(super) rows: Vec<Row>,
}

impl Run {
    pub(super) fn read(dir: &Path) -> Result<Self> {
        let cfg = crate::resolve::read_config(&dir.join(CONFIG_FILE))?;
        let rows = read_metrics(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            cfg,
            rows,
        })
    }

    /// The x value of `row`, given the training FLOPs per token (for --x flops).
    pub(super) fn x(&self, x: &XAxis, row: &Row, flops_per_token: f64) -> Option<f64> {
        let tokens = row.step as f64 * (self.cfg.train.batch * self.cfg.data.seq_len()) as f64;
        match x {
            XAxis::Step => Some(row.step as f64),
            XAxis::Tokens => Some(tokens),
            XAxis::Flops => Some(tokens * flops_per_token),
            XAxis::Time => row.time,
            XAxis::Setting(_) => None,
        }
    }
}

/// The rows of DIR/metrics.jsonl. A line that does not parse (a run killed mid-write) is
/// skipped with a warning. A resumed run's `elapsed_s` restarts from 0, so each restart adds
/// the previous segment's last value as an offset.
fn read_metrics(dir: &Path) -> Result<Vec<Row>> {
    let path = dir.join(METRICS_FILE);
    let text = match data::read_text(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "{} has no {METRICS_FILE}: it has not logged a step; train it (`resmem train --resume {}`) or leave it out",
            dir.display(),
            dir.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let (mut offset, mut last) = (0.0, 0.0);
    let mut rows = vec![];
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row = serde_json::from_str::<Value>(line).ok();
        let Some((row, step)) = row.and_then(|r| r["step"].as_u64().map(|s| (r, s))) else {
            warn(&format!(
                "skipping line {} of {}: not a metrics row",
                i + 1,
                path.display()
            ));
            continue;
        };
        let time = row["elapsed_s"].as_f64().map(|e| {
            if e < last {
                offset += last;
            }
            last = e;
            offset + e
        });
        rows.push(Row {
            line: i + 1,
            step,
            loss: row["loss"].as_f64(),
            val_loss: row["val_loss"].as_f64(),
            time,
        });
    }
    if rows.is_empty() {
        bail!(
            "{} has no metrics rows yet: train it (`resmem train --resume {}`) or leave it out",
            path.display(),
            dir.display()
        );
    }
    Ok(rows)
}

/// Training FLOPs per token: 3× the forward (forward, and a backward of twice its cost), the
/// forward counted at the run's window length T.
pub(super) fn train_flops_per_token(cfg: &RunConfig) -> Result<f64> {
    let t = cfg.data.seq_len();
    let mut model = cfg.model.clone();
    model.set_context(t);
    let counts = models::count::try_model(&model)?;
    Ok(3.0 * counts.flops_per_token(t))
}
