// SPDX-License-Identifier: GPL-2.0
/*
 * pfm_prof: a QEMU TCG plugin that counts executed guest instructions per
 * translation block, between marker hits: the profiler behind
 * scripts/bench-profile.sh (see Documentation/benchmarks.rst, "Profiling").
 *
 * Every time the guest executes the translation block that starts at
 * marker=ADDR (the kernel's __x64_sys_getcpu: pfm_bench --profile calls
 * getcpu(2) around each measured loop), the plugin ends a window: it
 * writes, for the window between this marker hit and the previous one, one
 * line per block that ran in it, then remembers every block's count for the
 * next window:
 *
 *   W VADDR NINSNS EXECUTIONS
 *
 * With callees=on it also writes, for the blocks that ran as part of a call
 * out of the module's code (below, tb_exec_callees), how often they did:
 *
 *   c W VADDR NINSNS EXECUTIONS
 *
 * Windows are numbered from 0 (between the first and the second hit), any
 * number of them (each written as it ends: memory stays one record per
 * block). gaps=skip writes only the even windows: pfm_bench brackets each
 * measured loop with two markers, so the odd windows are the set-up and
 * tear-down between loops, which nobody reads (the cost gate,
 * scripts/cost-gate.sh, has hundreds of them).
 *
 * Instructions are what -icount counts (one per iteration of a REP string
 * instruction), so NINSNS * EXECUTIONS summed per symbol is where the guest
 * time of the window went. Counting uses inline adds (no helper call per
 * block); with -icount QEMU runs all vCPUs in one thread, so the adds do not
 * race.
 *
 * Built against QEMU 7.2's plugin API (version 1), declared here because
 * Debian ships no qemu-plugin.h:
 *   cc -shared -fPIC -O2 -o pfm_prof.so pfm_prof.c
 *   qemu-system-x86_64 ... -plugin ./pfm_prof.so,marker=0xffffffff81068e70,out=prof.txt[,gaps=skip][,callees=on]
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the subset of qemu-plugin.h (API version 1) used here ---- */
typedef uint64_t qemu_plugin_id_t;
struct qemu_plugin_tb;
typedef struct qemu_info_t qemu_info_t;
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_CB_RW_REGS };
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb, qemu_plugin_vcpu_udata_cb_t cb,
					  enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op,
					      void *ptr, uint64_t imm);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn;
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);
#define QEMU_PLUGIN_EXPORT __attribute__((visibility("default")))
QEMU_PLUGIN_EXPORT int qemu_plugin_version = 1;
/* ---- */

enum tb_end { END_OTHER, END_CALL, END_RET };

struct rec {
	uint64_t count;		/* executions, bumped inline by the TB */
	uint64_t vaddr;
	uint32_t ninsns;
	uint64_t last;		/* count at the previous marker hit (0: translated since) */
	/* callees=on: */
	uint64_t callee;	/* executions as part of a call out of the module */
	uint64_t callee_last;
	uint8_t end;		/* enum tb_end: what its last instruction is */
	bool in_module;
};

/*
 * callees=on: which instructions a call out of the module's code executes.
 * Per vCPU: a module block that ends in a call makes the next block, if it
 * is outside the module, the start of a callee; from there every block
 * counts (rec.callee), calls deepen and returns shallow the nesting until it
 * is back to 0 (the return into the module). An interrupt taken inside a
 * callee counts with it (iret is no return here): the cost gate takes the
 * minimum over batches. A tail jump out of the module is not followed.
 */
#define MODULE_START 0xffffffffa0000000ull	/* x86-64 MODULES_VADDR (no KASLR) */
#define MODULE_END 0xffffffffff000000ull	/* MODULES_END */
#define MAX_VCPUS 64
static struct {
	long depth;
	bool pending;
} vcpus[MAX_VCPUS];
static bool callees;

static struct rec **recs;
static size_t nrecs, caprecs;
static unsigned long hits;	/* marker hits so far: window hits-1 ends at the next */
static uint64_t marker;
static const char *out_path = "pfm_prof.txt";
static bool skip_gaps;
static FILE *out;

/* A marker hit: window hits-1 ends (written unless it is a skipped gap). */
static void snapshot(unsigned int vcpu, void *udata)
{
	(void)vcpu; (void)udata;
	bool write = out && hits > 0 && !(skip_gaps && (hits - 1) % 2 == 1);

	for (size_t i = 0; i < nrecs; i++) {
		struct rec *r = recs[i];

		if (write && r->count > r->last)
			fprintf(out, "%lu %" PRIx64 " %u %" PRIu64 "\n", hits - 1, r->vaddr, r->ninsns,
				r->count - r->last);
		if (write && r->callee > r->callee_last)
			fprintf(out, "c %lu %" PRIx64 " %u %" PRIu64 "\n", hits - 1, r->vaddr, r->ninsns,
				r->callee - r->callee_last);
		r->last = r->count;
		r->callee_last = r->callee;
	}
	hits++;
}

