// SPDX-License-Identifier: GPL-2.0
/*
 * A setuid exec by a monitored thread ends monitoring by a less privileged
 * tool (PFM_MSG_REVOKED), and a setuid program cannot be attached to by its
 * unprivileged user. Runs as root in the test guest (module loaded); drops
 * to uid 1000 in the children. Prints kselftest TAP.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/perfmon.h>
#include "pfm_tap.h"

#define SUID_BIN "/tmp/pfm-suid-busybox"

static int drop_to_user(void)
{
	return setgroups(0, NULL) || setgid(1000) || setuid(1000) ? -1 : 0;
}

static int make_suid_binary(void)
{
	int in = open("/bin/busybox", O_RDONLY), out;
	char buf[65536];
	ssize_t n;

	if (in < 0)
		return -1;
	out = open(SUID_BIN, O_WRONLY | O_CREAT | O_TRUNC, 0755);
	if (out < 0)
		return -1;
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, n) != n)
			return -1;
	close(in);
	close(out);
	return chown(SUID_BIN, 0, 0) || chmod(SUID_BIN, 04755) ? -1 : 0;
}

/* Loads a context counting context switches on tid; returns the fd or -errno. */
static int attach(int tid)
{
	struct pfm_pmc pmc = { .reg_num = 0, .reg_value = PFM_SOFT_EV_CONTEXT_SWITCHES };
	struct pfm_regs_arg ra = { .regs = (uintptr_t)&pmc, .count = 1 };
	struct pfm_load load = { .tid = tid };
	int fd = open("/dev/perfmon", O_RDWR);

	if (fd < 0)
		return -errno;
	if (ioctl(fd, PFM_IOC_WRITE_PMCS, &ra) || ioctl(fd, PFM_IOC_LOAD, &load)) {
		int e = -errno;
		close(fd);
		return e;
	}
	return fd;
}

/* The target, re-executed as uid 1000 so that it is dumpable again. */
static int target_main(int go_fd)
{
	char c;

	if (read(go_fd, &c, 1) != 1)
		return 1;
	for (int i = 0; i < 5; i++)
		msleep(2);
	execl(SUID_BIN, "sleep", "1", (char *)NULL);
	return 1;
}

int main(int argc, char **argv)
{
	int go[2], res[2];

	if (argc == 3 && strcmp(argv[1], "--target") == 0)
		return target_main(atoi(argv[2]));

	printf("TAP version 13\n1..5\n");
	tap(pfm_load_module(NULL) == 0, "insmod perfmon.ko");
	if (make_suid_binary()) {
		printf("Bail out! cannot make %s: %s\n", SUID_BIN, strerror(errno));
		return 1;
	}

	/* 1: uid 1000 may not attach to a running setuid program. */
	pid_t suid = fork();
	if (suid == 0) {
		if (drop_to_user())
			_exit(1);
		execl(SUID_BIN, "sleep", "3", (char *)NULL);
		_exit(1);
	}
	msleep(300);
	if (pipe(res))
		return 1;
	pid_t tool = fork();
	if (tool == 0) {
		int r = drop_to_user() ? -EPERM : attach(suid);
		if (write(res[1], &r, sizeof(r)) != sizeof(r))
			_exit(1);
		_exit(0);
	}
	int r = 0;
	if (read(res[0], &r, sizeof(r)) != sizeof(r))
		r = 0;
	waitpid(tool, NULL, 0);
	printf("# attach by uid 1000 to a setuid program: %d\n", r);
	tap(r == -EACCES, "attach to a setuid program's thread: EACCES");
	kill(suid, SIGKILL);
	waitpid(suid, NULL, 0);

	/* 2, 3: a monitored thread execs a setuid program: monitoring ends. */
	if (pipe(go))
		return 1;
	pid_t target = fork();
	if (target == 0) {
		char fdarg[16];

		snprintf(fdarg, sizeof(fdarg), "%d", go[0]);
		if (drop_to_user())
			_exit(1);
		execl("/proc/self/exe", argv[0], "--target", fdarg, (char *)NULL);
		_exit(1);
	}
	msleep(300);	/* let the target re-exec (dumpable again) */
	tool = fork();
	if (tool == 0) {
		struct pfm_ctx_info st;
		struct pfm_msg msg;
		int fd, active = 0;

		if (drop_to_user() || (fd = attach(target)) < 0)
			_exit(10);
		for (int i = 0; i < 300 && !active; i++) {
			active = ioctl(fd, PFM_IOC_GET_STATE, &st) == 0 && (st.status & PFM_CTXST_ACTIVE);
			msleep(10);
		}
		if (!active || ioctl(fd, PFM_IOC_START, 0))
			_exit(11);
		if (write(go[1], "x", 1) != 1)
			_exit(12);
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 5000) != 1 || read(fd, &msg, sizeof(msg)) != sizeof(msg))
			_exit(13);
		if (msg.type != PFM_MSG_REVOKED) {
			printf("# tool got message type %u\n", msg.type);
			fflush(stdout);
			_exit(14);
		}
		if (ioctl(fd, PFM_IOC_GET_STATE, &st) || st.state != PFM_STATE_UNLOADED)
			_exit(15);
		_exit(0);
	}
	int status = -1;
	waitpid(tool, &status, 0);
	/* A tool that failed early never released the target. */
	if (!WIFEXITED(status) || (WEXITSTATUS(status) >= 10 && WEXITSTATUS(status) <= 12))
		kill(target, SIGKILL);
	printf("# tool exit status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	tap(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	    "setuid exec of the monitored thread: REVOKED message, context UNLOADED");
	waitpid(target, &status, 0);
	tap(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the setuid program ran to completion");
	unlink(SUID_BIN);
	tap(pfm_unload_module() == 0, "rmmod perfmon");
	return pfm_failed;
}
