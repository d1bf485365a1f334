// SPDX-License-Identifier: GPL-2.0
/*
 * The C side of rust/mm.rs, rust/mlock.rs and rust/clock.rs: one-line
 * wrappers of the static inlines and macros that the mapped counter page
 * and the sampling buffer need (page allocation, the VMA's fields and
 * flags, locked-memory counters, CPU features), which 6.12's `bindings`
 * does not reach.
 */
#include <linux/cpumask.h>
#include <linux/cred.h>
#include <linux/gfp.h>
#include <linux/mm.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/sched/user.h>
#include <asm/cpufeature.h>
#include <asm/tsc.h>
#include "mm_shim.h"

void *pfm_page_alloc(void) { return (void *)get_zeroed_page(GFP_KERNEL_ACCOUNT); }
void pfm_page_free(void *p) { free_page((unsigned long)p); }
unsigned long pfm_vma_len(struct vm_area_struct *v) { return v->vm_end - v->vm_start; }
unsigned long pfm_vma_pgoff(struct vm_area_struct *v) { return v->vm_pgoff; }
unsigned long pfm_vma_flags(struct vm_area_struct *v) { return v->vm_flags; }
/* Read-only for good (no mprotect to writable or executable), not grown by mremap, not in core dumps. */
int pfm_vma_insert_ro_page(struct vm_area_struct *v, void *p)
{
	vm_flags_mod(v, VM_DONTEXPAND | VM_DONTDUMP, VM_MAYWRITE | VM_MAYEXEC);
	return vm_insert_page(v, v->vm_start, virt_to_page(p));
}
/* Writable, shared; not grown by mremap, copied at fork, dumped, or made executable. */
int pfm_vma_insert_shared_page(struct vm_area_struct *v, unsigned long offset, void *p)
{
	vm_flags_mod(v, VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY, VM_MAYEXEC);
	return vm_insert_page(v, v->vm_start + offset, virt_to_page(p));
}
void pfm_vma_set_ops(struct vm_area_struct *v, const struct vm_operations_struct *ops, void *data)
{
	v->vm_ops = ops;
	v->vm_private_data = data;
}
void *pfm_vma_private(struct vm_area_struct *v) { return v->vm_private_data; }
/* Locked memory (rust/mlock.rs): the counters perf_mmap() charges, user->perf_mlock and mm->pinned_vm. */
struct user_struct *pfm_get_current_user(void) { return get_current_user(); }
long pfm_user_perf_mlock(struct user_struct *u) { return atomic_long_read(&u->perf_mlock); }
void pfm_user_perf_mlock_add(struct user_struct *u, long pages) { atomic_long_add(pages, &u->perf_mlock); }
struct mm_struct *pfm_current_mm_grab(void) { struct mm_struct *mm = current->mm; if (mm) mmgrab(mm); return mm; }
void pfm_mmdrop(struct mm_struct *mm) { mmdrop(mm); }
s64 pfm_mm_pinned_vm(struct mm_struct *mm) { return atomic64_read(&mm->pinned_vm); }
void pfm_mm_pinned_vm_add(struct mm_struct *mm, s64 pages) { atomic64_add(pages, &mm->pinned_vm); }
unsigned long pfm_rlimit_memlock(void) { return rlimit(RLIMIT_MEMLOCK); }
unsigned int pfm_num_online_cpus(void) { return num_online_cpus(); }
/*
 * A TSC user space may extend times with: not marked unstable (then
 * sched_clock is the TSC scaled by cyc2ns, as perf's cap_user_time asks),
 * rdtscp to tell the CPU, CPU numbers that fit TSC_AUX's 12 bits.
 */
bool pfm_tsc_user_time_ok(void)
{
	return boot_cpu_has(X86_FEATURE_RDTSCP) && !check_tsc_unstable() && nr_cpu_ids <= 4096 &&
	       READ_ONCE(tsc_khz) != 0;
}
