//! The system-call wall: a seccomp-BPF filter on every confined child.
//!
//! It refuses with `EPERM` what root could do to the machine and what no
//! command needs — reboot, kexec, module loading, mount and pivot_root
//! (after the namespace view is set up), swap, clock setting, device
//! `mknod`, ptrace and process_vm_*, keyrings, bpf, perf_event_open,
//! userfaultfd, open_by_handle_at, iopl/ioperm, unshare, setns,
//! clone(2) with namespace flags (clone3 is "not implemented", so glibc
//! falls back to clone(2)) and prlimit64 of another process — whatever
//! capabilities a child kept. The rest
//! is the socket wall.
//!
//! Landlock refuses TCP from ABI 4, but pathname UNIX socket connects only
//! from ABI 9 and UDP only from ABI 10, so on most kernels a confined
//! program could still send datagrams to 127.0.0.1 or talk to a daemon's
//! socket (docker.sock, D-Bus). No shell call needs a socket of its own, so
//! the filter refuses to make one:
//!
//! - `socket()` of every family fails with `EACCES` (`AF_UNIX` reaches
//!   daemons, `AF_NETLINK` the kernel's routing and audit, `AF_PACKET` raw
//!   frames). glibc's name-service clients (nscd, systemd-userdb) take the
//!   error as "no daemon" and fall back to files.
//! - `socketpair()` only for `AF_UNIX` stream and seqpacket pairs (asyncio,
//!   libuv, Rust's `std::process` use them as pipes): such a pair is connected to
//!   itself and the kernel refuses to connect it anywhere else (`EISCONN`)
//!   or send to an address. A datagram pair is refused: `sendto` on it
//!   reaches any named datagram socket (`/dev/log`, `/run/systemd/notify`).
//! - `io_uring_setup`/`_enter`/`_register` fail with `ENOSYS`, as on a
//!   kernel without io_uring: its `IORING_OP_SOCKET` makes sockets without
//!   the `socket` syscall.
//! - `pidfd_getfd` fails with `EPERM`: it copies a descriptor (a socket)
//!   out of another process.
//! - Another system-call ABI is not this filter's: on x86_64 every x32 call
//!   fails with `ENOSYS`, and a call made as another architecture (int 0x80,
//!   a 32-bit program) kills the process.
//!
//! A socket could otherwise only be inherited: the same hook marks every
//! descriptor above stderr close-on-exec, so none is.
//!
//! The program is built once, in the parent; the child hands it to the
//! kernel with a single `seccomp(2)` call, which allocates nothing.

use std::io;
use std::mem::offset_of;
use std::sync::OnceLock;

pub type Insn = crate::sys::sandbox::SockFilter;

/// `AUDIT_ARCH_*`: the ELF machine with the 64-bit and little-endian bits.
#[cfg(all(target_arch = "x86_64", target_pointer_width = "64"))]
const ARCH: Option<u32> = Some(0xC000_003E);
#[cfg(target_arch = "aarch64")]
const ARCH: Option<u32> = Some(0xC000_00B7);
#[cfg(not(any(
    all(target_arch = "x86_64", target_pointer_width = "64"),
    target_arch = "aarch64"
)))]
const ARCH: Option<u32> = None;

/// x32 calls are the x86_64 numbers with this bit set.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: Option<u32> = Some(0x4000_0000);
#[cfg(not(target_arch = "x86_64"))]
const X32_SYSCALL_BIT: Option<u32> = None;

const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const AND_K: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;
const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;

const fn errno(e: i32) -> u32 {
    libc::SECCOMP_RET_ERRNO | (e as u32 & libc::SECCOMP_RET_DATA)
}

/// The low 32 bits of argument `i`: the kernel reads these calls' `int`
/// arguments from there and ignores the rest.
const fn arg_low(i: usize) -> u32 {
    let hi = if cfg!(target_endian = "big") { 4 } else { 0 };
    (offset_of!(libc::seccomp_data, args) + 8 * i + hi) as u32
}

const NR: u32 = offset_of!(libc::seccomp_data, nr) as u32;
const ARCH_OFF: u32 = offset_of!(libc::seccomp_data, arch) as u32;

/// Where a jump goes: the next instruction, a labelled block, or a
/// `return action` placed at the end.
#[derive(Clone, Copy, PartialEq)]
enum To {
    Next,
    Label(Block),
    Ret(u32),
}

