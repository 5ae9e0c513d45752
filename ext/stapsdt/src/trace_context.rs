//! W3C Trace Context (level 1) identifiers: the trace id and span id a
//! request carries in its `traceparent` header, which the recorder puts
//! beside the records a thread makes while it serves that request. One
//! owner of what an id looks like: the extension's API checks the ids it
//! is given here, the Rack middleware parses headers here, and the
//! command's `report --trace-id` reads its argument here.
//!
//! An id is lowercase hex, 32 digits for a trace id and 16 for a span id,
//! and not all zero (the specification's invalid value).

use std::fmt;

/// A trace id (16 bytes) and the id of the span within it (8 bytes),
/// neither all zero.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TraceContext {
    trace_id: [u8; TRACE_ID_LEN],
    span_id: [u8; SPAN_ID_LEN],
}

pub const TRACE_ID_LEN: usize = 16;
pub const SPAN_ID_LEN: usize = 8;

/// Which of the two ids a message is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdKind {
    Trace,
    Span,
}

impl IdKind {
    pub const fn name(self) -> &'static str {
        match self {
            IdKind::Trace => "trace id",
            IdKind::Span => "span id",
        }
    }

    /// How many hex digits an id of this kind has.
    pub const fn digits(self) -> usize {
        match self {
            IdKind::Trace => 2 * TRACE_ID_LEN,
            IdKind::Span => 2 * SPAN_ID_LEN,
        }
    }

    /// An id of this kind, as messages show the form expected.
    pub const fn example(self) -> &'static str {
        match self {
            IdKind::Trace => "4bf92f3577b34da6a3ce929d0e0e4736",
            IdKind::Span => "00f067aa0ba902b7",
        }
    }
}

/// Why text is not an id: the message names the kind, the form expected
/// and what was given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdError {
    pub kind: IdKind,
    /// What is wrong with it, after "got ...".
    problem: String,
}

impl fmt::Display for IdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a {} is {} lowercase hex digits, not all zero (as in a W3C traceparent: {}); {}",
            self.kind.name(),
            self.kind.digits(),
            self.kind.example(),
            self.problem
        )
    }
}

impl std::error::Error for IdError {}

/// Text given for an id, shown in a message: escaped, and cut if long.
fn shown(text: &[u8]) -> String {
    const SHOWN: usize = 48;
    let cut = &text[..text.len().min(SHOWN)];
    let mut out = String::from("\"");
    for &byte in cut {
        match byte {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(char::from(byte)),
            _ => out.push_str(&format!("\\x{byte:02X}")),
        }
    }
    out.push('"');
    if text.len() > SHOWN {
        out.push_str("...");
    }
    out
}

/// Each byte's value as a lowercase hex digit, `NOT_HEX` for any other:
/// ids are decoded as requests are served, a table lookup a digit.
const NOT_HEX: u8 = 0xff;
const HEX_VALUES: [u8; 256] = {
    let mut values = [NOT_HEX; 256];
    let mut digit = 0;
    while digit < 16 {
        values[b"0123456789abcdef"[digit] as usize] = digit as u8;
        digit += 1;
    }
    values
};

/// The value of a lowercase hex digit.
fn hex_value(byte: u8) -> Option<u8> {
    let value = HEX_VALUES[usize::from(byte)];
    (value != NOT_HEX).then_some(value)
}

