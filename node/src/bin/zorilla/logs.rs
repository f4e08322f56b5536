//! Printing a job's logs as they come: each rank's lines whole (a rank's
//! piece of a line is held until the rest of it comes, as `mpirun` does),
//! stdout to stdout and stderr to stderr, optionally with its rank before
//! each line, or as JSON lines.

use std::collections::BTreeMap;
use std::io::Write;

use zorilla_node::protocol::LogChunk;

use crate::show::out;

/// The most of one rank's line on one stream held while waiting for its
/// end: a longer line is shown in pieces of this size, each on a line of
/// its own.
pub(crate) const MAX_HELD_LINE: usize = 16 * 1024;

/// The most held for all ranks together (a job may have thousands): past
/// it, every held piece is shown at once, each on a line of its own.
pub(crate) const MAX_HELD: usize = 1024 * 1024;

/// One whole line of one rank's stream, ending in a newline.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Line {
    pub(crate) rank: u32,
    pub(crate) stderr: bool,
    pub(crate) text: Vec<u8>,
}

/// Puts the lines of each rank back together from the chunks its worker
/// sent, which may end anywhere in a line, and which arrive mixed with
/// the other ranks' chunks. Each (rank, stream) has its own held piece; a
/// piece ends as a line at its newline, when it grows to
/// [`MAX_HELD_LINE`], when all pieces together pass [`MAX_HELD`], or when
/// its rank ends ([`LineAssembler::end_rank`]) or the log does
/// ([`LineAssembler::finish`]). Pure: chunks in, lines out.
#[derive(Debug, Default)]
pub(crate) struct LineAssembler {
    held: BTreeMap<(u32, bool), Vec<u8>>,
    /// The bytes in `held`, together.
    held_bytes: usize,
}

impl LineAssembler {
    /// Takes in `chunk`; returns the lines it completed, in order.
    pub(crate) fn push(&mut self, chunk: &LogChunk) -> Vec<Line> {
        let key = (chunk.rank, chunk.stderr);
        let mut lines = Vec::new();
        let mut piece = self.held.remove(&key).unwrap_or_default();
        self.held_bytes -= piece.len();
        for &byte in &chunk.data {
            piece.push(byte);
            if byte == b'\n' || piece.len() >= MAX_HELD_LINE {
                lines.push(line(key, std::mem::take(&mut piece)));
            }
        }
        if !piece.is_empty() {
            self.held_bytes += piece.len();
            self.held.insert(key, piece);
        }
        if self.held_bytes > MAX_HELD {
            lines.extend(self.finish());
        }
        lines
    }

    /// The pieces `rank` still holds, as lines: it ended, nothing more of
    /// those lines will come.
    pub(crate) fn end_rank(&mut self, rank: u32) -> Vec<Line> {
        [false, true]
            .into_iter()
            .filter_map(|stderr| self.held.remove(&(rank, stderr)).map(|p| (stderr, p)))
            .map(|(stderr, piece)| {
                self.held_bytes -= piece.len();
                line((rank, stderr), piece)
            })
            .collect()
    }

    /// Every piece still held, as lines: the log is over.
    pub(crate) fn finish(&mut self) -> Vec<Line> {
        self.held_bytes = 0;
        std::mem::take(&mut self.held)
            .into_iter()
            .map(|(key, piece)| line(key, piece))
            .collect()
    }
}

/// A line of `piece`, with the newline it may lack.
fn line((rank, stderr): (u32, bool), mut text: Vec<u8>) -> Line {
    if text.last() != Some(&b'\n') {
        text.push(b'\n');
    }
    Line { rank, stderr, text }
}

/// Prints log chunks: each rank's lines whole, stdout to stdout, stderr
/// to stderr, optionally with each line prefixed by its rank; or the
/// chunks as they came as JSON lines.
pub(crate) struct LogPrinter {
    ranks: bool,
    json: bool,
    lines: LineAssembler,
}

impl LogPrinter {
    pub(crate) fn new(ranks: bool, json: bool) -> Self {
        LogPrinter {
            ranks,
            json,
            lines: LineAssembler::default(),
        }
    }

    pub(crate) fn print(&mut self, chunk: &LogChunk) {
        if self.json {
            let line = serde_json::json!({
                "rank": chunk.rank,
                "stream": if chunk.stderr { "stderr" } else { "stdout" },
                "data": String::from_utf8_lossy(&chunk.data),
            });
            out(&format!("{line}\n"));
            return;
        }
        let lines = self.lines.push(chunk);
        self.write(lines);
    }

    /// Shows what `rank` still holds: it ended.
    pub(crate) fn end_rank(&mut self, rank: u32) {
        let lines = self.lines.end_rank(rank);
        self.write(lines);
    }

    /// Shows everything still held: the log is over.
    pub(crate) fn flush(&mut self) {
        let lines = self.lines.finish();
        self.write(lines);
        let _ = std::io::stdout().flush();
    }

