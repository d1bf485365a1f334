// SPDX-License-Identifier: GPL-2.0
/*
 * A C tool on the uapi header alone: self-monitoring with the soft PMU's
 * three events, checked against perf_event_open's software events and
 * CLOCK_THREAD_CPUTIME_ID for the same thread and interval, at the default
 * counter width and with soft_width=16. Prints kselftest TAP.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <linux/perf_event.h>
#include <linux/perfmon.h>
#include "pfm_tap.h"

struct sample {
	uint64_t pfm[3], perf[3], cputime;
};

static int perf_open(uint64_t config)
{
	struct perf_event_attr a = {
		.type = PERF_TYPE_SOFTWARE, .size = sizeof(a), .config = config, .disabled = 1,
	};
	return syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
}

static uint64_t thread_cputime(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* busy: spin 200 ms; else 100 short sleeps alternating CPUs (switches, migrations). */
static void workload(int busy)
{
	struct timespec ts = { 0, 200000 };
	cpu_set_t set;

	if (busy) {
		uint64_t t0 = thread_cputime();
		while (thread_cputime() - t0 < 200000000ULL)
			;
		return;
	}
	for (int i = 0; i < 100; i++) {
		CPU_ZERO(&set);
		CPU_SET(i & 1, &set);
		sched_setaffinity(0, sizeof(set), &set);
		nanosleep(&ts, NULL);
	}
}

static int measure(int busy, struct sample *s)
{
	static const uint64_t ev[3] = { PFM_SOFT_EV_TASK_CLOCK, PFM_SOFT_EV_CONTEXT_SWITCHES,
					PFM_SOFT_EV_CPU_MIGRATIONS };
	static const uint64_t pe[3] = { PERF_COUNT_SW_TASK_CLOCK, PERF_COUNT_SW_CONTEXT_SWITCHES,
					PERF_COUNT_SW_CPU_MIGRATIONS };
	struct pfm_pmc pmc[3] = { 0 };
	struct pfm_pmd pmd[3] = { 0 };
	struct pfm_regs_arg ra = { .regs = (uintptr_t)pmc, .count = 3 };
	struct pfm_load load = { .tid = 0 };
	int fd = open("/dev/perfmon", O_RDWR), pfd[3], ok;
	uint64_t c0, c1;

	for (int i = 0; i < 3; i++) {
		pmc[i].reg_num = pmd[i].reg_num = i;
		pmc[i].reg_value = ev[i];
		pfd[i] = perf_open(pe[i]);
	}
	ok = fd >= 0 && ioctl(fd, PFM_IOC_WRITE_PMCS, &ra) == 0;
	ra.regs = (uintptr_t)pmd;
	ok = ok && ioctl(fd, PFM_IOC_WRITE_PMDS, &ra) == 0 && ioctl(fd, PFM_IOC_LOAD, &load) == 0;
	for (int i = 0; i < 3; i++)
		ok = ok && pfd[i] >= 0 && ioctl(pfd[i], PERF_EVENT_IOC_ENABLE, 0) == 0;
	c0 = thread_cputime();
	ok = ok && ioctl(fd, PFM_IOC_START, 0) == 0;
	workload(busy);
	ok = ok && ioctl(fd, PFM_IOC_STOP, 0) == 0;
	c1 = thread_cputime();
	for (int i = 0; i < 3; i++)
		ioctl(pfd[i], PERF_EVENT_IOC_DISABLE, 0);
	ok = ok && ioctl(fd, PFM_IOC_READ_PMDS, &ra) == 0;
	for (int i = 0; i < 3; i++) {
		s->pfm[i] = pmd[i].reg_value;
		ok = ok && read(pfd[i], &s->perf[i], 8) == 8;
		close(pfd[i]);
	}
	s->cputime = c1 - c0;
	printf("# %s: perfmon clock %llu cs %llu migr %llu | perf clock %llu cs %llu migr %llu | cputime %llu\n",
	       busy ? "busy" : "sleepy", (unsigned long long)s->pfm[0], (unsigned long long)s->pfm[1],
	       (unsigned long long)s->pfm[2], (unsigned long long)s->perf[0],
	       (unsigned long long)s->perf[1], (unsigned long long)s->perf[2],
	       (unsigned long long)s->cputime);
	if (fd >= 0)
		close(fd);
	return ok;
}

