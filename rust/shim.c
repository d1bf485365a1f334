// SPDX-License-Identifier: GPL-2.0
/*
 * The C side of perfmon: only what Rust cannot reach through 6.12's
 * `bindings` (static inlines and macros), as one-line wrappers, plus the
 * declarations that must be C (module parameters, the miscdevice, the sysfs
 * files Rust lists). Logic lives in Rust; see rust/mod.rs and the files it
 * declares (irq.rs, cpu.rs, hrtimer.rs) for the safe wrappers over these.
 */
#include <linux/binfmts.h>
#include <linux/tracepoint.h>
#include <linux/pid_namespace.h>
#include <linux/build_bug.h>
#include <linux/sched/signal.h>
#include <linux/sched/coredump.h>
#include <linux/workqueue.h>
#include <linux/cred.h>
#include <linux/user_namespace.h>
#include <linux/hrtimer.h>
#include <linux/irq.h>
#include <linux/irq_work.h>
#include <linux/irqdomain.h>
#include <asm/apic.h>
#include <asm/hw_irq.h>
#include <asm/irqdomain.h>
#include <asm/msr.h>
#include <asm/nmi.h>
#include <linux/capability.h>
#include <linux/kobject.h>
#include <linux/miscdevice.h>
#include <linux/moduleparam.h>
#include <linux/poll.h>
#include <linux/preempt.h>
#include <linux/rcupdate.h>
#include <linux/cpu.h>
#include <linux/ptrace.h>
#include <linux/sched/task_stack.h>
#include <linux/smp.h>
#include <linux/spinlock.h>
#include <linux/slab.h>
#include <linux/sysfs.h>
#include "../include/uapi/linux/perfmon.h"
#include "shim.h"

/* The ABI sizes, pinned on the C side (the Rust mirror pins the same). */
static_assert(sizeof(struct pfm_pmc) == 32);
static_assert(sizeof(struct pfm_pmd) == 64);
static_assert(sizeof(struct pfm_regs_arg) == 48);
static_assert(sizeof(struct pfm_load) == 32);
static_assert(sizeof(struct pfm_ctx_flags) == 32);
static_assert(sizeof(struct pfm_ctx_info) == 48);
static_assert(sizeof(struct pfm_event_info) == 32);
static_assert(sizeof(struct pfm_info) == 872);
static_assert(sizeof(struct pfm_msg) == 64);
static_assert(sizeof(struct pfm_values) == 48);
static_assert(sizeof(struct pfm_thread) == 160);
static_assert(sizeof(struct pfm_threads_arg) == 56);

/* Rust keeps a struct irq_work in opaque storage of this size (rust/mod.rs). */
static_assert(sizeof(struct irq_work) <= 32 && __alignof__(struct irq_work) <= 8);

/* Module parameters (Rust modules cannot declare them in 6.12). */
static char *pmu = "auto";
module_param(pmu, charp, 0444);
MODULE_PARM_DESC(pmu, "PMU model: auto (default), soft, intel_arch, amd64");
static unsigned int soft_width = 64;
module_param(soft_width, uint, 0444);
MODULE_PARM_DESC(soft_width, "Counter width of the soft PMU model, 16..64 (default 64)");
static unsigned int soft_counters = 4;
module_param(soft_counters, uint, 0444);
MODULE_PARM_DESC(soft_counters, "Counters of the soft PMU model, 1..4 (default 4): fewer force event sets to multiplex");

static unsigned int max_attached_per_user = 1024;
module_param(max_attached_per_user, uint, 0644);
MODULE_PARM_DESC(max_attached_per_user, "Threads one unprivileged user may have attached at once (default 1024 of the 4096 slots)");
const char *pfm_param_pmu(void) { return pmu; }
unsigned int pfm_param_max_attached_per_user(void) { return READ_ONCE(max_attached_per_user); }
unsigned int pfm_param_soft_width(void) { return soft_width; }
unsigned int pfm_param_soft_counters(void) { return soft_counters; }

