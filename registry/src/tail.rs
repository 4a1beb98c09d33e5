//! Streaming an events file's new lines with bounded memory and no fd held
//! between reads (SPEC §9.9): `latch events --all` merges every id's file, and
//! holding them all (or all their lines) at once is what this avoids.
//!
//! A [`Place`] remembers where a reader stopped in one file: the file (device and
//! inode), the offset after the last line it took, and that line, to find its place
//! again once compaction has replaced the file.

use std::fs;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::events::EVENTS_READ_MAX_BYTES;
use crate::file::{open_regular, FileError};

/// How much of a file one refill reads. A source holds at most this plus one line.
const CHUNK: usize = 16 << 10;

/// Where a reader stopped in one events file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Place {
    file: Option<(u64, u64)>,
    offset: u64,
    last: Option<Vec<u8>>,
}

/// The lines of one events file after a [`Place`], read a chunk at a time; the file
/// is opened (through [`open_regular`]) for each chunk and closed again, and lines
/// appended after [`LineSource::open`] wait for the next source.
#[derive(Debug)]
pub struct LineSource {
    path: PathBuf,
    file: (u64, u64),
    /// The next byte to read from the file.
    next: u64,
    /// Where the source ends: the file's length when opened.
    end: u64,
    buf: Vec<u8>,
    /// The start of the unread part of `buf`.
    at: usize,
    /// The offset in the file of `buf[0]`.
    buf_offset: u64,
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> FileError + '_ {
    move |source| FileError::Io {
        path: path.to_path_buf(),
        source,
    }
}

impl LineSource {
    /// The lines of `path` after `place`. `Ok(None)`: no such file. When the file
    /// is another than `place`'s (replaced by compaction) or shorter, the source
    /// starts after the last line of its readable end ([`EVENTS_READ_MAX_BYTES`])
    /// equal to `place`'s last line, or at that end's first whole line.
    pub fn open(path: &Path, place: &Place) -> Result<Option<Self>, FileError> {
        let Some(f) = open_regular(path)? else {
            return Ok(None);
        };
        let meta = f.metadata().map_err(io_err(path))?;
        let file = (meta.dev(), meta.ino());
        let end = meta.len();
        let mut src = Self {
            path: path.to_path_buf(),
            file,
            next: 0,
            end,
            buf: Vec::new(),
            at: 0,
            buf_offset: 0,
        };
        if place.file == Some(file) && place.offset <= end && ends_with_last(&f, place) {
            src.seek(place.offset);
            return Ok(Some(src));
        }
        // The readable end of the file, from its first whole line.
        let start = end.saturating_sub(EVENTS_READ_MAX_BYTES);
        src.seek(start.saturating_sub(1));
        if start > 0 {
            // The line cut by the bound is skipped (SPEC §9.9).
            src.skip_past_newline()?;
        }
        if let Some(last) = &place.last {
            let from = src.offset();
            let mut after = None;
            while let Some((line, off)) = src.next_line_at()? {
                if &line == last {
                    after = Some(off);
                }
            }
            src.seek(after.unwrap_or(from));
        }
        Ok(Some(src))
    }

    fn seek(&mut self, offset: u64) {
        self.next = offset;
        self.buf.clear();
        self.at = 0;
        self.buf_offset = offset;
    }

    /// The offset of the next unread byte.
    fn offset(&self) -> u64 {
        self.buf_offset + self.at as u64
    }

    /// Reads the next chunk into `buf`; `Ok(false)`: the source's end, or the file
    /// was replaced meanwhile (its new lines wait for the next source).
    fn refill(&mut self) -> Result<bool, FileError> {
        if self.next >= self.end {
            return Ok(false);
        }
        let Some(f) = open_regular(&self.path)? else {
            return Ok(false);
        };
        let meta = f.metadata().map_err(io_err(&self.path))?;
        if (meta.dev(), meta.ino()) != self.file {
            return Ok(false);
        }
        let want = usize::try_from(self.end - self.next).map_or(CHUNK, |n| n.min(CHUNK));
        self.buf.drain(..self.at);
        self.buf_offset += self.at as u64;
        self.at = 0;
        let old = self.buf.len();
        self.buf.resize(old + want, 0);
        let n = read_at(&f, &mut self.buf[old..], self.next).map_err(io_err(&self.path))?;
        self.buf.truncate(old + n);
        self.next += n as u64;
        if n == 0 {
            self.end = self.next;
        }
        Ok(n > 0)
    }

