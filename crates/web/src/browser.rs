//! What the page asks of the browser beyond the DOM: fetching files placed beside the page,
//! downloads, charts as SVG and PNG files, the clipboard, the address bar, and a small store in
//! IndexedDB that keeps runs across reloads. The browser APIs are promise-based JavaScript; the
//! glue is a few lines of it, each returning a promise Rust awaits.

use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

#[wasm_bindgen(inline_js = r#"
function db() {
  return new Promise((ok, no) => {
    const r = indexedDB.open('resmem', 1);
    r.onupgradeneeded = () => r.result.createObjectStore('kv');
    r.onsuccess = () => ok(r.result);
    r.onerror = () => no(r.error);
  });
}
function request(mode, act) {
  return db().then((d) => new Promise((ok, no) => {
    const tx = d.transaction('kv', mode);
    const r = act(tx.objectStore('kv'));
    tx.oncomplete = () => ok(r.result);
    tx.onerror = () => no(tx.error);
    tx.onabort = () => no(tx.error);
  }));
}
export function store_put(key, value) { return request('readwrite', (s) => s.put(value, key)); }
export function store_get(key) { return request('readonly', (s) => s.get(key)); }
// Bytes go in as a Blob: a value is refused past about 128 MiB, a Blob is kept as a file.
export function store_put_bytes(key, bytes) { return store_put(key, new Blob([bytes])); }
export async function store_get_bytes(key) {
  const v = await store_get(key);
  return v instanceof Blob ? new Uint8Array(await v.arrayBuffer()) : v;
}
export function store_delete(key) { return request('readwrite', (s) => s.delete(key)); }
export function store_clear() { return request('readwrite', (s) => s.clear()); }

export async function fetch_bytes(url) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status} ${r.statusText}`);
  return new Uint8Array(await r.arrayBuffer());
}

function save(blob, name) {
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
}
export function download(bytes, name, type) { save(new Blob([bytes], { type }), name); }

function svg_text(id) {
  const svg = document.querySelector(`#${id} svg`);
  if (!svg) throw new Error(`the chart ${id} has nothing drawn yet`);
  const copy = svg.cloneNode(true);
  copy.setAttribute('xmlns', 'http://www.w3.org/2000/svg');
  return new XMLSerializer().serializeToString(copy);
}
export function save_svg(id, name) { save(new Blob([svg_text(id)], { type: 'image/svg+xml' }), name); }
// Drawn at twice the SVG's size on a white background, so that it stays sharp on slides.
export async function save_png(id, name) {
  const text = svg_text(id);
  const svg = document.querySelector(`#${id} svg`);
  const box = svg.getBoundingClientRect();
  const img = new Image();
  img.src = 'data:image/svg+xml;charset=utf-8,' + encodeURIComponent(text);
  await img.decode();
  const canvas = document.createElement('canvas');
  canvas.width = Math.max(1, Math.round(box.width * 2));
  canvas.height = Math.max(1, Math.round(box.height * 2));
  const ctx = canvas.getContext('2d');
  ctx.fillStyle = 'white';
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  ctx.drawImage(img, 0, 0, canvas.width, canvas.height);
  const blob = await new Promise((ok) => canvas.toBlob(ok, 'image/png'));
  save(blob, name);
}

export async function copy_text(text) {
  if (navigator.clipboard && window.isSecureContext) await navigator.clipboard.writeText(text);
  else throw new Error('the clipboard needs a secure (https or localhost) page');
}
export function query() { return location.search; }
export function set_query(q) { history.replaceState(null, '', q ? `?${q}` : location.pathname); }
export function link(q) { return `${location.origin}${location.pathname}?${q}`; }
"#)]
extern "C" {
    #[wasm_bindgen(catch)]
    fn store_put(key: &str, value: &JsValue) -> Result<js_sys::Promise, JsValue>;
    #[wasm_bindgen(catch)]
    fn store_get(key: &str) -> Result<js_sys::Promise, JsValue>;
    #[wasm_bindgen(catch)]
    fn store_put_bytes(key: &str, bytes: &[u8]) -> Result<js_sys::Promise, JsValue>;
    #[wasm_bindgen(catch)]
    fn store_get_bytes(key: &str) -> Result<js_sys::Promise, JsValue>;
    #[wasm_bindgen(catch)]
    fn store_delete(key: &str) -> Result<js_sys::Promise, JsValue>;
    #[wasm_bindgen(catch)]
    fn store_clear() -> Result<js_sys::Promise, JsValue>;
    fn fetch_bytes(url: &str) -> js_sys::Promise;
    #[wasm_bindgen(catch)]
    fn download(bytes: &[u8], name: &str, mime: &str) -> Result<(), JsValue>;
    #[wasm_bindgen(catch)]
    fn save_svg(id: &str, name: &str) -> Result<(), JsValue>;
    fn save_png(id: &str, name: &str) -> js_sys::Promise;
    fn copy_text(text: &str) -> js_sys::Promise;
    fn query() -> String;
    fn set_query(q: &str);
    fn link(q: &str) -> String;
}

