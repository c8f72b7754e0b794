//! A pseudo-terminal for one console command, opened without `unsafe` (rustix: `openpt`,
//! `grantpt`, `unlockpt`, `ptsname`, then the secondary end opened by name, without making it
//! the agent's controlling terminal).
//!
//! The secondary end becomes the command's stdin, stdout and stderr (so programs see a tty:
//! colours, progress bars); the agent reads the primary end, non-blocking, until every
//! secondary copy is closed (Linux then answers `EIO`, taken as the end). Nothing is ever
//! written to the primary end: nothing can be typed into a console command.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::{Mode, OFlags};
use rustix::pty::OpenptFlags;
use rustix::termios::Winsize;
use tokio::sync::mpsc;

/// How long the reading thread waits between two looks at whether it should stop.
const POLL_EVERY: Timespec = Timespec {
    tv_sec: 0,
    tv_nsec: 100_000_000,
};
/// Chunks read ahead of the agent.
const READ_AHEAD: usize = 16;
/// The most one read takes.
const READ_BYTES: usize = 16 * 1024;

/// The agent's end of a pseudo-terminal: a thread of its own reads it (waiting at most
/// [`POLL_EVERY`] at a time, so it ends soon after this is dropped, whoever still holds the
/// other end).
#[derive(Debug)]
pub struct Primary {
    chunks: mpsc::Receiver<Vec<u8>>,
    stop: Arc<AtomicBool>,
}

/// Opens a pseudo-terminal of `cols` × `rows` (each at least 1): the agent's end, and the
/// command's end.
///
/// # Errors
/// When the system has no pseudo-terminal to give.
pub fn open(cols: u16, rows: u16) -> io::Result<(Primary, OwnedFd)> {
    let primary =
        rustix::pty::openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    rustix::pty::grantpt(&primary)?;
    rustix::pty::unlockpt(&primary)?;
    let name = rustix::pty::ptsname(&primary, Vec::new())?;
    let secondary = rustix::fs::open(
        name.as_c_str(),
        OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let size = Winsize {
        ws_row: rows.max(1),
        ws_col: cols.max(1),
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    rustix::termios::tcsetwinsize(&primary, size)?;
    let flags = rustix::fs::fcntl_getfl(&primary)?;
    rustix::fs::fcntl_setfl(&primary, flags | OFlags::NONBLOCK)?;
    let (sender, chunks) = mpsc::channel(READ_AHEAD);
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    std::thread::Builder::new()
        .name("tether-console-pty".to_owned())
        .spawn(move || read_all(&primary, &sender, &stopped))?;
    Ok((Primary { chunks, stop }, secondary))
}

/// Reads `primary` into `sender` until the other end is closed everywhere, the agent's end
/// is dropped, or `stop` is raised.
fn read_all(primary: &OwnedFd, sender: &mpsc::Sender<Vec<u8>>, stop: &AtomicBool) {
    let mut buffer = vec![0u8; READ_BYTES];
    while !stop.load(Ordering::Relaxed) {
        let mut fds = [PollFd::new(primary, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&POLL_EVERY)) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return,
        }
        match rustix::io::read(primary, &mut buffer) {
            // The other end is closed everywhere: Linux says EIO, others 0.
            Ok(0) | Err(rustix::io::Errno::IO) => return,
            Ok(read) => {
                if sender.blocking_send(buffer[..read].to_vec()).is_err() {
                    return;
                }
            }
            Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => {}
            Err(_) => return,
        }
    }
}

impl Primary {
    /// The next output; `None` once no copy of the command's end is open any more.
    pub async fn read(&mut self) -> Option<Vec<u8>> {
        self.chunks.recv().await
    }
}

impl Drop for Primary {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
