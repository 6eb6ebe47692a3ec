//! `resmem export tensorboard`: a run's metrics.jsonl as a TensorBoard event file, so that
//! `tensorboard --logdir` (or any tool that reads its files) shows resmem runs beside others.
//!
//! An event file is a sequence of TFRecords (length, its masked CRC-32C, the bytes, their
//! masked CRC-32C), each an `Event` message (tensorflow/core/util/event.proto): the first
//! names the file version, then one a metrics row, its step, its wall time and one scalar per
//! numeric field. The messages are declared here with prost's derive, field numbers as in the
//! proto files; nothing else of TensorFlow is needed.

use crate::console::say;
use crate::run_dir::{CONFIG_FILE, METRICS_FILE};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};

#[derive(Args, Debug)]
pub struct TensorboardArgs {
    /// The run directory whose metrics.jsonl to export.
    #[arg(long)]
    pub run: PathBuf,
    /// The directory to write the event file into (made if missing; it must hold no event
    /// file yet). Point `tensorboard --logdir` at its parent to see several runs together.
    #[arg(long)]
    pub out: PathBuf,
}

/// tensorflow.Event: fields 1 (wall_time), 2 (step), 3 (file_version) and 5 (summary).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    #[prost(int64, tag = "2")]
    pub step: i64,
    #[prost(string, optional, tag = "3")]
    pub file_version: Option<String>,
    #[prost(message, optional, tag = "5")]
    pub summary: Option<Summary>,
}

/// tensorflow.Summary: its values (field 1).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Summary {
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<Value>,
}

/// tensorflow.Summary.Value: a tag (field 1) and a scalar (simple_value, field 2).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Value {
    #[prost(string, tag = "1")]
    pub tag: String,
    #[prost(float, tag = "2")]
    pub simple_value: f32,
}

/// The marker of an event file's name that TensorBoard looks for.
const EVENT_FILE: &str = "events.out.tfevents";

/// Fields of a metrics row that are not scalars to plot.
const NOT_SCALARS: &[&str] = &["step", "elapsed_s"];

pub fn export(args: TensorboardArgs) -> Result<()> {
    let metrics = args.run.join(METRICS_FILE);
    let text = data::read_small_text(&metrics, 1 << 30).with_context(|| {
        format!(
            "cannot read {}; give --run a directory written by `resmem train`",
            metrics.display()
        )
    })?;
    std::fs::create_dir_all(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
    if let Some(old) = event_files(&args.out)?.first() {
        bail!(
            "{} holds an event file already ({}); TensorBoard would show both, so give another --out or remove it",
            args.out.display(),
            old.display()
        );
    }
    // Rows carry seconds since the run started; the run started when it wrote its config.
    let start = std::fs::metadata(args.run.join(CONFIG_FILE))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0.0, |d| d.as_secs_f64());
    let mut events = vec![Event {
        wall_time: start,
        file_version: Some("brain.Event:2".into()),
        ..Event::default()
    }];
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let row: serde_json::Map<String, serde_json::Value> = serde_json::from_str(line)
            .with_context(|| format!("line {} of {} is not a metrics row", i + 1, metrics.display()))?;
        events.push(event_of(&row, start).with_context(|| format!("line {} of {}", i + 1, metrics.display()))?);
    }
    let mut bytes = Vec::new();
    for e in &events {
        record(&mut bytes, &prost::Message::encode_to_vec(e));
    }
    let name = format!("{EVENT_FILE}.{}.resmem", start as u64);
    let path = args.out.join(name);
    crate::run_dir::write_atomic(&path, |tmp| {
        std::fs::write(tmp, &bytes).with_context(|| format!("cannot write {}", tmp.display()))
    })?;
    say(&format!(
        "wrote {} rows of {} to {}; view with: tensorboard --logdir {}",
        events.len() - 1,
        metrics.display(),
        path.display(),
        args.out
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(&args.out)
            .display()
    ));
    Ok(())
}

/// One metrics row as an event: its step, and each numeric field but the step and the time as
/// a scalar under its own name.
fn event_of(row: &serde_json::Map<String, serde_json::Value>, start: f64) -> Result<Event> {
    let Some(step) = row.get("step").and_then(serde_json::Value::as_i64) else {
        bail!("it has no whole `step`");
    };
    let elapsed = row.get("elapsed_s").and_then(serde_json::Value::as_f64).unwrap_or(0.0);
    let value = row
        .iter()
        .filter(|(k, _)| !NOT_SCALARS.contains(&k.as_str()))
        .filter_map(|(k, v)| {
            v.as_f64().map(|x| Value {
                tag: k.clone(),
                simple_value: x as f32,
            })
        })
        .collect();
    Ok(Event {
        wall_time: start + elapsed,
        step,
        file_version: None,
        summary: Some(Summary { value }),
    })
}

/// Appends one TFRecord holding `data`.
fn record(out: &mut Vec<u8>, data: &[u8]) {
    let len = (data.len() as u64).to_le_bytes();
    out.extend_from_slice(&len);
    out.extend_from_slice(&masked_crc(&len).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
}

/// TFRecord's masked CRC-32C.
fn masked_crc(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes).rotate_right(15).wrapping_add(0xa282_ead8)
}

/// The event files in `dir`.
fn event_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found = vec![];
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with(EVENT_FILE) {
            found.push(entry.path());
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// The record framing and checksum of TFRecord: CRC-32C of "123456789" is 0xe3069283, and
    /// a record reads back as its length, its bytes and two checksums that match.
    #[test]
    fn records_frame_and_checksum_as_tfrecord_does() {
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
        let event = Event {
            wall_time: 1.5,
            step: 7,
            file_version: None,
            summary: Some(Summary {
                value: vec![Value {
                    tag: "loss".into(),
                    simple_value: 2.25,
                }],
            }),
        };
        let data = event.encode_to_vec();
        let mut out = Vec::new();
        record(&mut out, &data);
        assert_eq!(out.len(), 8 + 4 + data.len() + 4);
        assert_eq!(u64::from_le_bytes(out[..8].try_into().unwrap()), data.len() as u64);
        assert_eq!(
            u32::from_le_bytes(out[8..12].try_into().unwrap()),
            masked_crc(&out[..8])
        );
        let back = Event::decode(&out[12..12 + data.len()]).unwrap();
        assert_eq!(back, event);
    }
}
