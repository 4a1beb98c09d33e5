//! `peek --format svg|png|html` (SPEC §4.4 "Pictures"), against tools nobody here
//! wrote: rsvg-convert renders latch's SVG, the `png` crate decodes both PNGs and
//! their pixels are checked at known cells; python's xml.etree and html5lib parse
//! the pictures of a hostile screen. rsvg-convert and the venv come from
//! scripts/test-env.sh; a missing one fails, naming it.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};

use support::{python, Reg};

/// The grid of SPEC §4.4: cells of 9 × 18 pixels, 8 pixels from the edge.
const CELL_W: u32 = 9;
const CELL_H: u32 = 18;
const MARGIN: u32 = 8;

/// A session running `script` (sh) once it is 24 × `cols` and told to go, on a
/// cleared screen (the terminal echoed `go`); waits until the screen shows `ready`.
fn session(reg: &Reg, id: &str, cols: u16, script: &str, ready: &str) {
    let script = format!(r"read go; printf '[H[2J'; {script}; sleep 100000");
    reg.new_session(id, &["sh", "-c", &script]);
    reg.run(&["resize", id, "24", &cols.to_string()]).ok();
    reg.run(&["send", id, "go\n"]).ok();
    reg.wait_for(id, ready);
}

fn tool(name: &str) -> String {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .unwrap();
    assert!(
        found.status.success(),
        "{name} is not installed: run `bash scripts/test-env.sh` (it installs it)"
    );
    String::from_utf8(found.stdout).unwrap().trim().to_owned()
}

/// An RGBA image.
struct Image {
    width: u32,
    height: u32,
    rgba: Vec<u8>,
}

impl Image {
    fn decode(bytes: &[u8]) -> Self {
        let mut decoder = png::Decoder::new(std::io::Cursor::new(bytes));
        decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::ALPHA);
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!(info.bit_depth, png::BitDepth::Eight);
        assert_eq!(info.color_type, png::ColorType::Rgba, "{info:?}");
        buf.truncate(info.buffer_size());
        Self {
            width: info.width,
            height: info.height,
            rgba: buf,
        }
    }

    fn pixel(&self, x: u32, y: u32) -> [u8; 3] {
        let i = usize::try_from((y * self.width + x) * 4).unwrap();
        [self.rgba[i], self.rgba[i + 1], self.rgba[i + 2]]
    }

    /// The pixel at the centre of cell (row, col).
    fn centre(&self, row: u32, col: u32) -> [u8; 3] {
        self.pixel(
            MARGIN + col * CELL_W + CELL_W / 2,
            MARGIN + row * CELL_H + CELL_H / 2,
        )
    }

    /// How many pixels of cell (row, col) are close to `rgb`.
    fn count(&self, row: u32, col: u32, rgb: [u8; 3]) -> usize {
        let mut n = 0;
        for y in MARGIN + row * CELL_H..MARGIN + (row + 1) * CELL_H {
            for x in MARGIN + col * CELL_W..MARGIN + (col + 1) * CELL_W {
                if close(self.pixel(x, y), rgb) {
                    n += 1;
                }
            }
        }
        n
    }
}

fn close(a: [u8; 3], b: [u8; 3]) -> bool {
    a.iter().zip(b).all(|(x, y)| x.abs_diff(y) <= 24)
}

const RED: [u8; 3] = [0xcd, 0, 0];
const GREEN: [u8; 3] = [0, 0xcd, 0];
const BLUE: [u8; 3] = [0, 0, 0xee];
const YELLOW: [u8; 3] = [0xcd, 0xcd, 0];
const BLACK: [u8; 3] = [0, 0, 0];

/// Row 0: a red-background blank at column 0, the bold green word GREEN at 2–6,
/// two full blocks in bold green at 8–9, a wide character on blue at 11–12, and
/// a yellow X at 13, where the wide character's advance puts it.
const COLOURED: &str = r"printf '\033[41m \033[m \033[1;32mGREEN \342\226\210\342\226\210\033[m \033[44m\344\270\255\033[m\033[33mX\033[m\nREADY'";

