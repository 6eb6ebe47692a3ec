//! The checkpoint and config.toml loaders against thousands of corrupt inputs: truncations at
//! every offset, every single bit flipped, random bytes and shape lies. None may panic; every
//! corrupt checkpoint is an error, and every config that loads is a valid one.

use rand::{rngs::SmallRng, Rng, SeedableRng};
use resmem_models::checkpoint::{self, TrainState};
use resmem_models::params::{Init, LayoutBuilder, ParamLayout};
use resmem_models::RunConfig;
use std::panic::{catch_unwind, AssertUnwindSafe};

fn layout(width: usize) -> ParamLayout {
    let mut lb = LayoutBuilder::default();
    lb.add("w", &[3, width], true, Init::Normal { std: 1.0 });
    lb.add("g", &[5], false, Init::Constant(1.0));
    lb.build()
}

fn checkpoint_bytes(l: &ParamLayout, config: &str) -> Vec<u8> {
    let state = TrainState {
        step: 7,
        params: l.init_values(1),
        m: l.init_values(2),
        v: l.init_values(3).iter().map(|x| x * x).collect(),
    };
    let path = std::env::temp_dir().join(format!(
        "resmem-fuzz-{}-{}.safetensors",
        std::process::id(),
        config.len()
    ));
    checkpoint::write_state(l, &state, config, &path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    bytes
}

/// Loads `bytes` every way a command does; Ok(()) only if all of them accept it.
fn load_checkpoint(l: &ParamLayout, bytes: &[u8]) -> Result<(), String> {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        checkpoint::config_of(bytes).map_err(|e| e.to_string())?;
        checkpoint::from_bytes(l, bytes).map_err(|e| e.to_string())?;
        checkpoint::state_from_bytes(l, bytes).map_err(|e| e.to_string())?;
        Ok(())
    }));
    outcome.unwrap_or_else(|_| panic!("a loader panicked on {} bytes", bytes.len()))
}

#[test]
fn corrupt_checkpoints_are_errors_and_never_panic() {
    let l = layout(7);
    let good = checkpoint_bytes(&l, "[train]\nsteps = 10\n");
    assert_eq!(load_checkpoint(&l, &good), Ok(()));
    let mut cases = 0;
    let mut expect_err = |bytes: &[u8], what: &str| {
        cases += 1;
        let err = load_checkpoint(&l, bytes)
            .map(|_| String::from_utf8_lossy(&bytes[..bytes.len().min(600)]).to_string())
            .expect_err(what);
        assert!(
            err.contains("corrupt or truncated") || err.contains("not written by resmem") || err.contains("needs f32"),
            "{what}: {err}"
        );
    };
    for cut in 0..good.len() {
        expect_err(&good[..cut], &format!("truncated at {cut}"));
    }
    for bit in 0..good.len() * 8 {
        let mut flipped = good.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        expect_err(&flipped, &format!("bit {bit} flipped"));
    }
    let mut rng = SmallRng::seed_from_u64(0);
    for i in 0..3000 {
        let len = rng.random_range(0..2 * good.len());
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        // Half of them start with a plausible header length, to get past the first check.
        if i % 2 == 0 && len >= 8 {
            bytes[..8].copy_from_slice(&good[..8]);
        }
        expect_err(&bytes, "random bytes");
    }
    // Shape lies: well-formed files with a valid checksum, written for other shapes.
    for width in [1, 6, 8, 64] {
        expect_err(&checkpoint_bytes(&layout(width), "x = 1\n"), &format!("width {width}"));
    }
    eprintln!("checkpoints: {cases} corrupt cases, all refused");
    assert!(cases >= 10_000, "{cases} cases");
}

/// Loads a config; Ok only for one that validates.
fn load_config(text: &str) -> Option<RunConfig> {
    let outcome = catch_unwind(|| RunConfig::from_toml(text).ok());
    let cfg = outcome.unwrap_or_else(|_| panic!("from_toml panicked on:\n{text}"));
    if let Some(c) = &cfg {
        c.validate().expect("from_toml returns only valid configs");
    }
    cfg
}

#[test]
fn corrupt_config_files_never_panic_and_load_only_when_valid() {
    for preset in ["small-rmt", "small-hybrid"] {
        corrupt_configs_of(preset);
    }
}

fn corrupt_configs_of(preset: &str) {
    let good = RunConfig::preset(preset).unwrap().to_toml().unwrap();
    assert!(load_config(&good).is_some());
    let mut cases = 0;
    let mut errors = 0;
    let mut check = |text: &str| {
        cases += 1;
        errors += usize::from(load_config(text).is_none());
    };
    for (cut, _) in good.char_indices() {
        check(&good[..cut]);
    }
    let bytes = good.as_bytes();
    for bit in 0..bytes.len() * 8 {
        let mut flipped = bytes.to_vec();
        flipped[bit / 8] ^= 1 << (bit % 8);
        if let Ok(text) = std::str::from_utf8(&flipped) {
            check(text);
        }
    }
    let mut rng = SmallRng::seed_from_u64(1);
    for _ in 0..1000 {
        let len = rng.random_range(0..200);
        let text: String = (0..len).map(|_| rng.random_range(b' '..=b'~') as char).collect();
        check(&text);
    }
    // A few printable characters of the good config replaced at random.
    for _ in 0..4000 {
        let mut text = bytes.to_vec();
        for _ in 0..rng.random_range(1..4) {
            let i = rng.random_range(0..text.len());
            text[i] = rng.random_range(b' '..=b'~');
        }
        check(std::str::from_utf8(&text).expect("printable ASCII"));
    }
    // Value lies: every setting given a value that is out of range or of the wrong type.
    let lies = [
        "0",
        "-1",
        "inf",
        "nan",
        "-inf",
        "1e309",
        "9223372036854775807",
        "\"x\"",
        "[]",
        "{}",
        "true",
        "0.5",
    ];
    for line in good.lines() {
        let Some((key, _)) = line.split_once(" = ") else {
            continue;
        };
        for lie in lies {
            check(&good.replace(line, &format!("{key} = {lie}")));
        }
    }
    eprintln!("{preset} config: {cases} corrupt cases, {errors} refused");
    assert!(cases >= 10_000, "{preset}: {cases} cases");
    assert!(
        errors > cases / 2,
        "{preset}: only {errors} of {cases} corrupt configs were refused"
    );
}
