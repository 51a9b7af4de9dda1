//! Modified UTF-8 (JVMS 4.4.7): NUL as `C0 80`, supplementary characters as two 3-byte
//! surrogates, and unpaired surrogates allowed. Decoding yields UTF-16 code units, which is
//! what a Java string is; conversion to a Rust `String` is lossless unless a surrogate is unpaired.

/// Decodes modified UTF-8 into UTF-16 code units; `Err(index)` names the first bad byte.
pub fn decode(bytes: &[u8]) -> Result<Vec<u16>, usize> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b != 0 && b < 0x80 {
            out.push(u16::from(b));
            i += 1;
        } else if b & 0xE0 == 0xC0 {
            let b2 = *bytes.get(i + 1).ok_or(i)?;
            if b2 & 0xC0 != 0x80 {
                return Err(i + 1);
            }
            out.push((u16::from(b & 0x1F) << 6) | u16::from(b2 & 0x3F));
            i += 2;
        } else if b & 0xF0 == 0xE0 {
            let b2 = *bytes.get(i + 1).ok_or(i)?;
            let b3 = *bytes.get(i + 2).ok_or(i)?;
            if b2 & 0xC0 != 0x80 {
                return Err(i + 1);
            }
            if b3 & 0xC0 != 0x80 {
                return Err(i + 2);
            }
            out.push(
                (u16::from(b & 0x0F) << 12) | (u16::from(b2 & 0x3F) << 6) | u16::from(b3 & 0x3F),
            );
            i += 3;
        } else {
            // 0x00, a stray continuation byte, or a 4-byte form: none is legal.
            return Err(i);
        }
    }
    Ok(out)
}

/// Encodes UTF-16 code units (any, including unpaired surrogates) as modified UTF-8.
pub fn encode_utf16(units: &[u16]) -> Vec<u8> {
    let mut out = Vec::with_capacity(units.len());
    for &c in units {
        if c != 0 && c < 0x80 {
            out.push(c as u8);
        } else if c < 0x800 {
            out.push(0xC0 | (c >> 6) as u8);
            out.push(0x80 | (c & 0x3F) as u8);
        } else {
            out.push(0xE0 | (c >> 12) as u8);
            out.push(0x80 | ((c >> 6) & 0x3F) as u8);
            out.push(0x80 | (c & 0x3F) as u8);
        }
    }
    out
}

/// Encodes a Rust string as modified UTF-8.
pub fn encode(s: &str) -> Vec<u8> {
    let units: Vec<u16> = s.encode_utf16().collect();
    encode_utf16(&units)
}

/// Decodes to a Rust string; `None` if the bytes are malformed or hold an unpaired surrogate.
pub fn to_string(bytes: &[u8]) -> Option<String> {
    // Fast path: plain ASCII without NUL is the same in both encodings.
    if bytes.iter().all(|&b| b != 0 && b < 0x80) {
        return std::str::from_utf8(bytes).ok().map(str::to_string);
    }
    String::from_utf16(&decode(bytes).ok()?).ok()
}

/// Decodes to a Rust string, replacing unpaired surrogates and bad bytes with U+FFFD.
pub fn to_string_lossy(bytes: &[u8]) -> String {
    match decode(bytes) {
        Ok(units) => String::from_utf16_lossy(&units),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_is_two_bytes() {
        assert_eq!(encode("a\0b"), vec![b'a', 0xC0, 0x80, b'b']);
        assert_eq!(
            to_string(&[b'a', 0xC0, 0x80, b'b']).as_deref(),
            Some("a\0b")
        );
        assert_eq!(decode(&[0]), Err(0));
    }

    #[test]
    fn supplementary_is_a_surrogate_pair_of_three_byte_forms() {
        // U+1F600 = D83D DE00
        let enc = encode("\u{1F600}");
        assert_eq!(enc, vec![0xED, 0xA0, 0xBD, 0xED, 0xB8, 0x80]);
        assert_eq!(to_string(&enc).as_deref(), Some("\u{1F600}"));
        // Standard 4-byte UTF-8 is not legal modified UTF-8.
        assert_eq!(decode("\u{1F600}".as_bytes()), Err(0));
    }

    #[test]
    fn unpaired_surrogate_round_trips() {
        let units = [0x61, 0xD800, 0x62];
        let enc = encode_utf16(&units);
        assert_eq!(enc, vec![0x61, 0xED, 0xA0, 0x80, 0x62]);
        assert_eq!(decode(&enc).unwrap(), units.to_vec());
        assert_eq!(to_string(&enc), None);
        assert_eq!(to_string_lossy(&enc), "a\u{FFFD}b");
    }

    #[test]
    fn two_byte_and_three_byte_forms() {
        let s = "é€";
        let enc = encode(s);
        assert_eq!(enc, vec![0xC3, 0xA9, 0xE2, 0x82, 0xAC]);
        assert_eq!(to_string(&enc).as_deref(), Some(s));
    }

    #[test]
    fn truncated_and_bad_continuation_are_errors() {
        assert_eq!(decode(&[0xE2, 0x82]), Err(0));
        assert_eq!(decode(&[0xC3, 0x41]), Err(1));
        assert_eq!(decode(&[0x80]), Err(0));
    }
}
