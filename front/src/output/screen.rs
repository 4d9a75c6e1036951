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
//! use front::output::screen::Screen;
//! let mut s = Screen::default();
//! s.feed(b"10%\r50%\r\x1b[32m100%\x1b[0m done\n");
//! s.finish();
//! assert_eq!(s.take_committed(), ["100% done"]);
//! ```

use policies::redaction::Redactor;
use std::collections::VecDeque;

/// Lines kept open for cursor-up redraws once a stream has used them.
pub const WINDOW: usize = 64;
/// Lines kept open before a stream has moved the cursor up (so its first redraw still reaches them).
pub const HOLD: usize = 8;
/// Characters kept per line; the rest are counted and shown as a suffix.
pub const MAX_CHARS: usize = 8192;

/// Characters past [`MAX_CHARS`] kept (not shown) so that a secret straddling the cut is still recognised.
const OVERFLOW_SCAN: usize = 512;
/// Lines shorter than this hold no secret the redactor knows (its shortest shapes are longer).
const MIN_SECRET: usize = 10;

#[derive(Debug, Default)]
struct Line {
    chars: Vec<char>,
    dropped: u64,
    /// Per cell, the placeholder of a secret the cell held in an earlier state of the line (empty:
    /// none). A `\r` or cursor move followed by shorter text (a progress-style rewrite) leaves the rest
    /// of a secret on screen without the prefix that made it recognisable: those cells stay marked until
    /// they are overwritten themselves, and render as the placeholder.
    secret: Vec<Option<&'static str>>,
    /// Written since the last snapshot.
    dirty: bool,
    /// The line as it was when the cursor last moved back over it (valid while `pending`): if a later
    /// state keeps any of its cells, it is scanned for secrets then ([`Line::resolve`]). A rewrite that
    /// covers all of it (a progress bar's next frame) costs no scan.
    snap: Vec<char>,
    pending: bool,
    /// The cells written since the snapshot, `lo..hi`: one contiguous range, as every move resolves the
    /// snapshot (empty when `lo >= hi`).
    lo: usize,
    hi: usize,
    /// The first [`OVERFLOW_SCAN`] characters cut off past [`MAX_CHARS`].
    overflow: String,
}

impl Line {
    /// The cursor moved onto or back over this line: settle the last snapshot, take a new one if the
    /// line changed since.
    fn moved(&mut self) {
        self.resolve(None);
        if self.dirty {
            self.snap.clone_from(&self.chars);
            self.pending = true;
            (self.lo, self.hi) = (usize::MAX, 0);
            self.dirty = false;
        }
    }

    /// The cell at `col` gets new text: it no longer holds a secret.
    #[inline]
    fn write(&mut self, col: usize) {
        if !self.secret.is_empty() {
            if let Some(cell) = self.secret.get_mut(col) {
                *cell = None;
            }
        }
        self.lo = self.lo.min(col);
        self.hi = self.hi.max(col + 1);
        self.dirty = true;
    }

    /// Settle the snapshot before the cells `erased` (if any) are cleared: when some of its cells are
    /// still shown, mark those that belonged to a secret in it.
    fn resolve(&mut self, erased: Option<(usize, usize)>) {
        if !std::mem::take(&mut self.pending) {
            return;
        }
        let (lo, hi, len) = (self.lo, self.hi, self.snap.len().min(self.chars.len()));
        let covered = |i: usize| (lo..hi).contains(&i) || erased.is_some_and(|(a, z)| (a..z).contains(&i));
        let whole = |a: usize, z: usize| a == 0 && z >= len;
        if len < MIN_SECRET || whole(lo, hi) || erased.is_some_and(|(a, z)| whole(a, z)) || (0..len).all(covered) {
            return;
        }
        let text: String = self.snap.iter().collect();
        let spans = Redactor::builtin().secret_spans(&text);
        if spans.is_empty() {
            return;
        }
        let mut cells = vec![None; self.snap.len()];
        mark(&mut cells, &text, &spans);
        self.secret.resize(self.secret.len().max(len), None);
        for (i, ph) in cells.into_iter().enumerate().take(len) {
            if ph.is_some() && !covered(i) {
                self.secret[i] = ph;
            }
        }
    }

