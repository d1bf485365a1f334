// SPDX-License-Identifier: GPL-2.0
/*
 * Overflow interrupts from C through the uapi header: exact overflow counts
 * for a period P over N context switches, the `perfmon` line of
 * /proc/interrupts, non-blocking read, poll, SIGIO, and notify-block with
 * RESTART. Prints kselftest TAP; the module must be loaded.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sched.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/perfmon.h>
#include "pfm_tap.h"

static void nsleep(long ns)
{
	struct timespec ts = { ns / 1000000000L, ns % 1000000000L };
	nanosleep(&ts, NULL);
}

static uint64_t proc_interrupts(void)
{
	char line[512];
	uint64_t total = 0;
	FILE *f = fopen("/proc/interrupts", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (!strstr(line, "perfmon"))
			continue;
		char *p = strchr(line, ':');
		for (int cpu = 0; p && cpu < 2; cpu++)
			total += strtoull(p + 1, &p, 10);
	}
	fclose(f);
	return total;
}

/* PMD0: context switches with period P and notification; PMD1: plain count. */
static int setup_period(int tid, uint64_t period, uint32_t ctx_flags)
{
	struct pfm_pmc pmc[2] = { { .reg_num = 0, .reg_value = PFM_SOFT_EV_CONTEXT_SWITCHES },
				  { .reg_num = 1, .reg_value = PFM_SOFT_EV_CONTEXT_SWITCHES } };
	struct pfm_pmd pmd[2] = { { .reg_num = 0, .reg_flags = PFM_REGFL_OVFL_NOTIFY,
				    .reg_value = -period, .reg_short_reset = -period,
				    .reg_long_reset = -period },
				  { .reg_num = 1 } };
	struct pfm_regs_arg ra = { .regs = (uintptr_t)pmc, .count = 2 };
	struct pfm_ctx_flags fl = { .flags = ctx_flags };
	struct pfm_load load = { .tid = tid };
	int fd = open("/dev/perfmon", O_RDWR | O_NONBLOCK);

	if (fd < 0)
		return -1;
	if (ioctl(fd, PFM_IOC_SET_FLAGS, &fl) || ioctl(fd, PFM_IOC_WRITE_PMCS, &ra))
		goto fail;
	ra.regs = (uintptr_t)pmd;
	if (ioctl(fd, PFM_IOC_WRITE_PMDS, &ra) || ioctl(fd, PFM_IOC_LOAD, &load))
		goto fail;
	return fd;
fail:
	close(fd);
	return -1;
}

static void read_pmds(int fd, uint64_t *v0, uint64_t *v1)
{
	struct pfm_pmd pmd[2] = { { .reg_num = 0 }, { .reg_num = 1 } };
	struct pfm_regs_arg ra = { .regs = (uintptr_t)pmd, .count = 2 };

	*v0 = *v1 = UINT64_MAX;
	if (ioctl(fd, PFM_IOC_READ_PMDS, &ra) == 0) {
		*v0 = pmd[0].reg_value;
		*v1 = pmd[1].reg_value;
	}
}

static volatile sig_atomic_t sigio_count;
static void on_sigio(int sig) { (void)sig; sigio_count++; }

