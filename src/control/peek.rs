//! `peek` (SPEC §13.4): the screen as `latch peek` gives it, a picture of it, or
//! the output after a cursor.

use base64::Engine as _;
use latch_client::{Bound, ClientError, Found};

use super::methods::{to_value, usage, Reply};
use super::params::*;
use super::rpc::RpcError;
use super::schema::*;
use super::{At, Place, Server};
use crate::commands::sessions;
use crate::shapes::OutputJson;

/// The most `peek since` gives in one answer.
const SINCE_DEFAULT: u32 = 1 << 20;

pub(super) fn peek(server: &Server, place: &Place<'_>, t: &Found, p: PeekParams) -> Reply {
    use crate::pictures::Format;
    let picture = match p.format.as_deref() {
        Some("svg") => Some(("svg", Format::Svg)),
        Some("html") => Some(("html", Format::Html)),
        Some("png") => Some(("png", Format::Png)),
        _ => None,
    };
    let plain = match p.format.as_deref() {
        None | Some("plain") => true,
        Some("ansi") => false,
        Some(_) if picture.is_some() => false,
        Some(f) => {
            return Err(
                RpcError::params(format!("format {f:?}: plain, ansi, svg, html or png")).into(),
            )
        }
    };
    let s = &t.session;
    if let Some((name, format)) = picture {
        if p.since.is_some() {
            return Err(usage("since gives plain text of the output: not a picture"));
        }
        // The picture `peek --format` draws (SPEC §4.4); a PNG as base64.
        let bytes = crate::pictures::picture_of(place.loc(), t, p.full, format).at(s)?;
        let screen = match format {
            Format::Png => base64::engine::general_purpose::STANDARD.encode(&bytes),
            _ => String::from_utf8_lossy(&bytes).into_owned(),
        };
        return to_value(&PeekResult::Screen(ScreenJson {
            id: s.id.to_string(),
            incarnation: s.incarnation.to_string(),
            format: name,
            full: p.full,
            screen,
            exit_code: None,
            exit_signal: None,
        }));
    }
    if let Some(since) = p.since {
        if !plain || p.full {
            return Err(usage(
                "since gives plain text of the output: no format, no full",
            ));
        }
        let max = p.max_bytes.unwrap_or(SINCE_DEFAULT).max(1);
        let output = server
            .pool
            .with(place, t, |b| output_since(b, since, max))
            .at(s)?;
        return to_value(&PeekResult::Output(output));
    }
    let opts = sessions::peek_options(plain, p.full);
    let shape = |screen: String, exit: Option<(Option<i32>, Option<i32>)>| ScreenJson {
        id: s.id.to_string(),
        incarnation: s.incarnation.to_string(),
        format: if plain { "plain" } else { "ansi" },
        full: p.full,
        screen,
        exit_code: exit.map(|e| e.0),
        exit_signal: exit.map(|e| e.1),
    };
    // On the creation's kept connection (SPEC §13.4).
    let live = server.pool.with(place, t, |b| b.peek(opts));
    match live {
        Ok(bytes) => to_value(&PeekResult::Screen(shape(
            String::from_utf8_lossy(&bytes).into_owned(),
            None,
        ))),
        Err(e) => {
            // An ended program: its kept final screen, as `latch peek` shows.
            let f = sessions::ended_screen(place.loc(), t, e).at(s)?;
            let text = sessions::final_text(&f, plain, p.full).clone();
            to_value(&PeekResult::Screen(shape(
                text,
                Some((f.exit.code, f.exit.signal)),
            )))
        }
    }
}

/// The output after `since`, as plain text, at most `max` bytes of it: the
/// output shape, whose `outputRange.end` is where to continue (SPEC §4.7).
fn output_since(bound: &mut Bound, since: u64, max: u32) -> Result<OutputJson, ClientError> {
    let session = bound.target().clone();
    let mut plain = latch_screen::PlainStream::default();
    let mut text = String::new();
    let read = crate::commands::turns::read_since(bound, since, u64::from(max), |bytes| {
        text.push_str(&plain.strip(bytes));
        true
    })?;
    Ok(crate::commands::turns::output_json(&session, &read, text))
}
