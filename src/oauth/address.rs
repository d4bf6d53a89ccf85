//! Which network addresses the authorization server refuses to fetch from on a client's
//! behalf. A client ID metadata document is fetched from a URL the client chose, so the
//! fetch must never reach the server's own machine, its private network or a cloud
//! metadata service (server-side request forgery). [`is_forbidden`] decides for one
//! address; every address a host name resolves to is checked, and the connection goes to
//! a checked address only (`client_document`).
//!
//! Only globally routable unicast addresses pass. IPv6 forms that carry an IPv4 address
//! (IPv4-mapped, the NAT64 well-known prefix, 6to4) are judged by the IPv4 address they
//! carry, so `::ffff:127.0.0.1` is as forbidden as `127.0.0.1`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// IPv4 ranges that are not globally routable unicast (RFC 6890 and its updates), as
/// (network, prefix length).
const FORBIDDEN_V4: &[([u8; 4], u8)] = &[
    ([0, 0, 0, 0], 8),       // "this network", the unspecified address
    ([10, 0, 0, 0], 8),      // private
    ([100, 64, 0, 0], 10),   // shared address space (carrier-grade NAT)
    ([127, 0, 0, 0], 8),     // loopback
    ([169, 254, 0, 0], 16),  // link-local, the cloud metadata service 169.254.169.254
    ([172, 16, 0, 0], 12),   // private
    ([192, 0, 0, 0], 24),    // IETF protocol assignments
    ([192, 0, 2, 0], 24),    // documentation (TEST-NET-1)
    ([192, 88, 99, 0], 24),  // 6to4 relay anycast (deprecated)
    ([192, 168, 0, 0], 16),  // private
    ([198, 18, 0, 0], 15),   // benchmarking
    ([198, 51, 100, 0], 24), // documentation (TEST-NET-2)
    ([203, 0, 113, 0], 24),  // documentation (TEST-NET-3)
    ([224, 0, 0, 0], 4),     // multicast
    ([240, 0, 0, 0], 4),     // reserved, and the limited broadcast 255.255.255.255
];

/// Ranges inside the IPv6 global unicast block 2000::/3 that are not reachable public
/// hosts, as (network, prefix length).
const FORBIDDEN_V6_GLOBAL: &[(u128, u8)] = &[
    (0x2001_0000 << 96, 32),      // Teredo
    (0x2001_0002 << 96, 48),      // benchmarking
    (0x2001_0010 << 96, 28),      // ORCHID
    (0x2001_0020 << 96, 28),      // ORCHIDv2
    (0x2001_0db8 << 96, 32),      // documentation
    (0x3fff_0000 << 96, 20),      // documentation (RFC 9637)
    (0x0064_ff9b_0001 << 80, 48), // local-use IPv4/IPv6 translation (RFC 8215)
];

/// The NAT64 well-known prefix 64:ff9b::/96 (RFC 6052): the last 32 bits are an IPv4
/// address.
const NAT64_WELL_KNOWN: (u128, u8) = (0x0064_ff9b << 96, 96);

/// The 6to4 prefix 2002::/16 (RFC 3056): bits 16 to 47 are an IPv4 address.
const SIX_TO_FOUR: (u128, u8) = (0x2002 << 112, 16);

/// The IPv6 global unicast block 2000::/3, the only one IANA allocates from.
const GLOBAL_UNICAST_V6: (u128, u8) = (0x2000 << 112, 3);

/// Whether a client's document must not be fetched from `ip`: anything but a globally
/// routable unicast address (loopback, private, link-local, carrier-grade NAT,
/// benchmarking, documentation, multicast, broadcast, unspecified, reserved, IPv6
/// unique-local and site-local), including an IPv6 address that carries such an IPv4
/// address.
pub fn is_forbidden(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_forbidden_v4(v4),
        IpAddr::V6(v6) => is_forbidden_v6(v6),
    }
}

fn is_forbidden_v4(ip: Ipv4Addr) -> bool {
    let bits = u32::from(ip);
    FORBIDDEN_V4
        .iter()
        .any(|&(network, len)| in_prefix32(bits, u32::from_be_bytes(network), len))
}

fn is_forbidden_v6(ip: Ipv6Addr) -> bool {
    let bits = u128::from(ip);
    if let Some(v4) = ip.to_ipv4_mapped() {
        // ::ffff:a.b.c.d reaches a.b.c.d on a dual-stack socket.
        return is_forbidden_v4(v4);
    }
    if in_prefix128(bits, NAT64_WELL_KNOWN) {
        // A NAT64 gateway forwards 64:ff9b::a.b.c.d to a.b.c.d.
        return is_forbidden_v4(Ipv4Addr::from(bits as u32));
    }
    if in_prefix128(bits, SIX_TO_FOUR) {
        return is_forbidden_v4(Ipv4Addr::from((bits >> 80) as u32));
    }
    // Everything outside 2000::/3 is special: the unspecified and loopback addresses, the
    // IPv4-compatible ::/96, discard-only 100::/64, unique-local fc00::/7, link-local
    // fe80::/10, site-local fec0::/10, multicast ff00::/8 and the unallocated rest.
    if !in_prefix128(bits, GLOBAL_UNICAST_V6) {
        return true;
    }
    FORBIDDEN_V6_GLOBAL
        .iter()
        .any(|&range| in_prefix128(bits, range))
}

