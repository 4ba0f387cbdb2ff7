//! A sink that keeps what the session writes. The proxy's sans-IO core
//! ([`super::session::Session`]) takes its four outputs as `Write` sinks; its
//! unit tests, the state-machine model test and the `proxy` fuzz target all
//! drive it through this one.

use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};

/// A shared in-memory sink: clones write to the same buffer.
#[derive(Debug, Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    fn bytes(&self) -> MutexGuard<'_, Vec<u8>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The complete lines written since the last call, without their
    /// newlines (a partial last line stays for the next call).
    pub fn take_lines(&self) -> Vec<Vec<u8>> {
        let mut bytes = self.bytes();
        let end = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let taken: Vec<u8> = bytes.drain(..end).collect();
        taken
            .split(|&b| b == b'\n')
            .filter(|line| !line.is_empty())
            .map(<[u8]>::to_vec)
            .collect()
    }

    /// Every byte written since the last take, as written (the stream a
    /// client reader frames for itself).
    pub fn take_bytes(&self) -> Vec<u8> {
        std::mem::take(&mut *self.bytes())
    }

    /// [`Captured::take_lines`] as text (invalid UTF-8 replaced).
    pub fn take(&self) -> Vec<String> {
        self.take_lines()
            .iter()
            .map(|line| String::from_utf8_lossy(line).into_owned())
            .collect()
    }
}

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.bytes().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