/// The blocks that look at a call's arguments.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Block {
    /// socketpair: which family and type.
    Pair,
    /// clone: namespace flags.
    Clone,
    /// prlimit64: whose limits (argument 0).
    Prlimit,
    /// mknod: the file type (argument 1).
    Mknod,
    /// mknodat: the file type (argument 2).
    Mknodat,
    /// Both: device or not.
    NodeType,
    /// socket, for a child granted hosts: which family.
    Socket,
    /// Then which type.
    SocketType,
    /// sendto, sendmmsg: their flags (argument 3).
    SendFlags3,
    /// sendmsg: its flags (argument 2).
    SendFlags2,
    /// Either: MSG_FASTOPEN or not.
    FastOpen,
    /// setsockopt: TCP Fast Open options.
    SockOpt,
}

/// A tiny forward-only assembler: jumps name their targets and the offsets
/// are filled in once every instruction is placed.
#[derive(Default)]
struct Asm {
    body: Vec<(u16, u32, To, To)>,
    labels: Vec<(Block, usize)>,
}

impl Asm {
    fn load(&mut self, off: u32) {
        self.body.push((LD_W_ABS, off, To::Next, To::Next));
    }
    fn jeq(&mut self, k: u32, jt: To, jf: To) {
        self.body.push((JEQ_K, k, jt, jf));
    }
    fn jge(&mut self, k: u32, jt: To, jf: To) {
        self.body.push((JGE_K, k, jt, jf));
    }
    fn and(&mut self, k: u32) {
        self.body.push((AND_K, k, To::Next, To::Next));
    }
    fn ret(&mut self, action: u32) {
        self.body.push((RET_K, action, To::Next, To::Next));
    }
    fn label(&mut self, b: Block) {
        self.labels.push((b, self.body.len()));
    }

    fn finish(self) -> Option<Vec<Insn>> {
        let mut actions: Vec<u32> = Vec::new();
        for &(_, _, jt, jf) in &self.body {
            for t in [jt, jf] {
                if let To::Ret(a) = t
                    && !actions.contains(&a)
                {
                    actions.push(a);
                }
            }
        }
        let end = self.body.len();
        let target = |t: To| match t {
            To::Next => None,
            To::Label(b) => self.labels.iter().find(|(l, _)| *l == b).map(|&(_, at)| at),
            To::Ret(a) => actions.iter().position(|&x| x == a).map(|p| end + p),
        };
        // `None` for a jump without a forward target, or one too far for
        // BPF's 8-bit offsets: then there is no program.
        let offset = |i: usize, t: To| -> Option<u8> {
            match target(t) {
                None if t == To::Next => Some(0),
                Some(at) if at > i => u8::try_from(at - i - 1).ok(),
                _ => None,
            }
        };
        let mut out = self
            .body
            .iter()
            .enumerate()
            .map(|(i, &(code, k, jt, jf))| {
                Some(Insn {
                    code,
                    jt: offset(i, jt)?,
                    jf: offset(i, jf)?,
                    k,
                })
            })
            .collect::<Option<Vec<Insn>>>()?;
        out.extend(actions.iter().map(|&a| Insn {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: a,
        }));
        Some(out)
    }
}

/// Calls refused with EPERM: what root could do to the machine (reboot,
/// modules, clocks, swap, mounts once the view is set up, raw I/O ports),
/// reach into other processes (ptrace, process_vm_*, keyrings,
/// open_by_handle_at past the mount view), or the kernel attack surface no
/// shell command needs (bpf, perf_event_open, userfaultfd), and new
/// namespaces.
#[cfg(any(
    all(target_arch = "x86_64", target_pointer_width = "64"),
    target_arch = "aarch64"
))]
#[rustfmt::skip]
const PRIVILEGED: &[libc::c_long] = &[
    libc::SYS_reboot, libc::SYS_kexec_load, libc::SYS_kexec_file_load,
    libc::SYS_init_module, libc::SYS_finit_module, libc::SYS_delete_module,
    libc::SYS_mount, libc::SYS_umount2, libc::SYS_pivot_root, libc::SYS_move_mount,
    libc::SYS_open_tree, libc::SYS_fsopen, libc::SYS_fsmount, libc::SYS_fsconfig,
    libc::SYS_fspick, libc::SYS_mount_setattr, libc::SYS_chroot,
    libc::SYS_swapon, libc::SYS_swapoff, libc::SYS_settimeofday, libc::SYS_clock_settime,
    libc::SYS_clock_adjtime, libc::SYS_adjtimex, libc::SYS_ptrace,
    libc::SYS_process_vm_readv, libc::SYS_process_vm_writev, libc::SYS_keyctl,
    libc::SYS_add_key, libc::SYS_request_key, libc::SYS_bpf, libc::SYS_perf_event_open,
    libc::SYS_userfaultfd, libc::SYS_open_by_handle_at, libc::SYS_name_to_handle_at,
    libc::SYS_unshare, libc::SYS_setns, libc::SYS_acct, libc::SYS_quotactl, libc::SYS_syslog,
    libc::SYS_vhangup, libc::SYS_pidfd_getfd,
    #[cfg(target_arch = "x86_64")] libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")] libc::SYS_ioperm,
];