/* Period P over N context switches of this thread at one counter width. */
static void period_run(int width)
{
	const uint64_t period = 7;
	struct pfm_msg msg;
	uint64_t msgs = 0, ovfl_mask_ok = 1, ip_ok = 1, v0, v1;
	char params[32];
	int fd;

	snprintf(params, sizeof(params), "soft_width=%d", width);
	tap(pfm_load_module(params) == 0, "insmod perfmon.ko %s", params);
	uint64_t irq_before = proc_interrupts();
	fd = setup_period(0, period, 0);
	if (fd < 0) {
		tap(0, "width %d: self-monitoring with a period", width);
		return;
	}
	sigio_count = 0;
	signal(SIGIO, on_sigio);
	fcntl(fd, F_SETOWN, getpid());
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC);
	ioctl(fd, PFM_IOC_START, 0);
	for (int i = 0; i < 100; i++) {
		nsleep(100000);
		while (read(fd, &msg, sizeof(msg)) == sizeof(msg)) {
			msgs++;
			ovfl_mask_ok &= msg.type == PFM_MSG_OVFL && msg.ovfl_pmds == 1;
			ip_ok &= msg.ip != 0;
		}
	}
	ioctl(fd, PFM_IOC_STOP, 0);
	while (read(fd, &msg, sizeof(msg)) == sizeof(msg))
		msgs++;
	read_pmds(fd, &v0, &v1);
	uint64_t irq_after = proc_interrupts();
	printf("# width %d: N=%llu switches, P=%llu: %llu messages, PMD0=%lld, interrupts %llu -> %llu, SIGIO %d\n",
	       width, (unsigned long long)v1, (unsigned long long)period, (unsigned long long)msgs,
	       (long long)v0, (unsigned long long)irq_before, (unsigned long long)irq_after,
	       (int)sigio_count);
	/* A 100 us sleep may find its timer expired (slow kernels) and not switch. */
	tap(v1 >= 50 && msgs == v1 / period, "width %d: overflow messages == floor(N / P)", width);
	tap(v0 == (uint64_t)-period + v1 % period, "width %d: PMD0 holds the rest of the period", width);
	tap(ovfl_mask_ok && ip_ok, "width %d: messages name PMD0 and a user IP", width);
	tap(irq_after - irq_before >= msgs, "width %d: /proc/interrupts' perfmon line counts them", width);
	tap(sigio_count > 0, "width %d: SIGIO delivered", width);
	errno = 0;
	tap(read(fd, &msg, sizeof(msg)) < 0 && errno == EAGAIN, "width %d: empty queue, non-blocking read: EAGAIN", width);
	close(fd);
}

/* Notify-block: the child stops at the overflow until RESTART. */
static void notify_block(int kill_tool)
{
	volatile uint64_t *progress = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
					   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct pfm_ctx_info st = { 0 };
	struct pfm_msg msg;
	int go[2], fd;

	if (progress == MAP_FAILED || pipe(go))
		return;
	pid_t child = fork();
	if (child == 0) {
		char c;
		if (read(go[0], &c, 1) != 1)
			_exit(1);
		for (;;) {
			nsleep(1000000);
			(*progress)++;
		}
	}
	/* With kill_tool, the tool is a child that is SIGKILLed while the target is blocked. */
	int res[2];
	if (pipe(res))
		return;
	pid_t tool = kill_tool ? fork() : 0;
	if (tool == 0) {
		fd = setup_period(child, 5, PFM_CTXFL_NOTIFY_BLOCK);
		for (int i = 0; i < 500; i++) {
			if (ioctl(fd, PFM_IOC_GET_STATE, &st) == 0 && (st.status & PFM_CTXST_ACTIVE))
				break;
			nsleep(10000000);
		}
		ioctl(fd, PFM_IOC_START, 0);
		if (write(go[1], "x", 1) != 1)
			_exit(1);
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int got = poll(&p, 1, 5000) == 1 && read(fd, &msg, sizeof(msg)) == sizeof(msg);
		ioctl(fd, PFM_IOC_GET_STATE, &st);
		if (kill_tool) {
			int ok = got && st.state == PFM_STATE_MASKED;
			if (write(res[1], &ok, sizeof(ok)) != sizeof(ok))
				_exit(1);
			pause();
		}
		nsleep(200000000);
		uint64_t stalled_at = *progress;
		nsleep(300000000);
		int stalled = *progress == stalled_at;
		printf("# message %d, state %u, progress %llu then %llu\n", got, st.state,
		       (unsigned long long)stalled_at, (unsigned long long)*progress);
		tap(got && st.state == PFM_STATE_MASKED && stalled, "notify-block: thread stops, context MASKED");
		ioctl(fd, PFM_IOC_RESTART, 0);
		nsleep(300000000);
		tap(*progress > stalled_at, "RESTART resumes the thread");
		close(fd);
	} else {
		int ok = 0;
		if (read(res[0], &ok, sizeof(ok)) != sizeof(ok))
			ok = 0;
		nsleep(200000000);
		uint64_t stalled_at = *progress;
		kill(tool, SIGKILL);
		waitpid(tool, NULL, 0);
		nsleep(300000000);
		printf("# blocked at %llu, after the tool died %llu\n", (unsigned long long)stalled_at,
		       (unsigned long long)*progress);
		tap(ok && *progress > stalled_at, "killing the tool releases the blocked thread");
	}
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
}

