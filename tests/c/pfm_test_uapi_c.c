// SPDX-License-Identifier: GPL-2.0
/*
 * A C tool on the uapi header: self-monitoring of the soft PMU's three
 * events, checked against perf_event_open's software events for the same
 * thread and interval. Prints kselftest TAP. Build: cc -static -I include/uapi.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <linux/perf_event.h>
#include <linux/perfmon.h>

static int n_test;
static int failed;

static void tap(int ok, const char *name)
{
	printf("%s %d - %s\n", ok ? "ok" : "not ok", ++n_test, name);
	if (!ok)
		failed = 1;
}

static int perf_open(uint64_t config)
{
	struct perf_event_attr a = {
		.type = PERF_TYPE_SOFTWARE, .size = sizeof(a), .config = config,
		.disabled = 1, .exclude_kernel = 0,
	};
	return syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
}

static int mode;

static void workload(void)
{
	struct timespec ts = { 0, 200000 };
	cpu_set_t set;

	if (mode == 1) {
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		do clock_gettime(CLOCK_MONOTONIC, &b);
		while ((b.tv_sec - a.tv_sec) * 1000000000L + b.tv_nsec - a.tv_nsec < 50000000L);
		return;
	}
	if (mode == 2) {
		for (int i = 0; i < 100; i++)
			nanosleep(&ts, NULL);
		return;
	}
	for (int i = 0; i < 100; i++) {
		/* Alternate CPUs to cause migrations, sleep to cause switches. */
		CPU_ZERO(&set);
		CPU_SET(i & 1, &set);
		sched_setaffinity(0, sizeof(set), &set);
		nanosleep(&ts, NULL);
	}
}

int main(int argc, char **argv)
{
	static const uint64_t ev[3] = { PFM_SOFT_EV_TASK_CLOCK, PFM_SOFT_EV_CONTEXT_SWITCHES,
					PFM_SOFT_EV_CPU_MIGRATIONS };
	static const uint64_t pe[3] = { PERF_COUNT_SW_TASK_CLOCK, PERF_COUNT_SW_CONTEXT_SWITCHES,
					PERF_COUNT_SW_CPU_MIGRATIONS };
	struct pfm_pmc pmc[3];
	struct pfm_pmd pmd[3];
	struct pfm_regs_arg ra;
	struct pfm_load load;
	struct pfm_info info;
	uint64_t perf[3];
	int fd, pfd[3];

	mode = argc > 1 ? atoi(argv[1]) : 0;
	printf("TAP version 13\n1..6\n");
	fd = open("/dev/perfmon", O_RDWR);
	tap(fd >= 0, "open /dev/perfmon");
	if (fd < 0) {
		printf("Bail out! %s\n", strerror(errno));
		return 1;
	}
	memset(&info, 0, sizeof(info));
	tap(ioctl(fd, PFM_IOC_GET_INFO, &info) == 0 && info.abi_version == PFM_ABI_VERSION &&
	    info.num_pmds >= 3, "GET_INFO");
	printf("# model %s, %u counters, %u bits\n", info.model, info.num_pmds, info.counter_width);

	memset(pmc, 0, sizeof(pmc));
	memset(pmd, 0, sizeof(pmd));
	for (int i = 0; i < 3; i++) {
		pmc[i].reg_num = i;
		pmc[i].reg_value = ev[i];
		pmd[i].reg_num = i;
	}
	memset(&ra, 0, sizeof(ra));
	ra.regs = (uintptr_t)pmc;
	ra.count = 3;
	int ok = ioctl(fd, PFM_IOC_WRITE_PMCS, &ra) == 0;
	ra.regs = (uintptr_t)pmd;
	ok = ok && ioctl(fd, PFM_IOC_WRITE_PMDS, &ra) == 0;
	memset(&load, 0, sizeof(load));
	ok = ok && ioctl(fd, PFM_IOC_LOAD, &load) == 0;
	tap(ok, "program and load on self");

	for (int i = 0; i < 3; i++) {
		pfd[i] = perf_open(pe[i]);
		if (pfd[i] < 0)
			printf("# perf_event_open: %s\n", strerror(errno));
	}
	for (int i = 0; i < 3; i++)
		ioctl(pfd[i], PERF_EVENT_IOC_ENABLE, 0);
	struct timespec c0, c1;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
	ok = ioctl(fd, PFM_IOC_START, 0) == 0;
	workload();
	ok = ok && ioctl(fd, PFM_IOC_STOP, 0) == 0;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
	printf("# thread cpu time %lld ns\n", (long long)((c1.tv_sec - c0.tv_sec) * 1000000000LL + c1.tv_nsec - c0.tv_nsec));
	for (int i = 0; i < 3; i++)
		ioctl(pfd[i], PERF_EVENT_IOC_DISABLE, 0);
	tap(ok, "start, workload, stop");

	ok = ioctl(fd, PFM_IOC_READ_PMDS, &ra) == 0;
	for (int i = 0; i < 3; i++)
		ok = ok && read(pfd[i], &perf[i], 8) == 8;
	printf("# perfmon: task-clock %llu cs %llu migr %llu (enabled %llu running %llu)\n",
	       (unsigned long long)pmd[0].reg_value, (unsigned long long)pmd[1].reg_value,
	       (unsigned long long)pmd[2].reg_value, (unsigned long long)ra.time_enabled,
	       (unsigned long long)ra.time_running);
	printf("# perf:    task-clock %llu cs %llu migr %llu\n", (unsigned long long)perf[0],
	       (unsigned long long)perf[1], (unsigned long long)perf[2]);
	tap(ok && pmd[1].reg_value == perf[1] && pmd[2].reg_value == perf[2],
	    "context-switches and cpu-migrations equal perf_event's");
	tap(ok && pmd[0].reg_value > 0, "task-clock counted");
	close(fd);
	return failed;
}
