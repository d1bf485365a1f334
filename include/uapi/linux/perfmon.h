/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * perfmon: per-thread access to the CPU's performance counters through
 * /dev/perfmon. This header is the ABI; Documentation/perfmon.rst explains it
 * and include/uapi/linux/perfmon.rs mirrors it for Rust (module and user
 * space). Every structure has fixed-width fields, explicit padding and
 * reserved space that must be zero; sizes are pinned below.
 *
 * One open() of /dev/perfmon is one monitoring context.
 */
#ifndef _UAPI_LINUX_PERFMON_H
#define _UAPI_LINUX_PERFMON_H

#include <linux/types.h>
#include <linux/ioctl.h>

#define PFM_ABI_VERSION		1

#define PFM_MAX_PMCS		32	/* PMC (config) register numbers 0..31 */
#define PFM_MAX_PMDS		32	/* PMD (data) register numbers 0..31 */
#define PFM_MAX_EVENTS		16	/* events described by PFM_IOC_GET_INFO */
#define PFM_MAX_REGS_PER_CALL	64	/* elements in one register array call */
#define PFM_NAME_LEN		32

/* struct pfm_info.core_types */
#define PFM_CORE_TYPE_CORE	(1U << 0)	/* hybrid Intel Core (P-) cores */
#define PFM_CORE_TYPE_ATOM	(1U << 1)	/* hybrid Intel Atom (E-) cores */
#define PFM_CORE_TYPE_OTHER	(1U << 31)	/* a core type not named here */

/* Context states (struct pfm_ctx_info.state). */
#define PFM_STATE_UNLOADED	1	/* not attached to a thread */
#define PFM_STATE_LOADED	2	/* attached (counting when started) */
#define PFM_STATE_MASKED	3	/* stopped by a notifying overflow until RESTART */
#define PFM_STATE_ZOMBIE	4	/* fd closed while attached to another thread */

/* struct pfm_pmc.reg_flags / struct pfm_pmd.reg_flags, input bits. */
#define PFM_REGFL_OVFL_NOTIFY	(1u << 0)	/* PMD: queue a message on overflow */
/*
 * PMD: randomise the period (perfmon2's). Every reset (short, long or
 * linked) subtracts an amount drawn uniformly in [0, reg_random_mask] from
 * the reset value, so a period P (a reset value of 2^64 - P) lasts P + r
 * events; each PMD has its own generator, seeded by reg_random_seed.
 */
#define PFM_REGFL_RANDOM	(1u << 1)
#define PFM_REGFL_IN_MASK	0x0000ffffu	/* room for input flags */
/*
 * The input flags a PMD accepts today. Any other bit outside
 * PFM_REG_RETFL_MASK (bits 16-23 included) fails with EINVAL; a PMC takes
 * no input flag at all.
 */
#define PFM_REGFL_PMD_MASK	(PFM_REGFL_OVFL_NOTIFY | PFM_REGFL_RANDOM)

/*
 * reg_flags output bits: one per element of an array call, as in perfmon2.
 * They are ignored on input and rewritten by every call that fails
 * validation; a call that succeeds clears them.
 */
#define PFM_REG_RETFL_NOTAVAIL	(1u << 31)	/* register does not exist */
#define PFM_REG_RETFL_EINVAL	(1u << 30)	/* value or flags invalid */
#define PFM_REG_RETFL_NOSET	(1u << 29)	/* event set does not exist */
#define PFM_REG_RETFL_MASK	0xff000000u

/* A PMC (configuration register) to write. */
struct pfm_pmc {
	__u16 reg_num;		/* PMC number */
	__u16 reg_set;		/* event set (PFM_REG_RETFL_NOSET if it does not exist) */
	__u32 reg_flags;	/* in: 0; out: PFM_REG_RETFL_* */
	__u64 reg_value;	/* checked against the model's reserved mask */
	__u64 reserved[2];	/* must be 0 */
};

