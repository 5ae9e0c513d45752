//! A wall-clock time as RFC 3339 text, to the nanosecond, in UTC.

/// `nanoseconds` since the Unix epoch as `2023-11-14T22:13:20.001000000Z`.
pub(super) fn iso8601(nanoseconds: i128) -> String {
    let seconds = nanoseconds.div_euclid(1_000_000_000);
    let fraction = nanoseconds.rem_euclid(1_000_000_000);
    let days = seconds.div_euclid(86_400);
    let of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{fraction:09}Z",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil(days: i128) -> (i128, i128, i128) {
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let of_era = shifted.rem_euclid(146_097);
    let year_of_era = (of_era - of_era / 1460 + of_era / 36_524 - of_era / 146_096) / 365;
    let of_year = of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * of_year + 2) / 153;
    let day = of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i128::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_utc_to_the_nanosecond() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(
            iso8601(1_700_000_000_001_000_000),
            "2023-11-14T22:13:20.001000000Z"
        );
        assert_eq!(iso8601(-1_500), "1969-12-31T23:59:59.999998500Z");
        assert_eq!(
            iso8601(951_782_400_000_000_007),
            "2000-02-29T00:00:00.000000007Z"
        );
        assert_eq!(
            iso8601(253_402_300_799_999_999_999),
            "9999-12-31T23:59:59.999999999Z"
        );
    }
}
