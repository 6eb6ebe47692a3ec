//! Prepared corpora: text files tokenized once into `train.bin` and `val.bin` (little-endian
//! tokens, u16 when V ≤ 65,536, else u32) and `meta.json`, then read window by window for
//! training.
//!
//! Each input file is one document. The last `val_frac` of each document's tokens is held out for
//! validation, so both splits cover every document and the split is a pure function of the
//! inputs. GPT-2 appends `<|endoftext|>` after each document's train part and after its val part
//! so that a window that crosses documents sees the boundary.
//!
//! One file over 600 lines because the format is one contract: the writer, the reader, the
//! checks that refuse a corpus whose files disagree, and their tests hold each other to it.

use crate::error::DataError;
use crate::sampler::Split;
use crate::tokenizer::{Tokenizer, TokenizerKind};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::{self, File};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// The version written to and required of `meta.json`.
pub const FORMAT: u32 = 1;
pub const TRAIN_FILE: &str = "train.bin";
pub const VAL_FILE: &str = "val.bin";
pub const META_FILE: &str = "meta.json";
/// Roughly how much text is encoded between progress reports.
pub const PIECE_BYTES: usize = 1 << 20;
/// A meta.json larger than this is not one we wrote.
const MAX_META_BYTES: u64 = 64 << 20;

/// What `meta.json` records about a prepared corpus.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Meta {
    pub format: u32,
    pub tokenizer: TokenizerKind,
    pub vocab: usize,
    /// Bytes per token in the .bin files: 2 or 4.
    pub token_bytes: u8,
    pub train_tokens: u64,
    pub val_tokens: u64,
    pub val_frac: f64,
    pub sources: Vec<Source>,
}

/// One input document. Its token counts include the end-of-text tokens appended after its parts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// The path as it was given (an input, or an input joined with a path found under it).
    pub path: String,
    pub bytes: u64,
    /// Lowercase hex SHA-256 of the file's bytes.
    pub sha256: String,
    pub train_tokens: u64,
    pub val_tokens: u64,
}

/// Bytes per token for a vocabulary: the narrowest little-endian integer that holds every id.
pub fn token_bytes_for(vocab: usize) -> Option<u8> {
    match vocab {
        0 => None,
        1..=65_536 => Some(2),
        _ if u32::try_from(vocab - 1).is_ok() => Some(4),
        _ => None,
    }
}

/// How many of a document's `n` tokens go to validation: `val_frac` of them, rounded.
pub fn val_count(n: usize, val_frac: f64) -> usize {
    // `as` saturates; f64 rounding is exact and identical on every platform.
    ((n as f64 * val_frac).round() as usize).min(n)
}

impl Meta {
    /// Checks everything that does not need the .bin files; `path` is meta.json, for messages.
    /// The validated meta.json of the corpus in `dir`, without reading its tokens.
    pub fn read(dir: &Path) -> Result<Meta, DataError> {
        let meta_path = dir.join(META_FILE);
        let file = match crate::check_input(&meta_path).and_then(|()| File::open(&meta_path)) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(DataError::Missing {
                    dir: dir.to_path_buf(),
                    file: META_FILE,
                })
            }
            Err(e) => return Err(DataError::io("read", &meta_path)(e)),
        };
        let size = file.metadata().map_err(DataError::io("read", &meta_path))?.len();
        if size > MAX_META_BYTES {
            return Err(DataError::corrupt(
                &meta_path,
                format!("it is {size} bytes, too large to be ours"),
            ));
        }
        let text = crate::read_file(&meta_path).map_err(DataError::io("read", &meta_path))?;
        Meta::parse(&meta_path, &text)
    }

    /// The validated meta.json in `text`; `path` names it in messages.
    pub fn parse(path: &Path, text: &[u8]) -> Result<Meta, DataError> {
        let meta: Meta = serde_json::from_slice(text)
            .map_err(|e| DataError::corrupt(path, format!("it is not a valid meta.json ({e})")))?;
        meta.validate(path)?;
        Ok(meta)
    }

    pub fn validate(&self, path: &Path) -> Result<(), DataError> {
        let bad = |reason: String| Err(DataError::corrupt(path, reason));
        if self.format != FORMAT {
            return bad(format!(
                "format {} is not {FORMAT}, the one this build reads",
                self.format
            ));
        }
        if self.vocab != self.tokenizer.vocab() {
            return bad(format!(
                "vocab {} does not match the {} tokenizer's {}",
                self.vocab,
                self.tokenizer,
                self.tokenizer.vocab()
            ));
        }
        if token_bytes_for(self.vocab) != Some(self.token_bytes) {
            return bad(format!(
                "token_bytes {} does not fit vocab {} (expected {:?})",
                self.token_bytes,
                self.vocab,
                token_bytes_for(self.vocab)
            ));
        }
        if !(self.val_frac > 0.0 && self.val_frac <= 0.5) {
            return bad(format!("val_frac {} is outside (0, 0.5]", self.val_frac));
        }
        if self.train_tokens == 0 || self.val_tokens == 0 {
            return bad("a split is empty".into());
        }
        let (mut train, mut val) = (0u64, 0u64);
        for s in &self.sources {
            let hex = s.sha256.len() == 64 && s.sha256.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'));
            if !hex {
                return bad(format!(
                    "the sha256 of source `{}` is not 64 lowercase hex digits",
                    s.path
                ));
            }
            match (train.checked_add(s.train_tokens), val.checked_add(s.val_tokens)) {
                (Some(t), Some(v)) => (train, val) = (t, v),
                _ => return bad("the sources' token counts overflow".into()),
            }
        }
        if (train, val) != (self.train_tokens, self.val_tokens) {
            return bad(format!(
                "the sources add up to {train} train and {val} val tokens, not {} and {}",
                self.train_tokens, self.val_tokens
            ));
        }
        Ok(())
    }
}

