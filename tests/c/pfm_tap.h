/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Shared by the C tests: kselftest TAP output and loading the module in the
 * test guest (the harness unloads it between tests).
 */
#ifndef PFM_TAP_H
#define PFM_TAP_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int pfm_n_test, pfm_failed;

static inline void tap(int ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s %d - ", ok ? "ok" : "not ok", ++pfm_n_test);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (!ok)
		pfm_failed = 1;
}

static inline void msleep(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* insmod /lib/perfmon.ko PARAMS (unloading a loaded one first). */
static inline int pfm_load_module(const char *params)
{
	char cmd[256];

	if (access("/dev/perfmon", F_OK) == 0 && system("rmmod perfmon") != 0)
		return -1;
	snprintf(cmd, sizeof(cmd), "insmod /lib/perfmon.ko %s", params ? params : "");
	if (system(cmd) != 0)
		return -1;
	for (int i = 0; i < 100 && access("/dev/perfmon", F_OK) != 0; i++)
		msleep(10);
	return access("/dev/perfmon", F_OK);
}

/* rmmod perfmon, retrying while the last attachments are being reaped. */
static inline int pfm_unload_module(void)
{
	for (int i = 0; i < 50; i++) {
		if (system("rmmod perfmon 2>/dev/null") == 0)
			return 0;
		msleep(100);
	}
	return -1;
}

static inline long pfm_sysfs(const char *name)
{
	char path[128], buf[32] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/sys/kernel/perfmon/%s", name);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = 0;
	fclose(f);
	return atol(buf);
}

#endif /* PFM_TAP_H */
