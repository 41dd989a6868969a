//! A running server's own TCP sockets, read from `/proc` and duplicated with
//! `pidfd_getfd`, so a test can check the options the server set on them
//! (`TCP_NODELAY`) rather than time what a missing option costs.

use rustix::process::{Pid, PidfdFlags, PidfdGetfdFlags, pidfd_getfd, pidfd_open};

/// The sockets of `pid` whose remote end is TCP port `port` (IPv4 and IPv6),
/// as the process's own file descriptor numbers.
pub fn sockets_to(pid: u32, port: u16) -> Vec<i32> {
    let mut inodes = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // remote address is field 2 as HEX_ADDR:HEX_PORT; the inode is field 9.
            let remote_port = fields
                .get(2)
                .and_then(|addr| addr.rsplit(':').next())
                .and_then(|hex| u16::from_str_radix(hex, 16).ok());
            if remote_port == Some(port)
                && let Some(inode) = fields.get(9)
            {
                inodes.push(format!("socket:[{inode}]"));
            }
        }
    }
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let target = std::fs::read_link(entry.path()).ok()?;
            inodes
                .contains(&target.to_string_lossy().into_owned())
                .then(|| entry.file_name().to_str()?.parse().ok())?
        })
        .collect()
}

/// Whether socket `fd` of process `pid` has `TCP_NODELAY`; `None` when the
/// descriptor was closed since it was listed.
pub fn has_tcp_nodelay(pid: u32, fd: i32) -> Option<bool> {
    let pidfd = pidfd_open(
        Pid::from_raw(i32::try_from(pid).unwrap()).unwrap(),
        PidfdFlags::empty(),
    )
    .unwrap();
    // A duplicate of the server's socket: options are the socket's.
    let socket = pidfd_getfd(&pidfd, fd, PidfdGetfdFlags::empty()).ok()?;
    Some(rustix::net::sockopt::tcp_nodelay(&socket).unwrap())
}
