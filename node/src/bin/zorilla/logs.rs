//! Printing a job's logs as they come: each chunk to stdout or stderr as
//! the worker wrote it, optionally with its rank before each line, or as
//! JSON lines.

use std::io::Write;

use zorilla_node::protocol::LogChunk;

use crate::show::out;

/// Prints log chunks: stdout to stdout, stderr to stderr, optionally with
/// each line prefixed by its rank, or as JSON lines.
pub(crate) struct LogPrinter {
    pub(crate) ranks: bool,
    pub(crate) json: bool,
    /// Partial lines per (rank, stderr), when prefixing.
    pub(crate) partial: std::collections::BTreeMap<(u32, bool), Vec<u8>>,
}

impl LogPrinter {
    pub(crate) fn new(ranks: bool, json: bool) -> Self {
        LogPrinter {
            ranks,
            json,
            partial: Default::default(),
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
        if !self.ranks {
            write_to(chunk.stderr, &chunk.data);
            return;
        }
        let buf = self.partial.entry((chunk.rank, chunk.stderr)).or_default();
        buf.extend_from_slice(&chunk.data);
        while let Some(end) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            let mut out = format!("[{}] ", chunk.rank).into_bytes();
            out.extend_from_slice(&line);
            write_to(chunk.stderr, &out);
        }
    }

    pub(crate) fn flush(&mut self) {
        for ((rank, stderr), rest) in std::mem::take(&mut self.partial) {
            if !rest.is_empty() {
                let mut out = format!("[{rank}] ").into_bytes();
                out.extend_from_slice(&rest);
                out.push(b'\n');
                write_to(stderr, &out);
            }
        }
        let _ = std::io::stdout().flush();
    }
}

pub(crate) fn write_to(stderr: bool, data: &[u8]) {
    let _ = if stderr {
        std::io::stderr().write_all(data)
    } else {
        std::io::stdout().write_all(data)
    };
}
