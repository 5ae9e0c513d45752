//! Times in steps of 1/1024 µs: a whole number of them, written in
//! microseconds, is a decimal that a double holds exactly (as long as it
//! is below 2^53 steps, 285 years), so that a viewer reading the times as
//! doubles adds and compares them without rounding. A step is 0.977 ns:
//! each time is within half a nanosecond of the one recorded, each
//! duration within one.

use serde_json::ser::{CompactFormatter, Formatter};
use std::io::{self, Write};
use std::ops::Sub;

/// Steps of 1/1024 µs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Ticks(i128);

/// The decimal digits of one step, 1/1024 µs = 0.0009765625 µs.
const STEP_DIGITS: u128 = 9_765_625;

impl Ticks {
    /// The nearest step to `nanoseconds` (up, at a tie): rounding the same
    /// way every time keeps the times in their order.
    pub fn of_ns(nanoseconds: i128) -> Ticks {
        // nanoseconds * 1.024, rounded: (ns * 256 + 125) / 250, floored.
        Ticks((nanoseconds * 256 + 125).div_euclid(250))
    }

    /// As microseconds: every digit, no trailing zero after the point.
    pub fn write(self, out: &mut (impl Write + ?Sized)) -> io::Result<()> {
        if self.0 < 0 {
            out.write_all(b"-")?;
        }
        let magnitude = self.0.unsigned_abs();
        // Written without allocating: a report writes millions of times.
        match u64::try_from(magnitude / 1024) {
            Ok(whole) => CompactFormatter.write_u64(out, whole)?,
            Err(_) => CompactFormatter.write_u128(out, magnitude / 1024)?,
        }
        let fraction = magnitude % 1024;
        if fraction == 0 {
            return Ok(());
        }
        // '.' and the fraction's 10 decimals (1023 steps: 0.9990234375).
        let mut digits = *b".0000000000";
        let mut decimals = fraction * STEP_DIGITS;
        for digit in digits[1..].iter_mut().rev() {
            *digit = b'0' + (decimals % 10) as u8;
            decimals /= 10;
        }
        let end = digits.iter().rposition(|&digit| digit != b'0').unwrap_or(0) + 1;
        out.write_all(&digits[..end])
    }
}

impl Sub for Ticks {
    type Output = Ticks;

    fn sub(self, other: Ticks) -> Ticks {
        Ticks(self.0 - other.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(ticks: Ticks) -> String {
        let mut out = Vec::new();
        ticks.write(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn writes_each_step_exactly() {
        for (nanoseconds, shown) in [
            (0, "0"),
            (1, "0.0009765625"),
            (1000, "1"),
            (-2_500_001, "-2500.0009765625"),
            (8_000_123, "8000.123046875"),
            (999, "0.9990234375"),
        ] {
            let ticks = Ticks::of_ns(nanoseconds);
            assert_eq!(written(ticks), shown);
            // Read as a double, it is the step's value exactly.
            let read: f64 = shown.parse().unwrap();
            assert_eq!(read * 1024.0, ticks.0 as f64);
            assert!((read * 1000.0 - nanoseconds as f64).abs() <= 0.5);
        }
    }

    #[test]
    fn rounds_the_same_way_everywhere() {
        let times: Vec<Ticks> = (-3000..3000).map(Ticks::of_ns).collect();
        assert!(times.windows(2).all(|pair| pair[0] <= pair[1]));
        for (start, end) in [(-1999, 7), (123, 124), (5, 1_000_005)] {
            let lasted = (Ticks::of_ns(end) - Ticks::of_ns(start)).0 as f64 / 1.024;
            assert!((lasted - (end - start) as f64).abs() < 1.0);
        }
    }
}
