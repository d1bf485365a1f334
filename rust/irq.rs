// SPDX-License-Identifier: GPL-2.0

//! Interrupts: an IRQ of the x86 vector domain bound to one CPU and
//! requested with a handler until dropped (the shape of upstream's
//! `irq::Registration`, for a CPU-bound vector instead of a device line),
//! and this CPU's local APIC performance-counter entry (LVTPC).

use kernel::bindings;
use kernel::ffi::{c_int, c_uint, c_void};
use kernel::prelude::*;

mod ffi {
    use super::*;

    extern "C" {
        pub(super) fn pfm_irq_alloc_on_cpu(cpu: c_uint) -> c_int;
        pub(super) fn pfm_irq_set_edge_handler(irq: c_uint);
        pub(super) fn pfm_irq_vector(irq: c_uint) -> c_uint;
        pub(super) fn pfm_irq_dispose(irq: c_uint);
        pub(super) fn pfm_apic_read_lvtpc() -> u32;
        pub(super) fn pfm_apic_write_lvtpc(value: u32);
        pub(super) fn pfm_send_ipi_self(vector: c_uint);
    }
}

/// The handler of a [`CpuIrq`].
pub(crate) trait Handler: Sync {
    /// Handles one interrupt, in hard-IRQ context on the IRQ's CPU. The
    /// IRQ is a vector of its own, never shared: every interrupt is ours.
    fn handle(&self);
}

/// An IRQ of the x86 vector domain bound to one CPU, requested with a
/// handler; freed (`free_irq`, then `irq_dispose_mapping`) when dropped.
///
/// # Invariants
///
/// `irq` is allocated from the x86 vector domain, has the edge flow handler
/// and is requested with [`handle_irq::<H>`] and `handler` as its cookie;
/// `vector` is the vector it was given. (`H: Handler` is required where a
/// registration is made, not on the type, so that the handler can hold its
/// own registration.)
pub(crate) struct CpuIrq<'a, H> {
    irq: u32,
    vector: u32,
    handler: &'a H,
}

impl<'a, H: Handler> CpuIrq<'a, H> {
    /// Allocates an IRQ bound to `cpu`, gives it the edge flow handler (the
    /// vector domain sets none) and requests it with `handler`, kept off IRQ
    /// balancing. Process context: it sleeps.
    ///
    /// # Safety
    ///
    /// The returned registration must be dropped before `handler` goes
    /// away: forgetting it would leave the IRQ calling `handler` after that.
    pub(crate) unsafe fn request(cpu: u32, name: &'static CStr, handler: &'a H) -> Result<Self> {
        // SAFETY: Allocates from the exported x86 vector domain; a CPU
        // that is not online only makes the allocation fail.
        let irq = unsafe { ffi::pfm_irq_alloc_on_cpu(cpu) };
        if irq <= 0 {
            return Err(if irq < 0 {
                Error::from_errno(irq)
            } else {
                EINVAL
            });
        }
        let irq = irq as u32;
        // SAFETY: `irq` was just allocated and is not requested yet.
        unsafe { ffi::pfm_irq_set_edge_handler(irq) };
        // SAFETY: `handle_irq::<H>` reads the cookie as a `&H`, which the
        // caller keeps alive until `drop` has freed the IRQ; the name is static.
        let ret = unsafe {
            bindings::request_threaded_irq(
                irq,
                Some(handle_irq::<H>),
                None,
                bindings::IRQF_NOBALANCING as _,
                name.as_char_ptr(),
                handler as *const H as *mut c_void,
            )
        };
        if ret != 0 {
            // SAFETY: Allocated above, not requested.
            unsafe { ffi::pfm_irq_dispose(irq) };
            return Err(Error::from_errno(ret));
        }
        // SAFETY: `irq` is allocated.
        let vector = unsafe { ffi::pfm_irq_vector(irq) };
        // INVARIANT: allocated, edge handler set, requested with `handler`.
        Ok(Self {
            irq,
            vector,
            handler,
        })
    }

    /// The vector the IRQ was given on its CPU.
    pub(crate) fn vector(&self) -> u32 {
        self.vector
    }
}

impl<H> Drop for CpuIrq<'_, H> {
    fn drop(&mut self) {
        let cookie = self.handler as *const H as *mut c_void;
        // SAFETY: Requested with this cookie (type invariant); `free_irq`
        // waits for a running handler, after which the IRQ is unused.
        unsafe { bindings::free_irq(self.irq, cookie) };
        // SAFETY: No longer requested.
        unsafe { ffi::pfm_irq_dispose(self.irq) };
    }
}

/// The C entry of every [`CpuIrq`]: the one place interrupts come in.
///
/// # Safety
///
/// `cookie` is the `&H` a live [`CpuIrq`] was requested with.
unsafe extern "C" fn handle_irq<H: Handler>(
    _irq: c_int,
    cookie: *mut c_void,
) -> bindings::irqreturn {
    // SAFETY: The cookie is the `&H` of `CpuIrq::request`, alive while the
    // IRQ is requested (the caller's contract there).
    let handler = unsafe { &*(cookie as *const H) };
    handler.handle();
    bindings::irqreturn_IRQ_HANDLED
}

/// `APIC_LVT_MASKED`: an LVT entry's mask bit.
pub(crate) const APIC_LVT_MASKED: u32 = 1 << 16;
/// An LVT entry's delivery mode field (`APIC_MODE_MASK`); 0 is fixed.
const APIC_LVT_MODE: u32 = 0x700;
/// An LVT entry's vector field.
const APIC_LVT_VECTOR: u32 = 0xff;
/// The first vector of external interrupts (`FIRST_EXTERNAL_VECTOR`):
/// lower ones are exceptions, which an IPI must not name.
const FIRST_EXTERNAL_VECTOR: u32 = 0x20;

/// The vector an LVT entry delivers to: `Some` only for an unmasked entry
/// in fixed delivery mode naming an external vector (an NMI, SMI or
/// masked entry delivers no vector).
pub(crate) const fn lvt_fixed_vector(lvt: u32) -> Option<u32> {
    let vector = lvt & APIC_LVT_VECTOR;
    if lvt & (APIC_LVT_MASKED | APIC_LVT_MODE) != 0 || vector < FIRST_EXTERNAL_VECTOR {
        return None;
    }
    Some(vector)
}

/// This CPU's LVTPC register.
pub(crate) fn apic_read_lvtpc() -> u32 {
    // SAFETY: Reads the local APIC of this CPU.
    unsafe { ffi::pfm_apic_read_lvtpc() }
}

/// Writes this CPU's LVTPC register.
pub(crate) fn apic_write_lvtpc(value: u32) {
    // SAFETY: Writes the local APIC of this CPU; callers pass a vector of
    // ours or the value saved before.
    unsafe { ffi::pfm_apic_write_lvtpc(value) }
}

/// Sends `vector` to this CPU; an exception vector (below 0x20) is not
/// sent. A vector without a handler is counted and reported as spurious
/// by the x86 core.
pub(crate) fn send_ipi_self(vector: u32) {
    if !(FIRST_EXTERNAL_VECTOR..=APIC_LVT_VECTOR).contains(&vector) {
        return;
    }
    // SAFETY: An external vector: the self-IPI raises an ordinary interrupt.
    unsafe { ffi::pfm_send_ipi_self(vector) }
}
