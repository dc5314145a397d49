//! Which addresses web_fetch may connect to: a pure policy over IP addresses, no I/O.
//!
//! Every address is classified; anything that is not a public internet address is refused
//! unless the operator allowed that exact address or host name (`[web] allow_private`).
//! IPv6 forms that embed an IPv4 address (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible
//! `::a.b.c.d`, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are judged by the embedded address,
//! so `[::ffff:127.0.0.1]` is as loopback as `127.0.0.1`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is not a public internet address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    /// `0.0.0.0/8`, `::` — "this host"; connecting to it reaches the local machine.
    Unspecified,
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// RFC 1918: `10/8`, `172.16/12`, `192.168/16`.
    Private,
    /// `100.64.0.0/10` (RFC 6598), used inside providers' networks.
    CarrierGradeNat,
    /// `169.254/16`, `fe80::/10`.
    LinkLocal,
    /// `fc00::/7` (and the deprecated site-local `fec0::/10`).
    UniqueLocal,
    /// `224/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// Cloud instance metadata services (169.254.169.254, fd00:ec2::254, ...), which hand out
    /// credentials.
    CloudMetadata,
    /// Documentation, benchmarking, IETF protocol, reserved and tunnelling ranges that are
    /// never a web server on the internet.
    Reserved,
}

impl AddressClass {
    /// The words used in refusals.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Unspecified => "unspecified (this-host)",
            Self::Loopback => "loopback",
            Self::Private => "private (RFC 1918)",
            Self::CarrierGradeNat => "carrier-grade NAT",
            Self::LinkLocal => "link-local",
            Self::UniqueLocal => "unique-local",
            Self::Multicast => "multicast",
            Self::Broadcast => "broadcast",
            Self::CloudMetadata => "cloud metadata",
            Self::Reserved => "reserved",
        }
    }
}

/// Cloud metadata endpoints: AWS/GCP/Azure/OpenStack/Oracle, AWS ECS task metadata, Alibaba,
/// Oracle's legacy address.
const METADATA_V4: [Ipv4Addr; 4] = [
    Ipv4Addr::new(169, 254, 169, 254),
    Ipv4Addr::new(169, 254, 170, 2),
    Ipv4Addr::new(100, 100, 100, 200),
    Ipv4Addr::new(192, 0, 0, 192),
];

/// AWS's IPv6 instance metadata endpoint, `fd00:ec2::254`.
const METADATA_V6: [Ipv6Addr; 1] = [Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)];

/// Classifies `ip`; `None` means a public internet address.
pub(super) fn classify(ip: IpAddr) -> Option<AddressClass> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<AddressClass> {
    let [a, b, c, _] = ip.octets();
    let class = if METADATA_V4.contains(&ip) {
        AddressClass::CloudMetadata
    } else if a == 0 {
        AddressClass::Unspecified
    } else if a == 127 {
        AddressClass::Loopback
    } else if a == 10 || (a == 172 && (16..32).contains(&b)) || (a == 192 && b == 168) {
        AddressClass::Private
    } else if a == 100 && (64..128).contains(&b) {
        AddressClass::CarrierGradeNat
    } else if a == 169 && b == 254 {
        AddressClass::LinkLocal
    } else if ip.is_broadcast() {
        AddressClass::Broadcast
    } else if (224..240).contains(&a) {
        AddressClass::Multicast
    } else if a >= 240
        || (a == 192 && b == 0 && c == 0)
        || (a == 192 && b == 0 && c == 2)
        || (a == 198 && (18..20).contains(&b))
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
        || (a == 192 && b == 88 && c == 99)
    {
        AddressClass::Reserved
    } else {
        return None;
    };
    Some(class)
}

fn classify_v6(ip: Ipv6Addr) -> Option<AddressClass> {
    if METADATA_V6.contains(&ip) {
        return Some(AddressClass::CloudMetadata);
    }
    if ip.is_unspecified() {
        return Some(AddressClass::Unspecified);
    }
    if ip.is_loopback() {
        return Some(AddressClass::Loopback);
    }
    if let Some(v4) = embedded_v4(ip) {
        // A public address in the deprecated IPv4-compatible form is still not a web server.
        let compatible = ip.segments()[..6].iter().all(|s| *s == 0);
        return classify_v4(v4).or(compatible.then_some(AddressClass::Reserved));
    }
    let s = ip.segments();
    let class = if s[0] & 0xfe00 == 0xfc00 || s[0] & 0xffc0 == 0xfec0 {
        AddressClass::UniqueLocal
    } else if s[0] & 0xffc0 == 0xfe80 {
        AddressClass::LinkLocal
    } else if s[0] & 0xff00 == 0xff00 {
        AddressClass::Multicast
    } else if s[0] < 0x2000 || (s[0] == 0x2001 && (s[1] == 0x0db8 || s[1] < 0x200)) {
        // Below 2000::/3 (discard-only 100::/64 and the like), documentation 2001:db8::/32,
        // and IETF assignments 2001::/23, which include Teredo tunnels to anywhere.
        AddressClass::Reserved
    } else {
        return None;
    };
    Some(class)
}

/// The IPv4 address inside an IPv4-mapped, IPv4-compatible, NAT64 or 6to4 IPv6 address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let tail = || Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if s[..5] == [0, 0, 0, 0, 0] && (s[5] == 0xffff || s[5] == 0) {
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

/// web_fetch refused to connect to an address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "refused: {host} is {address}, a {} address; web_fetch only reaches public internet \
     addresses (an operator can allow a private host with `[web] allow_private`)",
    class.describe()
)]
pub struct Refusal {
    /// The host as the URL names it.
    pub host: String,
    /// The address it is or resolved to.
    pub address: IpAddr,
    /// Why the address is refused.
    pub class: AddressClass,
}