/// Tokenizes `inputs` (files, or directories walked recursively in sorted order, hidden entries
/// skipped) into `out/train.bin`, `out/val.bin` and `out/meta.json`. `progress(done, total)` gets
/// input bytes. Files are written under temporary names and renamed, meta.json last, so a corpus
/// with a meta.json is always complete.
pub fn prepare(
    inputs: &[PathBuf],
    kind: TokenizerKind,
    val_frac: f64,
    out: &Path,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Meta, DataError> {
    if !(val_frac > 0.0 && val_frac <= 0.5) {
        return Err(DataError::Invalid(format!(
            "--val-frac must be in (0, 0.5], not {val_frac}"
        )));
    }
    let tok = Tokenizer::new(kind)?;
    let vocab = tok.vocab();
    let token_bytes = token_bytes_for(vocab)
        .ok_or_else(|| DataError::Invalid(format!("vocabulary {vocab} does not fit in 32-bit tokens")))?;
    let files = list_files(inputs)?;
    if files.is_empty() {
        return Err(DataError::Invalid(format!(
            "no text files found in {}; --text takes files or directories (hidden files are skipped)",
            show(inputs)
        )));
    }
    let mut total = 0u64;
    for f in &files {
        let len = fs::metadata(f).map_err(DataError::io("read the size of", f))?.len();
        total = total.saturating_add(len);
    }

    fs::create_dir_all(out).map_err(DataError::io("create the directory", out))?;
    // Held to the end: a second `data prepare` into the same directory is refused, not mixed in.
    let _lock = lock(out)?;
    // Without meta.json a half-replaced corpus cannot be mistaken for a complete one.
    let meta_path = out.join(META_FILE);
    match fs::remove_file(&meta_path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(DataError::io("remove", &meta_path)(e));
        }
        _ => {}
    }
    let mut train = TokenWriter::create(&out.join(TRAIN_FILE), token_bytes)?;
    let mut val = TokenWriter::create(&out.join(VAL_FILE), token_bytes)?;

    let sources = match write_documents(&files, &tok, val_frac, (&mut train, &mut val), total, progress) {
        Ok(sources) => sources,
        Err(e) => {
            train.abandon();
            val.abandon();
            return Err(e);
        }
    };
    let meta = Meta {
        format: FORMAT,
        tokenizer: kind,
        vocab,
        token_bytes,
        train_tokens: train.count,
        val_tokens: val.count,
        val_frac,
        sources,
    };
    if meta.train_tokens == 0 || meta.val_tokens == 0 {
        train.abandon();
        val.abandon();
        return Err(DataError::Invalid(format!(
            "{} gave {} train and {} validation tokens; both splits need tokens: give more text or raise --val-frac",
            show(inputs),
            meta.train_tokens,
            meta.val_tokens
        )));
    }
    train.finish()?;
    val.finish()?;
    let json = serde_json::to_vec_pretty(&meta)
        .map_err(|e| DataError::Invalid(format!("could not serialize meta.json: {e}")))?;
    let tmp = temp_name(&meta_path);
    fs::write(&tmp, json).map_err(DataError::io("write", &tmp))?;
    fs::rename(&tmp, &meta_path).map_err(DataError::io("rename into place", &meta_path))?;
    Ok(meta)
}

