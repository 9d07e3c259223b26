//! The network of simulated pods.
//!
//! A pod that runs as a container gets a network namespace of its own, as a real pod does:
//! two replicas can bind the same port, and what a pod binds is its own. The namespace
//! holds only its loopback interface, brought up. It is made by a thread of this process
//! that stays in it to open its sockets, and held by a file descriptor ([`Namespace`]),
//! so it vanishes when the last container in it has ended and the namespace is dropped,
//! or when this process dies: nothing is mounted, no interface or route is added to the
//! host, and nothing can leak.
//!
//! There are no interfaces between namespaces. This process reaches into a pod's instead,
//! the way the real kubelet's port-forward enters the pod's namespace:
//! - [`Namespace::listen`] opens a socket inside it (the pod's API proxy listens there, at
//!   the `127.0.0.1` port its `KUBERNETES_SERVICE_*` variables name);
//! - [`route`] records that a pod address lives in a namespace, and [`connect`] (with
//!   [`socket_for`]) is how this process dials any address: from inside the namespace an
//!   address was routed to, else from the host. Probes, metrics scrapes and `pods/proxy`
//!   all dial through it.
//!
//! A pod's address is a loopback address (`127.x.y.z`): inside its namespace the whole of
//! `127.0.0.0/8` is local, so the pod can bind its address and clients that enter the
//! namespace reach it there. Nothing else reaches a pod: pods do not reach each other.
//!
//! Making a namespace needs `CAP_SYS_ADMIN` (root); joining one needs the same. Without
//! root the simulated kubelet's rootless containers go without one (see `sim-node`'s
//! `oci` module).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, RwLock, Weak};

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::link::{LinkFlags, LinkMessage};
use netlink_sys::protocols::NETLINK_ROUTE;
use nix::sched::{CloneFlags, unshare};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// The interface index of the loopback interface in a new network namespace.
const LOOPBACK_INDEX: u32 = 1;

