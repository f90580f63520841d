//! A TrueType font for plot text. plotters renders text with ab_glyph from a registered
//! font; we register DejaVu Sans (Debian's fonts-dejavu-core, installed by setup.sh) or
//! the file named by `TP_PLOT_FONT`.

use anyhow::Result;
use plotters::style::FontStyle;
use std::sync::OnceLock;

const CANDIDATES: [&str; 4] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Registers the font once per process as "sans-serif".
pub fn ensure_font() -> Result<()> {
    static DONE: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    DONE.get_or_init(|| {
        let mut paths: Vec<String> = std::env::var("TP_PLOT_FONT").into_iter().collect();
        paths.extend(CANDIDATES.iter().map(|s| s.to_string()));
        for p in &paths {
            if let Ok(bytes) = std::fs::read(p) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return Ok(());
                }
            }
        }
        Err("no TrueType font for plot text: install fonts-dejavu-core (scripts/setup.sh does) or set TP_PLOT_FONT=/path/to/font.ttf".into())
    })
    .clone()
    .map_err(tp_harness::error::user)
}