/// Encodes each file and appends its parts to the two splits; returns what meta.json records.
fn write_documents(
    files: &[PathBuf],
    tok: &Tokenizer,
    val_frac: f64,
    (train, val): (&mut TokenWriter, &mut TokenWriter),
    total: u64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Vec<Source>, DataError> {
    let mut sources = Vec::with_capacity(files.len());
    let mut done = 0u64;
    progress(done, total);
    for path in files {
        let bytes = crate::read_file(path).map_err(DataError::io("read", path))?;
        let text = std::str::from_utf8(&bytes).map_err(|e| DataError::NotUtf8 {
            path: path.clone(),
            offset: e.valid_up_to(),
        })?;
        let mut tokens = Vec::new();
        for piece in pieces(text, PIECE_BYTES) {
            tokens.extend(tok.encode(piece));
            done = done.saturating_add(piece.len() as u64);
            progress(done, total);
        }
        let cut = tokens.len().saturating_sub(val_count(tokens.len(), val_frac));
        let (train_part, val_part) = tokens.split_at(cut);
        let train_n = train.document(train_part, tok.end_of_text())?;
        let val_n = val.document(val_part, tok.end_of_text())?;
        sources.push(Source {
            path: path.to_string_lossy().into_owned(),
            bytes: bytes.len() as u64,
            sha256: format!("{:x}", Sha256::digest(&bytes)),
            train_tokens: train_n,
            val_tokens: val_n,
        });
    }
    Ok(sources)
}

fn show(inputs: &[PathBuf]) -> String {
    let names: Vec<String> = inputs.iter().map(|p| format!("`{}`", p.display())).collect();
    names.join(", ")
}

/// Every file under the inputs, each input's files in sorted path order.
fn list_files(inputs: &[PathBuf]) -> Result<Vec<PathBuf>, DataError> {
    let mut files = Vec::new();
    for input in inputs {
        let meta = fs::metadata(input).map_err(DataError::io("read", input))?;
        if meta.is_file() {
            files.push(input.clone());
            continue;
        }
        let walk = walkdir::WalkDir::new(input)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|e| e.depth() == 0 || !e.file_name().to_string_lossy().starts_with('.'));
        for entry in walk {
            let entry = entry.map_err(|e| {
                let path = e.path().unwrap_or(input).to_path_buf();
                DataError::Io {
                    action: "list",
                    path,
                    source: e.into(),
                }
            })?;
            // Follows a link to a file; links to directories are not descended (no cycles).
            if entry.path().is_file() {
                files.push(entry.into_path());
            }
        }
    }
    Ok(files)
}

/// Cuts `text` into pieces of at least `target` bytes (the last may be shorter) at line starts
/// where GPT-2's pre-tokenizer always splits: after a `\n` that follows a non-blank ASCII
/// character and before a non-blank ASCII character. Encoding piece by piece then equals
/// encoding the whole text; a text with no such point stays one piece.
pub fn pieces(text: &str, target: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while rest.len() > target {
        let b = rest.as_bytes();
        let solid = |c: Option<&u8>| c.is_some_and(|c| c.is_ascii() && !c.is_ascii_whitespace());
        let cut =
            (target.max(2)..b.len()).find(|&p| b.get(p - 1) == Some(&b'\n') && solid(b.get(p - 2)) && solid(b.get(p)));
        // The cut sits before an ASCII byte, so it is a char boundary.
        match cut.and_then(|p| rest.split_at_checked(p)) {
            Some((head, tail)) => {
                out.push(head);
                rest = tail;
            }
            None => break,
        }
    }
    if !rest.is_empty() {
        out.push(rest);
    }
    out
}

/// A name beside `path` that no other process writes (the lock keeps two prepares apart; this
/// keeps a killed one's leftovers from being taken for a live one's).
fn temp_name(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{}.tmp", std::process::id()));
    path.with_file_name(name)
}

/// The lock file of a corpus directory, as run directories have theirs.
const LOCK_FILE: &str = ".resmem.lock";

/// An exclusive lock on `out`, held while the returned file stays open.
fn lock(out: &Path) -> Result<File, DataError> {
    let path = out.join(LOCK_FILE);
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(DataError::io("open the lock file", &path))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(fs::TryLockError::WouldBlock) => Err(DataError::Invalid(format!(
            "another `resmem data prepare` is writing into {}; wait for it to finish, or give another --out",
            out.display()
        ))),
        Err(fs::TryLockError::Error(e)) => Err(DataError::io("lock", &path)(e)),
    }
}

/// Appends tokens to a temporary file that `finish` renames into place.
struct TokenWriter {
    path: PathBuf,
    tmp: PathBuf,
    out: BufWriter<File>,
    token_bytes: u8,
    count: u64,
}

impl TokenWriter {
    fn create(path: &Path, token_bytes: u8) -> Result<Self, DataError> {
        let tmp = temp_name(path);
        let file = File::create(&tmp).map_err(DataError::io("create", &tmp))?;
        Ok(Self {
            path: path.to_path_buf(),
            tmp,
            out: BufWriter::with_capacity(1 << 20, file),
            token_bytes,
            count: 0,
        })
    }