    fn text(&self) -> String {
        let mut mask = std::borrow::Cow::Borrowed(&self.secret);
        if self.pending {
            let mut settled =
                Line { snap: self.snap.clone(), pending: true, lo: self.lo, hi: self.hi, ..Line::default() };
            settled.chars.clone_from(&self.chars);
            settled.secret.clone_from(&self.secret);
            settled.resolve(None);
            mask = std::borrow::Cow::Owned(settled.secret);
        }
        if self.dropped > 0 && self.chars.len() + self.overflow.len() >= MIN_SECRET {
            // The line was cut: look at the cut-off start too, so a secret straddling the cut is hidden.
            let joined: String = self.chars.iter().copied().chain(self.overflow.chars()).collect();
            let spans = Redactor::builtin().secret_spans(&joined);
            if !spans.is_empty() {
                let m = mask.to_mut();
                m.resize(self.chars.len() + self.overflow.chars().count(), None);
                mark(m, &joined, &spans);
                m.truncate(self.chars.len());
            }
        }
        let mut s = String::with_capacity(self.chars.len());
        let mut last: Option<&str> = None;
        for (i, c) in self.chars.iter().enumerate() {
            match mask.get(i).copied().flatten() {
                Some(ph) if last == Some(ph) => {}
                Some(ph) => {
                    s.push_str(&format!("[redacted:{ph}]"));
                    last = Some(ph);
                }
                None => {
                    s.push(*c);
                    last = None;
                }
            }
        }
        let trimmed = s.trim_end_matches(' ').len();
        s.truncate(trimmed);
        if self.dropped > 0 {
            s.push_str(&format!(" … [{} more characters on this line; see the raw output]", self.dropped));
        }
        s
    }
}