/// Errors of making, entering or using a network namespace.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    /// `unshare(CLONE_NEWNET)` failed (it needs `CAP_SYS_ADMIN`).
    #[error("cannot make a network namespace")]
    Unshare(#[source] nix::Error),
    /// The new namespace's loopback interface could not be brought up.
    #[error("cannot bring up the loopback interface of a new network namespace")]
    Loopback(#[source] io::Error),
    /// The namespace could not be opened to be held.
    #[error("cannot open the new network namespace")]
    Open(#[source] io::Error),
    /// A socket could not be made or bound inside the namespace.
    #[error("cannot open a socket in the network namespace {path}")]
    Socket {
        /// The namespace's path.
        path: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The namespace's thread could not be started, or is gone.
    #[error("the thread of a network namespace could not be started or is gone")]
    Thread,
}

impl From<NetworkError> for io::Error {
    fn from(e: NetworkError) -> Self {
        io::Error::other(e)
    }
}

/// Work done inside a namespace, on its thread.
type Job = Box<dyn FnOnce() + Send>;

/// A network namespace with only its loopback interface, held open by this process, with
/// a thread of its own that stays inside it to open its sockets (a thread per socket would
/// cost a spawn for every probe and scrape).
#[derive(Debug)]
pub struct Namespace {
    fd: OwnedFd,
    /// The namespace's thread; dropping the sender ends it.
    jobs: Mutex<std::sync::mpsc::Sender<Job>>,
}

impl Namespace {
    /// Makes a namespace and brings its loopback interface up.
    ///
    /// # Errors
    /// Without `CAP_SYS_ADMIN`, or when the kernel refuses.
    pub fn create() -> Result<Self, NetworkError> {
        // A thread of its own: a network namespace is a property of the thread that
        // unshares. It stays there to open the namespace's sockets until the namespace is
        // dropped.
        let (made, made_rx) = std::sync::mpsc::channel();
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("pod-network".into())
            .spawn(move || {
                let fd = (|| {
                    unshare(CloneFlags::CLONE_NEWNET).map_err(NetworkError::Unshare)?;
                    loopback_up().map_err(NetworkError::Loopback)?;
                    std::fs::File::open("/proc/thread-self/ns/net")
                        .map(OwnedFd::from)
                        .map_err(NetworkError::Open)
                })();
                let entered = fd.is_ok();
                let _ = made.send(fd);
                if entered {
                    for job in queue {
                        job();
                    }
                }
            })
            .map_err(|_| NetworkError::Thread)?;
        let fd = made_rx.recv().map_err(|_| NetworkError::Thread)??;
        Ok(Self {
            fd,
            jobs: Mutex::new(jobs),
        })
    }

    /// A path to the namespace that other processes (an OCI runtime joining it) can open
    /// while this process lives: `/proc/<pid>/fd/<fd>`.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            self.fd.as_raw_fd()
        ))
    }

    /// Runs `make` on the namespace's thread: the sockets it opens belong to the namespace
    /// for their whole life.
    fn inside<T: Send + 'static>(
        &self,
        make: impl FnOnce() -> io::Result<T> + Send + 'static,
    ) -> Result<T, NetworkError> {
        let (done, result) = std::sync::mpsc::channel();
        let job: Job = Box::new(move || {
            let _ = done.send(make());
        });
        self.jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(job)
            .map_err(|_| NetworkError::Thread)?;
        result
            .recv()
            .map_err(|_| NetworkError::Thread)?
            .map_err(|source| NetworkError::Socket {
                path: self.path().display().to_string(),
                source,
            })
    }

    /// A TCP socket of the namespace, not yet bound or connected.
    ///
    /// # Errors
    /// When the namespace cannot be entered or the socket made.
    pub fn socket(&self, addr: SocketAddr) -> Result<TcpSocket, NetworkError> {
        self.inside(move || new_socket(addr))
    }

    /// A listener of the namespace on `addr` (port 0: any free port).
    ///
    /// # Errors
    /// When the namespace cannot be entered or the address bound.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn listen(&self, addr: SocketAddr) -> Result<TcpListener, NetworkError> {
        let socket = self.inside(move || {
            let socket = new_socket(addr)?;
            socket.set_reuseaddr(true)?;
            socket.bind(addr)?;
            Ok(socket)
        })?;
        socket.listen(1024).map_err(|source| NetworkError::Socket {
            path: self.path().display().to_string(),
            source,
        })
    }
}

fn new_socket(addr: SocketAddr) -> io::Result<TcpSocket> {
    match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4(),
        SocketAddr::V6(_) => TcpSocket::new_v6(),
    }
}

/// Sets the loopback interface of the calling thread's network namespace up, over
/// rtnetlink (`RTM_NEWLINK` with `IFF_UP`); the kernel then gives it `127.0.0.1/8` and
/// `::1`.
fn loopback_up() -> io::Result<()> {
    let mut socket = netlink_sys::Socket::new(NETLINK_ROUTE)?;
    socket.bind_auto()?;
    socket.connect(&netlink_sys::SocketAddr::new(0, 0))?;
    let mut link = LinkMessage::default();
    link.header.index = LOOPBACK_INDEX;
    link.header.flags = LinkFlags::Up;
    link.header.change_mask = LinkFlags::Up;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_ACK;
    let mut request = NetlinkMessage::new(
        header,
        NetlinkPayload::from(RouteNetlinkMessage::SetLink(link)),
    );
    request.finalize();
    let mut bytes = vec![0; request.buffer_len()];
    request.serialize(&mut bytes);
    socket.send(&bytes, 0)?;
    let mut reply = vec![0u8; 4096];
    let read = socket.recv(&mut &mut reply[..], 0)?;
    let answer = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&reply[..read])
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    match answer.payload {
        NetlinkPayload::Error(error) => match error.code {
            None => Ok(()),
            Some(code) => Err(io::Error::from_raw_os_error(-code.get())),
        },
        other => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unexpected answer to RTM_NEWLINK: {other:?}"),
        )),
    }
}

struct Entry {
    id: u64,
    namespace: Weak<Namespace>,
}

/// Which namespace each routed address lives in.
static ROUTES: LazyLock<RwLock<HashMap<IpAddr, Entry>>> = LazyLock::new(RwLock::default);
static NEXT_ROUTE: AtomicU64 = AtomicU64::new(1);

