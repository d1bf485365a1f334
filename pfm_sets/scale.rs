// SPDX-License-Identifier: GPL-2.0

//! The scaling arithmetic a tool applies to a multiplexed set's counts
//! (`count × enabled / running`) and the share of its time a set ran:
//! exact in 128 bits with 64-bit operations only, since the kernel's
//! 128-bit division helpers panic. No kernel code, no floats: the host
//! tests check it (host/tests/sets.rs) and the user library re-exports it.

/// `(hi:lo) / d` for `d != 0`, the quotient in 128 bits, with 64-bit
/// operations only: the kernel's 128-bit division helpers panic.
const fn div_128_by_64(hi: u64, lo: u64, d: u64) -> (u64, u64) {
    // Checked: no division-by-zero panic path in the module (objtool
    // flagged one: "falls through to next function").
    let (q_hi, mut r) = match (hi.checked_div(d), hi.checked_rem(d)) {
        (Some(q), Some(r)) => (q, r),
        _ => return (0, 0),
    };
    let mut q_lo = 0u64;
    let mut bit = 64;
    // Restoring division, one bit of `lo` at a time; r < d throughout.
    while bit > 0 {
        bit -= 1;
        let carry = r >> 63;
        r = (r << 1) | ((lo >> bit) & 1);
        q_lo <<= 1;
        if carry != 0 || r >= d {
            r = r.wrapping_sub(d);
            q_lo |= 1;
        }
    }
    (q_hi, q_lo)
}

/// `round(a * b / d)` in 128 bits (halves up), `d != 0`.
const fn mul_div_round(a: u64, b: u64, d: u64) -> u128 {
    let p = a as u128 * b as u128;
    let (lo, c) = (p as u64).overflowing_add(d / 2);
    // a * b <= (2^64 - 1)^2 leaves room for the carry.
    let hi = ((p >> 64) as u64).wrapping_add(c as u64);
    let (q_hi, q_lo) = div_128_by_64(hi, lo, d);
    ((q_hi as u128) << 64) | q_lo as u128
}

/// The estimate of what a set's event would have counted had it counted
/// all the time it was enabled: `count × enabled / running`, rounded to
/// nearest, exact in 128 bits. `None` when the event never ran (perf's
/// `<not counted>`). An enabled time below the running time (possible only
/// for times from two clocks) never scales a count down: it counted at
/// least that many events.
pub const fn scale(count: u64, enabled: u64, running: u64) -> Option<u128> {
    if running == 0 {
        return None;
    }
    if enabled <= running {
        return Some(count as u128);
    }
    Some(mul_div_round(count, enabled, running))
}

/// [`scale`], saturated to 64 bits for a tool's `u64` column.
pub const fn scale_u64(count: u64, enabled: u64, running: u64) -> Option<u64> {
    match scale(count, enabled, running) {
        Some(v) if v > u64::MAX as u128 => Some(u64::MAX),
        Some(v) => Some(v as u64),
        None => None,
    }
}

/// The share of its enabled time an event counted, in hundredths of a
/// percent, rounded to nearest and at most 10,000 (`pfm stat`'s
/// `(66.67%)` is 6667). `None` if it was never enabled.
pub const fn running_share(running: u64, enabled: u64) -> Option<u32> {
    if enabled == 0 {
        return None;
    }
    if running >= enabled {
        return Some(10_000);
    }
    // running < enabled: at most 10,000 after rounding.
    Some(mul_div_round(running, 10_000, enabled) as u32)
}