fn in_prefix32(bits: u32, network: u32, len: u8) -> bool {
    let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
    bits & mask == network & mask
}

fn in_prefix128(bits: u128, (network, len): (u128, u8)) -> bool {
    let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
    bits & mask == network & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forbidden(text: &str) -> bool {
        is_forbidden(text.parse().expect("an address"))
    }

    #[test]
    fn public_addresses_pass() {
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "93.184.215.14",
            "9.255.255.255",
            "11.0.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "126.255.255.255",
            "128.0.0.0",
            "169.253.255.255",
            "169.255.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.0.1.0",
            "192.0.3.0",
            "192.167.255.255",
            "192.169.0.0",
            "198.17.255.255",
            "198.20.0.0",
            "223.255.255.255",
            "2606:4700:4700::1111",
            "2001:4860:4860::8888",
            "2a00:1450:4001:80b::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "2001:200::1",
        ] {
            assert!(!forbidden(ip), "{ip} is public");
        }
    }

    #[test]
    fn every_special_ipv4_range_is_refused_at_both_ends() {
        for (first, last) in [
            ("0.0.0.0", "0.255.255.255"),
            ("10.0.0.0", "10.255.255.255"),
            ("100.64.0.0", "100.127.255.255"),
            ("127.0.0.0", "127.255.255.255"),
            ("169.254.0.0", "169.254.255.255"),
            ("172.16.0.0", "172.31.255.255"),
            ("192.0.0.0", "192.0.0.255"),
            ("192.0.2.0", "192.0.2.255"),
            ("192.88.99.0", "192.88.99.255"),
            ("192.168.0.0", "192.168.255.255"),
            ("198.18.0.0", "198.19.255.255"),
            ("198.51.100.0", "198.51.100.255"),
            ("203.0.113.0", "203.0.113.255"),
            ("224.0.0.0", "239.255.255.255"),
            ("240.0.0.0", "255.255.255.255"),
        ] {
            assert!(forbidden(first), "{first}");
            assert!(forbidden(last), "{last}");
        }
        for ip in ["127.0.0.1", "169.254.169.254", "0.0.0.0", "255.255.255.255"] {
            assert!(forbidden(ip), "{ip}");
        }
    }

    #[test]
    fn special_ipv6_addresses_are_refused() {
        for ip in [
            "::",
            "::1",
            "::7f00:1",
            "::808:808",
            "100::1",
            "fc00::1",
            "fd12:3456:789a::1",
            "fe80::1",
            "febf:ffff::1",
            "fec0::1",
            "feff::1",
            "ff02::1",
            "ff05::2",
            "4000::1",
            "1fff:ffff::1",
            "2001::1",
            "2001:2::1",
            "2001:10::1",
            "2001:20::1",
            "2001:db8::1",
            "3fff::1",
            "64:ff9b:1::a00:1",
        ] {
            assert!(forbidden(ip), "{ip}");
        }
    }

    #[test]
    fn ipv6_forms_carrying_a_special_ipv4_address_are_refused() {
        for ip in [
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::ffff:0.0.0.0",
            "::ffff:192.168.1.1",
            "::ffff:100.64.0.1",
            "::127.0.0.1",
            "::169.254.169.254",
            "64:ff9b::127.0.0.1",
            "64:ff9b::10.1.2.3",
            "64:ff9b::169.254.169.254",
            "64:ff9b::192.168.0.1",
            "2002:7f00:1::1",
            "2002:a9fe:a9fe::",
            "2002:c0a8:101::1",
        ] {
            assert!(forbidden(ip), "{ip}");
        }
    }

    #[test]
    fn the_helpers_mask_exactly_the_prefix() {
        assert!(in_prefix32(0x0a00_0001, 0x0a00_0000, 8));
        assert!(!in_prefix32(0x0b00_0001, 0x0a00_0000, 8));
        assert!(in_prefix32(0xdead_beef, 0, 0));
        assert!(in_prefix32(0x7f00_0001, 0x7f00_0001, 32));
        assert!(!in_prefix32(0x7f00_0002, 0x7f00_0001, 32));
        assert!(in_prefix128(u128::MAX, (0, 0)));
        assert!(in_prefix128(1, (1, 128)));
        assert!(!in_prefix128(2, (1, 128)));
    }
}
