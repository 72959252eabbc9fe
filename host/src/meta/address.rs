//! Which IP addresses are internal to the host's network: what a source of
//! a WasmReconciler object and a plugin's outbound request may reach only
//! when the host config names them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Whether `ip` is internal: loopback, unspecified, private (RFC 1918,
/// IPv6 unique local, where AWS's metadata service `fd00:ec2::254`
/// answers), shared (RFC 6598), link-local (where cloud metadata services
/// answer, `169.254.169.254`), multicast and broadcast addresses, and IPv4
/// ones in IPv6 clothing (mapped `::ffff:a.b.c.d`, compatible `::a.b.c.d`,
/// NAT64 `64:ff9b::a.b.c.d` and 6to4 `2002:ab:cd::`), which reach the
/// IPv4 address they carry.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_loopback()
                || v4.is_unspecified()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_broadcast()
                || a == 0
                || (a == 100 && (64..128).contains(&b))
                // Benchmarking networks (RFC 2544) and the reserved 240/4:
                // never public destinations.
                || (a == 198 && (18..20).contains(&b))
                || a >= 240
                // The rest of IANA's special-purpose registry that is not
                // globally reachable: protocol assignments (DS-Lite's
                // 192.0.0.0/29 among them), the documentation networks, and
                // the retired 6to4 relay anycast.
                || matches!(v4.octets(), [192, 0, 0 | 2, _] | [198, 51, 100, _] | [203, 0, 113, _] | [192, 88, 99, _])
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_v4(v6) {
                return is_internal(IpAddr::V4(v4));
            }
            let s = v6.segments();
            let first = s[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                // NAT64 for local use (RFC 8215) and Teredo, whose IPv4
                // addresses sit in forms not unpacked here: refused whole.
                || (s[0], s[1], s[2]) == (0x64, 0xff9b, 1)
                || (s[0], s[1]) == (0x2001, 0)
                // Documentation (RFC 3849) and discard-only (RFC 6666).
                || (s[0], s[1]) == (0x2001, 0xdb8)
                || s[..4] == [0x100, 0, 0, 0]
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || (first & 0xffc0) == 0xfec0
        }
    }
}

/// The IPv4 address an IPv6 one carries, in the forms that reach it.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = v6.segments();
    let tail = || Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    // `::a.b.c.d` (deprecated IPv4-compatible); `::` and `::1` are their own.
    if s[..6] == [0; 6] && (s[6] != 0) {
        return Some(tail());
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(tail());
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::is_internal;

    #[test]
    fn internal_addresses_in_every_clothing() {
        for ip in [
            "127.0.0.1",
            "127.8.9.10",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "::",
            "fd00::1",
            "fd00:ec2::254",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "::169.254.169.254",
            "64:ff9b::7f00:1",
            "2002:7f00:1::",
            "2002:a9fe:a9fe::1",
            "64:ff9b:1::7f00:1",
            "64:ff9b:1:ffff::1",
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "198.18.0.1",
            "198.19.255.255",
            "240.0.0.1",
            "192.0.0.1",
            "192.0.2.10",
            "198.51.100.7",
            "203.0.113.200",
            "192.88.99.1",
            "2001:db8::1",
            "100::1",
            "::ffff:192.0.2.1",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "2606:4700::1111",
            "172.32.0.1",
            "64:ff9b::808:808",
            "2002:808:808::",
            "2001:db9::1",
            "2001:4860:4860::8888",
            "198.20.0.1",
            "192.0.3.1",
            "198.51.101.1",
            "203.0.114.1",
        ] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip}");
        }
    }
}
