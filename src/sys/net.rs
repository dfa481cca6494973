//! Socket options std has no switch for.

use std::net::TcpStream;

/// TCP_QUICKACK on `sock`: acknowledge at once instead of delaying. Best
/// effort: a socket that refuses it only reads as before.
pub fn quick_ack(sock: &TcpStream) {
    let _ = rustix::net::sockopt::set_tcp_quickack(sock, true);
}

/// Hook-safe: brings this network namespace's loopback device up (a new
/// namespace has it down, so not even 127.0.0.1 answers). Needs
/// CAP_NET_ADMIN in the namespace (its maker has it).
pub fn loopback_up() -> std::io::Result<()> {
    // SAFETY: socket(2) with constant arguments; the descriptor is closed
    // below on every path.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: an all-zero ifreq is a valid value (a C struct of integers
    // and byte arrays).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *d = *s as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS and SIOCSIFFLAGS read and write the ifreq whose
    // address is passed; it lives on this stack frame for both calls.
    let r = unsafe {
        let got = libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req as *mut libc::ifreq);
        if got == 0 {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            libc::ioctl(fd, libc::SIOCSIFFLAGS, &req as *const libc::ifreq)
        } else {
            got
        }
    };
    let err = std::io::Error::last_os_error();
    // SAFETY: `fd` was opened above and is closed once.
    unsafe { libc::close(fd) };
    if r == 0 { Ok(()) } else { Err(err) }
}

/// Hook-safe: a TCP socket listening on 127.0.0.1 at a port the kernel
/// picks, in this process's network namespace (a socket stays in the
/// namespace it was made in, wherever its descriptor goes).
pub fn listen_loopback() -> std::io::Result<std::os::fd::OwnedFd> {
    use rustix::net::{AddressFamily, SocketAddrV4, SocketFlags, SocketType};
    let fd = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::bind(&fd, &SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, 0))?;
    rustix::net::listen(&fd, 64)?;
    Ok(fd)
}