    /// Writes one document's part and, when it is not empty, the end-of-text token. Returns the
    /// number of tokens written.
    fn document(&mut self, tokens: &[u32], end: Option<u32>) -> Result<u64, DataError> {
        if tokens.is_empty() {
            return Ok(0);
        }
        let before = self.count;
        for &t in tokens.iter().chain(end.as_ref()) {
            let written = match self.token_bytes {
                2 => match u16::try_from(t) {
                    Ok(t) => self.out.write_all(&t.to_le_bytes()),
                    Err(_) => {
                        return Err(DataError::Invalid(format!("token {t} does not fit the 2-byte format")));
                    }
                },
                _ => self.out.write_all(&t.to_le_bytes()),
            };
            written.map_err(DataError::io("write", &self.tmp))?;
            self.count = self.count.saturating_add(1);
        }
        Ok(self.count.saturating_sub(before))
    }

    fn finish(self) -> Result<(), DataError> {
        let file = self
            .out
            .into_inner()
            .map_err(|e| DataError::io("write", &self.tmp)(e.into_error()))?;
        file.sync_all().map_err(DataError::io("write", &self.tmp))?;
        fs::rename(&self.tmp, &self.path).map_err(DataError::io("rename into place", &self.path))
    }

    fn abandon(self) {
        drop(self.out);
        // Best effort: a stray temp file is harmless, only untidy.
        let _ = fs::remove_file(&self.tmp);
    }
}

/// A file of little-endian u16 or u32 tokens, every one checked < vocab on open: read natively
/// by positioned reads of the open file, or bytes already in memory (the page fetches its
/// corpus). Natively every window is read, and its tokens checked, when it is used, so a file
/// that changes or shrinks under a running run is an error that names it, never a fault (see
/// ARCHITECTURE.md, "Corpora are read, not mapped").
#[derive(Debug)]
pub struct TokenFile {
    path: PathBuf,
    bytes: TokenBytes,
    token_bytes: u8,
    len: usize,
    vocab: usize,
    /// The largest token, found when the file was checked.
    max_token: u32,
}

#[derive(Debug)]
enum TokenBytes {
    File(File),
    Owned(Vec<u8>),
}

/// Tokens read at a time while checking or counting a whole file.
const SCAN_TOKENS: usize = 1 << 18;

/// Reads exactly `buf.len()` bytes of `file` at `offset`; UnexpectedEof where it is shorter.
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileExt;
        file.read_exact_at(buf, offset)
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::FileExt;
        let mut done = 0;
        while done < buf.len() {
            match file.seek_read(&mut buf[done..], offset + done as u64)? {
                0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                n => done += n,
            }
        }
        Ok(())
    }
    #[cfg(not(any(unix, windows)))]
    {
        let _ = (file, buf, offset);
        Err(std::io::ErrorKind::Unsupported.into())
    }
}

impl TokenFile {
    /// Opens `path` and checks that it holds exactly `expected` tokens of `token_bytes` bytes
    /// (2 or 4), each below `vocab`.
    pub fn open(path: &Path, token_bytes: u8, vocab: usize, expected: u64) -> Result<TokenFile, DataError> {
        let bad = |reason: String| DataError::corrupt(path, reason);
        crate::check_input(path).map_err(|e| bad(e.to_string()))?;
        let file = File::open(path).map_err(|e| bad(format!("it cannot be opened ({e})")))?;
        let size = file.metadata().map_err(DataError::io("read the size of", path))?.len();
        let len = Self::check_size(path, size, token_bytes, expected)?;
        Self::checked(path, TokenBytes::File(file), token_bytes, len, vocab)
    }

    /// The same checks as `open`, on bytes already in memory; `path` names them in messages.
    pub fn from_bytes(
        path: &Path,
        bytes: Vec<u8>,
        token_bytes: u8,
        vocab: usize,
        expected: u64,
    ) -> Result<TokenFile, DataError> {
        let len = Self::check_size(path, bytes.len() as u64, token_bytes, expected)?;
        Self::checked(path, TokenBytes::Owned(bytes), token_bytes, len, vocab)
    }