/// clone(2) flags that make a namespace (CLONE_NEWTIME shares its bit
/// with the exit signal in clone(2), and exists only for unshare/clone3).
#[cfg(any(
    all(target_arch = "x86_64", target_pointer_width = "64"),
    target_arch = "aarch64"
))]
const NAMESPACE_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;

#[cfg(any(
    all(target_arch = "x86_64", target_pointer_width = "64"),
    target_arch = "aarch64"
))]
fn build(arch: u32, tcp: bool) -> Option<Vec<Insn>> {
    let nr = |n: libc::c_long| n as u32;
    let mut a = Asm::default();
    a.load(ARCH_OFF);
    a.jeq(arch, To::Next, To::Ret(KILL));
    a.load(NR);
    if let Some(bit) = X32_SYSCALL_BIT {
        a.jge(bit, To::Ret(errno(libc::ENOSYS)), To::Next);
    }
    if tcp {
        a.jeq(nr(libc::SYS_socket), To::Label(Block::Socket), To::Next);
        // Ways to a port that skip Landlock's connect and bind hooks: a
        // TCP Fast Open send connects inside sendto/sendmsg, and listen()
        // on an unbound socket binds a port of the kernel's choice.
        a.jeq(nr(libc::SYS_listen), To::Ret(errno(libc::EACCES)), To::Next);
        a.jeq(nr(libc::SYS_sendto), To::Label(Block::SendFlags3), To::Next);
        a.jeq(
            nr(libc::SYS_sendmmsg),
            To::Label(Block::SendFlags3),
            To::Next,
        );
        a.jeq(
            nr(libc::SYS_sendmsg),
            To::Label(Block::SendFlags2),
            To::Next,
        );
        a.jeq(
            nr(libc::SYS_setsockopt),
            To::Label(Block::SockOpt),
            To::Next,
        );
    } else {
        a.jeq(nr(libc::SYS_socket), To::Ret(errno(libc::EACCES)), To::Next);
    }
    a.jeq(nr(libc::SYS_socketpair), To::Label(Block::Pair), To::Next);
    for n in [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        // glibc falls back to clone(2), whose flags a filter can read
        // (clone3 passes them in memory).
        libc::SYS_clone3,
    ] {
        a.jeq(nr(n), To::Ret(errno(libc::ENOSYS)), To::Next);
    }
    for &n in PRIVILEGED {
        a.jeq(nr(n), To::Ret(errno(libc::EPERM)), To::Next);
    }
    a.jeq(nr(libc::SYS_clone), To::Label(Block::Clone), To::Next);
    a.jeq(nr(libc::SYS_prlimit64), To::Label(Block::Prlimit), To::Next);
    #[cfg(target_arch = "x86_64")]
    a.jeq(nr(libc::SYS_mknod), To::Label(Block::Mknod), To::Next);
    a.jeq(nr(libc::SYS_mknodat), To::Label(Block::Mknodat), To::Next);
    a.ret(ALLOW);
    a.label(Block::Clone);
    // The flags are the first argument on both architectures.
    a.load(arg_low(0));
    a.and(NAMESPACE_FLAGS);
    a.jeq(0, To::Ret(ALLOW), To::Ret(errno(libc::EPERM)));
    // prlimit64 of itself only (pid 0: what setrlimit and getrlimit
    // send): never of another process, init's above all (a CPU limit
    // would kill it).
    a.label(Block::Prlimit);
    a.load(arg_low(0));
    a.jeq(0, To::Ret(ALLOW), To::Ret(errno(libc::EPERM)));
    a.label(Block::Mknod);
    a.load(arg_low(1));
    a.jeq(0, To::Label(Block::NodeType), To::Label(Block::NodeType));
    a.label(Block::Mknodat);
    a.load(arg_low(2));
    a.label(Block::NodeType);
    a.and(libc::S_IFMT);
    a.jeq(libc::S_IFCHR, To::Ret(errno(libc::EPERM)), To::Next);
    a.jeq(libc::S_IFBLK, To::Ret(errno(libc::EPERM)), To::Ret(ALLOW));
    if tcp {
        // TCP over IPv4 or IPv6 only: no UDP, raw, netlink or packet socket.
        a.label(Block::Socket);
        a.load(arg_low(0));
        a.jeq(libc::AF_INET as u32, To::Label(Block::SocketType), To::Next);
        a.jeq(
            libc::AF_INET6 as u32,
            To::Label(Block::SocketType),
            To::Ret(errno(libc::EACCES)),
        );
        a.label(Block::SocketType);
        a.load(arg_low(1));
        a.and(0xf);
        a.jeq(
            libc::SOCK_STREAM as u32,
            To::Next,
            To::Ret(errno(libc::EACCES)),
        );
        // Plain TCP only: MPTCP (IPPROTO_MPTCP, also a stream) is not TCP
        // to Landlock, whose port rule would not hold it.
        a.load(arg_low(2));
        a.jeq(0, To::Ret(ALLOW), To::Next);
        a.jeq(
            libc::IPPROTO_TCP as u32,
            To::Ret(ALLOW),
            To::Ret(errno(libc::EACCES)),
        );
        // sendto and sendmmsg: flags are argument 3; sendmsg: argument 2.
        a.label(Block::SendFlags3);
        a.load(arg_low(3));
        a.jeq(0, To::Ret(ALLOW), To::Label(Block::FastOpen));
        a.label(Block::SendFlags2);
        a.load(arg_low(2));
        a.label(Block::FastOpen);
        a.and(libc::MSG_FASTOPEN as u32);
        a.jeq(0, To::Ret(ALLOW), To::Ret(errno(libc::EACCES)));
        // setsockopt(IPPROTO_TCP, TCP_FASTOPEN or TCP_FASTOPEN_CONNECT).
        a.label(Block::SockOpt);
        a.load(arg_low(1));
        a.jeq(libc::IPPROTO_TCP as u32, To::Next, To::Ret(ALLOW));
        a.load(arg_low(2));
        a.jeq(
            libc::TCP_FASTOPEN as u32,
            To::Ret(errno(libc::EPERM)),
            To::Next,
        );
        a.jeq(
            libc::TCP_FASTOPEN_CONNECT as u32,
            To::Ret(errno(libc::EPERM)),
            To::Ret(ALLOW),
        );
    }
    a.label(Block::Pair);
    a.load(arg_low(0));
    a.jeq(libc::AF_UNIX as u32, To::Next, To::Ret(errno(libc::EACCES)));
    a.load(arg_low(1));
    // SOCK_NONBLOCK and SOCK_CLOEXEC ride in the same argument.
    a.and(0xf);
    a.jeq(libc::SOCK_STREAM as u32, To::Ret(ALLOW), To::Next);
    a.jeq(
        libc::SOCK_SEQPACKET as u32,
        To::Ret(ALLOW),
        To::Ret(errno(libc::EACCES)),
    );
    a.finish()
}

