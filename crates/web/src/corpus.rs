//! The page's data: a synthetic task, or the Shakespeare corpus that `cargo xtask serve`
//! prepared and placed beside the page, fetched once and checked as the command line checks a
//! corpus directory.

use crate::browser;
use crate::dataset::Dataset;
use data::corpus::{META_FILE, TRAIN_FILE, VAL_FILE};
use data::{Corpus, DataSource};
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

thread_local! {
    static FETCHED: RefCell<HashMap<&'static str, Arc<Corpus>>> = RefCell::new(HashMap::new());
}

/// Where `data`'s batches come from; a corpus is fetched on first use.
pub async fn source(data: Dataset) -> Result<DataSource, String> {
    let dir = match data {
        Dataset::Task(task) => return Ok(DataSource::Task(task)),
        Dataset::Shakespeare(_) => data.corpus_dir().expect("Shakespeare has a directory"),
    };
    if let Some(corpus) = FETCHED.with(|f| f.borrow().get(dir).cloned()) {
        return Ok(DataSource::Text(corpus));
    }
    let missing = |e: String| {
        format!(
            "the Shakespeare corpus is not beside the page ({e}); `cargo xtask serve` prepares it and places it there"
        )
    };
    let meta = browser::fetch(&format!("{dir}/{META_FILE}")).await.map_err(missing)?;
    let train = browser::fetch(&format!("{dir}/{TRAIN_FILE}")).await.map_err(missing)?;
    let val = browser::fetch(&format!("{dir}/{VAL_FILE}")).await.map_err(missing)?;
    let corpus = Arc::new(Corpus::from_bytes(Path::new(dir), &meta, train, val).map_err(|e| e.to_string())?);
    FETCHED.with(|f| f.borrow_mut().insert(dir, corpus.clone()));
    Ok(DataSource::Text(corpus))
}
