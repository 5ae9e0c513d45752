//! Latency histograms as bpftrace prints them: power-of-two buckets of
//! microseconds (its `hist()` of `arg0 / 1000`), labelled in time units,
//! with a bar each. `static-tracing latency` prints bpftrace's own buckets
//! this way; a report buckets the recorded calls alike, so that both read
//! the same.

use super::durations;
use std::io::{self, Write};

/// The width of a full bar, as bpftrace draws it.
const BAR_WIDTH: usize = 52;

/// One of bpftrace's `hist()` buckets of microseconds: `-1` for "< 0",
/// `0` for [0], and `k` for [2^(k-1), 2^k), whose values have bit length k.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    pub bits: i32,
    pub count: u64,
}

/// The bucket of a duration: the one rule of the reports' histograms and
/// the metrics' (`trace_metrics`), bpftrace's `hist()` of `arg0 / 1000`:
/// `-1` for "< 0", `0` for [0], and `k` for [2^(k-1), 2^k), the bit length
/// of its whole microseconds (truncated toward zero, as C divides).
pub fn bucket_bits(nanoseconds: i64) -> i32 {
    let micros = nanoseconds / 1000;
    if micros < 0 {
        -1
    } else {
        (64 - micros.leading_zeros()) as i32
    }
}

/// bpftrace's `hist()` buckets of `arg0 / 1000` for `latencies` (ns, in
/// any order), from the lowest bucket counted to the highest, the empty
/// ones between. `arg0 / 1000` truncates toward zero, so "< 0" ends at
/// -1000ns, [0] at 1000ns, [1] at 2000ns, [2, 4) at 4000ns... Counted in
/// one pass: a million calls need not be sorted for it.
pub fn latency_buckets(latencies: &[i64]) -> Vec<Bucket> {
    // By bits + 1: "< 0", [0], then bit lengths 1 to 63.
    let mut counts = [0u64; 65];
    for &ns in latencies {
        counts[(bucket_bits(ns) + 1) as usize] += 1;
    }
    let Some(first) = counts.iter().position(|&count| count > 0) else {
        return Vec::new();
    };
    let last = counts.iter().rposition(|&count| count > 0).unwrap_or(first);
    (first..=last)
        .map(|index| Bucket {
            bits: index as i32 - 1,
            count: counts[index],
        })
        .collect()
}

/// The bucket's inclusive bounds in microseconds, as bpftrace's JSON gives
/// them, shown as a half-open range of durations.
fn label(bits: i32) -> String {
    match bits {
        ..=-1 => "< 0".to_owned(),
        0 => "< 1us".to_owned(),
        _ => {
            let low = 1i128 << (bits - 1);
            let past = 1i128 << bits;
            format!(
                "[{}, {})",
                durations::format(low * 1000),
                durations::format(past * 1000)
            )
        }
    }
}

/// The buckets, one line each: label, count and a bar scaled to the
/// largest count.
pub fn write(out: &mut impl Write, buckets: &[Bucket]) -> io::Result<()> {
    let labels: Vec<String> = buckets.iter().map(|bucket| label(bucket.bits)).collect();
    let counts: Vec<String> = buckets
        .iter()
        .map(|bucket| bucket.count.to_string())
        .collect();
    let top = buckets.iter().map(|bucket| bucket.count).max().unwrap_or(0);
    let label_width = labels
        .iter()
        .map(|label| label.chars().count())
        .max()
        .unwrap_or(0);
    let count_width = counts.iter().map(String::len).max().unwrap_or(0);
    let full = "@".repeat(BAR_WIDTH);
    for ((bucket, label), count) in buckets.iter().zip(&labels).zip(&counts) {
        let bar = (u128::from(bucket.count) * BAR_WIDTH as u128 / u128::from(top)) as usize;
        writeln!(
            out,
            "  {label:<label_width$}  {count:>count_width$} |{:<BAR_WIDTH$}|",
            &full[..bar]
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// bpftrace's `hist(arg0 / 1000)` written out: C's division truncates
    /// toward zero; a negative value counts in "< 0", 0 in [0], any other
    /// n in the bucket of its bit length; the buckets run from the lowest
    /// counted to the highest.
    fn bpftrace_hist(nanoseconds: &[i64]) -> Vec<Bucket> {
        let bits: Vec<i32> = nanoseconds
            .iter()
            .map(|&ns| {
                let micros = ns / 1000;
                if micros < 0 {
                    -1
                } else {
                    (64 - micros.leading_zeros()) as i32
                }
            })
            .collect();
        let (low, high) = (*bits.iter().min().unwrap(), *bits.iter().max().unwrap());
        (low..=high)
            .map(|bucket| Bucket {
                bits: bucket,
                count: bits.iter().filter(|&&b| b == bucket).count() as u64,
            })
            .collect()
    }

    /// A small deterministic generator: the samples need only vary.
    struct XorShift(u64);

    impl XorShift {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, bound: u64) -> u64 {
            self.next() % bound
        }
    }

    #[test]
    fn buckets_any_durations_as_bpftrace_would() {
        let mut samples: Vec<Vec<i64>> = vec![
            vec![-1000],
            vec![-999],
            vec![999],
            vec![1000],
            vec![0, 1 << 62],
            vec![-(1 << 62), 5],
            vec![i64::MIN, i64::MAX],
            vec![i64::MAX],
        ];
        let mut random = XorShift(42);
        for _ in 0..200 {
            let size = 1 + random.below(300);
            let sample = (0..size)
                .map(|_| {
                    let low = 10i64.pow(1 + random.below(7) as u32);
                    let high = 1i64 << (1 + random.below(62));
                    -low + random.below((low + high) as u64) as i64
                })
                .collect();
            samples.push(sample);
        }
        for sample in samples {
            assert_eq!(
                latency_buckets(&sample),
                bpftrace_hist(&sample),
                "{sample:?}"
            );
        }
        assert_eq!(latency_buckets(&[]), []);
    }

    #[test]
    fn labels_the_buckets_as_latency_does() {
        let labels: Vec<String> = [-1, 0, 1, 2, 10, 11, 54].into_iter().map(label).collect();
        assert_eq!(
            labels,
            [
                "< 0",
                "< 1us",
                "[1us, 2us)",
                "[2us, 4us)",
                "[512us, 1.02ms)",
                "[1.02ms, 2.05ms)",
                "[9007199255s, 18014398509s)"
            ]
        );
    }
}
