//! Nanoseconds shown as people read them ("1.5us", "250ms"), in integer
//! arithmetic: the one rule of the reports, which the gem's Ruby side
//! (`StaticTracing::Durations.format`: the recorder's warnings, `latency`)
//! follows too, held equal to this by spec/contracts_spec.rb.

/// Largest first: a duration takes the largest unit it is at least
/// 0.9995 of (three significant digits round that to 1: 999.9ms shows as
/// 1s, not 1000ms).
const SHOWN: [(&str, u128); 3] = [("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)];

/// `nanoseconds` in the largest unit that shows them as 1 or more, with
/// three significant digits: 999ns, 1.5us, 1s.
pub fn format(nanoseconds: i128) -> String {
    let magnitude = nanoseconds.unsigned_abs();
    let (unit, scale) = SHOWN
        .into_iter()
        .find(|&(_, size)| {
            magnitude
                .checked_mul(10_000)
                .is_none_or(|scaled| scaled >= size * 9_995)
        })
        .unwrap_or(("ns", 1));
    let sign = if nanoseconds < 0 { "-" } else { "" };
    format!("{sign}{}{unit}", decimal(magnitude, scale, 3))
}

/// `numerator / denominator` with up to `digits` significant digits (more
/// when its whole part has more), rounded half to even, without trailing
/// zeros: 1.02, 16.4, 131.
fn decimal(numerator: u128, denominator: u128, digits: usize) -> String {
    let whole_digits = (numerator / denominator).to_string().len();
    let decimals = digits.saturating_sub(whole_digits);
    // Decimals only below 100 units: the product cannot overflow.
    let scaled = numerator * 10u128.pow(decimals as u32);
    let (mut kept, rest) = (scaled / denominator, scaled % denominator);
    if 2 * rest > denominator || (2 * rest == denominator && kept % 2 == 1) {
        kept += 1;
    }
    let text = format!("{kept:0>width$}", width = decimals + 1);
    let (whole, fraction) = text.split_at(text.len() - decimals);
    let fraction = fraction.trim_end_matches('0');
    if fraction.is_empty() {
        whole.to_owned()
    } else {
        format!("{whole}.{fraction}")
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
            // Halfway in decimal: to the even last digit, as Ruby's printf
            // rounded these.
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
    fn numbers_have_three_significant_digits_rounded_half_to_even() {
        // What `StaticTracing::Durations.number` returned for each value,
        // given here as a fraction.
        let shown: [((u128, u128), &str); 12] = [
            ((0, 1), "0"),
            ((102, 100), "1.02"),
            ((164, 10), "16.4"),
            ((131, 1), "131"),
            ((5, 10_000), "0"),
            ((123_456, 10_000), "12.3"),
            ((5, 10), "0.5"),
            ((10u128.pow(20), 1), "100000000000000000000"),
            ((9995, 100), "100"),
            ((9995, 1000), "10"),
            ((9995, 10_000), "1"),
            // Halfway: to the even last digit.
            ((1125, 1000), "1.12"),
        ];
        for ((numerator, denominator), text) in shown {
            assert_eq!(
                decimal(numerator, denominator, 3),
                text,
                "{numerator}/{denominator}"
            );
        }
    }
}
