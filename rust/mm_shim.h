/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The functions rust/mm_shim.c exports to rust/mm.rs, rust/mlock.rs and rust/clock.rs
 * (their Rust declarations are there).
 */
#ifndef PFM_MM_SHIM_H
#define PFM_MM_SHIM_H

#include <linux/mm_types.h>
#include <linux/types.h>

void *pfm_page_alloc(void);
void pfm_page_free(void *p);
unsigned long pfm_vma_len(struct vm_area_struct *v);
unsigned long pfm_vma_pgoff(struct vm_area_struct *v);
unsigned long pfm_vma_flags(struct vm_area_struct *v);
int pfm_vma_insert_ro_page(struct vm_area_struct *v, void *p);
int pfm_vma_insert_shared_page(struct vm_area_struct *v, unsigned long offset, void *p);
void pfm_vma_set_ops(struct vm_area_struct *v, const struct vm_operations_struct *ops, void *data);
void *pfm_vma_private(struct vm_area_struct *v);
bool pfm_tsc_user_time_ok(void);
struct user_struct;
struct user_struct *pfm_get_current_user(void);
long pfm_user_perf_mlock(struct user_struct *u);
void pfm_user_perf_mlock_add(struct user_struct *u, long pages);
struct mm_struct *pfm_current_mm_grab(void);
void pfm_mmdrop(struct mm_struct *mm);
s64 pfm_mm_pinned_vm(struct mm_struct *mm);
void pfm_mm_pinned_vm_add(struct mm_struct *mm, s64 pages);
unsigned long pfm_rlimit_memlock(void);
unsigned int pfm_num_online_cpus(void);

#endif /* PFM_MM_SHIM_H */
