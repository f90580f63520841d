//! How every figure is drawn, PNG and SVG: the font, the style (colours, legends,
//! ranges), a figure installed whole or not at all (`both_formats!`), and a run's
//! timeline (`timeline`). The figures themselves sit with their products: a study's
//! curves, penalties, tuning and calibration in `study/plots/`, the planner's in
//! `planner/plot.rs`, the scan's in `scan/plot.rs`.

pub(crate) mod font;
pub(crate) mod style;

pub use style::label_runs;

/// Draws `<name>.png` and `<name>.svg` into `out` with `$draw` (a closure calling a
/// drawing function, instantiated once per backend); evaluates to the two paths. Each
/// is drawn into a temporary file beside it, checked whole and renamed over the old one:
/// a full disk leaves the earlier figure as it was and says so in one line, never a
/// truncated one in its place.
macro_rules! both_formats {
    ($out:expr, $name:expr, $size:expr, $draw:expr) => {{
        let png = $out.join(format!("{}.png", $name));
        let svg = $out.join(format!("{}.svg", $name));
        let (png_tmp, svg_tmp) = ($crate::plot::temporary(&png), $crate::plot::temporary(&svg));
        let drawn = ($draw)(BitMapBackend::new(&png_tmp, $size).into_drawing_area())
            .map_err(|e| e.to_string())
            .and_then(|_| {
                ($draw)(SVGBackend::new(&svg_tmp, $size).into_drawing_area())
                    .map_err(|e| e.to_string())
            });
        $crate::plot::install(drawn, &[(&png_tmp, &png), (&svg_tmp, &svg)])?;
        vec![png, svg]
    }};
}
pub(crate) use both_formats;

/// Where a figure is drawn before it replaces `path`: a hidden file beside it with the
/// same extension (the PNG writer picks its format by it).
pub(crate) fn temporary(path: &std::path::Path) -> std::path::PathBuf {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("figure");
    path.with_file_name(format!(".{}.{}.tmp.{name}", name, std::process::id()))
}

/// Whether a drawn file is whole: a PNG ends with its IEND chunk, an SVG with `</svg>`
/// (the drawing backends write on drop and drop errors silently).
fn whole(path: &std::path::Path) -> bool {
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    match path.extension().and_then(|e| e.to_str()) {
        Some("png") => bytes.ends_with(&[0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82]),
        Some("svg") => String::from_utf8_lossy(&bytes)
            .trim_end()
            .ends_with("</svg>"),
        _ => !bytes.is_empty(),
    }
}

/// Renames each drawn temporary over its figure once every one is whole; otherwise
/// removes them all and leaves the figures as they were.
pub(crate) fn install(
    drawn: std::result::Result<(), String>,
    pairs: &[(&std::path::Path, &std::path::Path)],
) -> anyhow::Result<()> {
    let broken = match drawn {
        Err(e) => Some(e),
        Ok(()) => pairs
            .iter()
            .find(|(tmp, _)| !whole(tmp))
            .map(|(_, fig)| format!("{} came out incomplete (is the disk full?)", fig.display())),
    };
    if let Some(why) = broken {
        for (tmp, _) in pairs {
            let _ = std::fs::remove_file(tmp);
        }
        let fig = pairs
            .first()
            .map_or(String::new(), |(_, f)| f.display().to_string());
        return Err(tp_harness::error::user(format!(
            "cannot draw {fig}: {}; the earlier figures there are unchanged",
            why.lines().next().unwrap_or("")
        )));
    }
    for (tmp, fig) in pairs {
        std::fs::rename(tmp, fig)
            .map_err(|e| tp_harness::error::user(format!("cannot write {}: {e}", fig.display())))?;
    }
    Ok(())
}

// After the macro: the timeline draws with it.
pub mod timeline;

pub use timeline::plot_timeline;
