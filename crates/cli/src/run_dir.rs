//! A run directory that never loses work: claimed with an exclusive lock, never mixed with
//! another run, every file written atomically (temporary file, fsync, rename, fsync of the
//! directory), metrics appended whole lines at a time.

use anyhow::{bail, Context, Result};
use models::run::{Metrics, MetricsRow};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

pub const CONFIG_FILE: &str = "config.toml";
pub const METRICS_FILE: &str = "metrics.jsonl";
pub const MODEL_FILE: &str = "model.safetensors";
pub const CHECKPOINT_DIR: &str = "checkpoints";
/// The backend and device a run trains on, so that `--resume` continues on them.
pub const BACKEND_FILE: &str = "backend.json";
const LOCK_FILE: &str = ".resmem.lock";

/// The files that make a directory a resmem run.
const RUN_FILES: [&str; 4] = [CONFIG_FILE, METRICS_FILE, MODEL_FILE, CHECKPOINT_DIR];

/// A run directory held by this process until it is dropped.
pub struct RunDir {
    pub path: PathBuf,
    _lock: File,
    /// This process created the directory: dropped holding only the lock (the command failed
    /// before writing anything), it is removed.
    created: bool,
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let only_lock = fs::read_dir(&self.path)
            .map(|entries| entries.flatten().all(|e| e.file_name() == LOCK_FILE))
            .unwrap_or(false);
        if self.created && only_lock {
            let _ = fs::remove_file(self.path.join(LOCK_FILE));
            let _ = fs::remove_dir(&self.path);
        }
    }
}

impl RunDir {
    /// Claims `path` for a new run: created if missing, refused if it holds any run file.
    pub fn create(path: &Path) -> Result<Self> {
        let created = !path.exists();
        fs::create_dir_all(path).with_context(|| format!("cannot create the run directory {}", path.display()))?;
        let mut dir = Self::lock(path)?;
        dir.created = created;
        if let Some(found) = RUN_FILES.iter().find(|f| path.join(f).exists()) {
            if !path.join(CONFIG_FILE).exists() && config_from_checkpoints(path)?.is_none() {
                bail!(
                    "{} holds part of a run ({found}) but neither its {CONFIG_FILE} nor a checkpoint to rebuild it \
                     from, so it cannot be resumed or reused; choose another --out, or move its files away first",
                    path.display()
                );
            }
            bail!(
                "{} already holds a run ({found}); resume it with `resmem train --resume {}`, or choose another --out",
                path.display(),
                path.display()
            );
        }
        Ok(dir)
    }