/* The kind of a block's last instruction: a near or indirect call, a return. */
static uint8_t tb_end_of(const struct qemu_plugin_tb *tb, size_t n)
{
	const struct qemu_plugin_insn *insn = n ? qemu_plugin_tb_get_insn(tb, n - 1) : NULL;
	const uint8_t *b = insn ? qemu_plugin_insn_data(insn) : NULL;
	size_t len = insn ? qemu_plugin_insn_size(insn) : 0, i = 0;

	if (!b)
		return END_OTHER;
	/* legacy prefixes, then REX */
	while (i < len && (b[i] == 0x66 || b[i] == 0x67 || b[i] == 0xf2 || b[i] == 0xf3 ||
			   b[i] == 0x2e || b[i] == 0x3e || b[i] == 0x26 || b[i] == 0x64 ||
			   b[i] == 0x65 || b[i] == 0x36))
		i++;
	if (i < len && (b[i] & 0xf0) == 0x40)
		i++;
	if (i >= len)
		return END_OTHER;
	if (b[i] == 0xe8)
		return END_CALL;
	if (b[i] == 0xff && i + 1 < len && (((b[i + 1] >> 3) & 7) == 2 || ((b[i + 1] >> 3) & 7) == 3))
		return END_CALL;
	if (b[i] == 0xc3 || b[i] == 0xc2 || b[i] == 0xcb || b[i] == 0xca)
		return END_RET;
	return END_OTHER;
}

static void tb_exec_callees(unsigned int vcpu, void *udata)
{
	struct rec *r = udata;
	typeof(&vcpus[0]) v = &vcpus[vcpu % MAX_VCPUS];

	if (r->in_module && v->depth == 0) {
		v->pending = r->end == END_CALL;
		return;
	}
	if (!r->in_module) {
		if (v->depth == 0) {
			if (!v->pending)
				return;
			v->pending = false;
			v->depth = 1;
		}
		r->callee++;
	}
	if (r->end == END_CALL)
		v->depth++;
	else if (r->end == END_RET && --v->depth <= 0)
		v->depth = 0;
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	(void)id;
	struct rec *r = calloc(1, sizeof(*r));

	if (!r)
		return;
	r->vaddr = qemu_plugin_tb_vaddr(tb);
	r->ninsns = (uint32_t)qemu_plugin_tb_n_insns(tb);
	if (nrecs == caprecs) {
		size_t cap = caprecs ? caprecs * 2 : 65536;
		struct rec **n = realloc(recs, cap * sizeof(*n));

		if (!n) {
			free(r);
			return;
		}
		recs = n;
		caprecs = cap;
	}
	recs[nrecs++] = r;
	/* The marker's snapshot runs before the block's own count is bumped. */
	if (marker && r->vaddr == marker)
		qemu_plugin_register_vcpu_tb_exec_cb(tb, snapshot, QEMU_PLUGIN_CB_NO_REGS, NULL);
	qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &r->count, 1);
	if (callees) {
		r->end = tb_end_of(tb, r->ninsns);
		r->in_module = r->vaddr >= MODULE_START && r->vaddr < MODULE_END;
		qemu_plugin_register_vcpu_tb_exec_cb(tb, tb_exec_callees, QEMU_PLUGIN_CB_NO_REGS, r);
	}
}

static void at_exit(qemu_plugin_id_t id, void *udata)
{
	(void)id; (void)udata;
	if (!out)
		return;
	fprintf(out, "# pfm_prof end windows=%lu blocks=%zu marker=0x%" PRIx64 "\n",
		hits ? hits - 1 : 0, nrecs, marker);
	fclose(out);
	out = NULL;
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
					   int argc, char **argv)
{
	(void)info;
	for (int i = 0; i < argc; i++) {
		if (!strncmp(argv[i], "marker=", 7))
			marker = strtoull(argv[i] + 7, NULL, 0);
		else if (!strncmp(argv[i], "out=", 4))
			out_path = argv[i] + 4;
		else if (!strcmp(argv[i], "gaps=skip"))
			skip_gaps = true;
		else if (!strcmp(argv[i], "callees=on"))
			callees = true;
		else {
			fprintf(stderr, "pfm_prof: unknown argument %s (marker=ADDR, out=FILE, gaps=skip, callees=on)\n",
				argv[i]);
			return -1;
		}
	}
	out = fopen(out_path, "w");
	if (!out) {
		fprintf(stderr, "pfm_prof: cannot write %s\n", out_path);
		return -1;
	}
	fprintf(out, "# pfm_prof marker=0x%" PRIx64 "%s%s\n", marker, skip_gaps ? " gaps=skip" : "",
		callees ? " callees=on" : "");
	qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
	qemu_plugin_register_atexit_cb(id, at_exit, NULL);
	return 0;
}