fn check_coloured(name: &str, img: &Image) {
    assert_eq!((img.width, img.height), (736, 448), "{name}: 80 x 24 cells");
    assert!(
        close(img.centre(0, 0), RED),
        "{name}: {:?}",
        img.centre(0, 0)
    );
    assert!(close(img.centre(0, 1), BLACK), "{name}");
    for col in 2..7 {
        let green = img.count(0, col, GREEN);
        assert!(green >= 4, "{name}: cell {col} has {green} green pixels");
    }
    for col in 8..10 {
        assert!(close(img.centre(0, col), GREEN), "{name}: block at {col}");
    }
    // The wide character's background spans two cells; X is drawn in the third.
    for col in 11..13 {
        assert!(close(img.centre(0, col), BLUE), "{name}: wide cell {col}");
    }
    assert!(
        !close(img.centre(0, 13), BLUE),
        "{name}: blue past the wide cell"
    );
    assert!(img.count(0, 13, YELLOW) >= 4, "{name}: no X in column 13");
    for col in [11, 12, 14] {
        assert_eq!(
            img.count(0, col, YELLOW),
            0,
            "{name}: yellow in column {col}"
        );
    }
}

#[test]
fn svg_and_png_show_the_cells() {
    let reg = Reg::new();
    session(&reg, "pic", 80, COLOURED, "READY");
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("s.svg");
    let ours = dir.path().join("ours.png");
    let theirs = dir.path().join("theirs.png");
    reg.run(&[
        "peek",
        "pic",
        "--format",
        "svg",
        "--out",
        svg.to_str().unwrap(),
    ])
    .ok();
    reg.run(&[
        "peek",
        "pic",
        "--format",
        "png",
        "--out",
        ours.to_str().unwrap(),
    ])
    .ok();
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains(r##"fill="#00cd00" font-weight="bold">GREEN"##),
        "{text}"
    );
    let rendered = Command::new(tool("rsvg-convert"))
        .arg(&svg)
        .arg("-o")
        .arg(&theirs)
        .output()
        .unwrap();
    assert!(rendered.status.success(), "rsvg-convert: {rendered:?}");
    assert!(rendered.stderr.is_empty(), "rsvg-convert: {rendered:?}");
    check_coloured("latch", &Image::decode(&std::fs::read(&ours).unwrap()));
    check_coloured(
        "rsvg-convert",
        &Image::decode(&std::fs::read(&theirs).unwrap()),
    );
    // To a pipe, the PNG is stdout.
    let piped = reg
        .cmd()
        .args(["peek", "pic", "--format", "png"])
        .output()
        .unwrap();
    assert!(piped.status.success(), "{piped:?}");
    check_coloured("piped", &Image::decode(&piped.stdout));
}