#[cfg(not(any(
    all(target_arch = "x86_64", target_pointer_width = "64"),
    target_arch = "aarch64"
)))]
fn build(_arch: u32, _tcp: bool) -> Option<Vec<Insn>> {
    None
}

/// The filter for this build's architecture; `None` where latchclaw has
/// none (neither x86_64 nor aarch64), or where it did not assemble (a jump
/// out of BPF's reach: a bug the tests would show).
pub fn program() -> Option<&'static [Insn]> {
    static PROGRAM: OnceLock<Option<Vec<Insn>>> = OnceLock::new();
    PROGRAM
        .get_or_init(|| ARCH.and_then(|a| build(a, false)))
        .as_deref()
        .filter(|p| !p.is_empty())
}

/// What `policy show` says of the filter of a child granted hosts.
pub const TCP_SOCKET_RULE: &str = "sockets (seccomp): TCP over IPv4/IPv6 only → every other \
     socket() (UDP, MPTCP, raw, AF_UNIX, AF_NETLINK, AF_PACKET, ...) EACCES; no listen() and no \
     TCP Fast Open (MSG_FASTOPEN, TCP_FASTOPEN*); socketpair only AF_UNIX \
     stream/seqpacket; io_uring refused (ENOSYS); pidfd_getfd refused (EPERM)";