    fn write(&self, lines: Vec<Line>) {
        for line in lines {
            if self.ranks {
                let mut out = format!("[{}] ", line.rank).into_bytes();
                out.extend_from_slice(&line.text);
                write_to(line.stderr, &out);
            } else {
                write_to(line.stderr, &line.text);
            }
        }
    }
}

pub(crate) fn write_to(stderr: bool, data: &[u8]) {
    let _ = if stderr {
        std::io::stderr().write_all(data)
    } else {
        std::io::stdout().write_all(data)
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(rank: u32, stderr: bool, data: &str) -> LogChunk {
        LogChunk {
            rank,
            stderr,
            data: data.as_bytes().to_vec(),
        }
    }

    fn texts(lines: &[Line]) -> Vec<(u32, bool, String)> {
        lines
            .iter()
            .map(|l| (l.rank, l.stderr, String::from_utf8_lossy(&l.text).into()))
            .collect()
    }

    /// The case: four ranks' lines cut anywhere and mixed come out
    /// whole, each when its newline comes.
    #[test]
    fn mixed_pieces_of_ranks_lines_come_out_whole() {
        let mut a = LineAssembler::default();
        let mut shown = Vec::new();
        for (rank, piece) in [
            (1, "Hello world from processor w1, rank 1 out of 4"),
            (0, "Hello world from processor w0, rank 0 out of 4"),
            (2, "Hello world from processor w2, rank 2"),
            (
                3,
                "Hello world from processor w3, rank 3 out of 4 processors\nbye 3",
            ),
            (1, " processors\n"),
            (2, " out of 4 processors\n"),
            (0, " processors\n"),
        ] {
            shown.extend(a.push(&chunk(rank, false, piece)));
        }
        shown.extend(a.finish());
        let expected = [
            (
                3,
                "Hello world from processor w3, rank 3 out of 4 processors\n",
            ),
            (
                1,
                "Hello world from processor w1, rank 1 out of 4 processors\n",
            ),
            (
                2,
                "Hello world from processor w2, rank 2 out of 4 processors\n",
            ),
            (
                0,
                "Hello world from processor w0, rank 0 out of 4 processors\n",
            ),
            (3, "bye 3\n"),
        ];
        assert_eq!(
            texts(&shown),
            expected
                .map(|(rank, text)| (rank, false, text.to_owned()))
                .to_vec()
        );
    }

    /// A rank's stdout and stderr are lines of their own: a piece on one
    /// does not end with a newline on the other.
    #[test]
    fn stdout_and_stderr_are_assembled_apart() {
        let mut a = LineAssembler::default();
        assert!(a.push(&chunk(0, false, "out ")).is_empty());
        assert_eq!(
            texts(&a.push(&chunk(0, true, "err\n"))),
            [(0, true, "err\n".to_owned())]
        );
        assert_eq!(
            texts(&a.push(&chunk(0, false, "line\n"))),
            [(0, false, "out line\n".to_owned())]
        );
    }

    /// A rank that ended shows what it held, as a line, and only its own.
    #[test]
    fn a_rank_that_ended_shows_its_last_piece() {
        let mut a = LineAssembler::default();
        assert!(a.push(&chunk(0, false, "no newline")).is_empty());
        assert!(a.push(&chunk(1, false, "other")).is_empty());
        assert_eq!(
            texts(&a.end_rank(0)),
            [(0, false, "no newline\n".to_owned())]
        );
        assert!(a.end_rank(0).is_empty());
        assert_eq!(texts(&a.finish()), [(1, false, "other\n".to_owned())]);
        assert!(a.finish().is_empty());
    }

    /// A line without end is shown in pieces of [`MAX_HELD_LINE`], never
    /// held whole.
    #[test]
    fn a_long_line_is_shown_in_bounded_pieces() {
        let mut a = LineAssembler::default();
        let long = "x".repeat(MAX_HELD_LINE * 2 + 10);
        let lines = a.push(&chunk(0, false, &long));
        assert_eq!(lines.len(), 2);
        assert!(lines.iter().all(|l| l.text.len() == MAX_HELD_LINE + 1));
        assert_eq!(a.held_bytes, 10);
        assert_eq!(a.finish()[0].text.len(), 11);
    }

    /// Many ranks each holding a piece are held to [`MAX_HELD`] together.
    #[test]
    fn all_ranks_together_hold_a_bounded_amount() {
        let mut a = LineAssembler::default();
        let piece = "y".repeat(MAX_HELD_LINE - 1);
        let mut shown = 0;
        for rank in 0..200 {
            shown += a.push(&chunk(rank, false, &piece)).len();
            assert!(a.held_bytes <= MAX_HELD);
        }
        assert!(shown > 0);
        assert_eq!(shown + a.finish().len(), 200);
    }
}
