//! The kernel's random source.

use std::io;

/// getrandom(2) into `buf` (blocking until the pool is initialised): how
/// many bytes it filled, which may be fewer than asked. ENOSYS on kernels
/// before 3.17; EINTR when a signal cut it short.
pub fn getrandom(buf: &mut [u8]) -> io::Result<usize> {
    Ok(rustix::rand::getrandom(
        buf,
        rustix::rand::GetRandomFlags::empty(),
    )?)
}
