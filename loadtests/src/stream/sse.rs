//! A `text/event-stream` reader: bytes in, whole events out. Comments (`: keep-alive`) are
//! counted, not returned; an event's `data:` lines are joined with newlines.

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// `event:`; `message` when absent.
    pub name: String,
    pub id: Option<String>,
    pub data: String,
}

/// Bytes received and not yet a whole event.
#[derive(Debug, Default)]
pub struct SseReader {
    pending: Vec<u8>,
    /// Comment lines seen so far.
    pub comments: u64,
}

impl SseReader {
    /// Takes a chunk as it came off the connection; returns the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.pending.extend_from_slice(chunk);
        let mut events = Vec::new();
        while let Some(end) = block_end(&self.pending) {
            let block: Vec<u8> = self.pending.drain(..end.0 + end.1).collect();
            let text = String::from_utf8_lossy(&block[..end.0]);
            if let Some(event) = self.event_of(&text) {
                events.push(event);
            }
        }
        events
    }

    fn event_of(&mut self, block: &str) -> Option<SseEvent> {
        let mut name = None;
        let mut id = None;
        let mut data: Option<String> = None;
        for line in block.lines() {
            if line.starts_with(':') {
                self.comments += 1;
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "event" => name = Some(value.to_owned()),
                "id" => id = Some(value.to_owned()),
                "data" => match &mut data {
                    Some(data) => {
                        data.push('\n');
                        data.push_str(value);
                    }
                    None => data = Some(value.to_owned()),
                },
                _ => {}
            }
        }
        Some(SseEvent {
            name: name.unwrap_or_else(|| "message".to_owned()),
            id,
            data: data?,
        })
    }
}

/// Where the first event block ends: its length and the length of the blank line after it.
fn block_end(bytes: &[u8]) -> Option<(usize, usize)> {
    let lf = find(bytes, b"\n\n").map(|at| (at, 2));
    let crlf = find(bytes, b"\r\n\r\n").map(|at| (at, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (found, None) | (None, found) => found,
    }
}

fn find(bytes: &[u8], needle: &[u8]) -> Option<usize> {
    bytes
        .windows(needle.len())
        .position(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks_come_out_whole() {
        let mut reader = SseReader::default();
        assert!(reader
            .push(b": keep-alive\n\nevent: lines\nid: 3\nda")
            .is_empty());
        let events = reader.push(b"ta: {\"events\":[]}\n\nevent: job\ndata: {}\n\n");
        assert_eq!(reader.comments, 1);
        assert_eq!(
            events,
            vec![
                SseEvent {
                    name: "lines".to_owned(),
                    id: Some("3".to_owned()),
                    data: "{\"events\":[]}".to_owned()
                },
                SseEvent {
                    name: "job".to_owned(),
                    id: None,
                    data: "{}".to_owned()
                },
            ]
        );
    }

    #[test]
    fn data_lines_join_and_crlf_ends_a_block() {
        let mut reader = SseReader::default();
        let events = reader.push(b"data: a\r\ndata: b\r\n\r\n");
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data, "a\nb");
        assert_eq!(events[0].name, "message");
    }
}