    /// The number of tokens in `size` bytes, which must be exactly `expected` of them.
    fn check_size(path: &Path, size: u64, token_bytes: u8, expected: u64) -> Result<usize, DataError> {
        let bad = |reason: String| DataError::corrupt(path, reason);
        if token_bytes != 2 && token_bytes != 4 {
            return Err(bad(format!("{token_bytes} bytes per token is neither 2 nor 4")));
        }
        let width = u64::from(token_bytes);
        if !size.is_multiple_of(width) {
            return Err(bad(format!(
                "its {size} bytes are not a whole number of {token_bytes}-byte tokens"
            )));
        }
        if Some(size) != expected.checked_mul(width) {
            return Err(bad(format!(
                "it holds {} tokens but meta.json says {expected}",
                size / width
            )));
        }
        usize::try_from(size / width).map_err(|_| bad("it is too large for this machine".into()))
    }

    /// Every token read once and checked against the vocabulary.
    fn checked(
        path: &Path,
        bytes: TokenBytes,
        token_bytes: u8,
        len: usize,
        vocab: usize,
    ) -> Result<TokenFile, DataError> {
        let mut tokens = TokenFile {
            path: path.to_path_buf(),
            bytes,
            token_bytes,
            len,
            vocab,
            max_token: 0,
        };
        let mut max = 0;
        tokens.scan(|t| max = max.max(t))?;
        tokens.max_token = max;
        Ok(tokens)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn token_bytes(&self) -> u8 {
        self.token_bytes
    }

    fn decode(chunk: &[u8]) -> u32 {
        match *chunk {
            [a, b] => u32::from(u16::from_le_bytes([a, b])),
            [a, b, c, d] => u32::from_le_bytes([a, b, c, d]),
            _ => 0,
        }
    }

    /// Tokens `start..start + n`, which must lie in the file, each checked < vocab.
    fn read(&self, start: usize, n: usize) -> Result<Vec<u32>, DataError> {
        let w = usize::from(self.token_bytes);
        let bad = |reason: String| DataError::corrupt(&self.path, reason);
        let owned;
        let bytes: &[u8] = match &self.bytes {
            TokenBytes::Owned(bytes) => bytes.get(start * w..(start + n) * w).unwrap_or_default(),
            TokenBytes::File(file) => {
                let mut buf = vec![0u8; n * w];
                read_at(file, &mut buf, (start * w) as u64).map_err(|e| {
                    let now = file.metadata().map(|m| m.len()).unwrap_or(0);
                    bad(format!(
                        "it changed while in use: reading tokens {start}..{} failed ({e}); it holds {now} bytes \
                         now, not {}. Restore it (or prepare the corpus again into another directory), then \
                         resume the run",
                        start + n,
                        self.len * w
                    ))
                })?;
                owned = buf;
                &owned
            }
        };
        let tokens: Vec<u32> = bytes.chunks_exact(w).map(Self::decode).collect();
        if let Some((i, t)) = tokens.iter().enumerate().find(|&(_, &t)| t as usize >= self.vocab) {
            return Err(bad(format!(
                "token {} is {t}, outside the vocabulary of {}",
                start + i,
                self.vocab
            )));
        }
        Ok(tokens)
    }

    /// The `n` tokens from `start`, clipped at the end of the file (shorter, or empty, there).
    pub fn window(&self, start: usize, n: usize) -> Result<Vec<u32>, DataError> {
        let start = start.min(self.len);
        let end = start.saturating_add(n).min(self.len);
        self.read(start, end - start)
    }

    /// Calls `f` with every token in order, reading a chunk at a time.
    pub fn scan(&self, mut f: impl FnMut(u32)) -> Result<(), DataError> {
        let mut start = 0;
        while start < self.len {
            let n = SCAN_TOKENS.min(self.len - start);
            self.read(start, n)?.into_iter().for_each(&mut f);
            start += n;
        }
        Ok(())
    }
}

/// A prepared corpus, validated on open.
#[derive(Debug)]
pub struct Corpus {
    pub meta: Meta,
    pub train: TokenFile,
    pub val: TokenFile,
    dir: PathBuf,
}

impl Corpus {
    /// Opens a directory written by `prepare`, checking meta.json against the token files and
    /// every token against the vocabulary; sampling fails only if a file changes under it.
    pub fn open(dir: &Path) -> Result<Corpus, DataError> {
        let meta = Meta::read(dir)?;
        let train = TokenFile::open(&dir.join(TRAIN_FILE), meta.token_bytes, meta.vocab, meta.train_tokens)?;
        let val = TokenFile::open(&dir.join(VAL_FILE), meta.token_bytes, meta.vocab, meta.val_tokens)?;
        Self::checked(meta, train, val, dir)
    }

