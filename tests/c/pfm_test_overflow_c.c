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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/perfmon.h>

static int n_test, failed;

static void tap(int ok, const char *name)
{
	printf("%s %d - %s\n", ok ? "ok" : "not ok", ++n_test, name);
	fflush(stdout);
	if (!ok)
		failed = 1;
}

static void usleep_ns(long ns)
{
	struct timespec ts = { 0, ns };
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

int main(void)
{
	const uint64_t period = 7;
	struct pfm_msg msg;
	uint64_t msgs = 0, ovfl_mask_ok = 1, ip_ok = 1, v0, v1;
	int fd;

	printf("TAP version 13\n1..9\n");

	uint64_t irq_before = proc_interrupts();
	fd = setup_period(0, period, 0);
	tap(fd >= 0, "self-monitoring with a period");
	if (fd < 0)
		return 1;
	signal(SIGIO, on_sigio);
	fcntl(fd, F_SETOWN, getpid());
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC);
	ioctl(fd, PFM_IOC_START, 0);
	for (int i = 0; i < 100; i++) {
		usleep_ns(100000);
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
	printf("# N=%llu switches, P=%llu: %llu messages, PMD0=%lld, interrupts %llu -> %llu, SIGIO %d\n",
	       (unsigned long long)v1, (unsigned long long)period, (unsigned long long)msgs,
	       (long long)v0, (unsigned long long)irq_before, (unsigned long long)irq_after,
	       (int)sigio_count);
	tap(msgs == v1 / period, "overflow messages == floor(N / P)");
	tap(v0 == (uint64_t)-period + v1 % period, "PMD0 holds the residue of the period");
	tap(ovfl_mask_ok && ip_ok, "messages name PMD0 and a user IP");
	tap(irq_after - irq_before >= msgs, "/proc/interrupts perfmon line counts the overflows");
	tap(sigio_count > 0, "SIGIO delivered");
	errno = 0;
	tap(read(fd, &msg, sizeof(msg)) < 0 && errno == EAGAIN, "non-blocking read of an empty queue: EAGAIN");
	close(fd);

	/* Notify-block: the child stops at the overflow until RESTART. */
	volatile uint64_t *progress = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
					   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int go[2];
	if (pipe(go))
		return 1;
	pid_t child = fork();
	if (child == 0) {
		char c;
		if (read(go[0], &c, 1) != 1)
			_exit(1);
		for (;;) {
			usleep_ns(1000000);
			(*progress)++;
		}
	}
	fd = setup_period(child, 5, PFM_CTXFL_NOTIFY_BLOCK);
	struct pfm_ctx_info st;
	for (int i = 0; i < 500; i++) {
		if (ioctl(fd, PFM_IOC_GET_STATE, &st) == 0 && (st.status & PFM_CTXST_ACTIVE))
			break;
		usleep_ns(10000000);
	}
	ioctl(fd, PFM_IOC_START, 0);
	if (write(go[1], "x", 1) != 1)
		return 1;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int got = poll(&p, 1, 5000) == 1 && read(fd, &msg, sizeof(msg)) == sizeof(msg);
	ioctl(fd, PFM_IOC_GET_STATE, &st);
	usleep_ns(200000000);
	uint64_t stalled_at = *progress;
	usleep_ns(300000000);
	int stalled = *progress == stalled_at;
	printf("# message %d, state %u, progress %llu then %llu\n", got, st.state,
	       (unsigned long long)stalled_at, (unsigned long long)*progress);
	tap(got && st.state == PFM_STATE_MASKED && stalled, "notify-block: thread stops, context MASKED");
	ioctl(fd, PFM_IOC_RESTART, 0);
	usleep_ns(300000000);
	tap(*progress > stalled_at, "RESTART resumes the thread");
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	close(fd);
	return failed;
}