/// The bytes `hex` (exactly `2 * N` lowercase hex digits) stands for.
/// Ids are decoded each time a context is set, around every request:
/// sixteen digits at a time where `N` and the machine allow, else eight.
fn decode<const N: usize>(hex: &[u8]) -> Option<[u8; N]> {
    if hex.len() != 2 * N {
        return None;
    }
    let mut out = [0; N];
    #[cfg(target_arch = "x86_64")]
    if N % 8 == 0 {
        let mut valid = true;
        for (bytes, digits) in out.chunks_exact_mut(8).zip(hex.chunks_exact(16)) {
            // SAFETY: SSE2 is part of x86-64 itself: every x86-64 CPU has it.
            let (decoded, ok) = unsafe { decode_sixteen(digits.try_into().unwrap_or_default()) };
            bytes.copy_from_slice(&decoded.to_le_bytes());
            valid &= ok;
        }
        return valid.then_some(out);
    }
    if N % 4 == 0 {
        // Every word is decoded before any is checked: one branch an id.
        let mut valid = true;
        for (bytes, digits) in out.chunks_exact_mut(4).zip(hex.chunks_exact(8)) {
            let digits = u64::from_le_bytes(digits.try_into().unwrap_or_default());
            let (decoded, ok) = decode_word(digits);
            bytes.copy_from_slice(&decoded.to_le_bytes());
            valid &= ok;
        }
        return valid.then_some(out);
    }
    let mut invalid = 0;
    for (byte, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
        let (high, low) = (
            HEX_VALUES[usize::from(pair[0])],
            HEX_VALUES[usize::from(pair[1])],
        );
        invalid |= high | low;
        *byte = (high << 4) | low;
    }
    (invalid & 0xf0 == 0).then_some(out)
}

/// Eight hex digits, read as a little-endian word (the first digit in the
/// low byte): the four bytes they stand for, in order in the returned
/// word's little-endian bytes, and whether all eight were lowercase hex
/// digits (when not, the bytes mean nothing).
#[inline]
fn decode_word(digits: u64) -> (u32, bool) {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Each byte's high bit set where that byte is at least `low`. Every
    // byte checked is below 0x80, so no sum carries into the next byte.
    let at_least = |low: u8| digits.wrapping_add(ONES * (0x80 - low as u64)) & HIGH;
    let digit = at_least(b'0') & !at_least(b'9' + 1);
    let letter = at_least(b'a') & !at_least(b'f' + 1);
    let valid = digits & HIGH == 0 && digit | letter == HIGH;
    // '0'..'9' are 0x30..0x39, 'a'..'f' 0x61..0x66: the low nibble, plus
    // 9 for a letter.
    let values = (digits & (ONES * 0x0f)) + (letter >> 7) * 9;
    // Byte 2k (a high nibble) and byte 2k + 1 (its low nibble) into the
    // low byte of 16-bit lane k, then the four lanes' low bytes together.
    const LANES: u64 = 0x00ff_00ff_00ff_00ff;
    let lanes = ((values & LANES) << 4) | ((values >> 8) & LANES);
    let halves = (lanes | (lanes >> 8)) & 0x0000_ffff_0000_ffff;
    ((halves | (halves >> 16)) as u32, valid)
}

/// What [`decode_word`] does, for sixteen digits at once in SSE2's
/// registers (every x86-64 has them): the eight bytes they stand for, in
/// order in the returned word's little-endian bytes, and whether all were
/// lowercase hex digits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn decode_sixteen(digits: [u8; 16]) -> (u64, bool) {
    use std::arch::x86_64::*;
    let (low, high) = digits.split_at(8);
    let word = |half: &[u8]| i64::from_le_bytes(half.try_into().unwrap_or_default());
    let digits = _mm_set_epi64x(word(high), word(low));
    // Signed comparisons: a byte from 0x80 up is below '0', so neither.
    let within = |first: u8, last: u8| {
        _mm_and_si128(
            _mm_cmpgt_epi8(digits, _mm_set1_epi8((first - 1) as i8)),
            _mm_cmplt_epi8(digits, _mm_set1_epi8((last + 1) as i8)),
        )
    };
    let letter = within(b'a', b'f');
    let valid = _mm_movemask_epi8(_mm_or_si128(within(b'0', b'9'), letter)) == 0xffff;
    let values = _mm_add_epi8(
        _mm_and_si128(digits, _mm_set1_epi8(0x0f)),
        _mm_and_si128(letter, _mm_set1_epi8(9)),
    );
    // Each 16-bit lane: its first digit's value (the high nibble) in its
    // low byte, its second's in its high byte; then the lanes' bytes packed.
    let lanes = _mm_or_si128(
        _mm_slli_epi16(_mm_and_si128(values, _mm_set1_epi16(0x00ff)), 4),
        _mm_srli_epi16(values, 8),
    );
    let packed = _mm_packus_epi16(lanes, lanes);
    (_mm_cvtsi128_si64(packed) as u64, valid)
}