/// [`program`] for a child granted hosts (`super::egress`): TCP sockets
/// allowed too, which its own network namespace and Landlock hold to the
/// proxy.
pub fn tcp_program() -> Option<&'static [Insn]> {
    static PROGRAM: OnceLock<Option<Vec<Insn>>> = OnceLock::new();
    PROGRAM
        .get_or_init(|| ARCH.and_then(|a| build(a, true)))
        .as_deref()
        .filter(|p| !p.is_empty())
}

/// Puts this process (a forked child) under `prog`, for good. Callers have
/// set no_new_privs (or the kernel wants CAP_SYS_ADMIN). Async-signal-safe.
pub fn install(prog: &[Insn]) -> io::Result<()> {
    crate::sys::sandbox::seccomp_install(prog)
}

/// The filter, when this kernel can install it; probed once per process
/// without installing anything. A child that still fails to install it
/// fails its spawn under `required` ([`super::Prepared::install`]).
pub fn available() -> Result<&'static [Insn], &'static str> {
    static AVAILABLE: OnceLock<Result<&'static [Insn], &'static str>> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let prog = program().ok_or(if ARCH.is_some() {
            "latchclaw's seccomp filter did not assemble (a bug)"
        } else {
            "latchclaw has no seccomp filter for this CPU architecture"
        })?;
        probe().map(|()| prog)
    })
}