/* A PMD (data register: a counter) to write or read. */
struct pfm_pmd {
	__u16 reg_num;		/* PMD number */
	__u16 reg_set;		/* event set (PFM_REG_RETFL_NOSET if it does not exist) */
	__u32 reg_flags;	/* in: PFM_REGFL_*; out: PFM_REG_RETFL_* */
	__u64 reg_value;	/* 64-bit virtualized value */
	__u64 reg_long_reset;	/* reload value on RESTART after a notification */
	__u64 reg_short_reset;	/* reload value after a non-notified overflow */
	/* out (read): value of the last reset (randomised; 0 before the first) */
	__u64 reg_last_reset_val;
	__u64 reg_reset_pmds;	/* bitmask of PMDs also reset when this one overflows */
	/*
	 * PFM_REGFL_RANDOM: each reset subtracts an amount in [0, mask]; the
	 * mask is 2^k - 1 (0 included), at most reg_short_reset and
	 * reg_long_reset (a period stays within 2^64). Without the flag, 0.
	 * READ_PMDS: out (ignored on input), 0 without the flag.
	 */
	__u64 reg_random_mask;
	/*
	 * PFM_REGFL_RANDOM: the generator's seed; 0: the kernel picks one.
	 * Without the flag, 0. READ_PMDS: out (ignored on input), the
	 * generator's state, never 0 with the flag: a seed that, written
	 * back, continues the sequence; 0 without the flag.
	 */
	__u64 reg_random_seed;
};

/*
 * Argument of PFM_IOC_WRITE_PMCS, PFM_IOC_WRITE_PMDS and PFM_IOC_READ_PMDS:
 * an array of struct pfm_pmc or struct pfm_pmd. The call is all or nothing:
 * if one element is invalid, no element is applied, every element's reg_flags
 * says whether it was at fault, `done` is the index of the first bad one and
 * the call fails with EINVAL.
 */
struct pfm_regs_arg {
	__u64 regs;		/* user pointer to the array */
	__u32 count;		/* elements, 1..PFM_MAX_REGS_PER_CALL */
	__u32 done;		/* out: elements processed */
	__u64 time_enabled;	/* out (READ_PMDS): ns loaded and started */
	__u64 time_running;	/* out (READ_PMDS): ns the thread ran while started */
	__u64 reserved[2];	/* must be 0 */
};

/*
 * Argument of PFM_IOC_READ_VALUES: the cheap read of counting values, the
 * counterpart of perf's read() of a group. `values` receives one __u64 per
 * bit of `pmd_mask`, in PMD order.
 */
struct pfm_values {
	__u64 pmd_mask;		/* in: PMDs to read, implemented ones only, not 0 */
	__u64 values;		/* in: user pointer to __u64[popcount(pmd_mask)] */
	__u64 time_enabled;	/* out: ns loaded and started */
	__u64 time_running;	/* out: ns the thread ran while started */
	__u16 set;		/* PFM_VALFL_SET: the event set read; else 0 */
	__u16 vflags;		/* PFM_VALFL_* */
	__u32 pad;		/* must be 0 */
	__u64 reserved;		/* must be 0 */
};

/* struct pfm_values.vflags */
#define PFM_VALFL_SET		(1u << 0)	/* values and times of set `set` */
#define PFM_VALFL_MASK		0x1u

/* Argument of PFM_IOC_LOAD. */
struct pfm_load {
	__u32 tid;		/* thread to monitor; 0 = the calling thread;
				 * PFM_LOAD_PROCESS: a process id (tgid) */
	__u32 flags;		/* PFM_LOAD_* */
	__u16 load_set;		/* the event set monitoring starts in (it must exist) */
	__u16 pad0;		/* must be 0 */
	__u32 pad1;		/* must be 0 */
	__u64 reserved[2];	/* must be 0 */
};

/* struct pfm_load.flags */
#define PFM_LOAD_PROCESS	(1u << 0)	/* every thread of process `tid`, and (as with
						 * PFM_CTXFL_INHERIT) every thread and process
						 * they create from then on */
#define PFM_LOAD_START		(1u << 1)	/* then START, as PFM_IOC_START would (one call
						 * instead of two; UNLOAD stops) */
#define PFM_LOAD_MASK		0x3u

/*
 * Argument of PFM_IOC_CLONE: a new context, UNLOADED, with this one's
 * flags, registers and event sets as they are now (as if the same calls had
 * been made to it), and nothing else (no messages, mapping or threads). The
 * context cloned must be UNLOADED. The ioctl returns the new context's file
 * descriptor: a tool keeps one programmed context as a template and clones
 * it per thread, with no open() of /dev/perfmon and no register writes.
 */
struct pfm_clone {
	__u32 flags;		/* PFM_CLONE_* */
	__u32 pad;		/* must be 0 */
	__u64 reserved[3];	/* must be 0 */
};

