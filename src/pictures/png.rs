//! The PNG (SPEC §4.4): our SVG, rasterised by resvg (usvg and tiny-skia) with a
//! monospace font found among the system's fonts by fontdb. No font installed
//! that is monospaced is a clear failure naming what to install; a picture over
//! PNG_MAX_PIXELS (SPEC §8) is refused before anything is drawn.

use std::sync::Arc;

use latch_screen::capture::Capture;
use resvg::{tiny_skia, usvg};
use usvg::fontdb;

use super::{size, svg, PictureError, Theme, PNG_MAX_PIXELS};

/// Families looked for first, in this order (the SVG's stack); else any face the
/// font says is monospaced.
const PREFERRED: [&str; 3] = ["DejaVu Sans Mono", "Liberation Mono", "Noto Sans Mono"];

/// The PNG of `capture`; `full` only words the refusal of a picture too large.
pub(crate) fn render(capture: &Capture, theme: Theme, full: bool) -> Result<Vec<u8>, PictureError> {
    let (width, height) = size(capture);
    let too_large = PictureError::TooLarge {
        width,
        height,
        full,
    };
    if width.saturating_mul(height) > PNG_MAX_PIXELS {
        return Err(too_large);
    }
    let (w, h) = match (u32::try_from(width), u32::try_from(height)) {
        (Ok(w), Ok(h)) => (w, h),
        _ => return Err(too_large),
    };
    let (db, family) = fonts()?;
    let options = usvg::Options {
        font_family: family,
        fontdb: Arc::new(db),
        ..usvg::Options::default()
    };
    let svg = svg::render(capture, theme);
    let tree =
        usvg::Tree::from_str(&svg, &options).map_err(|e| PictureError::Render(e.to_string()))?;
    let mut pixmap = tiny_skia::Pixmap::new(w, h)
        .ok_or_else(|| PictureError::Render(format!("no {w} x {h} pixmap")))?;
    resvg::render(&tree, tiny_skia::Transform::default(), &mut pixmap.as_mut());
    pixmap
        .encode_png()
        .map_err(|e| PictureError::Render(e.to_string()))
}

/// The system's fonts, with `monospace` meaning the monospace family found.
fn fonts() -> Result<(fontdb::Database, String), PictureError> {
    let mut db = fontdb::Database::new();
    db.load_system_fonts();
    let family = monospace(&db).ok_or(PictureError::NoMonospaceFont)?;
    db.set_monospace_family(family.clone());
    Ok((db, family))
}

fn monospace(db: &fontdb::Database) -> Option<String> {
    let mono = || db.faces().filter(|f| f.monospaced);
    PREFERRED
        .iter()
        .find(|name| mono().any(|f| f.families.iter().any(|(n, _)| n == *name)))
        .map(|name| (*name).to_owned())
        .or_else(|| {
            mono()
                .find_map(|f| f.families.first())
                .map(|(n, _)| n.clone())
        })
}
