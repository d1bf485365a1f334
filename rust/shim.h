/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The functions rust/shim.c exports to the Rust side of perfmon; their Rust
 * declarations are in rust/mod.rs.
 */
#ifndef PFM_SHIM_H
#define PFM_SHIM_H

#include <linux/cred.h>
#include <linux/fs.h>
#include <linux/irq_work.h>
#include <linux/poll.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/wait.h>

struct user_namespace;

const char *pfm_param_pmu(void);
unsigned int pfm_param_soft_width(void);
unsigned int pfm_param_soft_counters(void);
int pfm_param_sim_no_vector_cpu(void);
unsigned int pfm_param_max_attached_per_user(void);
int pfm_misc_register(const struct file_operations *fops, int minor);
void pfm_tracepoint_synchronize_unregister(void);
struct pid_namespace *pfm_get_pid_ns(struct pid_namespace *ns);
void pfm_put_pid_ns(struct pid_namespace *ns);
unsigned long pfm_current_switches(void);
unsigned long pfm_current_min_flt(void);
unsigned long pfm_current_maj_flt(void);
unsigned long pfm_task_min_flt(struct task_struct *t);
unsigned long pfm_task_maj_flt(struct task_struct *t);
int pfm_process_threads(struct task_struct *task, struct task_struct **out, int max);
void pfm_misc_deregister(void);
int pfm_sysfs_register(void);
void pfm_sysfs_unregister(void);
unsigned int pfm_sysfs_count(void);	/* Rust */
const char *pfm_sysfs_name(unsigned int i);	/* Rust */
ssize_t pfm_sysfs_show(unsigned int i, char *buf);	/* Rust */
unsigned long pfm_spin_lock_irqsave(spinlock_t *l);
void pfm_spin_unlock_irqrestore(spinlock_t *l, unsigned long f);
void pfm_raw_spin_lock_init(raw_spinlock_t *l, const char *name, struct lock_class_key *key);
void pfm_init_delayed_work(struct delayed_work *w, work_func_t fn);
void *pfm_kmem_cache_alloc(struct kmem_cache *s, gfp_t flags);
void pfm_init_irq_work(struct irq_work *w, void (*fn)(struct irq_work *));
void pfm_poll_wait(struct file *f, wait_queue_head_t *q, poll_table *p);
void pfm_put_cred(const struct cred *c);
void pfm_init_waitqueue_head(wait_queue_head_t *q);
unsigned long pfm_user_ip(struct task_struct *t);
unsigned long pfm_user_bp(struct task_struct *t);
bool pfm_user_64bit(struct task_struct *t);
const struct cred *pfm_task_real_cred(struct task_struct *t);
const struct cred *pfm_get_cred(const struct cred *c);
int pfm_exec_update_lock_read(struct task_struct *t);
void pfm_exec_update_unlock_read(struct task_struct *t);
void pfm_rcu_read_lock(void);
void pfm_rcu_read_unlock(void);
struct task_struct *pfm_task_group_leader(struct task_struct *t);
struct task_struct *pfm_task_real_parent(struct task_struct *t);
int pfm_task_pid(struct task_struct *t);
bool pfm_task_on_cpu(struct task_struct *t);
unsigned long pfm_task_pi_lock(struct task_struct *t);
void pfm_task_pi_unlock(struct task_struct *t, unsigned long f);
void pfm_smp_rmb(void);
unsigned int pfm_task_cpu(struct task_struct *t);
bool pfm_task_in_execve(struct task_struct *t);
void pfm_preempt_notifier_add(struct task_struct *t, struct preempt_notifier *n);
void pfm_cpu_relax(void);
void pfm_exec_hook(void);	/* Rust */
void pfm_exec_watch_register(void);
void pfm_exec_watch_unregister(void);
int pfm_current_tid(void);
bool pfm_same_thread_group_as_current(struct task_struct *t);
unsigned long pfm_thread_group_key(struct task_struct *t);
bool pfm_current_group_dead(void);
void pfm_cred_ids(const struct cred *c, u32 ids[6]);
int pfm_task_dumpable(struct task_struct *t);
int pfm_mm_dumpable(struct mm_struct *mm);
u64 pfm_cred_cap_permitted(const struct cred *c);
u64 pfm_cred_cap_effective(const struct cred *c);
struct user_namespace *pfm_cred_user_ns(const struct cred *c);
struct user_namespace *pfm_mm_user_ns(struct mm_struct *mm);
struct user_namespace *pfm_task_mm_user_ns(struct task_struct *t);
int pfm_user_ns_level(const struct user_namespace *ns);
struct user_namespace *pfm_user_ns_parent(const struct user_namespace *ns);
u32 pfm_user_ns_owner(const struct user_namespace *ns);
extern const unsigned long pfm_c_layout[];
extern const unsigned long pfm_c_layout_len;
int pfm_irq_alloc_on_cpu(unsigned int cpu);
void pfm_irq_set_edge_handler(unsigned int irq);
unsigned int pfm_irq_vector(unsigned int irq);
void pfm_irq_dispose(unsigned int irq);
u32 pfm_apic_read_lvtpc(void);
void pfm_apic_write_lvtpc(u32 v);
void pfm_send_ipi_self(unsigned int vector);
int pfm_rdmsr_safe(u32 msr, u64 *v);
int pfm_wrmsr_safe(u32 msr, u64 v);
bool pfm_perfmon_capable(void);
void pfm_on_each_cpu(void (*fn)(void *), void *info);
bool pfm_irqs_disabled(void);
unsigned long pfm_local_irq_save(void);
void pfm_local_irq_restore(unsigned long f);
bool pfm_have_tasks_rcu(void);
void pfm_synchronize_rcu_tasks(void);
bool pfm_cpu_online(unsigned int cpu);
long pfm_work_on_cpu(int cpu, long (*fn)(void *), void *arg);

#endif /* PFM_SHIM_H */
