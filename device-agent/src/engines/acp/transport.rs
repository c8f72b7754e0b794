//! The ACP crate's `Lines` transport over a child's pipes (or this process's stdio): one
//! JSON-RPC message per line, each direction.
//!
//! Built here rather than through the crate's `process`/`stdio` features so the agent keeps
//! spawning the coding agent itself, confined, and so an incoming line has a size limit: a
//! peer that never prints a newline cannot make this process buffer without bound.

use std::io;

use agent_client_protocol::Lines;
use futures_util::{Sink, Stream};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

/// The longest message accepted from the peer (a `fs/write_text_file` carries a whole file).
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// A transport reading messages from `incoming` and writing them to `outgoing`.
pub fn lines<R, W>(
    incoming: R,
    outgoing: W,
) -> Lines<
    impl Sink<String, Error = io::Error> + Send + 'static,
    impl Stream<Item = io::Result<String>> + Send + 'static,
>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let incoming =
        futures_util::stream::unfold(Some(BufReader::new(incoming)), |reader| async move {
            let mut reader = reader?;
            match read_message(&mut reader, MAX_MESSAGE_BYTES).await {
                Ok(Some(line)) => Some((Ok(line), Some(reader))),
                Ok(None) => None,
                // One error ends the stream: what follows a broken message is not trusted.
                Err(err) => Some((Err(err), None)),
            }
        });
    let outgoing = futures_util::sink::unfold(outgoing, |mut writer, line: String| async move {
        let mut bytes = line.into_bytes();
        bytes.push(b'\n');
        writer.write_all(&bytes).await?;
        writer.flush().await?;
        Ok::<_, io::Error>(writer)
    });
    Lines::new(Box::pin(outgoing), Box::pin(incoming))
}

/// The next non-empty line without its line ending, `None` at end of input.
///
/// # Errors
/// A line longer than `limit` bytes, or a read error.
async fn read_message(
    reader: &mut (impl AsyncBufReadExt + Unpin),
    limit: usize,
) -> io::Result<Option<String>> {
    let mut buffer = Vec::new();
    loop {
        buffer.clear();
        let read = (&mut *reader)
            .take(limit as u64 + 1)
            .read_until(b'\n', &mut buffer)
            .await?;
        if read == 0 {
            return Ok(None);
        }
        if buffer.len() > limit && buffer.last() != Some(&b'\n') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a message longer than {limit} bytes"),
            ));
        }
        let text = String::from_utf8_lossy(&buffer);
        let text = text.trim_end_matches(['\n', '\r']);
        if !text.trim().is_empty() {
            return Ok(Some(text.to_owned()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn messages(input: &[u8], limit: usize) -> Vec<Result<String, String>> {
        let mut reader = BufReader::new(input);
        let mut out = Vec::new();
        loop {
            match read_message(&mut reader, limit).await {
                Ok(Some(line)) => out.push(Ok(line)),
                Ok(None) => return out,
                Err(err) => {
                    out.push(Err(err.to_string()));
                    return out;
                }
            }
        }
    }

    #[tokio::test]
    async fn lines_are_split_blank_lines_skipped_and_long_ones_refused() {
        assert_eq!(
            messages(b"{\"a\":1}\r\n\n  \n{\"b\":2}", 100).await,
            [Ok("{\"a\":1}".to_owned()), Ok("{\"b\":2}".to_owned())]
        );
        assert_eq!(
            messages(b"0123456789\nabc\n", 10).await,
            [Ok("0123456789".to_owned()), Ok("abc".to_owned())]
        );
        assert_eq!(
            messages(b"0123456789X\nabc\n", 10).await,
            [Err("a message longer than 10 bytes".to_owned())]
        );
    }
}