fn parse_id<const N: usize>(kind: IdKind, hex: &[u8]) -> Result<[u8; N], IdError> {
    let error = |problem: String| IdError { kind, problem };
    if hex.len() != 2 * N {
        let plural = if hex.len() == 1 { "" } else { "s" };
        return Err(error(format!(
            "got {} ({} character{plural})",
            shown(hex),
            hex.len()
        )));
    }
    let Some(id) = decode::<N>(hex) else {
        let at = hex
            .iter()
            .position(|&byte| hex_value(byte).is_none())
            .unwrap_or(0);
        let what = if hex[at].is_ascii_hexdigit() {
            "an upper-case digit"
        } else {
            "not a hex digit"
        };
        return Err(error(format!(
            "got {}: character {} is {what}",
            shown(hex),
            at + 1
        )));
    };
    if id.iter().all(|&byte| byte == 0) {
        return Err(error(format!("got {}, all zero", shown(hex))));
    }
    Ok(id)
}

/// A trace id given as text (`report --trace-id`).
pub fn parse_trace_id(hex: &[u8]) -> Result<[u8; TRACE_ID_LEN], IdError> {
    parse_id(IdKind::Trace, hex)
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(2 * bytes.len());
    for &byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    out
}

/// The length of a `traceparent` of version 00: `00-` 32 digits `-` 16
/// digits `-` 2 digits.
const TRACEPARENT_LEN: usize = 55;

impl TraceContext {
    /// The context of these ids, unless one of them is all zero.
    pub fn new(trace_id: [u8; TRACE_ID_LEN], span_id: [u8; SPAN_ID_LEN]) -> Option<TraceContext> {
        // Whole words: a byte loop here was a tenth of setting a context.
        let zero = u128::from_ne_bytes(trace_id) == 0 || u64::from_ne_bytes(span_id) == 0;
        (!zero).then_some(TraceContext { trace_id, span_id })
    }

    /// The context of ids given as text: 32 and 16 lowercase hex digits,
    /// neither all zero. The error says which is wrong and how.
    pub fn from_hex(trace_id: &[u8], span_id: &[u8]) -> Result<TraceContext, IdError> {
        // The ids a request brings are valid: what is wrong with others
        // is worked out apart.
        match (decode(trace_id), decode(span_id)) {
            (Some(trace_id), Some(span_id)) => TraceContext::new(trace_id, span_id),
            _ => None,
        }
        .map_or_else(|| Self::refused(trace_id, span_id), Ok)
    }

    #[cold]
    fn refused(trace_id: &[u8], span_id: &[u8]) -> Result<TraceContext, IdError> {
        Ok(TraceContext {
            trace_id: parse_id(IdKind::Trace, trace_id)?,
            span_id: parse_id(IdKind::Span, span_id)?,
        })
    }

    pub fn trace_id(&self) -> &[u8; TRACE_ID_LEN] {
        &self.trace_id
    }

    pub fn span_id(&self) -> &[u8; SPAN_ID_LEN] {
        &self.span_id
    }

    pub fn trace_hex(&self) -> String {
        hex(&self.trace_id)
    }

    pub fn span_hex(&self) -> String {
        hex(&self.span_id)
    }

    /// The context an incoming `traceparent` header gives (W3C Trace
    /// Context level 1): the trace id and the parent id, the span that
    /// called this process. None for a header the specification calls
    /// invalid, which is ignored, never an error:
    ///
    /// - its version is not two lowercase hex digits, or is `ff`;
    /// - version `00`: not exactly 55 characters (so extra fields are
    ///   invalid), dashes elsewhere than after the version, the trace id
    ///   and the parent id, digits not lowercase hex, an id all zero;
    /// - a later version (parsed as version 00 is, as far as version 00
    ///   goes): shorter than 55 characters, or followed by anything but a
    ///   dash after its flags.
    ///
    /// Optional whitespace around the value (HTTP's OWS) is not part of it.
    pub fn from_traceparent(header: &[u8]) -> Option<TraceContext> {
        let header = header.trim_ascii();
        if header.len() < TRACEPARENT_LEN {
            return None;
        }
        let version = decode::<1>(&header[0..2])?[0];
        if version == 0xff {
            return None;
        }
        if version == 0 && header.len() != TRACEPARENT_LEN {
            return None;
        }
        if header.len() > TRACEPARENT_LEN && header[TRACEPARENT_LEN] != b'-' {
            return None;
        }
        if header[2] != b'-' || header[35] != b'-' || header[52] != b'-' {
            return None;
        }
        decode::<1>(&header[53..55])?;
        TraceContext::new(decode(&header[3..35])?, decode(&header[36..52])?)
    }
}

