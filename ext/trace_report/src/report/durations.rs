//! Nanoseconds shown as people read them ("1.5us", "250ms"), by the rules
//! of the gem's `StaticTracing::Durations.format`: the recorder's warnings
//! and the `latency` command show durations with that, and a report must
//! show the same duration the same way.

use super::printf;

/// Largest first: a duration takes the largest unit it is at least
/// [`ROUNDS_TO_ONE`] of.
const SHOWN: [(&str, f64); 3] = [("s", 1e9), ("ms", 1e6), ("us", 1e3)];

/// The least fraction of a unit that three significant digits round to 1:
/// 999.9ms shows as 1s, not 1000ms.
const ROUNDS_TO_ONE: f64 = 0.9995;

/// `nanoseconds` in the largest unit that shows them as 1 or more, with
/// three significant digits: 999ns, 1.5us, 1s.
pub fn format(nanoseconds: i128) -> String {
    // Exact below 2^53; past it every threshold is far below anyway.
    let magnitude = nanoseconds.unsigned_abs() as f64;
    let (unit, scale) = SHOWN
        .into_iter()
        .find(|&(_, size)| magnitude >= size * ROUNDS_TO_ONE)
        .unwrap_or(("ns", 1.0));
    format!("{}{unit}", number(nanoseconds as f64 / scale, 3))
}

/// `value` with up to `digits` significant digits (more when its whole
/// part has more), no trailing zeros: 1.02, 16.4, 131.
pub fn number(value: f64, digits: usize) -> String {
    let whole_digits = format!("{:.0}", value.abs().floor()).len();
    let decimals = digits.saturating_sub(whole_digits);
    let text = printf::fixed(value, decimals);
    if text.contains('.') {
        let trimmed = text.trim_end_matches('0');
        trimmed.strip_suffix('.').unwrap_or(trimmed).to_owned()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_as_the_gems_durations_do() {
        // What `StaticTracing::Durations.format` returned for each value.
        let ruby: [(i128, &str); 37] = [
            (0, "0ns"),
            (1, "1ns"),
            (5, "5ns"),
            (-5, "-5ns"),
            (999, "999ns"),
            (1000, "1us"),
            (1125, "1.12us"),
            (1499, "1.5us"),
            (1500, "1.5us"),
            (1023999, "1.02ms"),
            (999499, "999us"),
            (999500, "1ms"),
            (999999, "1ms"),
            (1000000, "1ms"),
            (1024000, "1.02ms"),
            (2048000, "2.05ms"),
            (16384000, "16.4ms"),
            (131072000, "131ms"),
            (1500000, "1.5ms"),
            (999499999, "999ms"),
            (999500000, "1s"),
            (999999000, "1s"),
            (1000000000, "1s"),
            (12345678901, "12.3s"),
            (123456789012345, "123457s"),
            (-1500, "-1.5us"),
            (-999500000, "-1s"),
            (4611686018427387904, "4611686018s"),
            (9223372036854775807, "9223372037s"),
            (-9223372036854775808, "-9223372037s"),
            (10i128.pow(30), "1000000000000000000000s"),
            (-(10i128.pow(30)), "-1000000000000000000000s"),
            (1234567, "1.23ms"),
            // Ruby's printf rounds these up, though in binary they are
            // below halfway.
            (9995, "10us"),
            (2675, "2.68us"),
            (8995, "9us"),
            (99950, "100us"),
        ];
        for (nanoseconds, shown) in ruby {
            assert_eq!(format(nanoseconds), shown, "{nanoseconds}");
        }
    }

    #[test]
    fn numbers_as_the_gems_durations_do() {
        // What `StaticTracing::Durations.number` returned for each value.
        let ruby: [(f64, &str); 11] = [
            (0.0, "0"),
            (1.02, "1.02"),
            (16.4, "16.4"),
            (131.0, "131"),
            (0.0005, "0"),
            (12.3456, "12.3"),
            (-0.5, "-0.5"),
            (1.0e+20, "100000000000000000000"),
            (99.95, "100"),
            (9.995, "10"),
            (0.9995, "1"),
        ];
        for (value, shown) in ruby {
            assert_eq!(number(value, 3), shown, "{value}");
        }
    }
}