/// Mark the cells (characters of `text`) that `spans` (byte ranges of `text`) cover.
fn mark(cells: &mut [Option<&'static str>], text: &str, spans: &[(std::ops::Range<usize>, &'static str)]) {
    let starts: Vec<usize> = text.char_indices().map(|(b, _)| b).collect();
    for (range, ph) in spans {
        let (a, z) = (starts.partition_point(|&b| b < range.start), starts.partition_point(|&b| b < range.end));
        for cell in cells.iter_mut().take(z).skip(a) {
            *cell = Some(ph);
        }
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
    /// An escape sequence ended (a dispatch) since this was last cleared.
    seq_ended: bool,
    /// Inside a DCS string (between `hook` and `unhook`).
    in_dcs: bool,
}

impl Default for Term {
    fn default() -> Self {
        Term {
            lines: VecDeque::from([Line::default()]),
            row: 0,
            col: 0,
            windowed: false,
            committed: Vec::new(),
            seq_ended: false,
            in_dcs: false,
        }
    }
}

impl Term {
    fn put(&mut self, c: char) {
        let line = &mut self.lines[self.row];
        if self.col < line.chars.len() {
            line.write(self.col);
            line.chars[self.col] = c;
        } else if self.col < MAX_CHARS {
            line.write(self.col);
            line.chars.resize(self.col, ' ');
            line.chars.push(c);
        } else {
            line.dropped += 1;
            if line.overflow.len() < OVERFLOW_SCAN {
                line.overflow.push(c);
            }
        }
        self.col += 1;
    }

    fn newline(&mut self) {
        self.col = 0;
        if self.row + 1 < self.lines.len() {
            self.row += 1;
            self.lines[self.row].moved();
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
        self.lines[self.row].moved();
    }

    fn down(&mut self, n: usize) {
        self.row = (self.row + n).min(self.lines.len() - 1);
        self.lines[self.row].moved();
    }

    /// The cursor moves within its line (`\r`, backspace, `C`, `D`, `G`).
    fn moved(&mut self) {
        self.lines[self.row].moved();
    }

    fn erase_line(&mut self, mode: u16) {
        let col = self.col;
        let line = &mut self.lines[self.row];
        // A secret erased in part must not show its rest: settle the snapshot with the erased cells.
        let erased = match mode {
            0 => (col, usize::MAX),
            1 => (0, col + 1),
            _ => (0, usize::MAX),
        };
        line.resolve(Some(erased));
        match mode {
            0 => {
                line.chars.truncate(col);
                line.secret.truncate(col);
                line.dropped = 0;
                line.overflow.clear();
            }
            1 => {
                line.chars.iter_mut().take(col + 1).for_each(|c| *c = ' ');
                line.secret.iter_mut().take(col + 1).for_each(|c| *c = None);
            }
            _ => *line = Line::default(),
        }
    }
}

impl Term {
    /// Printable ASCII (no controls) at the cursor, in bulk.
    fn put_ascii(&mut self, seg: &[u8]) {
        let line = &mut self.lines[self.row];
        if self.col < line.chars.len() {
            seg.iter().for_each(|&b| self.put(char::from(b)));
            return;
        }
        // At or past the end: pad to the cursor (as `put` does), append what fits, count the rest.
        let take = seg.len().min(MAX_CHARS.saturating_sub(self.col));
        if take > 0 {
            line.chars.resize(self.col, ' ');
        }
        line.chars.extend(seg[..take].iter().map(|&b| char::from(b)));
        line.dropped += (seg.len() - take) as u64;
        let room = OVERFLOW_SCAN.saturating_sub(line.overflow.len()).min(seg.len() - take);
        line.overflow.extend(seg[take..take + room].iter().map(|&b| char::from(b)));
        if take > 0 {
            line.write(self.col);
            line.write(self.col + take - 1);
        }
        self.col += seg.len();
    }

    /// Printable ASCII and `\n` only, with the parser in its ground state: what the parser would do.
    fn plain(&mut self, bytes: &[u8]) {
        let mut start = 0;
        for nl in memchr::memchr_iter(b'\n', bytes) {
            self.put_ascii(&bytes[start..nl]);
            self.newline();
            start = nl + 1;
        }
        self.put_ascii(&bytes[start..]);
    }
}

impl vte::Perform for Term {
    fn print(&mut self, c: char) {
        self.put(c);
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' | 0x0b | 0x0c => self.newline(),
            b'\r' => {
                self.moved();
                self.col = 0;
            }
            0x08 => {
                self.moved();
                self.col = self.col.saturating_sub(1);
            }
            b'\t' => self.put('\t'),
            _ => {}
        }
    }

    fn esc_dispatch(&mut self, _intermediates: &[u8], _ignore: bool, _byte: u8) {
        self.seq_ended = true;
    }

    fn osc_dispatch(&mut self, _params: &[&[u8]], _bell_terminated: bool) {
        self.seq_ended = true;
    }

    fn hook(&mut self, _params: &vte::Params, _intermediates: &[u8], _ignore: bool, _action: char) {
        self.in_dcs = true;
    }

    fn unhook(&mut self) {
        self.in_dcs = false;
        self.seq_ended = true;
    }

    fn csi_dispatch(&mut self, params: &vte::Params, intermediates: &[u8], ignore: bool, action: char) {
        self.seq_ended = true;
        if ignore || !intermediates.is_empty() {
            return;
        }
        let first = params.iter().next().and_then(|p| p.first().copied()).unwrap_or(0);
        let n = usize::from(first.max(1));
        match action {
            'A' => self.up(n),
            'B' => self.down(n),
            'C' => {
                self.moved();
                self.col += n;
            }
            'D' => {
                self.moved();
                self.col = self.col.saturating_sub(n);
            }
            'E' => {
                self.down(n);
                self.col = 0;
            }
            'F' => {
                self.up(n);
                self.col = 0;
            }
            'G' => {
                self.moved();
                self.col = n - 1;
            }
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
pub struct Screen {
    parser: vte::Parser,
    term: Term,
    /// The parser is known to be in its ground state (outside any escape sequence and UTF-8
    /// character), so plain text may bypass it. False means "not known", never "known not".
    ground: bool,
    /// The stream's last bytes (up to 3, the longest unfinished UTF-8 character): whether a chunk
    /// starts inside a character split by the previous chunks.
    tail: [u8; 3],
    tail_len: u8,
}

impl Screen {
    /// An estimate of the heap bytes the screen holds (its lines, cells and committed lines).
    pub fn held_bytes(&self) -> usize {
        use std::mem::size_of;
        let t = &self.term;
        let line = |l: &Line| {
            (l.chars.capacity() + l.snap.capacity()) * size_of::<char>()
                + l.secret.capacity() * size_of::<Option<&str>>()
                + l.overflow.capacity()
        };
        t.lines.capacity() * size_of::<Line>()
            + t.lines.iter().map(line).sum::<usize>()
            + t.committed.capacity() * size_of::<String>()
            + t.committed.iter().map(String::capacity).sum::<usize>()
    }
}

impl Default for Screen {
    fn default() -> Self {
        Screen { parser: vte::Parser::default(), term: Term::default(), ground: true, tail: [0; 3], tail_len: 0 }
    }
}

/// Printable ASCII and `\n` only.
fn is_plain(bytes: &[u8]) -> bool {
    // Branch-free per block so the compiler vectorizes it.
    bytes.chunks(64).all(|c| c.iter().fold(true, |ok, &b| ok & (((0x20..0x7f).contains(&b)) | (b == b'\n'))))
}

/// True when `bytes` ends inside a UTF-8 character.
fn ends_mid_char(bytes: &[u8]) -> bool {
    for back in 1..=bytes.len().min(3) {
        let b = bytes[bytes.len() - back];
        if b & 0xC0 == 0x80 {
            continue;
        }
        let need = match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        return need > back;
    }
    false
}

impl std::fmt::Debug for Screen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Screen").field("term", &self.term).finish_non_exhaustive()
    }
}

impl Screen {
    /// Feed raw bytes of the stream. Plain text (printable ASCII and newlines) with the parser in its
    /// ground state takes a bulk path that does exactly what the parser would; everything else goes
    /// through the parser. Ground is proven, not assumed: after the last ESC of a chunk a sequence must
    /// have ended (a dispatch, outside any DCS), and the chunk must not end inside a UTF-8 character.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.ground && is_plain(bytes) {
            self.term.plain(bytes);
            self.keep_tail(bytes);
            return;
        }
        let ground_before = self.ground;
        // A chunk that continues a split character goes to the parser whole: vte's handling of a
        // split character depends on where its input is cut, so a cut of ours would change the text.
        let continues_char = ends_mid_char(&self.tail[..usize::from(self.tail_len)]);
        self.keep_tail(bytes);
        match memchr::memrchr(0x1b, bytes) {
            _ if continues_char => {
                self.parser.advance(&mut self.term, bytes);
                self.ground = false;
            }
            Some(p) => {
                // The ESC itself may end an OSC string (a dispatch) while starting a new sequence:
                // only a dispatch after it proves the ground state.
                self.parser.advance(&mut self.term, &bytes[..=p]);
                self.term.seq_ended = false;
                self.parser.advance(&mut self.term, &bytes[p + 1..]);
                self.ground = self.term.seq_ended && !self.term.in_dcs;
            }
            None => {
                self.term.seq_ended = false;
                self.parser.advance(&mut self.term, bytes);
                let cancels = bytes.iter().any(|&b| b == 0x18 || b == 0x1a);
                self.ground = (ground_before || self.term.seq_ended) && !self.term.in_dcs && !cancels;
            }
        }
        if ends_mid_char(&self.tail[..usize::from(self.tail_len)]) {
            self.ground = false;
        }
    }

    /// Remember the stream's last (up to 3) bytes after `bytes`.
    fn keep_tail(&mut self, bytes: &[u8]) {
        let mut all = [0u8; 6];
        let old = usize::from(self.tail_len);
        all[..old].copy_from_slice(&self.tail[..old]);
        let new = bytes.len().min(3);
        all[old..old + new].copy_from_slice(&bytes[bytes.len() - new..]);
        let n = old + new;
        let keep = n.min(3);
        self.tail[..keep].copy_from_slice(&all[n - keep..n]);
        self.tail_len = keep as u8;
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

    /// How many of [`Screen::open_lines`] are complete (a newline ended them): all but the line being
    /// written.
    pub fn complete_open_lines(&self) -> usize {
        self.term.lines.len().saturating_sub(1)
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
    fn a_secret_whose_prefix_a_carriage_return_overwrote_stays_redacted() {
        let token = "ghp_0123456789abcdefghijABCDEFGHIJ0123456789";
        let out = render(&[format!("{token}\rXXXX\n").as_bytes()]);
        assert_eq!(out, ["XXXX[redacted:github-token]"]);
        let out = render(&[format!("key {token}\x1b[40D\x1b[K done\n").as_bytes()]);
        assert!(!out[0].contains("0123456789abcdefghij"), "{out:?}");
        let out = render(&[format!("{token}\nnext\n\x1b[2AXXXX\n").as_bytes()]);
        assert_eq!(out[0], "XXXX[redacted:github-token]", "a cursor-up rewrite: {out:?}");
        let out = render(&[format!("{token}\r").as_bytes(), b"XX", b"\r", b"YYYY YYYY\n"]);
        assert_eq!(out, ["YYYY YYYY[redacted:github-token]"], "two rewrites, each shorter than the token");
        let out = render(&[b"50% \r100% done\n"]);
        assert_eq!(out, ["100% done"], "plain progress lines are untouched");
    }

    #[test]
    fn a_secret_straddling_the_line_cut_is_redacted() {
        let token = "ghp_0123456789abcdefghijABCDEFGHIJ0123456789";
        for through_parser in [false, true] {
            let line = format!("{} {token} tail\n", "x".repeat(MAX_CHARS - 10));
            let out =
                if !through_parser { render(&[line.as_bytes()]) } else { render(&[format!("é{line}").as_bytes()]) };
            assert!(!out[0].contains("ghp_01234"), "{}", &out[0][out[0].len() - 120..]);
            assert!(out[0].contains("[redacted:github-token] … ["), "{}", &out[0][out[0].len() - 120..]);
        }
    }

    #[test]
    fn overlong_lines_are_cut_and_counted() {
        let out = render(&[&vec![b'x'; MAX_CHARS + 10]]);
        assert!(out[0].starts_with(&"x".repeat(MAX_CHARS)) && out[0].contains("10 more characters"));
    }

    /// The bulk path must render exactly like the parser alone, whatever the chunking.
    fn parser_only(chunks: &[Vec<u8>]) -> Vec<String> {
        let mut s = Screen::default();
        for c in chunks {
            s.parser.advance(&mut s.term, c);
        }
        s.finish();
        s.take_committed()
    }

    #[test]
    fn a_chunk_continuing_a_split_character_is_not_cut_at_its_escape() {
        // A C1 control split across chunks, then ESC: cutting the second chunk after its ESC made vte
        // swallow the ESC.
        let chunks = [vec![194], vec![128, 27, 128, 80]];
        let mut s = Screen::default();
        for c in &chunks {
            s.feed(c);
        }
        s.finish();
        assert_eq!(s.take_committed(), parser_only(&chunks));
    }

    proptest! {
        #[test]
        fn the_bulk_path_matches_the_parser(chunks in proptest::collection::vec(
            proptest::collection::vec(prop_oneof![
                4 => 0x20u8..0x7f, 2 => Just(b'\n'), 1 => Just(0x1b), 1 => Just(b'['), 1 => Just(b'\r'),
                1 => Just(b']'), 1 => Just(0x07), 1 => Just(b'P'), 1 => Just(b'\\'), 1 => 0x80u8..=0xff,
                1 => Just(b'A'), 1 => Just(b'm'), 1 => Just(0x18),
            ], 0..60), 0..30)) {
            let mut s = Screen::default();
            for c in &chunks {
                s.feed(c);
            }
            s.finish();
            prop_assert_eq!(s.take_committed(), parser_only(&chunks));
        }

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