    /// Claims the existing run at `path` to continue it.
    pub fn resume(path: &Path) -> Result<Self> {
        let config = path.join(CONFIG_FILE);
        if !config.is_file() && (config.exists() || !RUN_FILES.iter().any(|f| path.join(f).exists())) {
            bail!(
                "{} is not a run directory (it has no {CONFIG_FILE}); start a run there with `resmem train --out`",
                path.display()
            );
        }
        let dir = Self::lock(path)?;
        // A lost config.toml: every checkpoint carries the config it was written with.
        if !config.is_file() {
            let Some((text, from)) = config_from_checkpoints(path)? else {
                bail!(
                    "{} has lost its {CONFIG_FILE} and has no checkpoint to rebuild it from, so it cannot be \
                     resumed; train again with `resmem train --out` into another directory",
                    path.display()
                );
            };
            write_atomic(&config, |tmp| {
                fs::write(tmp, &text).with_context(|| format!("cannot write {}", tmp.display()))
            })?;
            crate::console::warn(&format!(
                "note: {} had no {CONFIG_FILE}; rebuilt it from {}",
                path.display(),
                from.display()
            ));
        }
        // Temporary files of a write that was killed before its rename: checkpoints', and
        // write_atomic's beside config.toml and metrics.jsonl. The lock keeps out live writers.
        for entry in fs::read_dir(dir.checkpoints()).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().ends_with(".tmp") {
                let _ = fs::remove_file(entry.path());
            }
        }
        for entry in fs::read_dir(&dir.path).into_iter().flatten().flatten() {
            if is_temporary(&entry.file_name().to_string_lossy()) {
                let _ = fs::remove_file(entry.path());
            }
        }
        Ok(dir)
    }

    fn lock(path: &Path) -> Result<Self> {
        let busy = || {
            format!(
                "another resmem process is training in {}; wait for it to finish (or, for a new run, choose another \
                 --out)",
                path.display()
            )
        };
        Ok(Self {
            path: path.to_path_buf(),
            _lock: lock_file(&path.join(LOCK_FILE), busy)?,
            created: false,
        })
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    pub fn checkpoints(&self) -> PathBuf {
        self.path.join(CHECKPOINT_DIR)
    }

    /// Writes a checkpoint for `step` through `write` (given the temporary path), atomically,
    /// then keeps the newest `keep`. Returns its path.
    pub fn write_checkpoint(&self, step: u64, keep: usize, write: impl FnOnce(&Path) -> Result<()>) -> Result<PathBuf> {
        let dir = self.checkpoints();
        fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let path = dir.join(checkpoint_name(step));
        write_atomic(&path, write)?;
        let all = checkpoints_in(&self.path)?;
        // A checkpoint that cannot be pruned costs disk, not the run: said, and training goes on.
        for (_, old) in all.iter().take(all.len().saturating_sub(keep)) {
            if let Err(e) = fs::remove_file(old) {
                crate::console::warn(&format!(
                    "warning: cannot remove the old checkpoint {} ({e}); training goes on, remove it yourself \
                     to free its space",
                    old.display()
                ));
            }
        }
        Ok(path)
    }

    /// Opens metrics.jsonl for appending, keeping only the whole lines up to step `upto`
    /// (everything when None): a torn last line of a killed run, and the steps after the
    /// checkpoint a resumed run restarts from, are dropped.
    pub fn metrics(&self, upto: Option<u64>) -> Result<MetricsLog> {
        let path = self.file(METRICS_FILE);
        if let Some(upto) = upto {
            if path.exists() {
                let text = data::read_file(&path).with_context(|| format!("cannot read {}", path.display()))?;
                let kept = kept_metrics(&text, upto);
                if kept.len() != text.len() {
                    write_atomic(&path, |tmp| {
                        fs::write(tmp, &kept).with_context(|| format!("cannot write {}", tmp.display()))
                    })?;
                }
            }
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        Ok(MetricsLog { file, path })
    }
}

/// The lines of a metrics file that are whole, are rows, and have `step` ≤ `upto`.
fn kept_metrics(text: &[u8], upto: u64) -> Vec<u8> {
    let mut kept = Vec::new();
    for line in text.split_inclusive(|&b| b == b'\n') {
        let whole = line.ends_with(b"\n");
        match MetricsRow::parse(line) {
            Some(row) if whole && row.step <= upto => kept.extend_from_slice(line),
            _ => {}
        }
    }
    kept
}

/// The rows of DIR/metrics.jsonl, the one reader of the file; None when there is no file.
/// A line that is not a row (a run killed mid-write, an edit) is skipped with a warning.
pub fn read_metrics(dir: &Path) -> Result<Option<Metrics>> {
    let path = dir.join(METRICS_FILE);
    let text = match data::read_text(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let metrics = Metrics::parse(&text);
    for line in &metrics.skipped {
        crate::console::warn(&format!(
            "skipping line {line} of {}: not a metrics row",
            path.display()
        ));
    }
    Ok(Some(metrics))
}

pub struct MetricsLog {
    file: File,
    path: PathBuf,
}

impl MetricsLog {
    /// Appends one row as one whole line in one write; a failed write (a full disk) is cut
    /// back off, so that the file stays whole lines.
    pub fn append(&mut self, row: &MetricsRow) -> Result<()> {
        let mut line = row.to_line();
        line.push('\n');
        let len = self
            .file
            .metadata()
            .with_context(|| format!("cannot read the size of {}", self.path.display()))?
            .len();
        self.file.write_all(line.as_bytes()).or_else(|e| {
            let _ = self.file.set_len(len);
            Err(e).with_context(|| format!("cannot append to {}", self.path.display()))
        })
    }
}

/// An exclusive lock on `lock_path`, held while the file stays open; `busy` says what to do
/// when another process holds it. Run directories and sweeps lock through this.
pub fn lock_file(lock_path: &Path, busy: impl FnOnce() -> String) -> Result<File> {
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_path)
        .with_context(|| format!("cannot open the lock file {}", lock_path.display()))?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(std::fs::TryLockError::WouldBlock) => bail!("{}", busy()),
        Err(std::fs::TryLockError::Error(e)) => Err(e).with_context(|| format!("cannot lock {}", lock_path.display())),
    }
}