/* A test hook of pmu=intel_arch_sim only: this CPU gets no overflow vector,
 * as if its allocation had failed (the hardware path must then never put
 * counters on its PMU). */
static int sim_no_vector_cpu = -1;
module_param(sim_no_vector_cpu, int, 0444);
MODULE_PARM_DESC(sim_no_vector_cpu, "pmu=intel_arch_sim test hook: CPU left without an overflow vector (default -1, none)");
int pfm_param_sim_no_vector_cpu(void) { return sim_no_vector_cpu; }

/* /dev/perfmon: the file operations are a Rust table (pfm_core.rs), the
 * minor Rust's choice (rust/mod.rs: fixed, for autoload on first open). */
static struct miscdevice pfm_miscdev = {
	.minor = MISC_DYNAMIC_MINOR, .name = "perfmon", .mode = 0666,
};

int pfm_misc_register(const struct file_operations *fops, int minor)
{
	pfm_miscdev.fops = fops;
	pfm_miscdev.minor = minor;
	return misc_register(&pfm_miscdev);
}
void pfm_misc_deregister(void) { misc_deregister(&pfm_miscdev); }

/*
 * /sys/kernel/perfmon: one read-only file per entry of Rust's table
 * (pfm_dev.rs, SYSFS_FILES), which names them and answers each show() by
 * the file's index: the list lives on one side of the boundary only.
 */
static struct kobj_attribute *pfm_kattrs;
static struct attribute **pfm_attrs;
static struct attribute_group pfm_attr_group;
static struct kobject *pfm_kobj;

static ssize_t pfm_attr_show(struct kobject *k, struct kobj_attribute *a, char *buf)
{
	return pfm_sysfs_show(a - pfm_kattrs, buf);
}

static void pfm_sysfs_free(void)
{
	kfree(pfm_attrs);
	kfree(pfm_kattrs);
	pfm_attrs = NULL;
	pfm_kattrs = NULL;
}

int pfm_sysfs_register(void)
{
	unsigned int i, n = pfm_sysfs_count();
	int err;

	pfm_kattrs = kcalloc(n, sizeof(*pfm_kattrs), GFP_KERNEL);
	pfm_attrs = kcalloc(n + 1, sizeof(*pfm_attrs), GFP_KERNEL);
	if (!pfm_kattrs || !pfm_attrs) {
		pfm_sysfs_free();
		return -ENOMEM;
	}
	for (i = 0; i < n; i++) {
		sysfs_attr_init(&pfm_kattrs[i].attr);
		pfm_kattrs[i].attr.name = pfm_sysfs_name(i);
		pfm_kattrs[i].attr.mode = 0444;
		pfm_kattrs[i].show = pfm_attr_show;
		pfm_attrs[i] = &pfm_kattrs[i].attr;
	}
	pfm_attr_group.attrs = pfm_attrs;
	pfm_kobj = kobject_create_and_add("perfmon", kernel_kobj);
	if (!pfm_kobj) {
		pfm_sysfs_free();
		return -ENOMEM;
	}
	err = sysfs_create_group(pfm_kobj, &pfm_attr_group);
	if (err) {
		kobject_put(pfm_kobj);
		pfm_kobj = NULL;
		pfm_sysfs_free();
	}
	return err;
}

void pfm_sysfs_unregister(void)
{
	/* The files go (show() calls drained) before their attributes are freed. */
	sysfs_remove_group(pfm_kobj, &pfm_attr_group);
	kobject_put(pfm_kobj);
	pfm_sysfs_free();
}

/*
 * The layout of the kernel structures Rust touches, as this compiler sees
 * them: checked at load against bindgen's view (rust/mod.rs), which can
 * differ when bindgen's libclang is not the compiler.
 */
