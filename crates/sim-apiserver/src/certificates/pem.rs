//! Go's `encoding/pem` `Decode` and `encoding/base64` `StdEncoding.Decode`, ported so that
//! the simulator finds (and fails to find) exactly the blocks kube-apiserver finds: PEM data
//! may be surrounded by other text, a block with a bad trailer or bad base64 is skipped, and
//! the base64 decoder skips line breaks and names the offset of the first bad byte.

use std::collections::BTreeMap;

/// One PEM block: its type, its headers and the decoded bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The word(s) after `BEGIN`, e.g. `CERTIFICATE REQUEST`.
    pub kind: String,
    /// `Key: value` lines before the base64 data.
    pub headers: BTreeMap<String, String>,
    /// The decoded contents.
    pub bytes: Vec<u8>,
}

const PEM_START: &[u8] = b"\n-----BEGIN ";
const PEM_END: &[u8] = b"\n-----END ";
const PEM_END_OF_LINE: &[u8] = b"-----";

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn rfind(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.len() > haystack.len() {
        return None;
    }
    haystack.windows(needle.len()).rposition(|w| w == needle)
}

fn trim_right_space_tab(mut s: &[u8]) -> &[u8] {
    while let Some((&last, rest)) = s.split_last() {
        if last == b' ' || last == b'\t' {
            s = rest;
        } else {
            break;
        }
    }
    s
}

/// `getLine`: the first line without its line ending and trailing blanks, the rest, and how
/// many bytes were consumed.
fn get_line(data: &[u8]) -> (&[u8], &[u8], usize) {
    let (mut i, j) = match data.iter().position(|&b| b == b'\n') {
        None => (data.len(), data.len()),
        Some(i) => (i, i + 1),
    };
    if j != i && i > 0 && data[i - 1] == b'\r' {
        i -= 1;
    }
    (trim_right_space_tab(&data[..i]), &data[j..], j)
}

fn trim_space(s: &[u8]) -> &[u8] {
    let is_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c);
    let start = s.iter().position(|b| !is_space(b)).unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|b| !is_space(b))
        .map_or(start, |e| e + 1);
    &s[start..end.max(start)]
}

/// `pem.Decode`: the first well-formed block in `data` and what follows it, or `None`.
pub fn decode(data: &[u8]) -> Option<(Block, &[u8])> {
    let mut rest: &[u8] = data;
    let mut end_trailer_index: isize = 0;
    loop {
        if end_trailer_index < 0 || end_trailer_index as usize > rest.len() {
            return None;
        }
        rest = &rest[end_trailer_index as usize..];
        let end_index = find(rest, PEM_END)?;
        end_trailer_index = (end_index + PEM_END.len()) as isize;
        let begin_index = match rfind(&rest[..end_index], &PEM_START[1..]) {
            Some(b) if b == 0 || rest[b - 1] == b'\n' => b,
            _ => continue,
        };
        let skip = begin_index + PEM_START.len() - 1;
        rest = &rest[skip..];
        let mut end_index = end_index as isize - skip as isize;
        end_trailer_index -= skip as isize;

        let (type_line, after, consumed) = get_line(rest);
        rest = after;
        end_index -= consumed as isize;
        end_trailer_index -= consumed as isize;
        let Some(type_line) = type_line.strip_suffix(PEM_END_OF_LINE) else {
            continue;
        };

        let mut headers = BTreeMap::new();
        let mut truncated = false;
        loop {
            if rest.is_empty() {
                truncated = true;
                break;
            }
            let (line, next, consumed) = get_line(rest);
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                break;
            };
            let key = trim_space(&line[..colon]);
            let value = trim_space(&line[colon + 1..]);
            headers.insert(
                String::from_utf8_lossy(key).into_owned(),
                String::from_utf8_lossy(value).into_owned(),
            );
            rest = next;
            end_index -= consumed as isize;
            end_trailer_index -= consumed as isize;
        }
        if truncated {
            return None;
        }
        if !headers.is_empty() && end_index < 0 {
            continue;
        }
        if end_trailer_index < 0 || end_trailer_index as usize > rest.len() {
            continue;
        }
        let end_trailer = &rest[end_trailer_index as usize..];
        let end_trailer_len = type_line.len() + PEM_END_OF_LINE.len();
        if end_trailer.len() < end_trailer_len {
            continue;
        }
        let rest_of_end_line = &end_trailer[end_trailer_len..];
        let end_trailer = &end_trailer[..end_trailer_len];
        if !end_trailer.starts_with(type_line) || !end_trailer.ends_with(PEM_END_OF_LINE) {
            continue;
        }
        if !get_line(rest_of_end_line).0.is_empty() {
            continue;
        }
        let mut bytes = Vec::new();
        if end_index > 0 {
            let data: Vec<u8> = rest[..end_index as usize]
                .iter()
                .copied()
                .filter(|b| *b != b' ' && *b != b'\t')
                .collect();
            match decode_base64(&data) {
                Ok(decoded) => bytes = decoded,
                Err(_) => continue,
            }
        }
        // The END line may have been matched without its leading newline (an empty block).
        let from = (end_index + PEM_END.len() as isize - 1).max(0) as usize;
        let (_, after, _) = get_line(&rest[from.min(rest.len())..]);
        return Some((
            Block {
                kind: String::from_utf8_lossy(type_line).into_owned(),
                headers,
                bytes,
            },
            after,
        ));
    }
}

