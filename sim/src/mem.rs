//! The process's memory, as the kernel counts it (Linux `/proc/self/status`).
//! Campaigns report their peak; the memory test watches the current size.

/// The peak resident set size so far (`VmHWM`), in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    status_kib("VmHWM:").map(|kib| kib * 1024)
}

/// The resident set size now (`VmRSS`), in bytes.
pub fn rss_bytes() -> Option<u64> {
    status_kib("VmRSS:").map(|kib| kib * 1024)
}

fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..].trim().trim_end_matches("kB").trim().parse().ok()
}

/// Resets the peak to the current size (Linux `clear_refs`, value 5), so a
/// measurement's peak is its own. False where the kernel does not allow it.
pub fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// Bytes as MiB, for reports.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_its_own_memory() {
        let linux = cfg!(target_os = "linux");
        let (Some(now), Some(peak)) = (super::rss_bytes(), super::peak_rss_bytes()) else {
            assert!(!linux, "Linux has /proc/self/status");
            return;
        };
        assert!(now > 0 && peak >= now, "rss {now}, peak {peak}");
    }
}