static int within(uint64_t a, uint64_t b, uint64_t pct, uint64_t slack)
{
	uint64_t d = a > b ? a - b : b - a;

	return d <= b * pct / 100 + slack;
}

/* PFM_IOC_READ_VALUES agrees with READ_PMDS and checks its argument. */
static void read_values(void)
{
	struct pfm_pmc pmc[2] = { { .reg_num = 0, .reg_value = PFM_SOFT_EV_TASK_CLOCK },
				  { .reg_num = 2, .reg_value = PFM_SOFT_EV_CONTEXT_SWITCHES } };
	struct pfm_pmd pmd[2] = { { .reg_num = 0 }, { .reg_num = 2 } };
	struct pfm_regs_arg ra = { .regs = (uintptr_t)pmc, .count = 2 };
	struct pfm_load load = { .tid = 0 };
	uint64_t vals[2] = { 0 };
	struct pfm_values v = { .pmd_mask = 0x5, .values = (uintptr_t)vals };
	int fd = open("/dev/perfmon", O_RDWR), ok;

	ok = fd >= 0 && ioctl(fd, PFM_IOC_WRITE_PMCS, &ra) == 0 && ioctl(fd, PFM_IOC_LOAD, &load) == 0 &&
	     ioctl(fd, PFM_IOC_START, 0) == 0;
	workload(0);
	ok = ok && ioctl(fd, PFM_IOC_STOP, 0) == 0;
	ra.regs = (uintptr_t)pmd;
	ok = ok && ioctl(fd, PFM_IOC_READ_PMDS, &ra) == 0 && ioctl(fd, PFM_IOC_READ_VALUES, &v) == 0;
	printf("# READ_VALUES %llu %llu, READ_PMDS %llu %llu\n", (unsigned long long)vals[0],
	       (unsigned long long)vals[1], (unsigned long long)pmd[0].reg_value,
	       (unsigned long long)pmd[1].reg_value);
	tap(ok && vals[0] == pmd[0].reg_value && vals[1] == pmd[1].reg_value && vals[1] > 0 &&
	    v.time_running == ra.time_running, "READ_VALUES returns READ_PMDS' values, in PMD order");
	v.pmd_mask = 0;
	errno = 0;
	ok = ioctl(fd, PFM_IOC_READ_VALUES, &v) < 0 && errno == EINVAL;
	v.pmd_mask = 1 << 5;
	errno = 0;
	ok = ok && ioctl(fd, PFM_IOC_READ_VALUES, &v) < 0 && errno == EINVAL;
	v.pmd_mask = 1;
	v.reserved = 1;
	errno = 0;
	ok = ok && ioctl(fd, PFM_IOC_READ_VALUES, &v) < 0 && errno == EINVAL;
	v.reserved = 0;
	v.values = 0;
	errno = 0;
	ok = ok && ioctl(fd, PFM_IOC_READ_VALUES, &v) < 0 && errno == EFAULT;
	tap(ok, "READ_VALUES: empty mask, unimplemented PMD, reserved field: EINVAL; NULL array: EFAULT");
	close(fd);
}

/* The event sets' structures, as include/uapi/linux/perfmon.rs pins them. */
_Static_assert(sizeof(struct pfm_setdesc) == 32, "pfm_setdesc");
_Static_assert(sizeof(struct pfm_setinfo) == 128, "pfm_setinfo");
_Static_assert(sizeof(struct pfm_sets_arg) == 32, "pfm_sets_arg");
_Static_assert(sizeof(struct pfm_thread) == 160, "pfm_thread");
_Static_assert(sizeof(struct pfm_threads_arg) == 56, "pfm_threads_arg");
_Static_assert(offsetof(struct pfm_threads_arg, set) == 32, "threads set");
_Static_assert(offsetof(struct pfm_threads_arg, reserved) == 40, "threads reserved");
_Static_assert(offsetof(struct pfm_ctx_info, lost_threads) == 28, "lost_threads");
_Static_assert(sizeof(struct pfm_values) == 48, "pfm_values");
_Static_assert(sizeof(struct pfm_load) == 32, "pfm_load");
_Static_assert(sizeof(struct pfm_clone) == 32, "pfm_clone");
_Static_assert(offsetof(struct pfm_setinfo, set_last_cause) == 64, "set_last_cause");
_Static_assert(sizeof(struct pfm_pmd) == 64, "pfm_pmd");
_Static_assert(offsetof(struct pfm_pmd, reg_random_mask) == 48, "reg_random_mask");
_Static_assert(offsetof(struct pfm_pmd, reg_random_seed) == 56, "reg_random_seed");
_Static_assert(PFM_REGFL_PMD_MASK == (PFM_REGFL_OVFL_NOTIFY | PFM_REGFL_RANDOM), "PMD flags");

