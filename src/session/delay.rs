//! How long after its time a sample's stack was unwound, for the stacks that went past their
//! copy: the live process finishes those only if the thread is still in the frames sampled,
//! so the delay is what decides whether it can (`live::driver` keeps it to milliseconds).

/// Buckets below 16 µs are 1 µs wide; above, each power of two has 16, so a quantile read
/// from them is within 1/16 of the true delay.
const SUB: u32 = 16;
/// Enough buckets for any `u64` of microseconds.
const BUCKETS: usize = 16 + 60 * SUB as usize;

/// A histogram of delays, in microseconds (log-linear buckets, allocated at the first one).
#[derive(Debug, Default, Clone)]
pub struct ReadDelay {
    counts: Vec<u64>,
    /// Delays counted, and the longest, in ns.
    pub count: u64,
    pub max_ns: u64,
}

impl ReadDelay {
    /// Counts one delay of `ns` nanoseconds.
    pub fn add(&mut self, ns: u64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS];
        }
        if let Some(n) = self.counts.get_mut(bucket(ns / 1000)) {
            *n += 1;
        }
        self.count += 1;
        self.max_ns = self.max_ns.max(ns);
    }

    /// The delay that a share `q` (0 to 1) of the delays stay within, in ns: the upper end
    /// of its bucket, at most the longest. `None` when none was counted.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(bucket_end(i).saturating_mul(1000).min(self.max_ns));
            }
        }
        Some(self.max_ns)
    }
}

/// The bucket of a delay of `us` microseconds.
fn bucket(us: u64) -> usize {
    if us < u64::from(SUB) {
        return us as usize;
    }
    let e = 63 - us.leading_zeros();
    let sub = (us >> (e - 4)) - u64::from(SUB);
    SUB as usize + (e as usize - 4) * SUB as usize + sub as usize
}

/// The first delay in microseconds past bucket `i`.
fn bucket_end(i: usize) -> u64 {
    let sub = SUB as usize;
    if i < sub {
        return i as u64 + 1;
    }
    let e = (i - sub) / sub + 4;
    let k = ((i - sub) % sub + sub + 1) as u64;
    k.saturating_mul(1 << (e - 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_delay_lies_below_its_buckets_end_and_within_a_sixteenth() {
        for us in (0..100_000u64).chain([1 << 40, u64::MAX / 1000]) {
            let i = bucket(us);
            assert!(i < BUCKETS, "{us}");
            let end = bucket_end(i);
            assert!(us < end, "{us} in bucket {i} ending at {end}");
            assert!(
                end - us <= us / 16 + 1,
                "{us} in bucket {i} ending at {end}"
            );
            if i > 0 {
                assert!(bucket_end(i - 1) <= us, "{us}");
            }
        }
    }

    #[test]
    fn quantiles_of_known_delays() {
        let mut d = ReadDelay::default();
        assert_eq!(d.quantile(0.5), None);
        // 1..=100 ms, one each.
        for ms in 1..=100u64 {
            d.add(ms * 1_000_000);
        }
        let ms = |q| d.quantile(q).unwrap() as f64 / 1e6;
        assert!((50.0..=53.2).contains(&ms(0.5)), "{}", ms(0.5));
        assert!((99.0..=100.0).contains(&ms(0.99)), "{}", ms(0.99));
        assert_eq!(d.quantile(1.0), Some(100_000_000));
        assert_eq!((d.count, d.max_ns), (100, 100_000_000));
        // A single delay is every quantile.
        let mut one = ReadDelay::default();
        one.add(2_345_678);
        assert_eq!(one.quantile(0.5), Some(2_345_678));
    }
}
