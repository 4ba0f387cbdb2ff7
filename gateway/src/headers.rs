//! Which headers pass, and the MCP transport's DNS-rebinding rules
//! (`Origin` and `Host`): pure functions, tested here and through a
//! running gateway (`gateway/tests/hostile_upstream.rs`).

use std::net::SocketAddr;

use hyper::HeaderMap;
use hyper::header::{self, HeaderName};

/// Whether a header is hop-by-hop (RFC 9110 §7.6.1): it describes one
/// connection, never the message, so it is not forwarded either way.
pub fn is_hop_by_hop(name: &HeaderName) -> bool {
    let name = name.as_str();
    matches!(
        name,
        "connection" | "keep-alive" | "te" | "trailer" | "transfer-encoding" | "upgrade"
    ) || name.starts_with("proxy-")
}

/// The headers of `from` that pass to the next hop: every one except the
/// hop-by-hop ones, those the `Connection` header names, `Host` (the
/// client sets the upstream's), and `Content-Length` (the body may be
/// rewritten; hyper writes the length of what it sends).
pub fn forwarded(from: &HeaderMap) -> HeaderMap {
    let named: Vec<String> = from
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    let mut out = HeaderMap::with_capacity(from.len());
    for (name, value) in from {
        if is_hop_by_hop(name)
            || name == header::HOST
            || name == header::CONTENT_LENGTH
            || named.iter().any(|t| t == name.as_str())
        {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

/// The origins allowed when none are configured: the loopback origins of
/// the port the gateway listens on, in its scheme (`http`, or `https` on
/// TLS).
pub fn default_origins(scheme: &str, port: u16) -> Vec<String> {
    vec![
        format!("{scheme}://127.0.0.1:{port}"),
        format!("{scheme}://localhost:{port}"),
        format!("{scheme}://[::1]:{port}"),
    ]
}

/// Whether `text` is an origin as a browser sends it: `scheme://host[:port]`
/// with nothing after it.
pub fn is_origin(text: &str) -> bool {
    let Some((scheme, rest)) = text.split_once("://") else {
        return false;
    };
    !scheme.is_empty()
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
        && !rest.is_empty()
        && !rest.contains(['/', '?', '#', '@', ' '])
}

/// The MCP transport's rule against DNS rebinding: a request with no
/// `Origin` passes (not a browser); one with an `Origin` passes only when it
/// is one of `allowed` (compared ASCII-case-insensitively, as origins are).
/// Several `Origin` headers, or one that is not text, never pass.
pub fn origin_allowed(headers: &HeaderMap, allowed: &[String]) -> bool {
    let mut values = headers.get_all(header::ORIGIN).iter();
    let Some(origin) = values.next() else {
        return true;
    };
    if values.next().is_some() {
        return false;
    }
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    allowed.iter().any(|a| a.eq_ignore_ascii_case(origin))
}

/// Whether the `Host` header names this loopback listener: `127.0.0.1`,
/// `localhost` or `[::1]` (any case), with the listening port or none. A
/// DNS-rebinding page reaches a loopback port under its own host name; the
/// gateway then refuses it even when its browser sends no `Origin`. Only
/// checked when the gateway listens on loopback.
pub fn host_allowed(headers: &HeaderMap, listen: SocketAddr) -> bool {
    let mut values = headers.get_all(header::HOST).iter();
    let (Some(host), None) = (values.next(), values.next()) else {
        return false;
    };
    let Ok(host) = host.to_str() else {
        return false;
    };
    let host = host.to_ascii_lowercase();
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port))
            if !name.ends_with(':') && (name.ends_with(']') || !name.contains(':')) =>
        {
            (name, Some(port))
        }
        _ => (host.as_str(), None),
    };
    let port_ok = port.is_none_or(|p| p.parse::<u16>() == Ok(listen.port()));
    port_ok && matches!(name, "127.0.0.1" | "localhost" | "[::1]")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use hyper::header::HeaderValue;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_do_not_pass() {
        let from = map(&[
            ("connection", "keep-alive, x-secret-hop"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("proxy-authorization", "Basic abc"),
            ("host", "127.0.0.1:1"),
            ("content-length", "5"),
            ("x-secret-hop", "1"),
            ("mcp-session-id", "s1"),
            ("mcp-protocol-version", "2025-06-18"),
            ("authorization", "Bearer t"),
            ("last-event-id", "7"),
            ("accept", "application/json, text/event-stream"),
        ]);
        let out = forwarded(&from);
        let mut names: Vec<&str> = out.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "accept",
                "authorization",
                "last-event-id",
                "mcp-protocol-version",
                "mcp-session-id"
            ]
        );
    }

    #[test]
    fn origin_rules() {
        let allowed = default_origins("http", 8080);
        assert!(origin_allowed(&map(&[]), &allowed));
        assert!(origin_allowed(
            &map(&[("origin", "http://localhost:8080")]),
            &allowed
        ));
        assert!(origin_allowed(
            &map(&[("origin", "HTTP://[::1]:8080")]),
            &allowed
        ));
        for bad in [
            "http://localhost:8081",
            "http://evil.example",
            "null",
            "http://127.0.0.1:8080.evil.example",
        ] {
            assert!(!origin_allowed(&map(&[("origin", bad)]), &allowed), "{bad}");
        }
        assert!(!origin_allowed(
            &map(&[
                ("origin", "http://localhost:8080"),
                ("origin", "http://evil.example")
            ]),
            &allowed
        ));
        assert!(is_origin("https://app.example:8443"));
        assert!(!is_origin("https://app.example/path"));
        assert!(!is_origin("app.example"));
    }

    #[test]
    fn host_rules_on_loopback() {
        let listen: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        for good in [
            "127.0.0.1:8080",
            "localhost",
            "LOCALHOST:8080",
            "[::1]:8080",
            "[::1]",
        ] {
            assert!(host_allowed(&map(&[("host", good)]), listen), "{good}");
        }
        for bad in [
            "evil.example:8080",
            "127.0.0.1:9090",
            "127.0.0.2:8080",
            "localhost.evil.example",
            "[::2]:8080",
        ] {
            assert!(!host_allowed(&map(&[("host", bad)]), listen), "{bad}");
        }
        assert!(!host_allowed(&map(&[]), listen));
    }
}
