//! `http.trusted_proxies`: the addresses and CIDR blocks of the reverse proxies whose
//! client-address header is believed.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use super::ConfigError;

/// An address or a CIDR block of `http.trusted_proxies` (`10.0.0.0/8`, `::1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyRange {
    network: IpAddr,
    prefix: u8,
}

impl ProxyRange {
    /// Whether `ip` lies in the range (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.network, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                prefix_matches(&net.octets(), &ip.octets(), self.prefix)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                prefix_matches(&net.octets(), &ip.octets(), self.prefix)
            }
            _ => false,
        }
    }
}

/// Whether the first `prefix` bits of `a` and `b` agree.
fn prefix_matches(a: &[u8], b: &[u8], prefix: u8) -> bool {
    let bits = usize::from(prefix);
    let (whole, rest) = (bits / 8, bits % 8);
    if a[..whole] != b[..whole] {
        return false;
    }
    rest == 0 || {
        let mask = 0xffu8 << (8 - rest);
        a[whole] & mask == b[whole] & mask
    }
}

impl FromStr for ProxyRange {
    type Err = ConfigError;

    fn from_str(text: &str) -> Result<ProxyRange, ConfigError> {
        let bad = || {
            ConfigError::new(format!(
                "http.trusted_proxies: invalid entry {text:?}: expected an IP address or a \
                 CIDR block, e.g. \"127.0.0.1\", \"10.0.0.0/8\" or \"fd00::/8\""
            ))
        };
        let (addr, prefix) = match text.trim().split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text.trim(), None),
        };
        let network: IpAddr = addr.parse().map_err(|_| bad())?;
        let network = network.to_canonical();
        let max = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(bad)?,
            None => max,
        };
        Ok(ProxyRange { network, prefix })
    }
}

impl fmt::Display for ProxyRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = if self.network.is_ipv4() { 32 } else { 128 };
        if self.prefix == whole {
            write!(f, "{}", self.network)
        } else {
            write!(f, "{}/{}", self.network, self.prefix)
        }
    }
}