/* struct pfm_clone.flags */
#define PFM_CLONE_CLOEXEC	(1u << 0)	/* the new descriptor is close-on-exec */
#define PFM_CLONE_NONBLOCK	(1u << 1)	/* and O_NONBLOCK (its reads) */
#define PFM_CLONE_MASK		0x3u

/*
 * Event sets (Documentation/perfmon.rst, "Event sets and multiplexing").
 * Set 0 always exists; sets 1..PFM_MAX_SETS-1 are created and deleted while
 * UNLOADED. A register element's reg_set names its set. While loaded, the
 * sets take turns on the counters, round robin by id, switched by the
 * active set's flags.
 */
#define PFM_MAX_SETS		16
#define PFM_SETFL_OVFL_SWITCH	(1u << 0)	/* after set_ovfl_switch_cnt overflows of set_switch_pmds */
#define PFM_SETFL_TIME_SWITCH	(1u << 1)	/* after set_timeout ns of the thread's running time */
#define PFM_SETFL_MASK		0x3u
#define PFM_SET_MIN_TIMEOUT	100000	/* ns; shorter timeouts are raised to it */

/* struct pfm_setinfo.set_last_cause */
#define PFM_SET_CAUSE_NONE	0	/* the set was never switched away from */
#define PFM_SET_CAUSE_TIME	1	/* its timeout */
#define PFM_SET_CAUSE_OVFL	2	/* its ovfl_switch_cnt-th overflow */

struct pfm_setdesc {
	__u16 set_id;		/* 0..PFM_MAX_SETS-1 */
	__u16 set_flags;	/* PFM_SETFL_*: at most one */
	__u32 set_ovfl_switch_cnt; /* OVFL_SWITCH: >= 1; else 0 */
	__u64 set_timeout;	/* TIME_SWITCH: ns (out: the effective value); else 0 */
	__u64 set_switch_pmds;	/* OVFL_SWITCH: PMDs whose overflows count; else 0 */
	__u64 reserved;		/* must be 0 */
};

struct pfm_setinfo {
	__u16 set_id;		/* in: the set */
	__u16 set_flags;	/* out, as created */
	__u32 set_ovfl_switch_cnt;
	__u64 set_timeout;	/* the effective timeout */
	__u64 set_switch_pmds;
	__u64 set_runs;		/* activations since LOAD */
	__u64 set_timeout_left;	/* active and TIME_SWITCH: ns left; else the timeout */
	__u64 set_time_enabled;	/* ns the thread ran while the context counted, since LOAD */
	__u64 set_time_running;	/* the part of it with this set active */
	__u64 set_ovfl_pmds;	/* the PMDs whose overflows caused the last switch away */
	__u32 set_last_cause;	/* PFM_SET_CAUSE_* */
	__u32 pad;
	__u64 set_used_pmcs;	/* PMCs written in this set */
	__u64 set_used_pmds;	/* PMDs written in this set */
	__u64 reserved[5];
};

/*
 * Argument of PFM_IOC_CREATE_SETS (an array of struct pfm_setdesc),
 * PFM_IOC_DELETE_SETS (__u16 set ids) and PFM_IOC_GETINFO_SETS (struct
 * pfm_setinfo, set_id in). All or nothing: on EINVAL `done` is the index of
 * the first bad element.
 */
struct pfm_sets_arg {
	__u64 sets;		/* user pointer to the array */
	__u32 count;		/* elements, 1..PFM_MAX_SETS */
	__u32 done;		/* out: elements processed, or the first bad index */
	__u64 reserved[2];	/* must be 0 */
};

/* Context flags (PFM_IOC_SET_FLAGS; only while UNLOADED). */
#define PFM_CTXFL_NOTIFY_BLOCK	(1u << 0)	/* block the thread on overflow until RESTART */
#define PFM_CTXFL_NO_MSG	(1u << 1)	/* count overflows, queue no messages */
#define PFM_CTXFL_INHERIT	(1u << 2)	/* monitor the threads and processes the monitored
						 * threads create after LOAD, transitively */
#define PFM_CTXFL_START_ON_EXEC	(1u << 3)	/* start counting at the target's next successful
						 * exec (LOAD arms it; START starts at once) */
#define PFM_CTXFL_MASK		0xfu

struct pfm_ctx_flags {
	__u32 flags;		/* PFM_CTXFL_* */
	__u32 pad;		/* must be 0 */
	__u64 reserved[3];	/* must be 0 */
};

