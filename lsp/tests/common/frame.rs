//! Reading the server's `Content-Length` frames: shared by the tests'
//! client (`tests/common`) and the benches' (`benches/support`, which
//! includes this file by path).

use std::io::BufRead;

/// One frame's body, as sent; `None` at the end of the stream or on a
/// malformed frame.
pub fn read_body(reader: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut length = None;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(value) = line.strip_prefix("Content-Length: ") {
            length = value.parse::<usize>().ok();
        }
    }
    let mut body = vec![0; length?];
    reader.read_exact(&mut body).ok()?;
    Some(body)
}
