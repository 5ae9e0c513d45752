//! Floats written as Ruby's `Float#to_s` writes them.

use std::fmt::Write as _;
use std::io::{self, Write};
/// A finite float as Ruby's `Float#to_s` writes it: its shortest digits
/// that read back as it, in fixed notation with at least one decimal from
/// 0.0001 up to 16 digits before the point (15 when no digit follows it),
/// and as `1.5e-07` or `1.0e+20` beyond. Any JSON number would do; the text
/// Ruby wrote keeps reports made before and after comparable with diff.
pub(super) fn write_ruby_float(
    out: &mut impl Write,
    value: f64,
    scratch: &mut String,
) -> io::Result<()> {
    // Ruby's DBL_DIG: how many digits before the point are shown fixed.
    const DBL_DIG: usize = 15;
    const ZEROS: &[u8] = b"000000000000000000000000";
    scratch.clear();
    write!(scratch, "{value:e}").expect("writing to a String");
    let (mantissa, exponent) = scratch.split_once('e').expect("{:e} has an exponent");
    let exponent: i32 = exponent.parse().expect("{:e} has a decimal exponent");
    let mut buffer = [0u8; MAX_DIGITS];
    let mut count = 0;
    for digit in mantissa.bytes().filter(u8::is_ascii_digit) {
        buffer[count] = digit;
        count += 1;
    }
    even_at_a_tie(&mut buffer[..count], exponent, value);
    let digits = &buffer[..count];
    if mantissa.starts_with('-') {
        out.write_all(b"-")?;
    }
    // The point goes after `point` digits (before them, if not positive).
    let point = exponent + 1;
    match usize::try_from(point) {
        Ok(point) if point > 0 && point <= DBL_DIG + 1 && point < count => {
            out.write_all(&digits[..point])?;
            out.write_all(b".")?;
            out.write_all(&digits[point..])
        }
        Ok(point) if point > 0 && point <= DBL_DIG => {
            out.write_all(digits)?;
            out.write_all(&ZEROS[..point - count])?;
            out.write_all(b".0")
        }
        _ if point <= 0 && point > -4 => {
            out.write_all(b"0.")?;
            out.write_all(&ZEROS[..point.unsigned_abs() as usize])?;
            out.write_all(digits)
        }
        _ => {
            out.write_all(&digits[..1])?;
            out.write_all(b".")?;
            out.write_all(if count > 1 { &digits[1..] } else { b"0" })?;
            write!(out, "e{:+03}", point - 1)
        }
    }
}

/// The most significant digits an f64 needs to read back as itself.
const MAX_DIGITS: usize = 17;

/// When `value` lies exactly halfway between two numbers of as many
/// significant digits as its shortest `digits` (the first of them
/// `exponent` places before the point's), and both read back as it, Ruby
/// shows the one whose last digit is even; Rust's shortest digits take the
/// larger. 81395800798160.125 is "81395800798160.12" in Ruby.
fn even_at_a_tie(digits: &mut [u8], exponent: i32, value: f64) {
    let shown = digits
        .iter()
        .fold(0u64, |number, digit| number * 10 + u64::from(digit - b'0'));
    // The halfway point has one digit more, a 5.
    let place = exponent - digits.len() as i32;
    for below in [shown.checked_sub(1), Some(shown)].into_iter().flatten() {
        if !equals_decimal(value.abs(), below * 10 + 5, place) {
            continue;
        }
        let even = below + below % 2;
        let text = even.to_string();
        if text.len() == digits.len() && reads_back(&text, exponent, value) {
            digits.copy_from_slice(text.as_bytes());
        }
        return;
    }
}

/// Whether `value` (finite, not negative) is exactly `decimal` (odd)
/// times 10^`place`: whether their odd parts and their powers of two are
/// the same.
fn equals_decimal(value: f64, decimal: u64, place: i32) -> bool {
    let bits = value.to_bits();
    let biased = (bits >> 52) as i32;
    let fraction = bits & ((1 << 52) - 1);
    // value = mantissa * 2^binary
    let (mantissa, binary) = if biased == 0 {
        (fraction, -1074)
    } else {
        (fraction | (1 << 52), biased - 1075)
    };
    if mantissa == 0 {
        return false;
    }
    let twos = mantissa.trailing_zeros();
    let odd = u128::from(mantissa >> twos);
    if binary + twos as i32 != place {
        return false;
    }
    // decimal * 10^place = decimal * 5^place * 2^place
    let fives = |power: i32| 5u128.checked_pow(power.unsigned_abs());
    if place >= 0 {
        fives(place).and_then(|five| five.checked_mul(u128::from(decimal))) == Some(odd)
    } else {
        fives(place).and_then(|five| five.checked_mul(odd)) == Some(u128::from(decimal))
    }
}

/// Whether `digits`, with the point after the first and `exponent`, read
/// back as `value`'s magnitude.
fn reads_back(digits: &str, exponent: i32, value: f64) -> bool {
    let (first, rest) = digits.split_at(1);
    let text = format!("{first}.{rest}e{exponent}");
    text.parse::<f64>().map(f64::to_bits) == Ok(value.abs().to_bits())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    // The ties are written out exactly, to every digit of their binary value.
    #[allow(clippy::excessive_precision)]
    fn writes_floats_as_rubys_float_to_s() {
        // What Ruby's Float#to_s returned for each value.
        let ruby: [(f64, &str); 28] = [
            (0.25, "0.25"),
            (1.0e20, "1.0e+20"),
            (1e15, "1.0e+15"),
            (1e16, "1.0e+16"),
            (1e-4, "0.0001"),
            (1e-5, "1.0e-05"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (0.1, "0.1"),
            (123456789012345.6, "123456789012345.6"),
            (1234567890123456.8, "1234567890123456.8"),
            (1234567890123456.0, "1.234567890123456e+15"),
            (5e-324, "5.0e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (100.0, "100.0"),
            (1.5e-7, "1.5e-07"),
            (9007199254740993.0, "9.007199254740992e+15"),
            (100000000000000.0, "100000000000000.0"),
            (-2.5e-300, "-2.5e-300"),
            (0.001, "0.001"),
            (1673424096320954.25, "1673424096320954.2"),
            (-110329936768328.625, "-110329936768328.62"),
            (110329936768328.875, "110329936768328.88"),
            (0.30000000000000004, "0.30000000000000004"),
            (81395800798160.125, "81395800798160.12"),
            (-9708747456522.0625, "-9708747456522.062"),
            (2.5, "2.5"),
            (1.5e17, "1.5e+17"),
        ];
        let mut scratch = String::new();
        for (value, shown) in ruby {
            let mut out = Vec::new();
            write_ruby_float(&mut out, value, &mut scratch).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), shown, "{value:e}");
            assert_eq!(shown.parse::<f64>().unwrap().to_bits(), value.to_bits());
        }
    }
}
