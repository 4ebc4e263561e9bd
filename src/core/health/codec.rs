//! The byte form of a [`HealthRecord`] in proxy-wasm shared data: versioned, little-endian,
//! bounded. An unknown version or a truncated value reads as `None` (a fresh record), so a
//! newer or older filter sharing the VM id never misreads one.

use super::record::{HealthRecord, Samples, TpotWindow, MAX_FAILURES};

const VERSION: u8 = 3;

/// Encodes a record.
pub fn encode(r: &HealthRecord) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(64 + 8 * r.failures.len() + 12 * (r.ttft.0.len() + r.tpot.0.len()));
    out.push(VERSION);
    out.extend_from_slice(&r.consecutive_failures.to_le_bytes());
    out.extend_from_slice(&r.score.to_le_bytes());
    out.extend_from_slice(&r.evicted_until_ms.to_le_bytes());
    out.extend_from_slice(&r.evictions.to_le_bytes());
    let failures = r.failures.len().min(MAX_FAILURES);
    out.push(failures as u8);
    for at in r.failures.iter().skip(r.failures.len() - failures) {
        out.extend_from_slice(&at.to_le_bytes());
    }
    for samples in [&r.ttft, &r.tpot] {
        let n = samples.0.len().min(Samples::MAX);
        out.push(n as u8);
        for (at, v) in samples.0.iter().skip(samples.0.len() - n) {
            out.extend_from_slice(&at.to_le_bytes());
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    let n = r.latency.0.len().min(TpotWindow::KEPT as usize);
    out.push(n as u8);
    for (minute, sum, count) in r.latency.0.iter().skip(r.latency.0.len() - n) {
        out.extend_from_slice(&minute.to_le_bytes());
        out.extend_from_slice(&sum.to_le_bytes());
        out.extend_from_slice(&count.to_le_bytes());
    }
    out
}

/// Decodes a record written by [`encode`].
pub fn decode(bytes: &[u8]) -> Option<HealthRecord> {
    let mut r = Reader(bytes);
    if r.u8()? != VERSION {
        return None;
    }
    let consecutive_failures = r.u32()?;
    let score = f32::from_le_bytes(r.take::<4>()?);
    let evicted_until_ms = r.u64()?;
    let evictions = r.u32()?;
    let n = usize::from(r.u8()?).min(MAX_FAILURES);
    let failures = (0..n).map(|_| r.u64()).collect::<Option<Vec<_>>>()?;
    let mut samples = [Samples::default(), Samples::default()];
    for s in samples.iter_mut() {
        let n = usize::from(r.u8()?).min(Samples::MAX);
        s.0 = (0..n)
            .map(|_| Some((r.u64()?, r.u32()?)))
            .collect::<Option<Vec<_>>>()?;
    }
    let [ttft, tpot] = samples;
    let n = usize::from(r.u8()?).min(TpotWindow::KEPT as usize);
    let latency = TpotWindow(
        (0..n)
            .map(|_| Some((r.u32()?, r.u64()?, r.u32()?)))
            .collect::<Option<Vec<_>>>()?,
    );
    Some(HealthRecord {
        failures,
        consecutive_failures,
        score: if score.is_finite() {
            score.clamp(0.0, 1.0)
        } else {
            1.0
        },
        evicted_until_ms,
        evictions,
        ttft,
        tpot,
        latency,
    })
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|[b]| b)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> HealthRecord {
        let mut r = HealthRecord {
            failures: vec![1, 2, 3],
            consecutive_failures: 2,
            score: 0.5,
            evicted_until_ms: 99,
            evictions: 3,
            ..HealthRecord::default()
        };
        r.ttft.add(120, 7);
        r.tpot.add(30, 8);
        r.tpot.add(40, 9);
        r.latency.add(25, 60_000);
        r
    }

    #[test]
    fn round_trips() {
        let r = sample();
        assert_eq!(decode(&encode(&r)), Some(r));
        assert_eq!(
            decode(&encode(&HealthRecord::default())),
            Some(HealthRecord::default())
        );
    }

    #[test]
    fn golden_bytes_do_not_drift() {
        // Changing the layout without bumping VERSION would misread records of running filters.
        let bytes = encode(&sample());
        assert_eq!(
            bytes.len(),
            1 + 4 + 4 + 8 + 4 + 1 + 24 + 1 + 12 + 1 + 24 + 1 + 16
        );
        assert_eq!(&bytes[..5], &[3, 2, 0, 0, 0]);
    }

    #[test]
    fn truncated_or_foreign_bytes_read_as_none() {
        let bytes = encode(&sample());
        for len in 0..bytes.len() {
            assert_eq!(decode(&bytes[..len]), None, "len {len}");
        }
        let mut other = bytes.clone();
        other[0] = 2;
        assert_eq!(decode(&other), None);
    }
}