/// The value of one base64 character of the standard alphabet.
fn sextet(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// `base64.StdEncoding.Decode`: padding required, `\r` and `\n` skipped, trailing bits
/// ignored. The error is the offset Go's `CorruptInputError` names.
///
/// # Errors
/// The offset of the first byte that cannot be decoded.
pub fn decode_base64(src: &[u8]) -> Result<Vec<u8>, usize> {
    let mut out = Vec::with_capacity(src.len() / 4 * 3);
    let mut si = 0;
    while si < src.len() {
        let mut buf = [0u8; 4];
        let mut len = 4;
        let mut j = 0;
        let mut trailing = None;
        while j < 4 {
            if si == src.len() {
                if j == 0 {
                    return Ok(out);
                }
                // Padding is required: a short quantum is corrupt.
                return Err(si - j);
            }
            let c = src[si];
            si += 1;
            if let Some(v) = sextet(c) {
                buf[j] = v;
                j += 1;
                continue;
            }
            if c == b'\n' || c == b'\r' {
                continue;
            }
            if c != b'=' {
                return Err(si - 1);
            }
            match j {
                0 | 1 => return Err(si - 1),
                2 => {
                    while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
                        si += 1;
                    }
                    if si == src.len() {
                        return Err(src.len());
                    }
                    if src[si] != b'=' {
                        return Err(si - 1);
                    }
                    si += 1;
                }
                _ => {}
            }
            while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
                si += 1;
            }
            if si < src.len() {
                trailing = Some(si);
            }
            len = j;
            break;
        }
        let value = u32::from(buf[0]) << 18
            | u32::from(buf[1]) << 12
            | u32::from(buf[2]) << 6
            | u32::from(buf[3]);
        let bytes = [(value >> 16) as u8, (value >> 8) as u8, value as u8];
        out.extend_from_slice(&bytes[..len - 1]);
        if let Some(offset) = trailing {
            return Err(offset);
        }
    }
    Ok(out)
}

/// `pem.EncodeToMemory` of a block without headers: base64 in lines of 64 characters.
pub fn encode(kind: &str, bytes: &[u8]) -> String {
    use base64::Engine as _;
    let text = base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut out = format!("-----BEGIN {kind}-----\n");
    for chunk in text.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {kind}-----\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_surrounded_by_text_is_found_with_what_follows() {
        let text = b"junk\n-----BEGIN THING-----\naGVsbG8=\n-----END THING-----\nafter";
        let (block, rest) = decode(text).unwrap();
        assert_eq!(block.kind, "THING");
        assert_eq!(block.bytes, b"hello");
        assert_eq!(rest, b"after");
    }

    #[test]
    fn headers_are_read_and_a_mismatched_trailer_is_no_block() {
        let text = b"-----BEGIN A-----\nProc-Type: 4,ENCRYPTED\n\naGk=\n-----END A-----\n";
        let (block, _) = decode(text).unwrap();
        assert_eq!(block.headers["Proc-Type"], "4,ENCRYPTED");
        assert_eq!(block.bytes, b"hi");
        assert!(decode(b"-----BEGIN A-----\naGk=\n-----END B-----\n").is_none());
        assert!(decode(b"not pem at all").is_none());
    }

    #[test]
    fn an_empty_block_decodes_to_no_bytes() {
        let (block, _) =
            decode(b"-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n").unwrap();
        assert!(block.bytes.is_empty());
    }

    #[test]
    fn base64_names_the_offset_go_names() {
        assert_eq!(decode_base64(b"aGVsbG8=").unwrap(), b"hello");
        assert_eq!(decode_base64(b"aGVs\nbG8=").unwrap(), b"hello");
        assert_eq!(decode_base64(b"aGV!"), Err(3));
        assert_eq!(decode_base64(b"aGVsbG8"), Err(4));
        assert_eq!(decode_base64(b"aGVsbG8=x"), Err(8));
        assert_eq!(decode_base64(b"a==="), Err(1));
    }

    #[test]
    fn encoding_wraps_at_sixty_four_characters() {
        let pem = encode("CERTIFICATE", &[0u8; 60]);
        let lines: Vec<&str> = pem.lines().collect();
        assert_eq!(lines[0], "-----BEGIN CERTIFICATE-----");
        assert_eq!(lines[1].len(), 64);
        assert_eq!(lines.last().copied(), Some("-----END CERTIFICATE-----"));
        assert_eq!(decode(pem.as_bytes()).unwrap().0.bytes, vec![0u8; 60]);
    }
}