/* Output of PFM_IOC_GET_STATE. */
struct pfm_ctx_info {
	__u32 state;		/* PFM_STATE_* */
	__u32 tid;		/* monitored thread (caller's pid namespace); after its exit the
				 * thread that exited; 0 if none (never loaded, or UNLOADed) */
	__u32 flags;		/* PFM_CTXFL_* */
	__u32 status;		/* PFM_CTXST_* */
	__u64 used_pmds;	/* bitmask of PMDs written */
	__u32 threads;		/* threads monitored since LOAD, alive or exited (INHERIT or
				 * PFM_LOAD_PROCESS; else 1 while loaded) */
	__u32 lost_threads;	/* threads that should have been monitored and could not be
				 * (the per-user limit, memory, the registry full) */
	__u64 reserved[2];
};
#define PFM_CTXST_STARTED	(1u << 0)	/* START issued, no STOP since */
#define PFM_CTXST_ACTIVE	(1u << 1)	/* the target has installed the context */
#define PFM_CTXST_EXITED	(1u << 2)	/* the target exited (END queued) */
#define PFM_CTXST_EXEC_ARMED	(1u << 3)	/* START_ON_EXEC: waiting for the exec */

/*
 * PFM_IOC_READ_THREADS: one row per thread the context monitored since
 * LOAD, alive or exited (Documentation/perfmon.rst, "Whole programs").
 * The loaded thread's row is first, then the others in the order they
 * were attached. Each row holds the values of the PMDs in `pmd_mask`, in
 * PMD order (at most PFM_THREAD_VALUES of them).
 */
#define PFM_THREAD_VALUES	16
#define PFM_MAX_THREAD_ROWS	65536	/* most rows there can be (the loaded thread, live threads:
					 * at most 4096 attached system-wide, ended threads) */
#define PFM_MAX_ENDED_ROWS	1024	/* rows of ended threads kept; more are summed, not listed */

/* struct pfm_thread.flags */
#define PFM_THRFL_EXITED	(1u << 0)	/* the thread exited; values are final */
#define PFM_THRFL_REVOKED	(1u << 1)	/* monitoring ended at an exec it may not see */
#define PFM_THRFL_LOADED	(1u << 2)	/* the thread LOAD named (first row) */

struct pfm_thread {
	__u32 tid;		/* thread id (the caller's pid namespace; 0 if not visible there) */
	__u32 pid;		/* its process id (tgid) */
	__u32 flags;		/* PFM_THRFL_* */
	__u32 pad;
	__u64 time_enabled;	/* ns monitored and started */
	__u64 time_running;	/* ns it ran while started */
	__u64 values[PFM_THREAD_VALUES];
};

struct pfm_threads_arg {
	__u64 threads;		/* in: user pointer to struct pfm_thread[count] */
	__u64 pmd_mask;		/* in: PMDs whose values the rows hold, implemented ones only */
	__u32 count;		/* in: rows the array holds */
	__u32 needed;		/* out: rows there are (E2BIG, nothing written, if above count) */
	__u32 lost_threads;	/* out: as struct pfm_ctx_info.lost_threads */
	__u32 flags;		/* must be 0 */
	__u16 set;		/* PFM_VALFL_SET: the event set whose values and times
				 * the rows hold; else 0 */
	__u16 vflags;		/* 0 or PFM_VALFL_SET */
	__u32 pad;		/* must be 0 */
	__u64 reserved[2];	/* must be 0 */
};

/* Event of the PMU model (struct pfm_info.events). */
struct pfm_event_info {
	char  name[24];		/* NUL-terminated, e.g. "context-switches" */
	__u64 code;		/* value to write into a counter's PMC */
};

/* Output of PFM_IOC_GET_INFO. */
struct pfm_info {
	__u32 abi_version;	/* PFM_ABI_VERSION */
	__u32 size;		/* sizeof(struct pfm_info) */
	char  model[PFM_NAME_LEN];	/* "soft", "intel_arch", "amd64" */
	__u16 num_pmcs;		/* PMCs implemented */
	__u16 num_pmds;		/* PMDs implemented */
	__u16 num_events;	/* valid entries in events[] */
	__u16 counter_width;	/* bits of the (hardware or soft) counters */
	__u32 vector;		/* overflow interrupt vector on CPU 0, 0 if none */
	__u32 flags;		/* must be ignored */
	__u64 impl_pmcs;	/* bit n: PMC n exists */
	__u64 impl_pmds;	/* bit n: PMD n exists */
	__u32 core_types;	/* hybrid Intel: PFM_CORE_TYPE_* of the CPUs (the model is
				 * what every type has); 0 if not hybrid */
	__u32 reserved0;
	__u64 reserved[3];
	__u64 pmc_rsvd_mask[PFM_MAX_PMCS];	/* bits a PMC value must leave 0 */
	struct pfm_event_info events[PFM_MAX_EVENTS];
};