    /// A corpus whose meta.json and token files are already in memory (the page fetches them),
    /// checked as `open` checks files; `dir` names it in messages.
    pub fn from_bytes(dir: &Path, meta_json: &[u8], train: Vec<u8>, val: Vec<u8>) -> Result<Corpus, DataError> {
        let meta = Meta::parse(&dir.join(META_FILE), meta_json)?;
        let train = TokenFile::from_bytes(
            &dir.join(TRAIN_FILE),
            train,
            meta.token_bytes,
            meta.vocab,
            meta.train_tokens,
        )?;
        let val = TokenFile::from_bytes(&dir.join(VAL_FILE), val, meta.token_bytes, meta.vocab, meta.val_tokens)?;
        Self::checked(meta, train, val, dir)
    }

    /// The corpus of files already checked against `meta`, once its labels are.
    fn checked(meta: Meta, train: TokenFile, val: TokenFile, dir: &Path) -> Result<Corpus, DataError> {
        Self::check_labelled(&meta, &train)?;
        Ok(Corpus {
            meta,
            train,
            val,
            dir: dir.to_path_buf(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A corpus of bytes whose meta.json says GPT-2 (every token fits in any wider vocabulary,
    /// so the vocabulary check cannot see it): tens of thousands of tokens, none past 255.
    fn check_labelled(meta: &Meta, train: &TokenFile) -> Result<(), DataError> {
        const ENOUGH: usize = 10_000;
        if meta.tokenizer == TokenizerKind::Bytes || train.len() < ENOUGH || train.max_token > 255 {
            return Ok(());
        }
        Err(DataError::corrupt(
            &train.path,
            format!(
                "its {} tokens are all below 256, as bytes are, but meta.json says the {} tokenizer; \
                 prepare the texts again with the tokenizer they were meant for (resmem data prepare --tokenizer)",
                train.len(),
                meta.tokenizer
            ),
        ))
    }

    pub fn split(&self, split: Split) -> &TokenFile {
        match split {
            Split::Train => &self.train,
            Split::Val => &self.val,
        }
    }

    pub fn tokenizer(&self) -> Result<Tokenizer, DataError> {
        Tokenizer::new(self.meta.tokenizer)
    }

    /// The entropy in nats of the train split's token frequencies: the loss of the best model
    /// that ignores context, so a model that learns anything must go below it.
    pub fn unigram_entropy(&self) -> Result<f64, DataError> {
        let mut counts = vec![0u64; self.meta.vocab];
        self.train.scan(|t| {
            if let Some(c) = counts.get_mut(t as usize) {
                *c += 1;
            }
        })?;
        let n = self.train.len() as f64;
        Ok(counts
            .iter()
            .filter(|&&c| c > 0)
            .map(|&c| {
                let p = c as f64 / n;
                -p * p.ln()
            })
            .sum())
    }
}

impl Corpus {
    /// The conditional entropy in nats of a train token given the one before it: the loss of
    /// the best bigram table, fitted on the train split. A model whose loss stays at or above it
    /// has learned nothing that the previous token alone does not give.
    pub fn bigram_entropy(&self) -> Result<f64, DataError> {
        let v = self.meta.vocab as u64;
        let mut pairs: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
        let mut firsts = vec![0u64; self.meta.vocab];
        let mut previous: Option<u32> = None;
        self.train.scan(|t| {
            if let Some(a) = previous {
                *pairs.entry(a as u64 * v + t as u64).or_default() += 1;
                if let Some(c) = firsts.get_mut(a as usize) {
                    *c += 1;
                }
            }
            previous = Some(t);
        })?;
        let n: u64 = firsts.iter().sum();
        if n == 0 {
            return Ok(0.0);
        }
        // Summed in key order, so that the result does not depend on the map's order.
        let mut keys: Vec<(&u64, &u64)> = pairs.iter().collect();
        keys.sort_unstable();
        Ok(keys
            .into_iter()
            .map(|(&ab, &c)| {
                let given = firsts[(ab / v) as usize] as f64;
                -(c as f64 / n as f64) * (c as f64 / given).ln()
            })
            .sum())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Three documents (one in a subdirectory) and a hidden file that must be skipped.
    pub(crate) fn write_texts(dir: &Path) -> PathBuf {
        let root = dir.join("texts");
        fs::create_dir_all(root.join("sub")).unwrap();
        let line = |i: usize| format!("Line {i}: the quick brown fox, naïve café — «{i}»\n");
        fs::write(root.join("b.txt"), (0..400).map(line).collect::<String>()).unwrap();
        fs::write(root.join("a.txt"), "Short.\n\nTwo paragraphs, 日本語.\n").unwrap();
        fs::write(
            root.join("sub/c.txt"),
            (0..50).map(|i| format!("  {i}\n\n")).collect::<String>(),
        )
        .unwrap();
        fs::write(root.join(".hidden.txt"), "never read").unwrap();
        root
    }

    fn noop(_: u64, _: u64) {}

    /// A prepare into a directory another prepare holds is refused, and touches nothing there.
    #[test]
    fn a_second_prepare_into_one_directory_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let texts = write_texts(tmp.path());
        let out = tmp.path().join("c");
        prepare(std::slice::from_ref(&texts), TokenizerKind::Bytes, 0.1, &out, &mut noop).unwrap();
        let before: Vec<Vec<u8>> = [TRAIN_FILE, VAL_FILE, META_FILE]
            .map(|f| fs::read(out.join(f)).unwrap())
            .into();
        let held = lock(&out).unwrap();
        let err = prepare(std::slice::from_ref(&texts), TokenizerKind::Gpt2, 0.1, &out, &mut noop).unwrap_err();
        assert!(err.to_string().contains("another `resmem data prepare`"), "{err}");
        let after: Vec<Vec<u8>> = [TRAIN_FILE, VAL_FILE, META_FILE]
            .map(|f| fs::read(out.join(f)).unwrap())
            .into();
        assert_eq!(before, after);
        drop(held);
        prepare(std::slice::from_ref(&texts), TokenizerKind::Gpt2, 0.1, &out, &mut noop).unwrap();
    }

    #[test]
    fn prepare_is_deterministic_and_splits_each_document() {
        let tmp = tempfile::tempdir().unwrap();
        let texts = write_texts(tmp.path());
        for kind in TokenizerKind::ALL {
            let tok = Tokenizer::new(kind).unwrap();
            let (a, b) = (
                tmp.path().join(format!("{kind}-a")),
                tmp.path().join(format!("{kind}-b")),
            );
            let meta = prepare(std::slice::from_ref(&texts), kind, 0.1, &a, &mut noop).unwrap();
            let mut calls = 0;
            prepare(std::slice::from_ref(&texts), kind, 0.1, &b, &mut |_, _| calls += 1).unwrap();
            assert!(calls >= 4, "progress is reported per piece, got {calls} calls");
            for f in [TRAIN_FILE, VAL_FILE, META_FILE] {
                assert_eq!(fs::read(a.join(f)).unwrap(), fs::read(b.join(f)).unwrap(), "{kind} {f}");
            }
            let names: Vec<&str> = meta
                .sources
                .iter()
                .map(|s| s.path.rsplit('/').next().unwrap())
                .collect();
            assert_eq!(names, ["a.txt", "b.txt", "c.txt"]);
            let eot = u64::from(tok.end_of_text().is_some());
            for s in &meta.sources {
                let text = fs::read_to_string(&s.path).unwrap();
                let n = tok.encode(&text).len();
                let val = val_count(n, 0.1) as u64;
                assert!(val > 0);
                assert_eq!(s.val_tokens, val + eot, "{kind} {}", s.path);
                assert_eq!(s.train_tokens, n as u64 - val + eot, "{kind} {}", s.path);
                assert_eq!(s.bytes, text.len() as u64);
            }
            // The packed files decode back to each document, separators removed.
            let corpus = Corpus::open(&a).unwrap();
            let (mut tr, mut va) = (0usize, 0usize);
            for s in &meta.sources {
                let (nt, nv) = (s.train_tokens as usize, s.val_tokens as usize);
                let mut ids = corpus.train.window(tr, nt - eot as usize).unwrap();
                ids.extend(corpus.val.window(va, nv - eot as usize).unwrap());
                assert_eq!(tok.decode(&ids), fs::read_to_string(&s.path).unwrap());
                if let Some(e) = tok.end_of_text() {
                    assert_eq!(corpus.train.window(tr + nt - 1, 1).unwrap(), [e]);
                    assert_eq!(corpus.val.window(va + nv - 1, 1).unwrap(), [e]);
                }
                (tr, va) = (tr + nt, va + nv);
            }
            assert_eq!((tr, va), (corpus.train.len(), corpus.val.len()));
            let h = corpus.unigram_entropy().unwrap();
            assert!(h > 1.0 && h < (tok.vocab() as f64).ln());
        }
    }

    /// "aab" repeated: after a, a or b alike (ln 2 nats); after b, always a (0). So the
    /// bigram entropy is P(a first) · ln 2 = 2/3 · ln 2, and "ab" repeated has none.
    #[test]
    fn the_bigram_entropy_is_the_next_tokens_entropy_given_the_one_before() {
        let tmp = tempfile::tempdir().unwrap();
        for (text, expected) in [("aab", 2.0 / 3.0 * 2f64.ln()), ("ab", 0.0)] {
            let texts = tmp.path().join(format!("texts-{text}"));
            fs::create_dir_all(&texts).unwrap();
            fs::write(texts.join("t.txt"), text.repeat(3000)).unwrap();
            let out = tmp.path().join(format!("corpus-{text}"));
            prepare(std::slice::from_ref(&texts), TokenizerKind::Bytes, 0.1, &out, &mut noop).unwrap();
            let h = Corpus::open(&out).unwrap().bigram_entropy().unwrap();
            assert!((h - expected).abs() < 1e-3, "{text}: {h} against {expected}");
        }
    }

    #[test]
    fn pieces_encode_like_the_whole() {
        let tok = Tokenizer::new(TokenizerKind::Gpt2).unwrap();
        let text: String = (0..300)
            .map(|i| match i % 5 {
                0 => format!("ACT {i}.\n\n"),
                1 => format!("  indented {i}\n"),
                2 => format!("trailing spaces {i}   \n"),
                3 => "\n\n\n".to_string(),
                _ => format!("Grüße, {i}!\n"),
            })
            .collect();
        let parts = pieces(&text, 64);
        assert!(parts.len() > 20, "{} pieces", parts.len());
        assert_eq!(parts.concat(), text);
        let joined: Vec<u32> = parts.iter().flat_map(|p| tok.encode(p)).collect();
        assert_eq!(joined, tok.encode(&text));
        // No cut point: one piece.
        assert_eq!(pieces(&"x".repeat(1000), 10).len(), 1);
    }

    #[test]
    fn token_width_follows_the_vocabulary() {
        assert_eq!(token_bytes_for(256), Some(2));
        assert_eq!(token_bytes_for(50_257), Some(2));
        assert_eq!(token_bytes_for(65_536), Some(2));
        assert_eq!(token_bytes_for(65_537), Some(4));
        assert_eq!(token_bytes_for(0), None);
        // A u32 file reads back through TokenFile.
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("wide.bin");
        let ids = [0u32, 70_000, 1, 99_999];
        fs::write(&path, ids.iter().flat_map(|t| t.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
        let f = TokenFile::open(&path, 4, 100_000, 4).unwrap();
        assert_eq!(f.window(0, 10).unwrap(), ids);
        assert_eq!(f.window(1, 1).unwrap(), [70_000]);
        assert!(f.window(4, 1).unwrap().is_empty());
        assert!(TokenFile::open(&path, 4, 99_999, 4).is_err());
        // A file that shrinks, or gains a bad token, under a reader is an error naming it.
        fs::write(&path, [0u8, 0, 0, 0, 0x70, 0x11, 0x01, 0]).unwrap();
        let err = f.window(0, 4).unwrap_err().to_string();
        assert!(
            err.contains("changed while in use") && err.contains(&*path.to_string_lossy()),
            "{err}"
        );
        fs::write(
            &path,
            ids.iter()
                .map(|&t| if t == 1 { 200_000u32 } else { t })
                .flat_map(u32::to_le_bytes)
                .collect::<Vec<u8>>(),
        )
        .unwrap();
        let err = f.window(0, 4).unwrap_err().to_string();
        assert!(err.contains("token 2 is 200000, outside the vocabulary"), "{err}");
        assert!(TokenFile::open(&path, 2, 100_000, 7).is_err());
    }

    #[test]
    fn bad_inputs_are_refused_with_a_reason() {
        let tmp = tempfile::tempdir().unwrap();
        let texts = write_texts(tmp.path());
        let out = tmp.path().join("out");
        for frac in [0.0, -0.1, 0.51, f64::NAN] {
            let e = prepare(
                std::slice::from_ref(&texts),
                TokenizerKind::Bytes,
                frac,
                &out,
                &mut noop,
            )
            .unwrap_err();
            assert!(e.to_string().contains("--val-frac"), "{e}");
        }
        let tiny = tmp.path().join("tiny.txt");
        fs::write(&tiny, "abc").unwrap();
        let e = prepare(std::slice::from_ref(&tiny), TokenizerKind::Bytes, 0.05, &out, &mut noop).unwrap_err();
        assert!(e.to_string().contains("0 validation tokens"), "{e}");
        assert!(!out.join(META_FILE).exists());
        let latin1 = tmp.path().join("latin1.txt");
        fs::write(&latin1, b"caf\xe9 au lait").unwrap();
        let e = prepare(&[latin1], TokenizerKind::Bytes, 0.05, &out, &mut noop).unwrap_err();
        assert!(
            e.to_string().contains("latin1.txt") && e.to_string().contains("offset 3"),
            "{e}"
        );
        let e = Corpus::open(&tmp.path().join("nowhere")).unwrap_err();
        assert!(e.to_string().contains("resmem data prepare"), "{e}");
        let e = prepare(
            &[tmp.path().join("nowhere")],
            TokenizerKind::Bytes,
            0.05,
            &out,
            &mut noop,
        )
        .unwrap_err();
        assert!(e.to_string().contains("nowhere"), "{e}");
    }
}
