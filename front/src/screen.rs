//! One stream's terminal, reduced to lines: a `vte` parser drives a tiny screen model so that what a
//! terminal would finally show is what the model sees.
//!
//! Handled: printable text (UTF-8 split across chunks is joined by the parser; invalid bytes become
//! U+FFFD), `\n` (new line, column 0 — output is written as if through a tty's `onlcr`), `\r`
//! (column 0, later text overwrites), backspace, and the CSI cursor moves and erases progress bars use
//! (`A` up, `B` down, `C` right, `D` left, `E`/`F` next/previous line, `G` column, `K` erase in line,
//! `J` erase below). Every other CSI, OSC, DCS, SOS/PM/APC and C0/C1 control is dropped.
//!
//! Lines leave the screen ("are committed", in order) once they scroll out of a window a redraw could
//! still reach: [`HOLD`] lines while the stream has never moved the cursor up, [`WINDOW`] lines once it
//! has (a multi-line progress display), and all of them when the stream ends. A line longer than [`MAX_CHARS`]
//! keeps its first characters and counts the rest.
//!
//! ```
//! use front::screen::Screen;
//! let mut s = Screen::default();
//! s.feed(b"10%\r50%\r\x1b[32m100%\x1b[0m done\n");
//! s.finish();
//! assert_eq!(s.take_committed(), ["100% done"]);
//! ```

use std::collections::VecDeque;

/// Lines kept open for cursor-up redraws once a stream has used them.
pub const WINDOW: usize = 64;
/// Lines kept open before a stream has moved the cursor up (so its first redraw still reaches them).
pub const HOLD: usize = 8;
/// Characters kept per line; the rest are counted and shown as a suffix.
pub const MAX_CHARS: usize = 8192;

#[derive(Debug, Default)]
struct Line {
    chars: Vec<char>,
    dropped: u64,
}

impl Line {
    fn text(&self) -> String {
        let mut s: String = self.chars.iter().collect();
        let trimmed = s.trim_end_matches(' ').len();
        s.truncate(trimmed);
        if self.dropped > 0 {
            s.push_str(&format!(" … [{} more characters on this line; see the raw output]", self.dropped));
        }
        s
    }
}

/// The screen state the parser acts on.
#[derive(Debug)]
struct Term {
    lines: VecDeque<Line>,
    row: usize,
    col: usize,
    windowed: bool,
    committed: Vec<String>,
}

impl Default for Term {
    fn default() -> Self {
        Term { lines: VecDeque::from([Line::default()]), row: 0, col: 0, windowed: false, committed: Vec::new() }
    }
}

impl Term {
    fn put(&mut self, c: char) {
        let line = &mut self.lines[self.row];
        if self.col < line.chars.len() {
            line.chars[self.col] = c;
        } else if self.col < MAX_CHARS {
            line.chars.resize(self.col, ' ');
            line.chars.push(c);
        } else {
            line.dropped += 1;
        }
        self.col += 1;
    }

    fn newline(&mut self) {
        self.col = 0;
        if self.row + 1 < self.lines.len() {
            self.row += 1;
            return;
        }
        self.lines.push_back(Line::default());
        self.row += 1;
        let keep = if self.windowed { WINDOW } else { HOLD };
        while self.lines.len() > keep {
            let l = self.lines.pop_front().unwrap_or_default();
            self.committed.push(l.text());
            self.row -= 1;
        }
    }

    fn up(&mut self, n: usize) {
        self.windowed = true;
        self.row = self.row.saturating_sub(n);
    }

    fn down(&mut self, n: usize) {
        self.row = (self.row + n).min(self.lines.len() - 1);
    }

    fn erase_line(&mut self, mode: u16) {
        let col = self.col;
        let line = &mut self.lines[self.row];
        match mode {
            0 => {
                line.chars.truncate(col);
                line.dropped = 0;
            }
            1 => line.chars.iter_mut().take(col + 1).for_each(|c| *c = ' '),
            _ => *line = Line::default(),
        }
    }
}

impl vte::Perform for Term {
    fn print(&mut self, c: char) {
        self.put(c);
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' | 0x0b | 0x0c => self.newline(),
            b'\r' => self.col = 0,
            0x08 => self.col = self.col.saturating_sub(1),
            b'\t' => self.put('\t'),
            _ => {}
        }
    }

    fn csi_dispatch(&mut self, params: &vte::Params, intermediates: &[u8], ignore: bool, action: char) {
        if ignore || !intermediates.is_empty() {
            return;
        }
        let first = params.iter().next().and_then(|p| p.first().copied()).unwrap_or(0);
        let n = usize::from(first.max(1));
        match action {
            'A' => self.up(n),
            'B' => self.down(n),
            'C' => self.col += n,
            'D' => self.col = self.col.saturating_sub(n),
            'E' => {
                self.down(n);
                self.col = 0;
            }
            'F' => {
                self.up(n);
                self.col = 0;
            }
            'G' => self.col = n - 1,
            'K' => self.erase_line(first),
            'J' if first == 0 => {
                self.erase_line(0);
                let keep = self.row + 1;
                self.lines.truncate(keep);
            }
            _ => {}
        }
    }
}