/// The operator's allowance of private hosts and addresses (`[web] allow_private`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SsrfPolicy {
    addresses: Vec<IpAddr>,
    hosts: Vec<String>,
}

impl SsrfPolicy {
    /// Builds the policy from `allow_private` entries: IP addresses or host names.
    pub fn new(allow_private: &[String]) -> Self {
        let mut policy = Self::default();
        for entry in allow_private {
            let entry = entry.trim().trim_start_matches('[').trim_end_matches(']');
            match entry.parse::<IpAddr>() {
                Ok(ip) => policy.addresses.push(canonical(ip)),
                Err(_) => policy.hosts.push(normalize_host(entry)),
            }
        }
        policy
    }

    /// Whether web_fetch may connect to `address`, which `host` (as the URL names it) is or
    /// resolved to. A public address always may; a private one only if the operator allowed
    /// the address itself or the host name.
    pub fn check(&self, host: &str, address: IpAddr) -> Result<(), Refusal> {
        let Some(class) = classify(address) else {
            return Ok(());
        };
        let allowed = self.addresses.contains(&canonical(address))
            || self.hosts.iter().any(|h| *h == normalize_host(host));
        if allowed {
            return Ok(());
        }
        Err(Refusal {
            host: host.to_owned(),
            address,
            class,
        })
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn normalize_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn class(ip: &str) -> Option<AddressClass> {
        classify(ip.parse().expect("an IP address"))
    }

    #[test]
    fn every_address_class_is_recognized() {
        use AddressClass::*;
        let table = [
            ("0.0.0.0", Some(Unspecified)),
            ("0.1.2.3", Some(Unspecified)),
            ("::", Some(Unspecified)),
            ("127.0.0.1", Some(Loopback)),
            ("127.255.0.9", Some(Loopback)),
            ("::1", Some(Loopback)),
            ("10.1.2.3", Some(Private)),
            ("172.16.0.1", Some(Private)),
            ("172.31.255.255", Some(Private)),
            ("192.168.1.1", Some(Private)),
            ("100.64.0.1", Some(CarrierGradeNat)),
            ("100.127.255.254", Some(CarrierGradeNat)),
            ("169.254.1.1", Some(LinkLocal)),
            ("fe80::1", Some(LinkLocal)),
            ("fc00::1", Some(UniqueLocal)),
            ("fd12:3456::1", Some(UniqueLocal)),
            ("fec0::1", Some(UniqueLocal)),
            ("224.0.0.1", Some(Multicast)),
            ("239.255.255.250", Some(Multicast)),
            ("ff02::1", Some(Multicast)),
            ("255.255.255.255", Some(Broadcast)),
            ("169.254.169.254", Some(CloudMetadata)),
            ("169.254.170.2", Some(CloudMetadata)),
            ("100.100.100.200", Some(CloudMetadata)),
            ("fd00:ec2::254", Some(CloudMetadata)),
            ("240.0.0.1", Some(Reserved)),
            ("192.0.2.1", Some(Reserved)),
            ("198.18.0.1", Some(Reserved)),
            ("2001:db8::1", Some(Reserved)),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", Some(Reserved)),
            // IPv6 forms of IPv4 addresses are judged by the IPv4 address.
            ("::ffff:127.0.0.1", Some(Loopback)),
            ("::ffff:169.254.169.254", Some(CloudMetadata)),
            ("::ffff:10.0.0.1", Some(Private)),
            ("::127.0.0.1", Some(Loopback)),
            ("::10.0.0.1", Some(Private)),
            ("::8.8.8.8", Some(Reserved)),
            ("64:ff9b::7f00:1", Some(Loopback)),
            ("2002:7f00:1::", Some(Loopback)),
            ("2002:a9fe:a9fe::1", Some(CloudMetadata)),
            // Public addresses.
            ("8.8.8.8", None),
            ("172.32.0.1", None),
            ("100.128.0.1", None),
            ("93.184.216.34", None),
            ("::ffff:8.8.8.8", None),
            ("2606:4700:4700::1111", None),
            ("2a00:1450:4001::200e", None),
        ];
        for (ip, expected) in table {
            assert_eq!(class(ip), expected, "{ip}");
        }
    }

    #[test]
    fn the_allowance_names_addresses_or_hosts_and_nothing_else() {
        let policy = SsrfPolicy::new(&["127.0.0.2".into(), "Wiki.Internal.".into()]);
        let ip = |s: &str| s.parse::<IpAddr>().expect("an IP address");
        assert_eq!(policy.check("127.0.0.2", ip("127.0.0.2")), Ok(()));
        assert_eq!(policy.check("x", ip("::ffff:127.0.0.2")), Ok(()));
        assert_eq!(policy.check("wiki.internal", ip("10.0.0.5")), Ok(()));
        assert_eq!(policy.check("example.com", ip("8.8.8.8")), Ok(()));
        let refused = policy.check("localhost", ip("127.0.0.1")).unwrap_err();
        assert_eq!(
            refused,
            Refusal {
                host: "localhost".into(),
                address: ip("127.0.0.1"),
                class: AddressClass::Loopback,
            }
        );
        assert!(
            refused
                .to_string()
                .contains("localhost is 127.0.0.1, a loopback address")
        );
        assert!(policy.check("other.internal", ip("10.0.0.5")).is_err());
        assert!(
            SsrfPolicy::default()
                .check("127.0.0.2", ip("127.0.0.2"))
                .is_err()
        );
    }
}