/* The mapped page's layout, as include/uapi/linux/perfmon.rs pins it. */
_Static_assert(sizeof(struct pfm_page_pmd) == 32, "pfm_page_pmd");
_Static_assert(sizeof(struct pfm_page) == 1152, "pfm_page");
_Static_assert(offsetof(struct pfm_page, tsc_base) == 40, "tsc_base");
_Static_assert(offsetof(struct pfm_page, time_shift) == 52, "time_shift");
_Static_assert(offsetof(struct pfm_page, state) == 56, "state");
_Static_assert(offsetof(struct pfm_page, set) == 60, "page set");
_Static_assert(offsetof(struct pfm_page, time_pmds) == 64, "time_pmds");
_Static_assert(offsetof(struct pfm_page, pmds) == 128, "pmds");

/*
 * The page from C: a stopped context's values (nothing to extend) read
 * under the sequence count equal READ_VALUES'. C11 atomics are the C side
 * of the protocol (Documentation/perfmon.rst).
 */
static void mapped_page(void)
{
	struct pfm_pmc pmc = { .reg_num = 1, .reg_value = PFM_SOFT_EV_CONTEXT_SWITCHES };
	struct pfm_regs_arg ra = { .regs = (uintptr_t)&pmc, .count = 1 };
	struct pfm_load load = { .tid = 0 };
	uint64_t val = 0, seen = 0;
	struct pfm_values v = { .pmd_mask = 0x2, .values = (uintptr_t)&val };
	int fd = open("/dev/perfmon", O_RDWR), ok;
	struct pfm_page *pg;
	__u32 s1, s2, version = 0, state = 0;

	pg = mmap(NULL, PFM_PAGE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	ok = fd >= 0 && pg != MAP_FAILED && ioctl(fd, PFM_IOC_WRITE_PMCS, &ra) == 0 &&
	     ioctl(fd, PFM_IOC_LOAD, &load) == 0 && ioctl(fd, PFM_IOC_START, 0) == 0;
	workload(0);
	ok = ok && ioctl(fd, PFM_IOC_STOP, 0) == 0 && ioctl(fd, PFM_IOC_READ_VALUES, &v) == 0;
	if (ok) {
		do {
			s1 = __atomic_load_n(&pg->seq, __ATOMIC_ACQUIRE);
			version = __atomic_load_n(&pg->version, __ATOMIC_RELAXED);
			state = __atomic_load_n(&pg->state, __ATOMIC_RELAXED);
			seen = __atomic_load_n(&pg->pmds[1].value, __ATOMIC_RELAXED);
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			s2 = __atomic_load_n(&pg->seq, __ATOMIC_RELAXED);
		} while ((s1 & 1) || s1 != s2);
	}
	printf("# page: version %u state %u switches %llu, READ_VALUES %llu\n", version, state,
	       (unsigned long long)seen, (unsigned long long)val);
	tap(ok && version == PFM_PAGE_VERSION && state == PFM_STATE_LOADED && seen == val && val > 0,
	    "mapped page: a stopped context's value equals READ_VALUES'");
	if (pg != MAP_FAILED)
		munmap(pg, PFM_PAGE_SIZE);
	if (fd >= 0)
		close(fd);
}

/*
 * The four-call attach from C: a programmed template cloned
 * (PFM_IOC_CLONE returns the descriptor), loaded and started in one call
 * (PFM_LOAD_START), unloaded (which stops), closed. The clone counts the
 * thread's 50 naps between LOAD and UNLOAD, within what the thread's own
 * getrusage saw around the two calls.
 */
static void clone_load_start(void)
{
	struct pfm_pmc pmc = { .reg_num = 1, .reg_value = PFM_SOFT_EV_CONTEXT_SWITCHES };
	struct pfm_regs_arg ra = { .regs = (uintptr_t)&pmc, .count = 1 };
	struct pfm_clone cl = { .flags = PFM_CLONE_CLOEXEC };
	struct pfm_load load = { .tid = 0, .flags = PFM_LOAD_START };
	struct pfm_ctx_info info = { 0 };
	uint64_t val = 0;
	struct pfm_values v = { .pmd_mask = 0x2, .values = (uintptr_t)&val };
	struct rusage before, after;
	struct timespec nap = { 0, 1000000 };
	int tmpl = open("/dev/perfmon", O_RDWR), fd = -1, ok, started = 0;
	long own;

	ok = tmpl >= 0 && ioctl(tmpl, PFM_IOC_WRITE_PMCS, &ra) == 0;
	if (ok)
		fd = ioctl(tmpl, PFM_IOC_CLONE, &cl);
	if (tmpl >= 0)
		close(tmpl);
	ok = ok && fd >= 0 && (fcntl(fd, F_GETFD) & FD_CLOEXEC);
	getrusage(RUSAGE_THREAD, &before);
	ok = ok && ioctl(fd, PFM_IOC_LOAD, &load) == 0;
	started = ok && ioctl(fd, PFM_IOC_GET_STATE, &info) == 0 &&
		  (info.status & PFM_CTXST_STARTED) && info.state == PFM_STATE_LOADED;
	for (int i = 0; i < 50; i++)
		nanosleep(&nap, NULL);
	ok = ok && ioctl(fd, PFM_IOC_UNLOAD, 0) == 0;
	getrusage(RUSAGE_THREAD, &after);
	ok = ok && ioctl(fd, PFM_IOC_READ_VALUES, &v) == 0;
	own = (after.ru_nvcsw + after.ru_nivcsw) - (before.ru_nvcsw + before.ru_nivcsw);
	printf("# clone: started %d, switches %llu, the thread's own %ld\n", started,
	       (unsigned long long)val, own);
	tap(ok && started && val >= 50 && (long)val <= own,
	    "CLONE + LOAD|START + UNLOAD: started at LOAD, the naps counted");
	if (fd >= 0)
		close(fd);
}

int main(void)
{
	static const char *const widths[] = { "", "soft_width=16" };
	struct sample s;

	printf("TAP version 13\n1..%d\n", 2 * 5 + 2 + 1 + 1 + 1);
	for (int w = 0; w < 2; w++) {
		const char *name = w ? "soft_width=16" : "default width";
		int ok = 0;

		tap(pfm_load_module(widths[w]) == 0, "insmod perfmon.ko %s", widths[w]);
		/*
		 * The two sets of counters are started and stopped a few
		 * instructions apart: a preemption in between is possible, so
		 * equality gets three tries.
		 */
		for (int attempt = 0; attempt < 3 && !ok; attempt++)
			ok = measure(0, &s) && s.pfm[1] == s.perf[1] && s.pfm[2] == s.perf[2] &&
			     s.pfm[1] >= 100 && s.pfm[2] >= 50;
		tap(ok, "%s: context-switches and cpu-migrations equal perf_event's", name);
		tap(s.pfm[0] <= s.cputime, "%s: task-clock within the thread's CPU time", name);
		/*
		 * The CPU time and perf's count are read a few ioctls outside
		 * START/STOP (milliseconds on the KASAN kernel under TCG): 1% of
		 * a 200 ms spin plus 1 ms.
		 */
		ok = measure(1, &s);
		tap(ok && within(s.pfm[0], s.cputime, 1, 1000000) && s.pfm[0] <= s.cputime,
		    "%s: task-clock of a running thread is its CPU time", name);
		/*
		 * perf is enabled before and disabled after perfmon's window:
		 * what it counted beyond the thread's CPU time around that
		 * window is the two ioctls it spans (ms under KASAN), not error.
		 */
		tap(ok && within(s.pfm[0], s.perf[0], 1,
				 1000000 + (s.perf[0] > s.cputime ? s.perf[0] - s.cputime : 0)),
		    "%s: task-clock of a running thread within 1%% of perf's", name);
	}
	read_values();
	mapped_page();
	clone_load_start();
	tap(pfm_unload_module() == 0, "rmmod perfmon");
	return pfm_failed;
}
