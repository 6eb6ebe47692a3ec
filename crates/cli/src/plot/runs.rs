//! A run directory as the curves read it: its config, its metrics rows (with the wall time of
//! resumed segments added up), and where each row sits on the x axis.

use super::XAxis;
use crate::run_dir::{self, CONFIG_FILE, METRICS_FILE};
use anyhow::{bail, Result};
use models::run::MetricsRow;
use models::RunConfig;
use std::path::{Path, PathBuf};

/// One logged step of a run.
pub(super) struct Row {
    /// Its line in metrics.jsonl, from 1.
    pub(super) line: usize,
    pub(super) metrics: MetricsRow,
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
        let tokens = row.metrics.step as f64 * (self.cfg.train.batch * self.cfg.data.seq_len()) as f64;
        match x {
            XAxis::Step => Some(row.metrics.step as f64),
            XAxis::Tokens => Some(tokens),
            XAxis::Flops => Some(tokens * flops_per_token),
            XAxis::Time => row.time,
            XAxis::Setting(_) | XAxis::Comparison | XAxis::Tuning | XAxis::Scaling => None,
        }
    }
}

/// The rows of DIR/metrics.jsonl, with their wall times across resumes.
fn read_metrics(dir: &Path) -> Result<Vec<Row>> {
    let Some(metrics) = run_dir::read_metrics(dir)? else {
        bail!(
            "{} has no {METRICS_FILE}: it has not logged a step; train it (`resmem train --resume {}`) or leave it out",
            dir.display(),
            dir.display()
        );
    };
    if metrics.rows.is_empty() {
        bail!(
            "{} has no metrics rows yet: train it (`resmem train --resume {}`) or leave it out",
            dir.join(METRICS_FILE).display(),
            dir.display()
        );
    }
    let times = metrics.wall_times();
    Ok(metrics
        .rows
        .into_iter()
        .zip(times)
        .map(|((line, metrics), time)| Row { line, metrics, time })
        .collect())
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
