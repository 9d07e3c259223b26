//! Outgoing connections from a chosen loopback address: how a node's or a pod's traffic
//! reaches the API server from its own IP, so that the server (and its audit) can tell who
//! is asking.

use std::net::{IpAddr, SocketAddr};

use tokio::net::{TcpSocket, TcpStream};

/// Connects to `upstream` from `source` (any free port), with Nagle's algorithm off.
///
/// # Errors
/// When the socket cannot be bound to `source` or the connection fails.
pub(crate) async fn connect_from(
    source: IpAddr,
    upstream: SocketAddr,
) -> std::io::Result<TcpStream> {
    let socket = match source {
        IpAddr::V4(_) => TcpSocket::new_v4()?,
        IpAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.bind(SocketAddr::new(source, 0))?;
    let stream = socket.connect(upstream).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}
