//! Pseudo-terminals for commands run with a terminal (`kubectl exec -t`) and for containers
//! whose spec has `tty: true`: a pty pair whose slave a command gets as its controlling
//! terminal (util-linux `setsid --ctty`), or a container's process (or runtime) as its
//! standard streams; window sizes are set on the master.
//!
//! # Caveats
//! - In a container the command's terminal is the runtime's (`runc exec --tty` in the
//!   foreground), relayed by the runtime to this one: two terminals in a row. runc takes
//!   `--console-socket` (the container's terminal handed over) only with `--detach`, which
//!   loses the command's exit status.

use std::os::fd::OwnedFd;

use rustix::pty::OpenptFlags;
use rustix::termios::Winsize;

/// Errors of terminals.
#[derive(Debug, thiserror::Error)]
pub enum TerminalError {
    /// No pseudo-terminal could be opened.
    #[error("cannot open a pseudo-terminal")]
    Open(#[source] std::io::Error),
}

/// A pseudo-terminal pair: the master this kubelet keeps, the slave a command gets as its
/// standard streams.
pub struct Pty {
    /// The master side.
    pub master: OwnedFd,
    /// The slave side.
    pub slave: OwnedFd,
}

/// Opens a pseudo-terminal pair (both close-on-exec; a slave passed as a standard stream
/// is duplicated onto it, which the child keeps).
///
/// # Errors
/// When the system has no pseudo-terminal to give.
pub fn open_pty() -> Result<Pty, TerminalError> {
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let open = || -> rustix::io::Result<Pty> {
        let master = rustix::pty::openpt(flags)?;
        rustix::pty::grantpt(&master)?;
        rustix::pty::unlockpt(&master)?;
        let slave = rustix::pty::ioctl_tiocgptpeer(&master, flags)?;
        Ok(Pty { master, slave })
    };
    open().map_err(|e| TerminalError::Open(e.into()))
}

/// Sets the window size of the terminal whose master (or slave) is `fd`: `width` columns,
/// `height` rows.
///
/// # Errors
/// When `fd` is not a terminal.
pub fn resize(fd: &OwnedFd, width: u16, height: u16) -> std::io::Result<()> {
    let size = Winsize {
        ws_row: height,
        ws_col: width,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    rustix::termios::tcsetwinsize(fd, size).map_err(Into::into)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pty_pair_takes_a_window_size_set_on_its_master() {
        let pty = open_pty().unwrap_or_else(|e| panic!("{e}"));
        resize(&pty.master, 120, 40).unwrap_or_else(|e| panic!("{e}"));
        let size = rustix::termios::tcgetwinsize(&pty.slave).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((size.ws_col, size.ws_row), (120, 40));
    }
}