/* Messages read(2) from the fd: one struct per message. */
#define PFM_MSG_OVFL		1	/* a PMD with OVFL_NOTIFY overflowed */
#define PFM_MSG_END		2	/* the monitored thread exited */
#define PFM_MSG_REVOKED		3	/* the thread gained privileges the tool lacks (setuid exec): unloaded */
#define PFM_MSG_SMPL_FULL	4	/* the sampling buffer is full: MASKED until RESTART
					 * (ovfl_pmds: the PMDs whose entry filled it) */

struct pfm_msg {
	__u32 type;		/* PFM_MSG_* */
	__u32 tid;		/* monitored thread */
	__u16 cpu;		/* CPU where it happened */
	__u16 set;		/* OVFL: the event set of ovfl_pmds (0 without sets) */
	__u32 reserved0;
	__u64 ip;		/* OVFL: user instruction pointer when interrupted */
	__u64 ovfl_pmds;	/* OVFL: bitmask of overflowed PMDs */
	__u64 tstamp;		/* ns, local_clock() */
	__u64 reserved[3];
};

/*
 * The mapped counter page: mmap(NULL, PFM_PAGE_SIZE, PROT_READ, MAP_SHARED,
 * fd, 0) maps one read-only page that describes the context's counters
 * (Documentation/perfmon.rst, "Reading without a system call"). The kernel
 * updates it at every switch-in and switch-out of the monitored thread and
 * at every call that folds or changes the counters, under `seq`: odd while
 * it writes; a reader retries until it saw the same even value before and
 * after its reads.
 */
#define PFM_PAGE_VERSION	1
#define PFM_PAGE_SIZE		4096	/* the mmap length; the offset must be 0 */

/* struct pfm_page.flags */
#define PFM_PAGE_COUNTING	(1u << 0)	/* loaded, started, not masked */
#define PFM_PAGE_RUNNING	(1u << 1)	/* COUNTING, and the thread was on `cpu` at the
						 * update and has not been switched out since */
#define PFM_PAGE_TIME_VALID	(1u << 2)	/* tsc_base, time_mult, time_shift are valid */

/* struct pfm_page_pmd.flags */
#define PFM_PAGE_PMD_TIME	(1u << 0)	/* counts the thread's time on CPU (task-clock) */
#define PFM_PAGE_PMD_STALE	(1u << 1)	/* moves while the thread runs, and index is 0:
						 * only the system call reads it live */

struct pfm_page_pmd {
	__u64 value;		/* 64-bit value at the last update */
	__u32 index;		/* rdpmc index + 1 while readable in user mode; 0: not */
	__u32 flags;		/* PFM_PAGE_PMD_* */
	__u64 offset;		/* index != 0: the raw counter at the last update; the value
				 * now is value + ((rdpmc(index - 1) - offset) & (2^pmc_width - 1)) */
	__u64 reserved;
};

struct pfm_page {
	__u32 version;		/* PFM_PAGE_VERSION */
	__u32 seq;		/* sequence count: odd while the kernel writes */
	__u32 flags;		/* PFM_PAGE_* */
	__u32 cpu;		/* RUNNING: the CPU the thread runs on (TSC_AUX & 0xfff there) */
	__u64 pmd_mask;		/* PMDs described (the model's implemented PMDs) */
	__u64 time_enabled;	/* ns loaded and started, at the last update */
	__u64 time_running;	/* ns the thread ran while started, at the last update */
	__u64 tsc_base;		/* RUNNING and TIME_VALID: the TSC of `cpu` at the update */
	__u32 time_mult;	/* ns = (cycles * mult) >> shift, in 128 bits; or, in 64, */
	__u16 time_shift;	/* quot * mult + ((rem * mult) >> shift), quot = cycles >> shift,
				 * rem = cycles & (2^shift - 1) (at most 1 ns less) */
	__u16 pmc_width;	/* bits of the counters rdpmc reads */
	__u32 state;		/* PFM_STATE_* */
	__u32 set;		/* the event set whose values pmds[] shows (0 without sets) */
	__u64 time_pmds;	/* the PMDs with PFM_PAGE_PMD_TIME */
	__u64 slow_pmds;	/* the PMDs with index != 0 or PFM_PAGE_PMD_STALE: a reader
				 * that reads none of them needs no per-PMD flag */
	__u64 reserved[6];
	struct pfm_page_pmd pmds[PFM_MAX_PMDS];	/* indexed by PMD number */
};

