//! The page's link: a setup as a query of the settings that differ from the default, read back
//! with a report of each parameter it could not use; also how a setup travels to the CPU
//! engine's worker.

use crate::arch::Arch;
use crate::dataset::Dataset;
use crate::settings::{control, controls};
use crate::setup::{default_setup, Setup};

/// The version of the page's links. A link of another version is reported, not guessed at.
pub const LINK_VERSION: &str = "1";

/// What a link restores: a setup, whether the controls are hidden (for embedding in a talk or
/// a post), and what in it could not be used.
#[derive(Clone, Debug, PartialEq)]
pub struct Link {
    pub setup: Setup,
    pub hide_controls: bool,
    pub problems: Vec<String>,
}

/// A setup travels to and from the CPU engine's worker as its link's query.
impl serde::Serialize for Setup {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_query())
    }
}

impl<'de> serde::Deserialize<'de> for Setup {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Setup, D::Error> {
        let link = Link::parse(&String::deserialize(d)?);
        match link.problems.first() {
            None => Ok(link.setup),
            Some(p) => Err(serde::de::Error::custom(p)),
        }
    }
}

impl Setup {
    /// The link's query: the version, then every setting that differs from the default of its
    /// architecture, e.g. `v=1&arch=transformer&d_model=128&seed=3`.
    pub fn to_query(&self) -> String {
        let default = default_setup();
        let own = Setup::new(self.arch, self.data);
        let mut pairs = vec![("v", LINK_VERSION.to_string())];
        if self.arch != default.arch {
            pairs.push(("arch", self.arch.name().into()));
        }
        if self.data != default.data {
            pairs.push(("data", self.data.name().into()));
        }
        for c in controls() {
            match self.value(c.key) {
                Some(v) if own.value(c.key) != Some(v) => pairs.push((c.key, v.to_string())),
                _ => {}
            }
        }
        pairs
            .iter()
            .map(|(k, v)| format!("{k}={}", escape(v)))
            .collect::<Vec<_>>()
            .join("&")
    }
}

impl Link {
    /// The link of `query` (without the `?`). A parameter that is unknown, malformed or not a
    /// setting of the chosen model is reported and its default stands; a link of another
    /// version, or one whose settings make no valid config, restores the defaults.
    pub fn parse(query: &str) -> Link {
        let mut link = Link {
            setup: default_setup(),
            hide_controls: false,
            problems: vec![],
        };
        let pairs: Vec<(String, String)> = query
            .trim_start_matches('?')
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once('=') {
                Some((k, v)) => (unescape(k), unescape(v)),
                None => (unescape(p), String::new()),
            })
            .collect();
        if pairs.is_empty() {
            return link;
        }
        let get = |key: &str| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        match get("v") {
            Some(LINK_VERSION) => {}
            Some(v) => {
                link.problems.push(format!(
                    "this link was made by another version of the page (v={v}; this page reads v={LINK_VERSION}), so its settings were not applied"
                ));
                return link;
            }
            None => link.problems.push(format!(
                "the link has no version (v={LINK_VERSION}); its settings were read as this version's"
            )),
        }
        let (mut arch, mut data) = (link.setup.arch, link.setup.data);
        if let Some(a) = get("arch") {
            match Arch::parse(a) {
                Some(a) => arch = a,
                None => link.problems.push(format!(
                    "arch={a} is not a model here (the models are {})",
                    Arch::ALL.map(Arch::name).join(", ")
                )),
            }
        }
        if let Some(d) = get("data") {
            match Dataset::parse(d) {
                Some(d) => data = d,
                None => link.problems.push(format!(
                    "data={d} is not a dataset here (they are {})",
                    Dataset::ALL.map(Dataset::name).join(", ")
                )),
            }
        }
        let mut setup = Setup::new(arch, data);
        for (key, value) in &pairs {
            match key.as_str() {
                "v" | "arch" | "data" => {}
                "hide" if value == "controls" => link.hide_controls = true,
                "hide" => link
                    .problems
                    .push(format!("hide={value} is not known; hide=controls hides the controls")),
                _ => match control(key) {
                    None => link
                        .problems
                        .push(format!("`{key}` is not a setting of the page; it was ignored")),
                    Some(c) if !c.applies(arch) => link.problems.push(format!(
                        "`{key}` is not a setting of the {}; it was ignored",
                        arch.label()
                    )),
                    Some(c) => match c.parse(value) {
                        Ok(_) => setup.set(c.key, value.trim().to_string()),
                        Err(e) => link.problems.push(format!("{e}; its default stands")),
                    },
                },
            }
        }
        match setup.config() {
            Ok(_) => link.setup = setup,
            Err(e) => link.problems.push(format!(
                "the link's settings make no valid model ({e}); the defaults stand"
            )),
        }
        link
    }
}

/// Percent-encodes all but letters, digits and `-._~`.
fn escape(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Undoes `escape` (and `+` for a space); a malformed escape stays as it is.
fn unescape(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