/* A period of 1 on every event of a busy thread must not hang the guest. */
static void storm(void)
{
	int fd = setup_period(0, 1, 0);
	uint64_t v0, v1, t0;

	if (fd < 0)
		printf("# period 1 setup: %s\n", strerror(errno));
	struct pfm_msg msg;
	long msgs = 0, restarts = 0;

	ioctl(fd, PFM_IOC_START, 0);
	t0 = (uint64_t)time(NULL);
	/* Sleeps switch out for sure (a lone sched_yield() may not switch). */
	for (int i = 0; i < 600; i++) {
		if (i % 2)
			nsleep(1000000);	/* 1 ms: long enough to switch even on KASAN */
		else
			sched_yield();
		if (i % 16)
			continue;
		while (read(fd, &msg, sizeof(msg)) == sizeof(msg))
			msgs++;
		/*
		 * More than 8 switches between two reads fill the queue, which
		 * masks the context (counting stops) until RESTART, as a tool
		 * reading too slowly would see it.
		 */
		struct pfm_ctx_info st;
		if (ioctl(fd, PFM_IOC_GET_STATE, &st) == 0 && st.state == PFM_STATE_MASKED &&
		    ioctl(fd, PFM_IOC_RESTART, 0) == 0)
			restarts++;
	}
	ioctl(fd, PFM_IOC_STOP, 0);
	read_pmds(fd, &v0, &v1);
	printf("# period 1: %ld messages, %ld restarts after a full queue, %llu switches, %llu s\n",
	       msgs, restarts, (unsigned long long)v1, (unsigned long long)((uint64_t)time(NULL) - t0));
	tap(fd >= 0 && v1 >= 50 && msgs > 0, "period 1 on a busy thread completes");
	close(fd);
}

static int perfmon_irq_lines(void)
{
	char line[512];
	int n = 0;
	FILE *f = fopen("/proc/interrupts", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, "perfmon") != NULL;
	fclose(f);
	return n;
}

static int cpu1_online(int on)
{
	FILE *f = fopen("/sys/devices/system/cpu/cpu1/online", "w");
	int ok;

	if (!f)
		return -1;
	ok = fprintf(f, "%d\n", on) > 0;
	return fclose(f) == 0 && ok ? 0 : -1;
}

/* CPU hotplug: the vector of a CPU goes and comes back with the CPU. */
static void hotplug(void)
{
	int before = perfmon_irq_lines(), offline, online;

	if (cpu1_online(0)) {
		tap(1, "CPU hotplug # SKIP cannot offline CPU 1");
		return;
	}
	offline = perfmon_irq_lines();
	cpu1_online(1);
	msleep(100);
	online = perfmon_irq_lines();
	printf("# perfmon IRQs: %d, CPU 1 offline %d, back online %d\n", before, offline, online);
	tap(before == 2 && offline == 1 && online == 2, "CPU hotplug: CPU 1's overflow vector goes and comes back");
}

/* Load/unload with overflows in flight from other threads' contexts. */
static void load_unload_cycles(int n)
{
	int ok = 1;

	for (int i = 0; i < n && ok; i++) {
		ok = pfm_load_module(NULL) == 0;
		pid_t child = fork();
		if (child == 0) {
			int fd = setup_period(0, 1, 0);
			ioctl(fd, PFM_IOC_START, 0);
			for (int j = 0; j < 50; j++)
				sched_yield();
			_exit(0);	/* exits with the context loaded */
		}
		waitpid(child, NULL, 0);
		ok = ok && pfm_unload_module() == 0;
	}
	tap(ok, "%d load/unload cycles with overflows in flight", n);
}

int main(void)
{
	static const int widths[] = { 16, 32, 64 };

	printf("TAP version 13\n1..%d\n", 3 * 7 + 6 + 1);
	for (int i = 0; i < 3; i++)
		period_run(widths[i]);
	notify_block(0);
	notify_block(1);
	storm();
	hotplug();
	tap(pfm_unload_module() == 0, "rmmod perfmon");
	load_unload_cycles(50);
	return pfm_failed;
}
