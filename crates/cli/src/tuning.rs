//! The GPU's tuned kernel choices kept between runs: `tuning.json` in the user's cache directory
//! (`$XDG_CACHE_HOME/resmem`, else `~/.cache/resmem`), one map of shape class → candidate per
//! adapter, driver and build ([`engine::gpu::GpuBackend::tuning_key`]). The engine measures a
//! class's candidates the first time it launches it (`engine::gpu` `tuning.rs`); a choice made
//! once is loaded here and never measured again. `--no-tune` keeps every op's default.
//!
//! Every candidate computes the same bits, so a stale or lost cache costs time, never a result:
//! an unreadable file is set aside with a warning and rebuilt.

use crate::console;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

/// `--no-tune`, for the whole process.
static NO_TUNE: AtomicBool = AtomicBool::new(false);

/// Adapter key → (shape class → chosen candidate).
type Cache = BTreeMap<String, BTreeMap<String, String>>;

/// Sets `--no-tune` for every GPU backend this process makes from now on.
pub fn set_no_tune(no_tune: bool) {
    NO_TUNE.store(no_tune, Ordering::SeqCst);
}

/// Whether GPU backends measure their kernels' candidates.
pub fn enabled() -> bool {
    !NO_TUNE.load(Ordering::SeqCst)
}

/// The cache file, or None where the user has no cache or home directory.
pub fn cache_path() -> Option<PathBuf> {
    let dir = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })?;
    Some(dir.join("resmem").join("tuning.json"))
}

/// Gives `gpu` the choices cached for its adapter, and has every new choice printed and added
/// to the cache.
pub fn attach(gpu: &engine::gpu::GpuBackend) {
    if !gpu.tuning() {
        return;
    }
    let key = gpu.tuning_key();
    let path = cache_path();
    if let Some(path) = &path {
        if let Some(choices) = read(path).remove(&key) {
            gpu.load_choices(choices);
        }
    }
    let told = std::cell::Cell::new(false);
    gpu.on_tuned(move |choice| {
        let kept = match &path {
            Some(path) => match add(path, &key, &choice.class, &choice.chosen) {
                Ok(()) => format!("kept in {}", path.display()),
                Err(e) => format!("not kept: cannot write {} ({e})", path.display()),
            },
            None => "not kept: no cache directory (set XDG_CACHE_HOME or HOME)".to_string(),
        };
        if !told.replace(true) {
            console::warn(&format!(
                "tuning this adapter's kernels, once per shape (same results; {kept}; --no-tune skips it):"
            ));
        }
        let timings: Vec<String> = (choice.timings.iter())
            .map(|(name, s)| format!("{name} {:.3} ms", s * 1e3))
            .collect();
        console::warn(&format!(
            "  {}: {} ({}; the first is the default)",
            choice.class,
            choice.chosen,
            timings.join(", ")
        ));
    });
}

/// The cache, empty where there is none. A file that cannot be read as one is moved aside to
/// `tuning.json.bad` with a warning, and the cache starts anew.
fn read(path: &PathBuf) -> Cache {
    let Ok(text) = data::read_text(path) else {
        return Cache::new();
    };
    serde_json::from_str(&text).unwrap_or_else(|e| {
        let aside = path.with_extension("json.bad");
        let _ = std::fs::rename(path, &aside);
        console::warn(&format!(
            "warning: the tuning cache {} is not one ({e}); moved it to {} and tuning anew",
            path.display(),
            aside.display()
        ));
        Cache::new()
    })
}

/// Adds one choice to the file: read, add, then write a temporary file and rename it over the
/// cache, so that a reader never sees half a file. Two processes tuning at once may each keep
/// only its own choices: the other's are measured again next time.
fn add(path: &PathBuf, key: &str, class: &str, chosen: &str) -> std::io::Result<()> {
    let mut cache = read(path);
    (cache.entry(key.to_string()).or_default()).insert(class.to_string(), chosen.to_string());
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let text = serde_json::to_string_pretty(&cache).map_err(std::io::Error::other)?;
    let temp = path.with_extension(format!("json.{}", std::process::id()));
    std::fs::write(&temp, text + "\n")?;
    std::fs::rename(&temp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&temp);
    })
}
