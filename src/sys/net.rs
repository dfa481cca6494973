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

#[cfg(test)]
/// Whether socket(`family`, `kind`, `protocol`) is refused with EACCES
/// here (for tests of the socket filter, in a forked child). Closes what
/// it made.
pub fn socket_refused(family: i32, kind: i32, protocol: i32) -> bool {
    // SAFETY: socket(2) with plain integer arguments; a descriptor it
    // returns is closed at once.
    let fd = unsafe { libc::socket(family, kind | libc::SOCK_CLOEXEC, protocol) };
    if fd >= 0 {
        // SAFETY: `fd` was just opened and is closed once.
        unsafe { libc::close(fd) };
        return false;
    }
    std::io::Error::last_os_error().raw_os_error() == Some(libc::EACCES)
}

/// The addresses of this machine's own interfaces (getifaddrs(3)): a name
/// that resolves to one of them leads back to this machine, whatever
/// range it is in. Empty when they cannot be read.
pub fn local_addresses() -> Vec<std::net::IpAddr> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below with
    // freeifaddrs; on failure it leaves `head` untouched (null).
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return out;
    }
    let mut at = head;
    while !at.is_null() {
        // SAFETY: `at` is a node of the list getifaddrs made, alive until
        // freeifaddrs; `ifa_addr` is null or points to a sockaddr whose
        // family says which struct it is.
        unsafe {
            let addr = (*at).ifa_addr;
            if !addr.is_null() {
                match i32::from((*addr).sa_family) {
                    libc::AF_INET => {
                        let a = &*(addr as *const libc::sockaddr_in);
                        out.push(std::net::IpAddr::V4(std::net::Ipv4Addr::from(
                            u32::from_be(a.sin_addr.s_addr),
                        )));
                    }
                    libc::AF_INET6 => {
                        let a = &*(addr as *const libc::sockaddr_in6);
                        out.push(std::net::IpAddr::V6(std::net::Ipv6Addr::from(
                            a.sin6_addr.s6_addr,
                        )));
                    }
                    _ => {}
                }
            }
            at = (*at).ifa_next;
        }
    }
    // SAFETY: `head` came from a successful getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}

#[cfg(test)]
/// What the socket filter of a child granted hosts must refuse, tried on
/// a TCP socket (for its test, in a forked child): listen(), a TCP Fast
/// Open send, and the Fast Open options. True when each was refused.
pub fn fast_paths_refused() -> [bool; 3] {
    // SAFETY: plain system calls on a socket made and closed here; the
    // buffers passed live on this frame.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return [false; 3];
        }
        let err = || std::io::Error::last_os_error().raw_os_error();
        let listen = libc::listen(fd, 1) != 0 && err() == Some(libc::EACCES);
        let mut to: libc::sockaddr_in = std::mem::zeroed();
        to.sin_family = libc::AF_INET as libc::sa_family_t;
        to.sin_port = 9u16.to_be();
        to.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        let sent = libc::sendto(
            fd,
            b"x".as_ptr().cast(),
            1,
            libc::MSG_FASTOPEN,
            (&to as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        );
        let fastopen = sent < 0 && err() == Some(libc::EACCES);
        let one: libc::c_int = 1;
        let set = libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_FASTOPEN_CONNECT,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
        let option = set != 0 && err() == Some(libc::EPERM);
        libc::close(fd);
        [listen, fastopen, option]
    }
}
