//! Who is on the other end of a loopback TCP connection: the uid owning the client's socket, read from
//! the kernel's socket table (`/proc/net/tcp`, `/proc/net/tcp6`). The client's socket is the row whose
//! local address is the connection's peer address and whose remote address is ours, in state
//! ESTABLISHED (a socket in TIME_WAIT is listed with uid 0 and is never taken).
//!
//! ```
//! use std::net::SocketAddr;
//! let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 5 1 0 20 4 30 10 -1\n";
//! let peer: SocketAddr = "127.0.0.1:54321".parse().unwrap();
//! let ours: SocketAddr = "127.0.0.1:8080".parse().unwrap();
//! assert_eq!(front::transport::http::peer::find_uid(table, peer, ours), Some(1000));
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The TCP state of an established connection in the socket table.
const ESTABLISHED: u8 = 0x01;

/// The uid owning the client socket of the connection from `peer` to `ours` (both on this host), or
/// `None` when no table lists it (it closed, or it lives in another network namespace).
pub fn socket_owner(peer: SocketAddr, ours: SocketAddr) -> Option<u32> {
    let (peer, ours) = (unmapped(peer), unmapped(ours));
    let file = if peer.is_ipv4() { "/proc/net/tcp" } else { "/proc/net/tcp6" };
    let table = std::fs::read_to_string(file).ok()?;
    find_uid(&table, peer, ours)
}

/// An IPv4-mapped IPv6 address as the IPv4 one (a dual-stack listener sees IPv4 clients so; their
/// sockets are in the IPv4 table).
fn unmapped(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
            None => a,
        },
        IpAddr::V4(_) => a,
    }
}

/// The uid of the ESTABLISHED row of `table` (the text of `/proc/net/tcp` or `tcp6`) from `peer` to
/// `ours`. Rows that do not parse are skipped.
pub fn find_uid(table: &str, peer: SocketAddr, ours: SocketAddr) -> Option<u32> {
    table.lines().skip(1).find_map(|row| {
        let r = parse_row(row)?;
        (r.local == peer && r.remote == ours && r.state == ESTABLISHED).then_some(r.uid)
    })
}

struct Row {
    local: SocketAddr,
    remote: SocketAddr,
    state: u8,
    uid: u32,
}

fn parse_row(row: &str) -> Option<Row> {
    let mut f = row.split_ascii_whitespace();
    let _slot = f.next()?;
    let local = parse_addr(f.next()?)?;
    let remote = parse_addr(f.next()?)?;
    let state = u8::from_str_radix(f.next()?, 16).ok()?;
    // tx_queue:rx_queue, tr:tm->when, retrnsmt, then uid.
    let uid = f.nth(3)?.parse().ok()?;
    Some(Row { local, remote, state, uid })
}

/// `0100007F:1F90` (IPv4: one 32-bit word) or 32 hex digits (IPv6: four words), each word in the
/// kernel's byte order as printed by `%08X` of the in-memory value; the port in plain hex.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (ip, port) = s.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let hex = ip.get(i * 8..i * 8 + 8)?;
        Some(u32::from_str_radix(hex, 16).ok()?.to_ne_bytes())
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut b = [0u8; 16];
            for i in 0..4 {
                b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_live_connection_is_found_with_its_owner() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (_s, peer) = l.accept().unwrap();
        assert_eq!(peer, c.local_addr().unwrap());
        assert_eq!(socket_owner(peer, l.local_addr().unwrap()), Some(nix::unistd::geteuid().as_raw()));
        let l6 = std::net::TcpListener::bind("[::1]:0");
        if let Ok(l6) = l6 {
            let _c6 = std::net::TcpStream::connect(l6.local_addr().unwrap()).unwrap();
            let (_s6, peer6) = l6.accept().unwrap();
            assert_eq!(socket_owner(peer6, l6.local_addr().unwrap()), Some(nix::unistd::geteuid().as_raw()));
        }
    }

    #[test]
    fn only_an_established_row_with_both_ends_matching_counts() {
        let head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";
        let peer: SocketAddr = "127.0.0.1:54321".parse().unwrap();
        let ours: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let tw = "   0: 0100007F:D431 0100007F:1F90 06 00000000:00000000 03:00000000 00000000     0        0 0 3 0\n";
        assert_eq!(find_uid(&format!("{head}{tw}"), peer, ours), None, "TIME_WAIT rows are not owners");
        let other =
            "   1: 0100007F:D432 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000        0 5 1 0\n";
        assert_eq!(find_uid(&format!("{head}{other}"), peer, ours), None);
        let v6 = "   0: 0000000000000000FFFF00000100007F:D431 0000000000000000FFFF00000100007F:1F90 01 00000000:00000000 00:00000000 00000000  77 0 5\n";
        let p6 = SocketAddr::new(IpAddr::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped()), 54321);
        let o6 = SocketAddr::new(IpAddr::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped()), 8080);
        assert_eq!(find_uid(&format!("{head}{v6}"), p6, o6), Some(77));
    }

    proptest! {
        #[test]
        fn garbage_tables_never_panic(table in ".{0,400}", bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
            let _ = find_uid(&table, peer, peer);
            let _ = find_uid(&String::from_utf8_lossy(&bytes), peer, peer);
        }

        #[test]
        fn rows_round_trip(ip in any::<[u8; 4]>(), port in any::<u16>(), uid in any::<u32>()) {
            let a = SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port);
            let hex = format!("{:08X}:{:04X}", u32::from_ne_bytes(ip), port);
            let table = format!("head\n 0: {hex} {hex} 01 0:0 0:0 0 {uid} 0 1\n");
            prop_assert_eq!(find_uid(&table, a, a), Some(uid));
        }
    }
}