/// A JavaScript error as one line of text.
fn message(e: JsValue) -> String {
    e.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .or_else(|| e.as_string())
        .unwrap_or_else(|| format!("{e:?}"))
}

async fn settle(p: Result<js_sys::Promise, JsValue>) -> Result<JsValue, String> {
    JsFuture::from(p.map_err(message)?).await.map_err(message)
}

/// The bytes of `url`, relative to the page.
pub async fn fetch(url: &str) -> Result<Vec<u8>, String> {
    let v = settle(Ok(fetch_bytes(url))).await?;
    Ok(js_sys::Uint8Array::new(&v).to_vec())
}

/// Offers `bytes` as a file to save.
pub fn offer(bytes: &[u8], name: &str, mime: &str) -> Result<(), String> {
    download(bytes, name, mime).map_err(message)
}

/// Saves the chart drawn inside the element `id` as an SVG file.
pub fn chart_svg(id: &str, name: &str) -> Result<(), String> {
    save_svg(id, name).map_err(message)
}

/// Saves the chart drawn inside the element `id` as a PNG file.
pub async fn chart_png(id: &str, name: &str) -> Result<(), String> {
    settle(Ok(save_png(id, name))).await.map(|_| ())
}

pub async fn copy(text: &str) -> Result<(), String> {
    settle(Ok(copy_text(text))).await.map(|_| ())
}

/// The address bar's query, with its `?`.
pub fn address_query() -> String {
    query()
}

/// Puts `q` in the address bar without reloading or adding to the history.
pub fn show_query(q: &str) {
    set_query(q)
}

/// The page's address with query `q`.
pub fn address_with(q: &str) -> String {
    link(q)
}

/// A small persistent store (IndexedDB): plain data under a key, or bytes (of any size).
pub mod store {
    use super::*;

    /// Plain data as a JavaScript value, which (unlike JSON) keeps a diverged run's NaN loss.
    pub async fn put_value<T: serde::Serialize>(key: &str, value: &T) -> Result<(), String> {
        let value = serde_wasm_bindgen::to_value(value).map_err(|e| e.to_string())?;
        settle(store_put(key, &value)).await.map(|_| ())
    }

    pub async fn put_bytes(key: &str, bytes: &[u8]) -> Result<(), String> {
        settle(store_put_bytes(key, bytes)).await.map(|_| ())
    }

    pub async fn get_value<T: serde::de::DeserializeOwned>(key: &str) -> Result<Option<T>, String> {
        let value = settle(store_get(key)).await?;
        if value.is_undefined() {
            return Ok(None);
        }
        // Earlier versions of the page kept JSON text.
        if let Some(text) = value.as_string() {
            return serde_json::from_str(&text).map(Some).map_err(|e| e.to_string());
        }
        serde_wasm_bindgen::from_value(value)
            .map(Some)
            .map_err(|e| e.to_string())
    }

    pub async fn get_bytes(key: &str) -> Result<Option<Vec<u8>>, String> {
        let v = settle(store_get_bytes(key)).await?;
        Ok(v.dyn_ref::<js_sys::Uint8Array>().map(|a| a.to_vec()))
    }

    pub async fn delete(key: &str) -> Result<(), String> {
        settle(store_delete(key)).await.map(|_| ())
    }

    pub async fn clear() -> Result<(), String> {
        settle(store_clear()).await.map(|_| ())
    }
}
