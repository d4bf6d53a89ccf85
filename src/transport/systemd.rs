//! systemd readiness notification (`Type=notify`): a datagram to `$NOTIFY_SOCKET` saying
//! `READY=1` once migrations ran and the listener is bound, and `STOPPING=1` on shutdown.
//! Outside systemd (no `NOTIFY_SOCKET`) both are no-ops.

use std::os::unix::net::UnixDatagram;

fn send(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(socket) = UnixDatagram::unbound() else {
        return;
    };
    let bytes = path.as_encoded_bytes();
    // An abstract socket is written with a leading '@' and addressed with a NUL byte.
    let result = if let Some(name) = bytes.strip_prefix(b"@") {
        abstract_send(&socket, name, state)
    } else {
        socket.send_to(state.as_bytes(), &path).map(|_| ())
    };
    if let Err(e) = result {
        tracing::warn!(error = %e, "cannot notify systemd");
    }
}

#[cfg(target_os = "linux")]
fn abstract_send(socket: &UnixDatagram, name: &[u8], state: &str) -> std::io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
    socket.send_to_addr(state.as_bytes(), &addr).map(|_| ())
}

#[cfg(not(target_os = "linux"))]
fn abstract_send(_socket: &UnixDatagram, _name: &[u8], _state: &str) -> std::io::Result<()> {
    Err(std::io::Error::other("abstract sockets need Linux"))
}

/// Tells systemd the service is ready.
pub fn ready() {
    send("READY=1");
}

/// Tells systemd the service is stopping.
pub fn stopping() {
    send("STOPPING=1");
}
