// SPDX-License-Identifier: GPL-2.0

//! The layout check of the kernel structures Rust reads through `bindings`.

use kernel::bindings;

use super::{cpu, ffi};

/// Checks that the kernel structures Rust touches have the layout the C
/// compiler gives them. bindgen can lay a structure out differently from
/// the compiler: in 6.12 with `CONFIG_SCHEDSTATS=n`, `task_struct`'s empty
/// but cache-aligned `struct sched_statistics` puts every later field (pid,
/// group_leader, mm, cred, ...) 16 bytes off in the bindings. Rust reads
/// no `task_struct` field past `se` (the shims do), and loading with any
/// other mismatch would read and write the wrong fields.
/// The first layout entry (index into `pfm_c_layout`) where C and Rust
/// differ, with both values.
pub(crate) fn layout_mismatch() -> Option<(usize, usize, usize)> {
    use bindings::{file, file_operations as fops, task_struct as task};
    use core::mem::{offset_of, size_of};
    let rust: [usize; 33] = [
        offset_of!(task, __state),
        offset_of!(task, flags),
        offset_of!(task, se.sum_exec_runtime),
        offset_of!(task, se.exec_start),
        offset_of!(file, private_data),
        offset_of!(file, f_flags),
        size_of::<fops>(),
        offset_of!(fops, owner),
        offset_of!(fops, read),
        offset_of!(fops, poll),
        offset_of!(fops, unlocked_ioctl),
        offset_of!(fops, compat_ioctl),
        offset_of!(fops, open),
        offset_of!(fops, release),
        offset_of!(fops, fasync),
        offset_of!(fops, llseek),
        size_of::<bindings::preempt_notifier>(),
        size_of::<bindings::preempt_ops>(),
        size_of::<bindings::callback_head>(),
        size_of::<bindings::wait_queue_head>(),
        size_of::<bindings::wait_queue_entry>(),
        size_of::<bindings::spinlock_t>(),
        size_of::<bindings::work_struct>(),
        size_of::<bindings::hrtimer>(),
        offset_of!(bindings::hrtimer, function),
        size_of::<bindings::raw_spinlock_t>(),
        cpu::HOT_CURRENT_TASK,
        cpu::HOT_CPU_NUMBER,
        offset_of!(task, se.nr_migrations),
        offset_of!(bindings::tracepoint, name),
        size_of::<bindings::delayed_work>(),
        offset_of!(bindings::delayed_work, work),
        offset_of!(task, thread_info.flags),
    ];
    // SAFETY: `pfm_c_layout` is a constant array of `pfm_c_layout_len` entries.
    let c = unsafe {
        core::slice::from_raw_parts(
            core::ptr::addr_of!(ffi::pfm_c_layout).cast::<core::ffi::c_ulong>(),
            ffi::pfm_c_layout_len as usize,
        )
    };
    if c.len() != rust.len() {
        return Some((usize::MAX, c.len(), rust.len()));
    }
    c.iter()
        .zip(rust.iter())
        .enumerate()
        .find(|(_, (&c, &r))| c as usize != r)
        .map(|(i, (&c, &r))| (i, c as usize, r))
}