/// The config text of the newest checkpoint of `run` that holds a valid one, with its file.
fn config_from_checkpoints(run: &Path) -> Result<Option<(String, PathBuf)>> {
    for (_, path) in checkpoints_in(run)?.into_iter().rev() {
        let text = data::read_file(&path)
            .ok()
            .and_then(|bytes| models::checkpoint::config_of(&bytes).ok());
        if let Some(text) = text.filter(|t| models::RunConfig::from_toml(t).is_ok()) {
            return Ok(Some((text, path)));
        }
    }
    Ok(None)
}

pub fn checkpoint_name(step: u64) -> String {
    format!("step-{step:09}.safetensors")
}

/// The checkpoints of the run at `run`, oldest first, by the step in their names.
pub fn checkpoints_in(run: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let dir = run.join(CHECKPOINT_DIR);
    if !dir.exists() {
        return Ok(vec![]);
    }
    let mut found = Vec::new();
    for entry in fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let name = entry.file_name().to_string_lossy().to_string();
        if let Some(step) = name
            .strip_prefix("step-")
            .and_then(|s| s.strip_suffix(".safetensors"))
            .and_then(|s| s.parse::<u64>().ok())
        {
            found.push((step, entry.path()));
        }
    }
    found.sort();
    Ok(found)
}

/// How write_atomic's temporary names start.
const TEMPORARY: &str = ".resmem-";

/// Whether `name` is one of write_atomic's temporary files.
fn is_temporary(name: &str) -> bool {
    name.starts_with(TEMPORARY) && name.contains(".tmp")
}

/// Writes `path` through `write` (which writes the temporary path it is given), then fsyncs,
/// renames, and fsyncs the directory, so that `path` is always either the old file or the whole
/// new one. A failed write removes the temporary file and leaves `path` as it was.
pub fn write_atomic(path: &Path, write: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    // A bare file name's parent is "": the current directory.
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // Short, so that any legal name can be written; unique within and across processes.
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // The target's extension kept last, for writers that choose a format by it (plotters).
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy())
        .filter(|e| e.len() <= 8)
        .map(|e| format!(".{e}"))
        .unwrap_or_default();
    let tmp = dir.join(format!("{TEMPORARY}{}-{n}.tmp{ext}", std::process::id()));
    let result = (|| {
        write(&tmp)?;
        File::open(&tmp)
            .and_then(|f| f.sync_all())
            .with_context(|| format!("cannot flush {} to disk", tmp.display()))?;
        fs::rename(&tmp, path).with_context(|| format!("cannot move {} to {}", tmp.display(), path.display()))?;
        File::open(dir)
            .and_then(|d| d.sync_all())
            .with_context(|| format!("cannot flush the directory {} to disk", dir.display()))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_keep_whole_lines_up_to_the_step() {
        let text = b"{\"step\":1}\n{\"step\":10}\n{\"step\":20}\n{\"ste";
        assert_eq!(kept_metrics(text, 10), b"{\"step\":1}\n{\"step\":10}\n");
        assert_eq!(kept_metrics(text, 99), b"{\"step\":1}\n{\"step\":10}\n{\"step\":20}\n");
    }

    /// A failed write leaves the old file whole and no temporary behind; the temporary keeps the
    /// target's extension (plotters picks its format by it), and resume's cleaning knows it.
    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let figure = dir.path().join("fig.png");
        fs::write(&figure, b"old figure").unwrap();
        let mut seen = PathBuf::new();
        let failed = write_atomic(&figure, |tmp| {
            seen = tmp.to_path_buf();
            fs::write(tmp, b"half a")?;
            anyhow::bail!("the drawing failed")
        });
        assert!(failed.is_err());
        assert_eq!(fs::read(&figure).unwrap(), b"old figure");
        let name = seen.file_name().unwrap().to_string_lossy().to_string();
        assert!(name.ends_with(".tmp.png") && is_temporary(&name), "{name}");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "only the old figure");
        assert!(!is_temporary(LOCK_FILE) && !is_temporary("config.toml"));
    }
}
