//! Content digests: sha256 of what flows through a reader or writer, and the parsing of
//! `sha256:<hex>` digests, so that every blob read can be checked against the digest that
//! names it.
//!
//! # Caveats
//! Only sha256 is supported: a descriptor with a sha384 or sha512 digest is refused with
//! [`ImageError::Digest`](crate::ImageError::Digest) rather than read unverified.

use std::io::{self, Read, Write};

use sha2::{Digest as _, Sha256};

/// The hex part of `digest` when it is a well-formed sha256 digest.
pub(crate) fn sha256_hex(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    is_sha256_hex(hex).then_some(hex)
}

/// Whether `hex` is 64 lowercase hex digits.
pub(crate) fn is_sha256_hex(hex: &str) -> bool {
    hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// `sha256:<hex>` of a finished hash.
fn format(hasher: Sha256) -> String {
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for byte in hasher.finalize() {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    out
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The digest of `bytes`.
pub(crate) fn of(bytes: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(bytes);
    format(hasher)
}

/// A reader that hashes and counts what is read through it.
pub(crate) struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
    len: u64,
}

impl<R: Read> HashingReader<R> {
    pub(crate) fn new(inner: R) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            len: 0,
        }
    }

    /// Reads the rest of the stream (so that the digest covers all of it), then returns
    /// its digest and length.
    pub(crate) fn finish(mut self) -> io::Result<(String, u64)> {
        io::copy(&mut self, &mut io::sink())?;
        Ok((format(self.hasher), self.len))
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
}

/// A writer that hashes and counts what is written through it.
pub(crate) struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    len: u64,
}

impl<W: Write> HashingWriter<W> {
    pub(crate) fn new(inner: W) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            len: 0,
        }
    }

    /// The writer, the digest and the length of what was written.
    pub(crate) fn finish(self) -> (W, String, u64) {
        (self.inner, format(self.hasher), self.len)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_of_nothing_is_the_well_known_one() {
        assert_eq!(
            of(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn a_hashing_reader_covers_what_was_left_unread() {
        let mut reader = HashingReader::new(&b"hello world"[..]);
        let mut first = [0u8; 5];
        reader.read_exact(&mut first).unwrap();
        let (digest, len) = reader.finish().unwrap();
        assert_eq!(digest, of(b"hello world"));
        assert_eq!(len, 11);
    }

    #[test]
    fn only_well_formed_sha256_digests_are_accepted() {
        let hex = "a".repeat(64);
        assert_eq!(sha256_hex(&format!("sha256:{hex}")), Some(hex.as_str()));
        assert_eq!(sha256_hex(&format!("sha512:{hex}")), None);
        assert_eq!(sha256_hex("sha256:../../etc/passwd"), None);
        assert_eq!(sha256_hex(&format!("sha256:{}", "A".repeat(64))), None);
    }
}