/// A stream's parser and screen.
#[derive(Default)]
pub struct Screen {
    parser: vte::Parser,
    term: Term,
}

impl std::fmt::Debug for Screen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Screen").field("term", &self.term).finish_non_exhaustive()
    }
}

impl Screen {
    /// Feed raw bytes of the stream.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.parser.advance(&mut self.term, bytes);
    }

    /// Lines that can no longer change, in order, since the last call.
    pub fn take_committed(&mut self) -> Vec<String> {
        std::mem::take(&mut self.term.committed)
    }

    /// True when committed lines wait to be taken.
    pub fn has_committed(&self) -> bool {
        !self.term.committed.is_empty()
    }

    /// The lines still open (drawn but changeable), without a trailing empty line.
    pub fn open_lines(&self) -> Vec<String> {
        let mut v: Vec<String> = self.term.lines.iter().map(Line::text).collect();
        if self.term.lines.back().is_some_and(|l| l.chars.is_empty() && l.dropped == 0) {
            v.pop();
        }
        v
    }

    /// Another stream wrote: commit every complete line (all but the one being written), so lines of
    /// the two streams keep their arrival order. A later cursor-up cannot reach them any more.
    pub fn settle(&mut self) {
        let t = &mut self.term;
        while t.lines.len() > 1 {
            let l = t.lines.pop_front().unwrap_or_default();
            t.committed.push(l.text());
            t.row = t.row.saturating_sub(1);
        }
    }

    /// The stream ended: commit every open line (a final empty line after `\n` is not a line).
    pub fn finish(&mut self) {
        let open = self.open_lines();
        self.term.committed.extend(open);
        self.term.lines = VecDeque::from([Line::default()]);
        self.term.row = 0;
        self.term.col = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn render(chunks: &[&[u8]]) -> Vec<String> {
        let mut s = Screen::default();
        for c in chunks {
            s.feed(c);
        }
        s.finish();
        s.take_committed()
    }

    #[test]
    fn progress_bar_frames_leave_the_last_one() {
        let mut bar = Vec::new();
        for i in 0..=10_000 {
            bar.extend_from_slice(format!("\rDownloading [{:<20}] {i}/10000", "#".repeat(i * 20 / 10_000)).as_bytes());
        }
        bar.extend_from_slice(b"\n");
        assert_eq!(render(&[&bar]), [format!("Downloading [{}] 10000/10000", "#".repeat(20))]);
    }

    #[test]
    fn colours_osc_and_dcs_are_stripped() {
        let out = render(&[b"\x1b[01;31m\x1b[Kerror\x1b[m\x1b[K: x\n\x1b]0;title\x07plain\n\x1bP1$r0m\x1b\\after\n"]);
        assert_eq!(out, ["error: x", "plain", "after"]);
    }

    #[test]
    fn cursor_up_redraws_keep_the_final_state() {
        let mut s = Vec::new();
        for i in 0..100 {
            if i > 0 {
                s.extend_from_slice(b"\x1b[2A");
            }
            s.extend_from_slice(format!("\x1b[2Kcrate a {i}%\n\x1b[2Kcrate b {i}%\n").as_bytes());
        }
        assert_eq!(render(&[&s]), ["crate a 99%", "crate b 99%"]);
    }

    #[test]
    fn utf8_split_across_chunks_is_whole_and_invalid_bytes_are_replaced() {
        let euro = "€".as_bytes();
        assert_eq!(render(&[&[b'a', euro[0]], &[euro[1], euro[2], b'\n']]), ["a€"]);
        assert_eq!(render(&[b"ok\xff\xfeok\n"]), ["ok\u{FFFD}\u{FFFD}ok"]);
    }

    #[test]
    fn lines_are_committed_once_out_of_reach() {
        let mut s = Screen::default();
        let many: String = (0..HOLD + 2).map(|i| format!("{i}\n")).collect();
        s.feed(many.as_bytes());
        s.feed(b"tw");
        assert_eq!(s.take_committed(), ["0", "1", "2"]);
        assert_eq!(s.open_lines().last().map(String::as_str), Some("tw"));
        s.finish();
        assert_eq!(s.take_committed().len(), HOLD);
        assert!(s.open_lines().is_empty());
    }

    #[test]
    fn overlong_lines_are_cut_and_counted() {
        let out = render(&[&vec![b'x'; MAX_CHARS + 10]]);
        assert!(out[0].starts_with(&"x".repeat(MAX_CHARS)) && out[0].contains("10 more characters"));
    }

    proptest! {
        #[test]
        fn garbage_never_panics_and_stays_bounded(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..30)) {
            let mut s = Screen::default();
            for c in &chunks {
                s.feed(c);
                prop_assert!(s.term.lines.len() <= WINDOW + 1);
            }
            s.finish();
            for l in s.take_committed() {
                prop_assert!(!l.contains('\x1b'));
            }
        }
    }
}
