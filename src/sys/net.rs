//! Socket options std has no switch for.

use std::net::TcpStream;

/// TCP_QUICKACK on `sock`: acknowledge at once instead of delaying. Best
/// effort: a socket that refuses it only reads as before.
pub fn quick_ack(sock: &TcpStream) {
    let _ = rustix::net::sockopt::set_tcp_quickack(sock, true);
}