fn probe() -> Result<(), &'static str> {
    if let Err(e) = crate::sys::sandbox::seccomp_probe() {
        return Err(match e.raw_os_error() {
            Some(libc::ENOSYS) => "the kernel has no seccomp(2) (built without CONFIG_SECCOMP)",
            Some(libc::EINVAL) => {
                "the kernel has no seccomp filters (built without CONFIG_SECCOMP_FILTER)"
            }
            Some(libc::EPERM | libc::EACCES) => {
                "installing a seccomp filter is not permitted here (an outer sandbox?)"
            }
            _ => "the seccomp probe failed",
        });
    }
    if !crate::sys::sandbox::seccomp_action_available(KILL) {
        return Err("the kernel cannot kill a whole process from a filter (older than 4.14)");
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_program_is_well_formed() {
        let Some(prog) = program() else {
            eprintln!("SKIPPED: no filter for this architecture");
            return;
        };
        // Every path ends in a return: the last instruction is one, and each
        // jump lands inside the program.
        assert_eq!(prog.last().unwrap().code, RET_K);
        for (i, insn) in prog.iter().enumerate() {
            if insn.code & 0x07 == libc::BPF_JMP as u16 {
                for off in [insn.jt, insn.jf] {
                    assert!(i + 1 + (off as usize) < prog.len(), "insn {i} jumps out");
                }
            }
        }
        assert!(prog.len() < 120, "{}", prog.len());
        // The first check is the architecture, killing on a mismatch.
        assert_eq!((prog[0].code, prog[0].k), (LD_W_ABS, ARCH_OFF));
        let kill = prog[1 + 1 + prog[1].jf as usize];
        assert_eq!((kill.code, kill.k), (RET_K, KILL));
    }

    /// Runs `prog` as the kernel would on one system call.
    fn run(prog: &[Insn], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        // The bytes of a `seccomp_data` (instruction_pointer left 0).
        let mut bytes = [0u8; std::mem::size_of::<libc::seccomp_data>()];
        let mut put = |off: usize, b: &[u8]| bytes[off..off + b.len()].copy_from_slice(b);
        put(NR as usize, &(nr as i32).to_ne_bytes());
        put(ARCH_OFF as usize, &arch.to_ne_bytes());
        for (i, a) in args.iter().enumerate() {
            put(
                offset_of!(libc::seccomp_data, args) + 8 * i,
                &a.to_ne_bytes(),
            );
        }
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let i = prog[pc];
            pc += 1;
            match i.code {
                LD_W_ABS => {
                    let k = i.k as usize;
                    acc = u32::from_ne_bytes(bytes[k..k + 4].try_into().unwrap());
                }
                AND_K => acc &= i.k,
                RET_K => return i.k,
                JEQ_K | JGE_K => {
                    let hit = if i.code == JEQ_K {
                        acc == i.k
                    } else {
                        acc >= i.k
                    };
                    pc += usize::from(if hit { i.jt } else { i.jf });
                }
                c => panic!("unexpected instruction {c:#x}"),
            }
        }
    }

    #[test]
    fn the_program_decides_each_call_as_documented() {
        let (Some(prog), Some(arch)) = (program(), ARCH) else {
            eprintln!("SKIPPED: no filter for this architecture");
            return;
        };
        let nr = |n: libc::c_long| n as u32;
        let call = |n: libc::c_long, a0: u64, a1: u64| run(prog, arch, nr(n), [a0, a1, 0, 0, 0, 0]);
        let (unix, inet, inet6) = (
            libc::AF_UNIX as u64,
            libc::AF_INET as u64,
            libc::AF_INET6 as u64,
        );
        let stream = libc::SOCK_STREAM as u64;
        let flags = (libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) as u64;
        let eacces = errno(libc::EACCES);
        for family in [
            unix,
            inet,
            inet6,
            libc::AF_NETLINK as u64,
            libc::AF_PACKET as u64,
            0,
            45,
        ] {
            for ty in [stream, libc::SOCK_DGRAM as u64, libc::SOCK_RAW as u64] {
                assert_eq!(
                    call(libc::SYS_socket, family, ty),
                    eacces,
                    "socket({family}, {ty})"
                );
            }
        }
        assert_eq!(call(libc::SYS_socketpair, unix, stream), ALLOW);
        assert_eq!(call(libc::SYS_socketpair, unix, stream | flags), ALLOW);
        assert_eq!(
            call(libc::SYS_socketpair, unix, libc::SOCK_SEQPACKET as u64),
            ALLOW
        );
        // The kernel reads an int: high bits change nothing for it or here.
        assert_eq!(call(libc::SYS_socketpair, unix | 1 << 32, stream), ALLOW);
        assert_eq!(call(libc::SYS_socketpair, inet | 1 << 32, stream), eacces);
        for (family, ty) in [
            (unix, libc::SOCK_DGRAM as u64),
            (unix, libc::SOCK_DGRAM as u64 | flags),
            (unix, libc::SOCK_RAW as u64),
            (inet, stream),
            (inet6, stream),
            (libc::AF_NETLINK as u64, libc::SOCK_RAW as u64),
        ] {
            assert_eq!(
                call(libc::SYS_socketpair, family, ty),
                eacces,
                "socketpair({family}, {ty})"
            );
        }
        for n in [
            libc::SYS_io_uring_setup,
            libc::SYS_io_uring_enter,
            libc::SYS_io_uring_register,
        ] {
            assert_eq!(call(n, 8, 0), errno(libc::ENOSYS), "{n}");
        }
        assert_eq!(call(libc::SYS_pidfd_getfd, 3, 4), errno(libc::EPERM));
        for n in [
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_openat,
            libc::SYS_execve,
            libc::SYS_connect,
            libc::SYS_sendto,
            libc::SYS_clone,
            libc::SYS_pidfd_open,
            libc::SYS_landlock_restrict_self,
        ] {
            assert_eq!(call(n, inet, stream), ALLOW, "{n}");
        }
        // Another ABI: killed; on x86_64 an x32 call is "not implemented".
        const AUDIT_ARCH_I386: u32 = 0x4000_0003;
        assert_eq!(run(prog, AUDIT_ARCH_I386, nr(libc::SYS_read), [0; 6]), KILL);
        assert_eq!(
            run(prog, AUDIT_ARCH_I386, 359, [inet, stream, 0, 0, 0, 0]),
            KILL
        );
        if let Some(bit) = X32_SYSCALL_BIT {
            for n in [libc::SYS_socket, libc::SYS_read] {
                assert_eq!(
                    run(prog, arch, bit | nr(n), [inet, 0, 0, 0, 0, 0]),
                    errno(libc::ENOSYS)
                );
            }
        }
    }
}