/// As every message and report shows a context: `trace ID span ID`.
impl fmt::Display for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "trace {} span {}", self.trace_hex(), self.span_hex())
    }
}

impl fmt::Debug for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceContext({}, {})", self.trace_hex(), self.span_hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const SPAN: &str = "00f067aa0ba902b7";

    fn parsed(header: &str) -> Option<(String, String)> {
        TraceContext::from_traceparent(header.as_bytes())
            .map(|context| (context.trace_hex(), context.span_hex()))
    }

    #[test]
    fn ids_round_trip_through_hex() {
        let context = TraceContext::from_hex(TRACE.as_bytes(), SPAN.as_bytes()).unwrap();
        assert_eq!(context.trace_hex(), TRACE);
        assert_eq!(context.span_hex(), SPAN);
        assert_eq!(context.trace_id()[0], 0x4b);
        assert_eq!(context.span_id()[7], 0xb7);
        assert_eq!(
            parse_trace_id(TRACE.as_bytes()).unwrap(),
            *context.trace_id()
        );
    }

    #[test]
    fn bad_ids_are_refused_saying_what_is_wrong() {
        let refused = |trace: &str, span: &str| {
            TraceContext::from_hex(trace.as_bytes(), span.as_bytes())
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            refused("4bf9", SPAN),
            "a trace id is 32 lowercase hex digits, not all zero (as in a W3C traceparent: \
             4bf92f3577b34da6a3ce929d0e0e4736); got \"4bf9\" (4 characters)"
        );
        assert!(refused(&TRACE.to_uppercase(), SPAN).ends_with(
            "got \"4BF92F3577B34DA6A3CE929D0E0E4736\": character 2 is an upper-case digit"
        ));
        assert!(
            refused(TRACE, "00f067aa0ba902bz").starts_with("a span id is 16 lowercase hex digits")
        );
        assert!(refused(TRACE, "00f067aa0ba902bz").ends_with("character 16 is not a hex digit"));
        assert!(refused(&"0".repeat(32), SPAN).ends_with("all zero"));
        assert!(refused(TRACE, &"0".repeat(16)).ends_with("all zero"));
        assert!(refused("", SPAN).ends_with("got \"\" (0 characters)"));
        assert!(refused(&"\u{e9}".repeat(16), SPAN).contains("\\xC3\\xA9"));
        assert!(refused(&"a".repeat(100), SPAN)
            .ends_with(&format!("got \"{}\"... (100 characters)", "a".repeat(48))));
        assert!(TraceContext::new([0; 16], [1; 8]).is_none());
        assert!(TraceContext::new([1; 16], [0; 8]).is_none());
    }

    #[test]
    fn a_version_00_traceparent_gives_its_trace_and_parent_ids() {
        let header = format!("00-{TRACE}-{SPAN}-01");
        assert_eq!(parsed(&header), Some((TRACE.into(), SPAN.into())));
        assert_eq!(
            parsed(&format!("00-{TRACE}-{SPAN}-00")),
            Some((TRACE.into(), SPAN.into()))
        );
        assert_eq!(
            parsed(&format!(" \t00-{TRACE}-{SPAN}-01 ")),
            Some((TRACE.into(), SPAN.into()))
        );
    }

    #[test]
    fn invalid_traceparents_are_ignored() {
        for header in [
            String::new(),
            "garbage".into(),
            format!("00-{TRACE}-{SPAN}"),
            format!("00-{TRACE}-{SPAN}-01-extra"),
            format!("00-{TRACE}-{SPAN}-011"),
            format!("00-{}-{SPAN}-01", TRACE.to_uppercase()),
            format!("00-{TRACE}-{}-01", SPAN.to_uppercase()),
            format!("00-{}-{SPAN}-01", "0".repeat(32)),
            format!("00-{TRACE}-{}-01", "0".repeat(16)),
            format!("00-{TRACE}-{SPAN}-0g"),
            format!("00-{TRACE}-{SPAN}-0A"),
            format!("00_{TRACE}-{SPAN}-01"),
            format!("00-{TRACE}_{SPAN}-01"),
            format!("00-{TRACE}-{SPAN}_01"),
            format!("ff-{TRACE}-{SPAN}-01"),
            format!("0A-{TRACE}-{SPAN}-01"),
            format!("0-{TRACE}-{SPAN}-01"),
            format!("00-{}-{SPAN}-01", &TRACE[..31]),
            format!("00-{TRACE}-{SPAN}-01, 00-{TRACE}-{SPAN}-01"),
        ] {
            assert_eq!(parsed(&header), None, "{header:?}");
        }
    }

    #[test]
    fn a_later_version_is_parsed_as_far_as_version_00_goes() {
        assert_eq!(
            parsed(&format!("01-{TRACE}-{SPAN}-01")),
            Some((TRACE.into(), SPAN.into()))
        );
        assert_eq!(
            parsed(&format!("cc-{TRACE}-{SPAN}-01-what-the-future-adds")),
            Some((TRACE.into(), SPAN.into()))
        );
        assert_eq!(parsed(&format!("cc-{TRACE}-{SPAN}-01.what")), None);
        assert_eq!(parsed(&format!("cc-{TRACE}-{SPAN}-0")), None);
        assert_eq!(parsed(&format!("cc-{}-{SPAN}-01-x", "0".repeat(32))), None);
    }

    #[test]
    fn digits_decoded_together_decode_as_one_at_a_time_do() {
        // Every byte in every position of a word, beside valid digits.
        for at in 0..8 {
            for byte in 0..=255u8 {
                let mut digits = *b"0f9a61b7";
                digits[at] = byte;
                let one_at_a_time =
                    digits
                        .iter()
                        .all(|&digit| hex_value(digit).is_some())
                        .then(|| {
                            let mut bytes = [0u8; 4];
                            for (index, pair) in digits.chunks_exact(2).enumerate() {
                                bytes[index] =
                                    hex_value(pair[0]).unwrap() << 4 | hex_value(pair[1]).unwrap();
                            }
                            bytes
                        });
                assert_eq!(decode::<4>(&digits), one_at_a_time, "{digits:?}");
            }
        }
        #[cfg(target_arch = "x86_64")]
        for at in 0..16 {
            for byte in 0..=255u8 {
                let mut digits = *b"0f9a61b7c2d3e4f5";
                digits[at] = byte;
                // SAFETY: every x86-64 CPU has SSE2.
                let (decoded, valid) = unsafe { decode_sixteen(digits) };
                let halves = (
                    decode_word(u64::from_le_bytes(digits[..8].try_into().unwrap())),
                    decode_word(u64::from_le_bytes(digits[8..].try_into().unwrap())),
                );
                assert_eq!(valid, halves.0 .1 && halves.1 .1, "{digits:?}");
                if valid {
                    let expected = u64::from(halves.0 .0) | u64::from(halves.1 .0) << 32;
                    assert_eq!(decoded, expected, "{digits:?}");
                }
            }
        }
        assert_eq!(
            decode::<16>(TRACE.as_bytes()),
            Some([
                0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e,
                0x47, 0x36
            ])
        );
        assert_eq!(
            decode::<8>(b"0123456789abcdef"),
            Some([0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef])
        );
        assert_eq!(decode::<8>(b"0123456789abcdeF"), None);
        assert_eq!(decode::<8>(b"0123456789abcde"), None);
    }

    #[test]
    fn hex_is_lowercase() {
        assert_eq!(hex(&[0x00, 0xab, 0x7f]), "00ab7f");
    }
}