const unsigned long pfm_c_layout[] = {
	offsetof(struct task_struct, __state), offsetof(struct task_struct, flags),
	offsetof(struct task_struct, se.sum_exec_runtime), offsetof(struct task_struct, se.exec_start),
	offsetof(struct file, private_data), offsetof(struct file, f_flags),
	sizeof(struct file_operations), offsetof(struct file_operations, owner),
	offsetof(struct file_operations, read), offsetof(struct file_operations, poll),
	offsetof(struct file_operations, unlocked_ioctl), offsetof(struct file_operations, compat_ioctl),
	offsetof(struct file_operations, open), offsetof(struct file_operations, release),
	offsetof(struct file_operations, fasync), offsetof(struct file_operations, llseek),
	sizeof(struct preempt_notifier), sizeof(struct preempt_ops), sizeof(struct callback_head),
	sizeof(struct wait_queue_head), sizeof(struct wait_queue_entry), sizeof(spinlock_t),
	sizeof(struct work_struct), sizeof(struct hrtimer), offsetof(struct hrtimer, function),
	sizeof(raw_spinlock_t),
	offsetof(struct pcpu_hot, current_task), offsetof(struct pcpu_hot, cpu_number),
	offsetof(struct task_struct, se.nr_migrations), offsetof(struct tracepoint, name),
	sizeof(struct delayed_work), offsetof(struct delayed_work, work),
	offsetof(struct task_struct, thread_info.flags),
};
const unsigned long pfm_c_layout_len = ARRAY_SIZE(pfm_c_layout);

/* One-line wrappers of static inlines and macros. */
unsigned long pfm_spin_lock_irqsave(spinlock_t *l) { unsigned long f; spin_lock_irqsave(l, f); return f; }
void pfm_spin_unlock_irqrestore(spinlock_t *l, unsigned long f) { spin_unlock_irqrestore(l, f); }
/* A raw spinlock with a lock class of its own, as rust/helpers/spinlock.c
 * initialises a spinlock_t: lockdep sees it as LD_WAIT_SPIN (valid under the
 * runqueue lock, also on PREEMPT_RT). */