/// That `ip` lives in a namespace, while it is kept: dropping it removes the route.
#[derive(Debug)]
pub struct Route {
    ip: IpAddr,
    id: u64,
}

/// Routes `ip` to `namespace`: from now on [`connect`] and [`socket_for`] reach `ip` from
/// inside it. A later route of the same address replaces this one.
pub fn route(ip: IpAddr, namespace: &Arc<Namespace>) -> Route {
    let id = NEXT_ROUTE.fetch_add(1, Ordering::Relaxed);
    ROUTES.write().unwrap_or_else(|p| p.into_inner()).insert(
        ip,
        Entry {
            id,
            namespace: Arc::downgrade(namespace),
        },
    );
    Route { ip, id }
}

impl Drop for Route {
    fn drop(&mut self) {
        let mut routes = ROUTES.write().unwrap_or_else(|p| p.into_inner());
        if routes.get(&self.ip).is_some_and(|e| e.id == self.id) {
            routes.remove(&self.ip);
        }
    }
}

/// The namespace `ip` is routed to, if any (and still held).
pub fn namespace_of(ip: IpAddr) -> Option<Arc<Namespace>> {
    ROUTES
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&ip)
        .and_then(|e| e.namespace.upgrade())
}

/// A socket to dial `addr` with: made inside the namespace `addr`'s IP is routed to
/// (`true`), or a host socket (`false`).
///
/// # Errors
/// When the socket cannot be made.
pub fn socket_for(addr: SocketAddr) -> io::Result<(TcpSocket, bool)> {
    match namespace_of(addr.ip()) {
        Some(namespace) => Ok((namespace.socket(addr)?, true)),
        None => Ok((new_socket(addr)?, false)),
    }
}

/// Connects to `addr`, from inside the namespace its IP is routed to, else from the host.
///
/// # Errors
/// As a connect fails.
pub async fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    match namespace_of(addr.ip()) {
        Some(namespace) => namespace.socket(addr)?.connect(addr).await,
        None => TcpStream::connect(addr).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    fn root() -> bool {
        nix::unistd::Uid::effective().is_root()
    }

    #[tokio::test]
    async fn an_address_bound_in_a_namespace_is_reached_through_its_route_and_not_from_the_host() {
        if !root() {
            eprintln!("skipped: making a network namespace needs root");
            return;
        }
        let namespace = Arc::new(Namespace::create().unwrap());
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 199, 0, 7)), 8081);
        let listener = namespace.listen(addr).unwrap();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            stream.write_all(b"inside").await.unwrap();
        });
        assert!(
            TcpStream::connect(addr).await.is_err(),
            "the host has no listener at {addr}"
        );
        let route = route(addr.ip(), &namespace);
        let mut stream = connect(addr).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert_eq!(answer, "inside");
        server.await.unwrap();
        drop(route);
        assert!(namespace_of(addr.ip()).is_none());
    }

    #[tokio::test]
    async fn two_namespaces_each_bind_the_same_port() {
        if !root() {
            eprintln!("skipped: making a network namespace needs root");
            return;
        }
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 8443);
        let first = Namespace::create().unwrap();
        let second = Namespace::create().unwrap();
        let _a = first.listen(addr).unwrap();
        let _b = second.listen(addr).unwrap();
        // And in one namespace the port is taken.
        assert!(first.listen(addr).is_err());
    }

    #[test]
    fn a_namespace_path_names_this_process_and_descriptor() {
        if !root() {
            eprintln!("skipped: making a network namespace needs root");
            return;
        }
        let namespace = Namespace::create().unwrap();
        let path = namespace.path();
        assert!(
            path.starts_with(format!("/proc/{}/fd", std::process::id())),
            "{}",
            path.display()
        );
        let link = std::fs::read_link(&path).unwrap();
        assert!(link.to_string_lossy().starts_with("net:["), "{link:?}");
    }

    #[tokio::test]
    async fn an_address_without_a_route_is_dialled_from_the_host() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (_, inside) = socket_for(addr).unwrap();
        assert!(!inside);
        connect(addr).await.unwrap();
    }
}
