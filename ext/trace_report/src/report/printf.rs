//! Ruby's `format("%.Nf", value)`, which the reports' durations were
//! written with, down to its rounding. Ruby's printf (its own copy of David
//! Gay's dtoa) does not always round the float's exact binary value as C's
//! printf and Rust's `{:.N}` do: when a fast floating-point estimate finds
//! the value within its error bound of halfway between two results, it
//! rounds to the even last digit, though the exact value lies below or
//! above halfway. 9.995 (in binary 9.99499999999999921...) is "10.00" in
//! Ruby and "9.99" in C; 2.675 is "2.68" and "2.67"; a call of 2675ns was
//! "2.68us". Everywhere else both are the correctly rounded result, so
//! this finds that case, as dtoa does, and leaves the rest to Rust.

/// 10^0 to 10^22, each exact in an f64.
const TENS: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];
const BIG_TENS: [f64; 5] = [1e16, 1e32, 1e64, 1e128, 1e256];
/// Digits the fast estimate is tried for (dtoa's Quick_max).
const QUICK_MAX: i32 = 14;
/// The bits of an f64 below its exponent.
const FRACTION_BITS: u32 = 52;
const FRACTION_MASK: u64 = (1 << FRACTION_BITS) - 1;
const EXPONENT_BIAS: i32 = 1023;
/// dtoa's log10(2), to its digits, not std's: its estimate of the decimal
/// exponent, and so which digits the fast estimate makes, depend on them.
#[allow(clippy::approx_constant)]
const DTOA_LOG10_2: f64 = 0.301029995663981;

/// `value` with `decimals` digits after the point, as Ruby's
/// `format("%.#{decimals}f", value)` writes it.
pub fn fixed(value: f64, decimals: usize) -> String {
    match near_tie(value.abs(), decimals) {
        Some(mut digits) => {
            // Halfway, by the estimate: to the even last digit.
            if digits % 2 == 1 {
                digits += 1;
            }
            let sign = if value.is_sign_negative() { "-" } else { "" };
            let text = format!("{digits:0>width$}", width = decimals + 1);
            let (whole, fraction) = text.split_at(text.len() - decimals);
            if decimals == 0 {
                format!("{sign}{whole}")
            } else {
                format!("{sign}{whole}.{fraction}")
            }
        }
        None => format!("{value:.decimals$}"),
    }
}

/// For a `value` that dtoa's fast estimate (mode 3, `decimals` digits past
/// the point) finds within its error bound of halfway between two
/// results: the digits it generated up to the last one kept, as an
/// integer (the value times 10^decimals, truncated). None when the
/// estimate is not tried, gives up, or is sure which way to round: then
/// Ruby's result is the correctly rounded one.
///
/// Each floating-point operation below is dtoa's, in its order: the
/// decision depends on their rounding errors.
fn near_tie(value: f64, decimals: usize) -> Option<u64> {
    let decimals = i32::try_from(decimals).ok()?;
    let bits = value.to_bits();
    let biased_exponent = (bits >> FRACTION_BITS) as i32;
    // Zero, subnormals, infinities and NaN take dtoa's other paths.
    if value == 0.0 || biased_exponent == 0 || !value.is_finite() {
        return None;
    }

    // dtoa's estimate of floor(log10(value)), at most one too large.
    let mantissa =
        f64::from_bits((bits & FRACTION_MASK) | ((EXPONENT_BIAS as u64) << FRACTION_BITS));
    let binary_exponent = biased_exponent - EXPONENT_BIAS;
    let estimate = (mantissa - 1.5) * 0.289529654602168
        + 0.1760912590558
        + f64::from(binary_exponent) * DTOA_LOG10_2;
    let mut k = estimate as i32;
    if estimate < 0.0 && estimate != f64::from(k) {
        k -= 1;
    }
    let mut k_check = true;
    if (0..=22).contains(&k) {
        if value < TENS[k as usize] {
            k -= 1;
        }
        k_check = false;
    }

    let mut ilim = decimals + k + 1;
    let ilim1 = ilim - 1;
    if !(1..=QUICK_MAX).contains(&ilim) {
        // 0: one digit or none, which the estimate decides only when sure.
        return None;
    }

    let mut d = value;
    let mut ieps = 2;
    if k > 0 {
        let mut ds = TENS[(k & 0xf) as usize];
        let mut j = k >> 4;
        if j & 0x10 != 0 {
            j &= 0xf;
            d /= BIG_TENS[BIG_TENS.len() - 1];
            ieps += 1;
        }
        let mut i = 0;
        while j != 0 {
            if j & 1 != 0 {
                ieps += 1;
                ds *= BIG_TENS[i];
            }
            j >>= 1;
            i += 1;
        }
        d /= ds;
    } else if k < 0 {
        let j1 = -k;
        d *= TENS[(j1 & 0xf) as usize];
        let mut j = j1 >> 4;
        let mut i = 0;
        while j != 0 {
            if j & 1 != 0 {
                ieps += 1;
                d *= BIG_TENS[i];
            }
            j >>= 1;
            i += 1;
        }
    }
    if k_check && d < 1.0 {
        if ilim1 <= 0 {
            return None;
        }
        ilim = ilim1;
        d *= 10.0;
        ieps += 1;
    }
    // The error bound: (ieps * d + 7) ulps of 1, by lowering the exponent.
    let mut eps = f64::from(ieps) * d + 7.0;
    eps = f64::from_bits(eps.to_bits() - (u64::from(FRACTION_BITS) << FRACTION_BITS));
    eps *= TENS[(ilim - 1) as usize];

    let mut digits: u64 = 0;
    let mut i = 1;
    loop {
        let digit = d as i32;
        d -= f64::from(digit);
        if d == 0.0 {
            ilim = i;
        }
        digits = digits * 10 + digit as u64;
        if i == ilim {
            let sure = d > 0.5 + eps || d < 0.5 - eps;
            return if sure { None } else { Some(digits) };
        }
        i += 1;
        d *= 10.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_as_rubys_format_does() {
        // What Ruby's format("%.Nf") returned for each value.
        let ruby: [(f64, usize, &str); 16] = [
            (9.995, 2, "10.00"),
            (1.005, 2, "1.00"),
            (2.675, 2, "2.68"),
            (0.15, 1, "0.2"),
            (1.125, 2, "1.12"),
            (0.25, 1, "0.2"),
            (0.995, 2, "1.00"),
            (8.995, 2, "9.00"),
            (99.95, 1, "100.0"),
            (2.5, 0, "2"),
            (5.995, 2, "6.00"),
            (-2.675, 2, "-2.68"),
            (0.5, 0, "0"),
            (1.5, 0, "2"),
            (0.0, 2, "0.00"),
            (123456.5, 0, "123456"),
        ];
        for (value, decimals, shown) in ruby {
            assert_eq!(fixed(value, decimals), shown, "{value} to {decimals}");
        }
    }
}
