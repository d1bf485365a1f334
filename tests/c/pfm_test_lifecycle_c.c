// SPDX-License-Identifier: GPL-2.0
/*
 * Remote attach, target exit and the zombie life cycle, from C through the
 * uapi header. Prints kselftest TAP; run as root in the test guest with the
 * module loaded.
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/perfmon.h>
#include "pfm_tap.h"

/* Programs PMD0 = context switches, PMD1 = task clock; loads on tid. */
static int setup(int tid)
{
	struct pfm_pmc pmc[2] = { { .reg_num = 0, .reg_value = PFM_SOFT_EV_CONTEXT_SWITCHES },
				  { .reg_num = 1, .reg_value = PFM_SOFT_EV_TASK_CLOCK } };
	struct pfm_pmd pmd[2] = { { .reg_num = 0 }, { .reg_num = 1 } };
	struct pfm_regs_arg ra = { .regs = (uintptr_t)pmc, .count = 2 };
	struct pfm_load load = { .tid = tid };
	int fd = open("/dev/perfmon", O_RDWR);

	if (fd < 0)
		return -1;
	if (ioctl(fd, PFM_IOC_WRITE_PMCS, &ra))
		goto fail;
	ra.regs = (uintptr_t)pmd;
	if (ioctl(fd, PFM_IOC_WRITE_PMDS, &ra))
		goto fail;
	if (ioctl(fd, PFM_IOC_LOAD, &load))
		goto fail;
	return fd;
fail:
	close(fd);
	return -1;
}

static int wait_active(int fd)
{
	struct pfm_ctx_info info;

	for (int i = 0; i < 500; i++) {
		if (ioctl(fd, PFM_IOC_GET_STATE, &info) == 0 && (info.status & PFM_CTXST_ACTIVE))
			return 1;
		msleep(10);
	}
	return 0;
}

static uint64_t read_pmd0(int fd)
{
	struct pfm_pmd pmd = { .reg_num = 0 };
	struct pfm_regs_arg ra = { .regs = (uintptr_t)&pmd, .count = 1 };

	if (ioctl(fd, PFM_IOC_READ_PMDS, &ra))
		return UINT64_MAX;
	return pmd.reg_value;
}

int main(void)
{
	int pipefd[2];
	pid_t target;
	int fd;

	printf("TAP version 13\n1..11\n");
	tap(pfm_load_module(NULL) == 0, "insmod perfmon.ko");

	/* A sleeping child that wakes N times, then exits. */
	if (pipe(pipefd))
		return 1;
	target = fork();
	if (target == 0) {
		char c;
		if (read(pipefd[0], &c, 1) != 1)
			_exit(1);
		for (int i = 0; i < 50; i++)
			msleep(1);
		_exit(0);
	}
	fd = setup(target);
	tap(fd >= 0, "attach to a sleeping child");
	tap(fd >= 0 && wait_active(fd), "child installs the context (ACTIVE)");
	tap(fd >= 0 && ioctl(fd, PFM_IOC_START, 0) == 0, "start");
	if (write(pipefd[1], "x", 1) != 1)
		return 1;
	{
		struct pollfd p = { .fd = fd, .events = POLLIN };
		struct pfm_msg msg;
		int got_end = 0;

		if (poll(&p, 1, 5000) == 1 && read(fd, &msg, sizeof(msg)) == sizeof(msg))
			got_end = msg.type == PFM_MSG_END && msg.tid == (uint32_t)target;
		tap(got_end, "END message when the child exits");
		p.revents = 0;
		tap(poll(&p, 1, 1000) == 1 && (p.revents & POLLHUP), "POLLHUP after END is read");
		uint64_t cs = read_pmd0(fd);
		printf("# final context switches of the child: %llu\n", (unsigned long long)cs);
		/* 50 sleeps of 1 ms: a sleep whose timer expired early does not switch. */
		tap(cs >= 40 && cs <= 60, "final count readable and plausible");
	}
	waitpid(target, NULL, 0);
	close(fd);

	/* Zombie: a tool attaches to a busy target and is SIGKILLed. */
	target = fork();
	if (target == 0) {
		for (;;)
			msleep(20);	/* returns to user mode every 20 ms */
	}
	pid_t tool = fork();
	if (tool == 0) {
		int tfd = setup(target);
		if (tfd < 0 || !wait_active(tfd) || ioctl(tfd, PFM_IOC_START, 0))
			_exit(1);
		pause();
		_exit(0);
	}
	msleep(300);
	long before = pfm_sysfs("zombie_contexts");
	kill(tool, SIGKILL);
	waitpid(tool, NULL, 0);
	long during = pfm_sysfs("zombie_contexts");
	long after = -1;
	for (int i = 0; i < 200 && (after = pfm_sysfs("zombie_contexts")) != 0; i++)
		msleep(10);
	printf("# zombies: before %ld, right after SIGKILL %ld, later %ld\n", before, during, after);
	tap(before == 0 && after == 0, "zombie cleaned up when the target returns to user mode");
	fd = setup(target);
	tap(fd >= 0, "a second tool attaches to the same thread (no EBUSY)");
	tap(fd >= 0 && setup(target) < 0 && errno == EBUSY, "a third attach gets EBUSY");
	close(fd);
	kill(target, SIGKILL);
	waitpid(target, NULL, 0);
	for (int i = 0; i < 200 && pfm_sysfs("attached_threads") != 0; i++)
		msleep(10);
	printf("# live contexts %ld, attached threads %ld\n", pfm_sysfs("live_contexts"),
	       pfm_sysfs("attached_threads"));
	tap(pfm_unload_module() == 0, "rmmod perfmon");
	return pfm_failed;
}