/*
 * The sampling buffer (Documentation/perfmon.rst, "Sampling"): set up once
 * with PFM_IOC_SMPL_SETUP while UNLOADED, then mmap(NULL, (1 + data_pages)
 * * PFM_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, PFM_SMPL_OFFSET)
 * maps a header page followed by the entries, a ring. Every overflow of a
 * PMD writes one entry per period crossed. An entry is entry_size bytes:
 * the smallest power of two that holds struct pfm_smpl_entry and
 * chain_depth return addresses (128 without a chain). The kernel writes an
 * entry, then `head` (a release store); the tool reads `head` (acquire),
 * reads the entries before it, then writes `tail` (release). The kernel
 * reads `tail` before it writes over an entry, so the tool drains while
 * the thread runs. The 1 + data_pages pages are locked memory, charged at
 * PFM_IOC_SMPL_SETUP as perf charges a ring of as many pages at mmap (the
 * user's share of perf_event_mlock_kb, then RLIMIT_MEMLOCK; CAP_IPC_LOCK
 * exempt): EPERM past it, as perf. Given back when the buffer is freed.
 */
#define PFM_SMPL_VERSION	1
#define PFM_SMPL_OFFSET		(1u << 20)	/* mmap offset of the buffer (the counter page is at 0) */
#define PFM_SMPL_MAX_PAGES	1024		/* data pages, at most (4 MiB of entries) */
#define PFM_SMPL_MAX_VALUES	8		/* PMD values an entry records */
#define PFM_SMPL_MAX_CHAIN	64		/* return addresses an entry records, at most */

/* Argument of PFM_IOC_SMPL_SETUP. */
struct pfm_smpl_setup {
	__u32 data_pages;	/* entry pages: a power of two, 1..PFM_SMPL_MAX_PAGES */
	__u32 flags;		/* PFM_SMPL_* */
	__u32 watermark;	/* bytes of unread entries that make poll() readable (POLLIN);
				 * 0: half the data */
	__u32 pad;		/* must be 0 */
	__u64 smpl_pmds[PFM_MAX_PMDS];	/* per PMD: the PMDs whose values its entries record
					 * (implemented ones, at most PFM_SMPL_MAX_VALUES) */
	__u32 chain_depth;	/* user call chain: return addresses an entry records
				 * at most, 0..PFM_SMPL_MAX_CHAIN (0: none) */
	__u32 pad2;		/* must be 0 */
	__u64 reserved[3];	/* must be 0 */
};

/* struct pfm_smpl_setup.flags */
#define PFM_SMPL_DROP		(1u << 0)	/* full: drop the entry and count it (`lost`);
						 * else (perfmon2's) mask the context, queue
						 * PFM_MSG_SMPL_FULL, and resume at RESTART */
#define PFM_SMPL_MASK		0x1u

/* The buffer's first page. */
struct pfm_smpl_hdr {
	__u32 version;		/* PFM_SMPL_VERSION */
	__u32 entry_size;	/* bytes per entry (a power of two) */
	__u64 data_size;	/* bytes of entries: data_pages * PFM_PAGE_SIZE */
	__u64 head;		/* kernel: bytes written since setup; the entry at byte
				 * offset x is at data + (x % data_size) */
	__u64 tail;		/* tool: bytes consumed (the kernel never passes it) */
	__u64 written;		/* entries written */
	__u64 lost;		/* entries dropped: the buffer full (PFM_SMPL_DROP; or,
				 * masking, RESTART before the tool drained) */
	__u64 reserved[10];
};

/* One sample. */
struct pfm_smpl_entry {
	__u32 tid;		/* the thread (the loader's pid namespace) */
	__u32 pid;		/* its process */
	__u16 cpu;		/* where it overflowed */
	__u16 ovfl_pmd;		/* the PMD that overflowed */
	__u16 set;		/* its event set */
	__u16 nvalues;		/* values[] used: popcount of smpl_pmds */
	__u64 seq;		/* `written` before this entry: 0, 1, 2, ... */
	__u64 last_reset_val;	/* the value the PMD was reset to */
	__u64 ip;		/* user instruction pointer (0 if not visible) */
	__u64 tstamp;		/* CLOCK_MONOTONIC, ns */
	__u64 smpl_pmds;	/* the PMDs values[] holds, in PMD order */
	__u16 chain_len;	/* return addresses in chain[] */
	__u16 chain_flags;	/* PFM_SMPL_CHAIN_* */
	__u32 pad;		/* 0 */
	__u64 values[PFM_SMPL_MAX_VALUES];
	__u64 chain[];		/* with chain_depth: the user call chain, the
				 * caller of ip's function first (a frame-pointer
				 * walk); the entry is entry_size bytes */
};

/* struct pfm_smpl_entry.chain_flags */
#define PFM_SMPL_CHAIN_TRUNCATED	(1u << 0)	/* more frames than chain_depth */
#define PFM_SMPL_CHAIN_BROKEN		(1u << 1)	/* the walk met a frame it could not
							 * read or that did not go up the
							 * stack, before a null frame pointer */
#define PFM_SMPL_CHAIN_NONE		(1u << 2)	/* no chain could be taken (a 32-bit
							 * thread, or its registers not
							 * visible to the loader) */

