//! The page's controls: the settings of `models::settings::SETTINGS` that the page offers, with
//! their keys, labels, kinds, architectures and help from that one table.

use models::settings::SETTINGS;
pub use models::settings::{text_of, Kind, Setting as Control};

/// Every setting the page offers, model sizes first.
pub fn controls() -> impl Iterator<Item = &'static Control> {
    SETTINGS.iter().filter(|s| s.on_page)
}

/// The page's control of `key`, if the page offers it.
pub fn control(key: &str) -> Option<&'static Control> {
    controls().find(|c| c.key == key)
}
