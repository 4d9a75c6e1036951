//! A job's raw stream drawn as HTML for the cockpit page (`transport::http::cockpit`): the bytes go
//! through a `vt100` emulator (colours, cursor movement, erasing, carriage returns) and its cells come
//! out as `<span>`s, every character escaped, so hostile output (`<script>`, quotes, `&`) is text on
//! the page and never markup.
//!
//! Memory is bounded by the emulator's size: `rows × cols` cells on the screen plus [`SCROLLBACK`]
//! lines above it; a render shows at most [`MAX_RENDERED_LINES`] of them, the newest.
//!
//! ```
//! use front::terminal::html::RawScreen;
//! let mut s = RawScreen::new(24, 80, false);
//! s.feed(b"\x1b[31mred\x1b[0m <b>\n");
//! let html = s.render();
//! assert!(html.contains("<span style=\"color:#cd0000\">red</span>"));
//! assert!(html.contains("&lt;b&gt;"));
//! ```

use std::fmt::Write;

/// Lines a raw screen keeps above its visible rows.
pub const SCROLLBACK: usize = 500;
/// Most lines one render shows (scrollback and screen together, newest last).
pub const MAX_RENDERED_LINES: usize = 600;

impl std::fmt::Debug for RawScreen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawScreen").finish_non_exhaustive()
    }
}

/// The emulator of one viewer of one job's raw stream.
pub struct RawScreen {
    parser: vt100::Parser,
    /// A pipe job's `\n` moves down only; a terminal's line discipline adds the `\r` (`onlcr`), so
    /// without a PTY the bytes are fed with it added.
    add_cr: bool,
    /// The emulator panicked on the stream: it is gone, and the render says so.
    broken: bool,
}

impl RawScreen {
    /// A screen of `rows × cols`; `tty` says the stream came from a PTY (its line feeds carry their `\r`).
    pub fn new(rows: u16, cols: u16, tty: bool) -> RawScreen {
        RawScreen { parser: vt100::Parser::new(rows.max(2), cols.max(2), SCROLLBACK), add_cr: !tty, broken: false }
    }

    pub fn feed(&mut self, data: &[u8]) {
        if self.broken {
            return;
        }
        let parser = &mut self.parser;
        let add_cr = self.add_cr;
        // The emulator meets hostile bytes: a panic in it ends this view, never the front.
        let fed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            if add_cr {
                for piece in data.split_inclusive(|&b| b == b'\n') {
                    match piece.strip_suffix(b"\n") {
                        Some(line) => {
                            parser.process(line);
                            parser.process(b"\r\n");
                        }
                        None => parser.process(piece),
                    }
                }
            } else {
                parser.process(data);
            }
        }));
        if fed.is_err() {
            self.broken = true;
        }
    }

    /// The scrollback and the screen as HTML lines (`\n`-separated runs of escaped text in `<span>`s
    /// for their colours and attributes), trailing blank lines trimmed.
    pub fn render(&mut self) -> String {
        if self.broken {
            return "[heddle: the terminal emulator failed on this output; the raw bytes are still stored]".into();
        }
        let screen = self.parser.screen_mut();
        screen.set_scrollback(usize::MAX);
        let kept = screen.scrollback();
        let (rows, cols) = screen.size();
        let mut lines: Vec<String> = Vec::new();
        // Scrollback pages (offset k shows scrollback lines [kept-k, kept-k+rows) at the top), oldest
        // first, then the screen itself at offset 0.
        let mut offset = kept;
        while offset > 0 {
            screen.set_scrollback(offset);
            let take = usize::from(rows).min(offset);
            for row in 0..take {
                lines.push(row_html(screen, row as u16, cols));
            }
            offset -= take;
        }
        screen.set_scrollback(0);
        for row in 0..rows {
            lines.push(row_html(screen, row, cols));
        }
        while lines.last().is_some_and(String::is_empty) {
            lines.pop();
        }
        let skip = lines.len().saturating_sub(MAX_RENDERED_LINES);
        lines[skip..].join("\n")
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Default)]
struct Look {
    fg: Option<(u8, u8, u8)>,
    bg: Option<(u8, u8, u8)>,
    bold: bool,
    italic: bool,
    underline: bool,
}

impl Look {
    fn of(cell: &vt100::Cell) -> Look {
        let (mut fg, mut bg) = (rgb(cell.fgcolor()), rgb(cell.bgcolor()));
        if cell.inverse() {
            (fg, bg) = (Some(bg.unwrap_or(DEFAULT_BG)), Some(fg.unwrap_or(DEFAULT_FG)));
        }
        Look { fg, bg, bold: cell.bold(), italic: cell.italic(), underline: cell.underline() }
    }

    fn style(&self) -> String {
        let mut s = String::new();
        if let Some((r, g, b)) = self.fg {
            let _ = write!(s, "color:#{r:02x}{g:02x}{b:02x};");
        }
        if let Some((r, g, b)) = self.bg {
            let _ = write!(s, "background:#{r:02x}{g:02x}{b:02x};");
        }
        if self.bold {
            s.push_str("font-weight:bold;");
        }
        if self.italic {
            s.push_str("font-style:italic;");
        }
        if self.underline {
            s.push_str("text-decoration:underline;");
        }
        s.pop();
        s
    }
}

/// The page's terminal colours (cockpit.css), for inverse video over the defaults.
const DEFAULT_FG: (u8, u8, u8) = (0xd0, 0xd0, 0xd0);
const DEFAULT_BG: (u8, u8, u8) = (0x10, 0x10, 0x10);

