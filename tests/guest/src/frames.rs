//! Code whose stack frames are known, for call-chain samples: three
//! functions in assembly, `pfm_chain_a` calling `pfm_chain_b` calling
//! `pfm_chain_c`, each with the standard frame (`push rbp; mov rbp, rsp`),
//! whatever the compiler does with the rest of the program. `pfm_chain_c`
//! loops; it can nap in the loop (nanosleep) or run the loop with its frame
//! pointer set to a value of the caller's choosing. A sample whose IP is in
//! the loop must carry the return addresses into b and a ([`Code`]), in
//! that order, as the first two of its chain.

// a → b → c, each with a frame; c loops `rdi` times, with its frame
// pointer replaced by `rsi` during the loop if `rsi` is not 0, and, if
// `rdx` is not 0, a nanosleep(rdx) in every iteration. Clobbers only
// caller-saved registers (and restores rbp).
core::arch::global_asm!(
    ".text",
    ".p2align 4",
    ".globl pfm_chain_a",
    ".hidden pfm_chain_a",
    ".type pfm_chain_a, @function",
    "pfm_chain_a:",
    "push rbp",
    "mov rbp, rsp",
    "call pfm_chain_b",
    ".Lpfm_chain_a_ret:",
    "pop rbp",
    "ret",
    ".size pfm_chain_a, . - pfm_chain_a",
    ".p2align 4",
    ".globl pfm_chain_b",
    ".hidden pfm_chain_b",
    ".type pfm_chain_b, @function",
    "pfm_chain_b:",
    "push rbp",
    "mov rbp, rsp",
    "call pfm_chain_c",
    ".Lpfm_chain_b_ret:",
    "pop rbp",
    "ret",
    ".size pfm_chain_b, . - pfm_chain_b",
    ".p2align 4",
    ".globl pfm_chain_c",
    ".hidden pfm_chain_c",
    ".type pfm_chain_c, @function",
    "pfm_chain_c:",
    "push rbp",
    "mov rbp, rsp",
    "mov r8, rdi",
    "mov r9, rdx",
    "test rsi, rsi",
    "jz 2f",
    "mov rbp, rsi",
    "2:",
    ".Lpfm_chain_c_loop:",
    "test r9, r9",
    "jz 3f",
    "mov eax, 35",
    "mov rdi, r9",
    "xor esi, esi",
    "syscall",
    "3:",
    "dec r8",
    "jnz .Lpfm_chain_c_loop",
    ".Lpfm_chain_c_end:",
    "mov rbp, rsp",
    "pop rbp",
    "ret",
    ".size pfm_chain_c, . - pfm_chain_c",
    // The labels' addresses, for the checks, as data: the labels are
    // assembler-local, so the only symbols of this code are the three
    // functions (sized), which is what a symbolizer names it after.
    ".pushsection .data.rel.ro, \"aw\"",
    ".p2align 3",
    ".globl pfm_chain_labels",
    ".hidden pfm_chain_labels",
    "pfm_chain_labels:",
    ".quad .Lpfm_chain_c_loop",
    ".quad .Lpfm_chain_c_end",
    ".quad .Lpfm_chain_b_ret",
    ".quad .Lpfm_chain_a_ret",
    ".popsection",
);

extern "C" {
    fn pfm_chain_a(n: u64, bp: u64, nap: *const libc::timespec);
    static pfm_chain_labels: [u64; 4];
}

/// The addresses the chain is checked against.
#[derive(Clone, Copy, Debug)]
pub struct Code {
    /// `pfm_chain_c`'s loop: `[start, end]` (at `end`, its exit, the
    /// frame is still c's).
    pub loop_start: u64,
    pub loop_end: u64,
    /// The return addresses into b and a.
    pub b_ret: u64,
    pub a_ret: u64,
}

impl Code {
    /// Whether `ip` is in `pfm_chain_c`'s loop.
    pub fn in_loop(&self, ip: u64) -> bool {
        (self.loop_start..=self.loop_end).contains(&ip)
    }
}

pub fn code() -> Code {
    // SAFETY: Four words of read-only data the assembly above defines.
    let [loop_start, loop_end, b_ret, a_ret] = unsafe { pfm_chain_labels };
    Code {
        loop_start,
        loop_end,
        b_ret,
        a_ret,
    }
}

/// Runs the chain: `n` iterations of the loop, with frame pointer `bp`
/// (0: c's own) and a nap per iteration if `nap`.
pub fn run_chain(n: u64, bp: u64, nap: Option<&libc::timespec>) {
    let nap = nap.map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: The assembly above: it preserves every callee-saved
    // register, its stack use is balanced, and `nap` is null or a valid
    // timespec for the duration of the call.
    unsafe { pfm_chain_a(n.max(1), bp, nap) };
}

/// Runs the chain (frame pointer `bp`, as [`run_chain`]) until the
/// calling thread's own CPU clock has advanced `ms` ms, in chunks of about
/// 10 ms: a count of iterations from [`iterations_per_ms`] is not a time
/// on a busy host, where a calibration that a stalled vCPU slowed ran the
/// chain for half its time (STRESS=1: 159 and 194 samples for "300 ms").
/// Between chunks the thread reads its clock (a few µs each). `per_ms`
/// is [`iterations_per_ms`], taken by the caller before it counts (the
/// calibration runs the chain with the thread's own frame pointer).
pub fn run_chain_for_ms(ms: u64, bp: u64, per_ms: u64) {
    let chunk = 10 * per_ms;
    let (start, want) = (crate::edges::thread_cpu_ns(), ms * 1_000_000);
    while crate::edges::thread_cpu_ns() - start < want {
        run_chain(chunk, bp, None);
    }
}

/// Loop iterations per ms of the thread's CPU time.
pub fn iterations_per_ms() -> u64 {
    let t = crate::edges::thread_cpu_ns();
    run_chain(4_000_000, 0, None);
    let ns = (crate::edges::thread_cpu_ns() - t).max(1);
    (4_000_000u64 * 1_000_000 / ns).max(1000)
}