#define PFM_IOC_MAGIC		0xB6

#define PFM_IOC_GET_INFO	_IOR(PFM_IOC_MAGIC, 0x00, struct pfm_info)
#define PFM_IOC_WRITE_PMCS	_IOWR(PFM_IOC_MAGIC, 0x01, struct pfm_regs_arg)
#define PFM_IOC_WRITE_PMDS	_IOWR(PFM_IOC_MAGIC, 0x02, struct pfm_regs_arg)
#define PFM_IOC_READ_PMDS	_IOWR(PFM_IOC_MAGIC, 0x03, struct pfm_regs_arg)
#define PFM_IOC_LOAD		_IOW(PFM_IOC_MAGIC, 0x04, struct pfm_load)
#define PFM_IOC_UNLOAD		_IO(PFM_IOC_MAGIC, 0x05)
#define PFM_IOC_START		_IO(PFM_IOC_MAGIC, 0x06)
#define PFM_IOC_STOP		_IO(PFM_IOC_MAGIC, 0x07)
#define PFM_IOC_RESTART		_IO(PFM_IOC_MAGIC, 0x08)
#define PFM_IOC_GET_STATE	_IOR(PFM_IOC_MAGIC, 0x09, struct pfm_ctx_info)
#define PFM_IOC_SET_FLAGS	_IOW(PFM_IOC_MAGIC, 0x0a, struct pfm_ctx_flags)
#define PFM_IOC_READ_VALUES	_IOWR(PFM_IOC_MAGIC, 0x0b, struct pfm_values)
#define PFM_IOC_CREATE_SETS	_IOWR(PFM_IOC_MAGIC, 0x0c, struct pfm_sets_arg)
#define PFM_IOC_DELETE_SETS	_IOWR(PFM_IOC_MAGIC, 0x0d, struct pfm_sets_arg)
#define PFM_IOC_GETINFO_SETS	_IOWR(PFM_IOC_MAGIC, 0x0e, struct pfm_sets_arg)
#define PFM_IOC_READ_THREADS	_IOWR(PFM_IOC_MAGIC, 0x0f, struct pfm_threads_arg)
#define PFM_IOC_CLONE		_IOW(PFM_IOC_MAGIC, 0x10, struct pfm_clone)	/* returns an fd */
#define PFM_IOC_SMPL_SETUP	_IOW(PFM_IOC_MAGIC, 0x11, struct pfm_smpl_setup)

/* Soft PMU model: event codes written into PMC n select what PMD n counts. */
#define PFM_SOFT_EV_NONE		0
#define PFM_SOFT_EV_TASK_CLOCK		1	/* ns on CPU */
#define PFM_SOFT_EV_CONTEXT_SWITCHES	2
#define PFM_SOFT_EV_CPU_MIGRATIONS	3
#define PFM_SOFT_EV_PAGE_FAULTS		4	/* minor + major, as getrusage */
#define PFM_SOFT_EV_MINOR_FAULTS	5	/* ru_minflt */
#define PFM_SOFT_EV_MAJOR_FAULTS	6	/* ru_majflt */

#endif /* _UAPI_LINUX_PERFMON_H */