#[test]
fn the_programs_palette_wins_over_the_theme() {
    let reg = Reg::new();
    let script =
        r"printf '\033]11;rgb:10/20/30\007\033]4;1;rgb:01/02/03\007\033[41m \033[m\nREADY'";
    session(&reg, "pal", 80, script, "READY");
    for theme in ["dark", "light"] {
        let r = reg.run(&["peek", "pal", "--format", "svg", "--theme", theme]);
        let svg = r.ok();
        assert!(svg.contains(r##"height="448" fill="#102030"/>"##), "{svg}");
        assert!(svg.contains(r##"fill="#010203"/>"##), "{svg}");
    }
    let plain = Reg::new();
    session(&plain, "th", 80, "printf READY", "READY");
    let light = plain.run(&["peek", "th", "--format", "svg", "--theme", "light"]);
    assert!(light.ok().contains(r##"fill="#ffffff"/>"##));
    let html = plain.run(&["peek", "th", "--format", "html", "--theme", "light"]);
    assert!(html.ok().contains("color:#1f1f1f;background:#ffffff"));
}

/// Prints `</text><script>`, `&`, `]]>`, C0 and C1 controls, a noncharacter and
/// 1,000 columns.
const HOSTILE: &str = r"printf '</text><script>alert(1)</script> & ]]> <![CDATA[ \001\002\010\177 \302\205 \357\277\276 <svg onload=x>\n'; i=0; while [ $i -lt 100 ]; do printf 'abcdefghi<'; i=$((i+1)); done; printf '\nREADY'";

const CHECK: &str = r#"
import sys, xml.etree.ElementTree as ET, html5lib
svg = ET.parse(sys.argv[1]).getroot()
names = sorted({e.tag.split('}')[-1] for e in svg.iter()})
assert names == ['rect', 'svg', 'text'], names
text = ''.join(e.text or '' for e in svg.iter() if e.tag.endswith('text'))
assert '</text><script>alert(1)</script>' in text, text
assert '<svg onload=x>' in text and ']]>' in text and '&' in text
assert '\u2401\u2402' not in text  # the emulator executes C0 controls: never cells
assert ('abcdefghi<' * 100) in text.replace(' ', '')
doc = html5lib.parse(open(sys.argv[2], 'rb').read(), namespaceHTMLElements=False)
names = sorted({e.tag for e in doc.iter()})
assert names == ['body', 'head', 'html', 'meta', 'pre', 'span', 'title'], names
pre = ''.join(doc.find('body').find('pre').itertext())
assert '</text><script>alert(1)</script>' in pre, pre
assert ('abcdefghi<' * 100) in pre
print('ok')
"#;

#[test]
fn hostile_screens_stay_text() {
    let reg = Reg::new();
    session(&reg, "evil", 1000, HOSTILE, "READY");
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("e.svg");
    let html = dir.path().join("e.html");
    reg.run(&[
        "peek",
        "evil",
        "--format",
        "svg",
        "--out",
        svg.to_str().unwrap(),
    ])
    .ok();
    reg.run(&[
        "peek",
        "evil",
        "--format",
        "html",
        "--out",
        html.to_str().unwrap(),
    ])
    .ok();
    let checked = Command::new(python())
        .args(["-c", CHECK])
        .arg(&svg)
        .arg(&html)
        .output()
        .unwrap();
    assert!(
        checked.status.success() && checked.stdout == b"ok\n",
        "{}\n{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    let rendered = Command::new(tool("rsvg-convert"))
        .arg(&svg)
        .arg("-o")
        .arg(dir.path().join("e.png"))
        .output()
        .unwrap();
    assert!(rendered.status.success(), "rsvg-convert: {rendered:?}");
    // 1,000 columns: 9,016 pixels wide, within the PNG cap.
    let png = reg
        .cmd()
        .args(["peek", "evil", "--format", "png"])
        .output()
        .unwrap();
    assert!(png.status.success(), "{png:?}");
    assert_eq!(Image::decode(&png.stdout).width, 9016);
}

#[test]
fn format_is_a_usage_error_beside_plain_and_ansi() {
    let reg = Reg::new();
    for args in [
        &["peek", "x", "--format", "svg", "--plain"][..],
        &["peek", "x", "--format", "html", "--ansi"],
        &["peek", "x", "--format", "png", "--follow"],
        &["peek", "x", "--format", "png", "--since", "0"],
        &["peek", "x", "--format", "bmp"],
        &["peek", "x", "--out", "f.svg"],
        &["peek", "x", "--theme", "light"],
        &["peek", "x", "--format", "svg", "--theme", "sepia"],
    ] {
        let r = reg.run(args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
    }
}

#[test]
fn a_png_is_never_written_to_a_terminal() {
    let reg = Reg::new();
    session(&reg, "tty", 80, "printf READY", "READY");
    let pty = nix::pty::openpty(None, None).unwrap();
    let r = support::Run::from(
        reg.cmd()
            .args(["peek", "tty", "--format", "png"])
            .stdout(Stdio::from(pty.slave.try_clone().unwrap()))
            .stderr(Stdio::piped())
            .output()
            .unwrap(),
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("--out"), "{r:?}");
    // Nothing reached the terminal.
    drop(pty.slave);
    let mut buf = [0u8; 64];
    let n = nix::unistd::read(&pty.master, &mut buf).unwrap_or(0);
    assert_eq!(n, 0, "{:?}", &buf[..n]);
    // With --out, the terminal is no obstacle; SVG and HTML are text.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.png");
    let pty = nix::pty::openpty(None, None).unwrap();
    for args in [
        &[
            "peek",
            "tty",
            "--format",
            "png",
            "--out",
            out.to_str().unwrap(),
        ][..],
        &["peek", "tty", "--format", "svg"],
    ] {
        let status = reg
            .cmd()
            .args(args)
            .stdout(Stdio::from(pty.slave.try_clone().unwrap()))
            .status()
            .unwrap();
        assert!(status.success(), "{args:?}");
    }
    assert_eq!(Image::decode(&std::fs::read(&out).unwrap()).width, 736);
}

#[test]
fn full_over_the_png_cap_is_refused() {
    let reg = Reg::new();
    // 2,000 lines of 80 columns: 36,016 pixels high, over 16,777,216 / 736.
    let script = "i=0; while [ $i -lt 2000 ]; do echo line $i; i=$((i+1)); done; printf READY";
    session(&reg, "tall", 80, script, "READY");
    let r = reg.run(&["peek", "tall", "--format", "png", "--full"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("16777216") && r.stderr.contains("--full"),
        "{r:?}"
    );
    assert!(r.stdout.is_empty());
    // The visible screen fits; SVG has no cap and shows every line.
    let png = reg
        .cmd()
        .args(["peek", "tall", "--format", "png"])
        .output()
        .unwrap();
    assert!(png.status.success(), "{png:?}");
    let svg = reg.run(&["peek", "tall", "--format", "svg", "--full"]);
    let svg = svg.ok();
    assert!(svg.contains(">line 0</text>") && svg.contains(">line 1999</text>"));
}

#[test]
fn no_monospace_font_is_a_clear_failure() {
    let reg = Reg::new();
    session(&reg, "font", 80, "printf READY", "READY");
    let dir = tempfile::tempdir().unwrap();
    let fonts = dir.path().join("fonts");
    std::fs::create_dir(&fonts).unwrap();
    // Only a proportional font: not one to draw a terminal with.
    let sans = Path::new("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf");
    assert!(
        sans.exists(),
        "run `bash scripts/test-env.sh` (fonts-dejavu-core)"
    );
    std::fs::copy(sans, fonts.join("DejaVuSans.ttf")).unwrap();
    let conf = dir.path().join("fonts.conf");
    std::fs::write(
        &conf,
        format!(
            "<?xml version=\"1.0\"?>\n<fontconfig><dir>{}</dir></fontconfig>\n",
            fonts.display()
        ),
    )
    .unwrap();
    let r = support::Run::from(
        reg.cmd()
            .args(["peek", "font", "--format", "png"])
            .env("FONTCONFIG_FILE", &conf)
            .output()
            .unwrap(),
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("fonts-dejavu-core"), "{r:?}");
    assert!(r.stdout.is_empty());
    // With the monospace font there too, it draws.
    std::fs::copy(
        "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf",
        fonts.join("DejaVuSansMono.ttf"),
    )
    .unwrap();
    let ok = reg
        .cmd()
        .args(["peek", "font", "--format", "png"])
        .env("FONTCONFIG_FILE", &conf)
        .output()
        .unwrap();
    assert!(ok.status.success(), "{ok:?}");
}

#[test]
fn an_exited_session_is_drawn_from_its_final_screen() {
    let reg = Reg::new();
    reg.new_session(
        "done",
        &[
            "sh",
            "-c",
            r"printf '\033[41m \033[1;32mbye\033[m\n'; exit 3",
        ],
    );
    reg.wait_exit("done");
    let r = reg.run(&["peek", "done", "--format", "svg"]);
    let svg = r.ok();
    assert!(svg.contains(r##"fill="#cd0000"/>"##), "{svg}");
    assert!(svg.contains(">bye</text>"), "{svg}");
    assert!(r.stderr.contains("exited with code 3"), "{r:?}");
}