    /// Skips everything up to and including the next newline.
    fn skip_past_newline(&mut self) -> Result<(), FileError> {
        loop {
            if let Some(p) = self.buf[self.at..].iter().position(|&b| b == b'\n') {
                self.at += p + 1;
                return Ok(());
            }
            self.at = self.buf.len();
            if !self.refill()? {
                return Ok(());
            }
        }
    }

    /// The next line (without its newline) and the offset after it; a last line
    /// without a newline counts. Empty lines are skipped.
    fn next_line_at(&mut self) -> Result<Option<(Vec<u8>, u64)>, FileError> {
        loop {
            if let Some(p) = self.buf[self.at..].iter().position(|&b| b == b'\n') {
                let line = self.buf[self.at..self.at + p].to_vec();
                self.at += p + 1;
                if line.is_empty() {
                    continue;
                }
                return Ok(Some((line, self.offset())));
            }
            if !self.refill()? {
                if self.at == self.buf.len() {
                    return Ok(None);
                }
                let line = self.buf[self.at..].to_vec();
                self.at = self.buf.len();
                return Ok(Some((line, self.offset())));
            }
        }
    }

    /// The next line, without its newline.
    pub fn next_line(&mut self) -> Result<Option<Vec<u8>>, FileError> {
        Ok(self.next_line_at()?.map(|(l, _)| l))
    }

    /// The place after the last line [`LineSource::next_line`] returned.
    pub fn place_after(&self, line: Vec<u8>) -> Place {
        Place {
            file: Some(self.file),
            offset: self.offset(),
            last: Some(line),
        }
    }
}

/// Whether the bytes before `place.offset` are its last line (and its newline):
/// an inode number reused by a later compaction is not the same file.
fn ends_with_last(f: &fs::File, place: &Place) -> bool {
    let Some(last) = &place.last else {
        return place.offset == 0;
    };
    let mut want = last.clone();
    want.push(b'\n');
    let Some(from) = place.offset.checked_sub(want.len() as u64) else {
        return false;
    };
    let mut got = vec![0; want.len()];
    // The last line of a file may have had no newline when it was read.
    let read = read_at(f, &mut got, from).unwrap_or(0);
    got.truncate(read);
    got == want || (read > 0 && got[1..] == want[..want.len() - 1])
}

fn read_at(f: &fs::File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    loop {
        match f.read_at(buf, offset) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn drain(src: &mut LineSource) -> (Vec<String>, Option<Place>) {
        let mut out = Vec::new();
        let mut place = None;
        while let Some(l) = src.next_line().unwrap() {
            out.push(String::from_utf8(l.clone()).unwrap());
            place = Some(src.place_after(l));
        }
        (out, place)
    }

    #[test]
    fn follows_appends_and_finds_its_place_after_a_replacement() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("e");
        fs::write(&path, b"a\nb\n").unwrap();
        let mut src = LineSource::open(&path, &Place::default()).unwrap().unwrap();
        let (lines, place) = drain(&mut src);
        assert_eq!(lines, ["a", "b"]);
        let place = place.unwrap();
        fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"c\n")
            .unwrap();
        let mut src = LineSource::open(&path, &place).unwrap().unwrap();
        let (lines, place) = drain(&mut src);
        assert_eq!(lines, ["c"]);
        // Compaction: a new file holding the newest lines, then one more.
        let tmp2 = tmp.path().join("e2");
        fs::write(&tmp2, b"b\nc\nd\n").unwrap();
        fs::rename(&tmp2, &path).unwrap();
        let mut src = LineSource::open(&path, &place.unwrap()).unwrap().unwrap();
        assert_eq!(drain(&mut src).0, ["d"]);
        // Rewritten in place (the same inode, as a reused inode number would look):
        // the place's last line is not there, so the readable end is read again.
        let place = {
            fs::write(&path, b"a\nb\n").unwrap();
            let mut src = LineSource::open(&path, &Place::default()).unwrap().unwrap();
            drain(&mut src).1.unwrap()
        };
        fs::write(&path, b"x\ny\nz\n").unwrap();
        let mut src = LineSource::open(&path, &place).unwrap().unwrap();
        assert_eq!(drain(&mut src).0, ["x", "y", "z"]);
        // Long lines cross chunks whole.
        let long = "x".repeat(CHUNK * 3 + 7);
        fs::write(&path, format!("{long}\nend")).unwrap();
        let mut src = LineSource::open(&path, &Place::default()).unwrap().unwrap();
        assert_eq!(drain(&mut src).0, [long.as_str(), "end"]);
    }
}