/// xterm's 16 colours.
const BASIC: [(u8, u8, u8); 16] = [
    (0x00, 0x00, 0x00),
    (0xcd, 0x00, 0x00),
    (0x00, 0xcd, 0x00),
    (0xcd, 0xcd, 0x00),
    (0x00, 0x00, 0xee),
    (0xcd, 0x00, 0xcd),
    (0x00, 0xcd, 0xcd),
    (0xe5, 0xe5, 0xe5),
    (0x7f, 0x7f, 0x7f),
    (0xff, 0x00, 0x00),
    (0x00, 0xff, 0x00),
    (0xff, 0xff, 0x00),
    (0x5c, 0x5c, 0xff),
    (0xff, 0x00, 0xff),
    (0x00, 0xff, 0xff),
    (0xff, 0xff, 0xff),
];

fn rgb(c: vt100::Color) -> Option<(u8, u8, u8)> {
    match c {
        vt100::Color::Default => None,
        vt100::Color::Rgb(r, g, b) => Some((r, g, b)),
        vt100::Color::Idx(i @ 0..=15) => Some(BASIC[usize::from(i)]),
        vt100::Color::Idx(i @ 16..=231) => {
            let i = i - 16;
            let level = |v: u8| if v == 0 { 0 } else { 55 + v * 40 };
            Some((level(i / 36), level(i / 6 % 6), level(i % 6)))
        }
        vt100::Color::Idx(i) => {
            let v = 8 + (i - 232) * 10;
            Some((v, v, v))
        }
    }
}

/// One visible row: runs of cells with one look each, trailing blanks dropped.
fn row_html(screen: &vt100::Screen, row: u16, cols: u16) -> String {
    let mut runs: Vec<(Look, String)> = Vec::new();
    for col in 0..cols {
        let Some(cell) = screen.cell(row, col) else { break };
        if cell.is_wide_continuation() {
            continue;
        }
        let look = Look::of(cell);
        let text = if cell.has_contents() { cell.contents() } else { " " };
        match runs.last_mut() {
            Some((l, t)) if *l == look => t.push_str(text),
            _ => runs.push((look, text.to_owned())),
        }
    }
    // Blank cells with no background at the end of a row are no output.
    while let Some((look, text)) = runs.last_mut() {
        if look.bg.is_some() {
            break;
        }
        let kept = text.trim_end_matches(' ').len();
        text.truncate(kept);
        if !text.is_empty() {
            break;
        }
        runs.pop();
    }
    let mut out = String::new();
    for (look, text) in runs {
        let style = look.style();
        if style.is_empty() {
            escape_into(&text, &mut out);
        } else {
            let _ = write!(out, "<span style=\"{style}\">");
            escape_into(&text, &mut out);
            out.push_str("</span>");
        }
    }
    out
}

/// `text` with `& < > " '` as entities; control characters (which the emulator does not place in
/// cells, but a hostile title might) dropped.
pub fn escape_into(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn colours_and_attributes_become_spans() {
        let mut s = RawScreen::new(5, 40, false);
        s.feed(b"plain \x1b[1;32mgreen\x1b[0m \x1b[38;5;196mx\x1b[38;2;1;2;3my\x1b[7mz\x1b[0m\n");
        let html = s.render();
        assert_eq!(
            html,
            "plain <span style=\"color:#00cd00;font-weight:bold\">green</span> \
             <span style=\"color:#ff0000\">x</span><span style=\"color:#010203\">y</span>\
             <span style=\"color:#101010;background:#010203\">z</span>"
        );
    }

    #[test]
    fn markup_in_output_is_text() {
        let mut s = RawScreen::new(5, 80, false);
        s.feed(b"<script>alert('x')</script> & \"q\"\n");
        assert_eq!(s.render(), "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;");
    }

    #[test]
    fn cursor_movement_and_carriage_returns_are_applied() {
        let mut s = RawScreen::new(5, 20, false);
        s.feed(b"progress 10%\rprogress 99%\nab\x1b[1Dc\n");
        assert_eq!(s.render(), "progress 99%\nac");
        // A PTY's stream carries its own \r.
        let mut t = RawScreen::new(5, 20, true);
        t.feed(b"one\r\ntwo\r\n\x1b[2J\x1b[Hcleared");
        // Erasing the screen (ESC[2J) wipes it in place, as a terminal does: nothing scrolls away.
        assert_eq!(t.render(), "cleared");
    }

    #[test]
    fn scrollback_lines_come_first_and_renders_are_bounded() {
        let mut s = RawScreen::new(3, 20, false);
        for i in 0..2000 {
            s.feed(format!("line {i}\n").as_bytes());
        }
        let html = s.render();
        let lines: Vec<&str> = html.lines().collect();
        assert_eq!(lines.len(), SCROLLBACK + 2, "{}", &html[..200]);
        assert_eq!(lines.last(), Some(&"line 1999"));
        assert_eq!(lines.first(), Some(&"line 1498"));
    }

    proptest! {
        #[test]
        fn garbage_renders_escaped(b in proptest::collection::vec(any::<u8>(), 0..2000)) {
            let mut s = RawScreen::new(6, 30, false);
            s.feed(&b);
            let html = s.render();
            // The only markup is the renderer's own spans.
            let stripped = regex::Regex::new(r#"<span style="[a-z0-9:#;\-]*">|</span>"#).unwrap().replace_all(&html, "");
            prop_assert!(!stripped.contains('<') && !stripped.contains('>'), "{}", html);
        }
    }
}
