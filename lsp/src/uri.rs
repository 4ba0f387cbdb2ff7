//! Document URIs. lsp-types 0.97's `Uri` is not `url::Url`; documents are
//! keyed by the URI exactly as the client sent it, and shown as a path in
//! messages when it is a `file:` URI.

use lsp_types::Uri;

/// The key a document is stored under.
pub fn key(uri: &Uri) -> String {
    uri.as_str().to_owned()
}

/// A readable name for messages: the decoded path of a `file:` URI, the
/// URI itself otherwise.
pub fn display(uri: &Uri) -> String {
    let text = uri.as_str();
    match text.strip_prefix("file://") {
        Some(path) => percent_decode(path),
        None => text.to_owned(),
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            if let Some(byte) = hex {
                out.push(byte);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_uris_read_as_paths() {
        let uri: Uri = "file:///tmp/my%20policy.mcpolicy".parse().expect("uri");
        assert_eq!(display(&uri), "/tmp/my policy.mcpolicy");
        assert_eq!(key(&uri), "file:///tmp/my%20policy.mcpolicy");
    }
}