void pfm_raw_spin_lock_init(raw_spinlock_t *l, const char *name, struct lock_class_key *key)
{
#ifdef CONFIG_DEBUG_SPINLOCK
	__raw_spin_lock_init(l, name, key, LD_WAIT_SPIN);
#else
	raw_spin_lock_init(l);
#endif
}
void pfm_init_delayed_work(struct delayed_work *w, work_func_t fn) { INIT_DELAYED_WORK(w, fn); }
void *pfm_kmem_cache_alloc(struct kmem_cache *s, gfp_t flags) { return kmem_cache_alloc(s, flags); }
void pfm_init_irq_work(struct irq_work *w, void (*fn)(struct irq_work *)) { init_irq_work(w, fn); }
void pfm_poll_wait(struct file *f, wait_queue_head_t *q, poll_table *p) { poll_wait(f, q, p); }
void pfm_put_cred(const struct cred *c) { put_cred(c); }
void pfm_init_waitqueue_head(wait_queue_head_t *q) { init_waitqueue_head(q); }
unsigned long pfm_user_ip(struct task_struct *t) { return instruction_pointer(task_pt_regs(t)); }
unsigned long pfm_user_bp(struct task_struct *t) { return task_pt_regs(t)->bp; }
bool pfm_user_64bit(struct task_struct *t) { return user_64bit_mode(task_pt_regs(t)); }
const struct cred *pfm_task_real_cred(struct task_struct *t) { return rcu_access_pointer(t->real_cred); }
const struct cred *pfm_get_cred(const struct cred *c) { return get_cred(c); }
int pfm_exec_update_lock_read(struct task_struct *t) { return down_read_interruptible(&t->signal->exec_update_lock); }
void pfm_exec_update_unlock_read(struct task_struct *t) { up_read(&t->signal->exec_update_lock); }
void pfm_rcu_read_lock(void) { rcu_read_lock(); }
void pfm_rcu_read_unlock(void) { rcu_read_unlock(); }
struct task_struct *pfm_task_group_leader(struct task_struct *t) { return READ_ONCE(t->group_leader); }
struct task_struct *pfm_task_real_parent(struct task_struct *t) { return rcu_dereference(t->real_parent); }
int pfm_task_pid(struct task_struct *t) { return t->pid; }
bool pfm_task_on_cpu(struct task_struct *t) { return smp_load_acquire(&t->on_cpu); }
unsigned long pfm_task_pi_lock(struct task_struct *t) { unsigned long f; raw_spin_lock_irqsave(&t->pi_lock, f); return f; }
void pfm_task_pi_unlock(struct task_struct *t, unsigned long f) { raw_spin_unlock_irqrestore(&t->pi_lock, f); }
void pfm_smp_rmb(void) { smp_rmb(); }
unsigned int pfm_task_cpu(struct task_struct *t) { return task_cpu(t); }
bool pfm_task_in_execve(struct task_struct *t) { return t->in_execve; }
void pfm_preempt_notifier_add(struct task_struct *t, struct preempt_notifier *n) { hlist_add_head(&n->link, &t->preempt_notifiers); }
void pfm_cpu_relax(void) { cpu_relax(); }
int pfm_current_tid(void) { return task_pid_vnr(current); }
bool pfm_same_thread_group_as_current(struct task_struct *t) { return same_thread_group(t, current); }
/* A thread group's identity (rust/task.rs): its signal_struct, put only by __put_task_struct. */
unsigned long pfm_thread_group_key(struct task_struct *t) { return (unsigned long)t->signal; }
/* In do_exit: no thread of current's group is live any more (group_dead's counter). */
bool pfm_current_group_dead(void) { return atomic_read(&current->signal->live) == 0; }
void pfm_cred_ids(const struct cred *c, u32 ids[6]) { ids[0] = c->uid.val; ids[1] = c->euid.val; ids[2] = c->suid.val; ids[3] = c->gid.val; ids[4] = c->egid.val; ids[5] = c->sgid.val; }
int pfm_task_dumpable(struct task_struct *t) { return t->mm ? get_dumpable(t->mm) : -1; }
int pfm_mm_dumpable(struct mm_struct *mm) { return get_dumpable(mm); }
u64 pfm_cred_cap_permitted(const struct cred *c) { return c->cap_permitted.val; }
u64 pfm_cred_cap_effective(const struct cred *c) { return c->cap_effective.val; }
struct user_namespace *pfm_cred_user_ns(const struct cred *c) { return c->user_ns; }
struct user_namespace *pfm_mm_user_ns(struct mm_struct *mm) { return mm->user_ns; }
struct user_namespace *pfm_task_mm_user_ns(struct task_struct *t) { return t->mm ? t->mm->user_ns : NULL; }
int pfm_user_ns_level(const struct user_namespace *ns) { return ns->level; }
struct user_namespace *pfm_user_ns_parent(const struct user_namespace *ns) { return ns->parent; }
u32 pfm_user_ns_owner(const struct user_namespace *ns) { return ns->owner.val; }

/*
 * The overflow vector (rust/irq.rs, for pfm_intr.rs): struct irq_alloc_info,
 * the x86 vector domain, irqd_cfg() and the apic driver are not reachable from bindings.
 */
int pfm_irq_alloc_on_cpu(unsigned int cpu) { struct irq_alloc_info info = { .mask = cpumask_of(cpu) }; return irq_domain_alloc_irqs(x86_vector_domain, 1, cpu_to_node(cpu), &info); }
void pfm_irq_set_edge_handler(unsigned int irq) { irq_set_handler(irq, handle_edge_irq); }
unsigned int pfm_irq_vector(unsigned int irq) { return irqd_cfg(irq_get_irq_data(irq))->vector; }
void pfm_irq_dispose(unsigned int irq) { irq_dispose_mapping(irq); }
u32 pfm_apic_read_lvtpc(void) { return apic->read(APIC_LVTPC); }
void pfm_apic_write_lvtpc(u32 v) { apic->write(APIC_LVTPC, v); }
void pfm_send_ipi_self(unsigned int vector) { __apic_send_IPI_self(vector); }

/* The hardware PMU models (pfm_x86/): MSR accessors that survive a #GP. */
int pfm_rdmsr_safe(u32 msr, u64 *v) { return rdmsrl_safe(msr, v); }
int pfm_wrmsr_safe(u32 msr, u64 v) { return wrmsrl_safe(msr, v); }
bool pfm_perfmon_capable(void) { return perfmon_capable(); }
void pfm_on_each_cpu(void (*fn)(void *), void *info) { on_each_cpu(fn, info, 1); }
bool pfm_irqs_disabled(void) { return irqs_disabled(); }
unsigned long pfm_local_irq_save(void) { unsigned long f; local_irq_save(f); return f; }
void pfm_local_irq_restore(unsigned long f) { local_irq_restore(f); }

/*
 * Exec: a binary format that recognises nothing, first in the list, so
 * every execve() calls pfm_exec_hook() (Rust, pfm_ctxsw.rs) in the execing
 * thread before the real format loads the image.
 */
static int pfm_exec_load(struct linux_binprm *bprm) { pfm_exec_hook(); return -ENOEXEC; }
static struct linux_binfmt pfm_exec_watch = { .module = THIS_MODULE, .load_binary = pfm_exec_load };
void pfm_exec_watch_register(void) { __register_binfmt(&pfm_exec_watch, 1); }
void pfm_exec_watch_unregister(void) { unregister_binfmt(&pfm_exec_watch); }

/* Tracepoints (rust/tracepoint.rs): after unregistering, no probe runs. */
void pfm_tracepoint_synchronize_unregister(void) { tracepoint_synchronize_unregister(); }
struct pid_namespace *pfm_get_pid_ns(struct pid_namespace *ns) { return get_pid_ns(ns); }
void pfm_put_pid_ns(struct pid_namespace *ns) { put_pid_ns(ns); }
/* Past task_struct's `stats`, where bindgen's layout may differ (rust/mod.rs). */
unsigned long pfm_current_switches(void) { return current->nvcsw + current->nivcsw; }
unsigned long pfm_current_min_flt(void) { return current->min_flt; }
unsigned long pfm_current_maj_flt(void) { return current->maj_flt; }
unsigned long pfm_task_min_flt(struct task_struct *t) { return READ_ONCE(t->min_flt); }
unsigned long pfm_task_maj_flt(struct task_struct *t) { return READ_ONCE(t->maj_flt); }
/* for_each_thread is a macro: the threads of task's process, up to max of
 * them referenced into out; returns how many there are. */
int pfm_process_threads(struct task_struct *task, struct task_struct **out, int max)
{
	struct task_struct *t;
	int n = 0;

	rcu_read_lock();
	for_each_thread(task, t) {
		if (n < max)
			out[n] = get_task_struct(t);
		n++;
	}
	rcu_read_unlock();
	return n;
}

/*
 * Module exit waits for threads still returning through module code
 * (rust/mod.rs, wait_for_module_text_users): with Tasks RCU, or on a
 * kernel that cannot preempt them. A preemptible kernel without Tasks RCU
 * has neither guarantee.
 */
#if defined(CONFIG_PREEMPTION) && !defined(CONFIG_TASKS_RCU)
#error "perfmon needs CONFIG_TASKS_RCU on a preemptible kernel (module exit waits for callbacks with synchronize_rcu_tasks)"
#endif
bool pfm_have_tasks_rcu(void) { return IS_ENABLED(CONFIG_TASKS_RCU); }
void pfm_synchronize_rcu_tasks(void) { synchronize_rcu_tasks(); }
bool pfm_cpu_online(unsigned int cpu) { return cpu_online(cpu); }
long pfm_work_on_cpu(int cpu, long (*fn)(void *), void *arg) { return work_on_cpu(cpu, fn, arg); }
